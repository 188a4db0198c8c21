"""Who may run jobs on the native route, and in which lane (docs/operators.md "Who may use which route").

`POST /v1/verillm/jobs` runs a job for a correctly signed sender only when someone is accountable
for it:

- **committee**: the job fills a seat the chain says this node holds in an audit, sent by that
  audit's dispatcher (node/dispatcher/seats.py). It runs in the committee lane: its own queue
  slots, ahead of every other job, whoever floods the node;
- **peer**: the sender is active and staked for this node's model in the Registry (the dispatcher
  role's view of the chain, refreshed every `dispatcher.registry_refresh_s`), or named by the
  operator in `auth.allowed_senders`. Each may have `limits.max_jobs_per_sender` jobs queued or
  running (429), and all peers together leave `queue.reserved_for_committee` slots alone;
- anyone else: 403 forbidden, with the reason. Clients use the OpenAI routes, with their API
  keys and per-client limits (node/api/clients.py).

A valid signature alone buys nothing: a fresh key is free, a stake is not.
"""

from aiohttp import web

from verillm.errors import Forbidden
from verillm.spec.types import Job

from verillm.node.appkeys import APP_CONFIG, APP_SERVICE
from verillm.wire import from_hex


def get_allowed_senders(app: web.Application) -> frozenset[bytes]:
    """The senders the operator named (auth.allowed_senders)."""
    return frozenset(from_hex(a.lower(), "auth.allowed_senders", 20) for a in app[APP_CONFIG].auth.allowed_senders)


def get_staked_peers(app: web.Application) -> frozenset[bytes] | None:
    """The nodes active and staked for this node's model, as the dispatcher role last read the Registry; None without a chain view."""
    router = getattr(app.get(APP_SERVICE), "router", None)
    if router is None:
        return None
    return frozenset(entry.address for entry in router.view.workers if entry.stake_wei > 0)


def verify_native_sender(app: web.Application, sender: bytes) -> None:
    """Check ``sender`` may run peer-lane jobs here; Forbidden (403) saying why not."""
    if sender in get_allowed_senders(app):
        return
    auth = app[APP_CONFIG].auth
    peers = get_staked_peers(app) if auth.admit_staked_peers else None
    if peers is not None and sender in peers:
        return
    who = f"sender 0x{sender.hex()}"
    if not auth.admit_staked_peers:
        raise Forbidden(f"{who} is not in auth.allowed_senders, the only senders this node's native job route serves; "
                        "clients use /v1/completions")
    if peers is None:
        raise Forbidden(f"{who} is not in auth.allowed_senders, and this node has no view of the chain to find staked peers "
                        "([dispatcher] enabled = false); clients use /v1/completions")
    raise Forbidden(f"{who} is neither active and staked for this node's model in the Registry nor in auth.allowed_senders; "
                    "clients use /v1/completions")


async def compute_lane(app: web.Application, sender: bytes, job: Job, job_hash: bytes) -> str:
    """The lane a signed job enters: "committee" when the chain proves its seat, else "peer" for an
    admitted sender; raise Forbidden for anyone else."""
    service = app.get(APP_SERVICE)
    seats = getattr(service, "seats", None)
    if seats is not None and await seats.match(job, job_hash, sender) is not None:
        return "committee"
    verify_native_sender(app, sender)
    return "peer"
