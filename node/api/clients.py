"""Who may use the OpenAI routes, and how much of the node one client may hold.

`client_middleware` guards the generation routes (``/v1/completions``,
``/v1/chat/completions``) and ``/v1/models``:

- with ``auth.api_keys`` set, a request must carry ``Authorization: Bearer <key>`` for one
  of them (401 invalid_api_key);
- one client (its key, else its IP address) may have at most
  ``limits.max_inflight_per_client`` generation requests in flight (429 rate_limited), so a
  client flooding the node fills its own share, not the engine queue: others keep being
  admitted while ``queue.max_queued_jobs`` exceeds the per-client share;
- all clients together leave ``queue.reserved_for_peers`` queue slots to node-to-node jobs
  (`verify_client_room`), which a worker cannot tell apart from committee jobs and must
  not refuse for a client flood.

Node-to-node routes (signed envelopes) are not limited here: their senders are nodes,
checked by signature, and a committee job must never be refused for a client's flood.
"""

import hmac

from aiohttp import web

from verillm.errors import InvalidApiKey, QueueFull, TooManyRequests

from verillm.node.appkeys import APP_CONFIG, APP_INFLIGHT, APP_WORKER

OPENAI_PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/models"})
GENERATION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})


def compute_client_id(request: web.Request, api_keys: tuple[str, ...]) -> str:
    """Return who sent ``request``: ``key:<n>`` for the n-th API key, else ``ip:<address>``; raise InvalidApiKey."""
    if not api_keys:
        return f"ip:{request.remote}"
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() == "bearer":
        for index, key in enumerate(api_keys):
            if hmac.compare_digest(given.strip().encode(), key.encode()):  # constant time: no key guessing by timing
                return f"key:{index}"
    raise InvalidApiKey("this node needs an API key: send Authorization: Bearer <key>")


def verify_client_room(app: web.Application) -> None:
    """Check an OpenAI client's job would leave the peers' reserved queue slots free; raise QueueFull (503)."""
    queue, config = app[APP_WORKER].queue, app[APP_CONFIG].queue
    room = config.max_queued_jobs - config.reserved_for_peers
    if queue.depth >= room:
        raise QueueFull(f"the engine queue holds {queue.depth} jobs; the last {config.reserved_for_peers} slots are kept for other nodes' jobs; retry later")


@web.middleware
async def client_middleware(request: web.Request, handler) -> web.StreamResponse:
    """Check the API key and the client's in-flight share on the OpenAI routes."""
    if request.path not in OPENAI_PATHS:
        return await handler(request)
    config = request.app[APP_CONFIG]
    client = compute_client_id(request, config.auth.api_keys)
    if request.path not in GENERATION_PATHS:
        return await handler(request)
    inflight = request.app[APP_INFLIGHT]
    limit = config.limits.max_inflight_per_client
    if inflight[client] >= limit:
        raise TooManyRequests(f"this client already has {limit} requests in flight (limits.max_inflight_per_client); retry when one ends")
    verify_client_room(request.app)
    inflight[client] += 1
    try:
        return await handler(request)
    finally:
        inflight[client] -= 1
        if not inflight[client]:
            del inflight[client]
