"""Who may run jobs on the native route, and in which lane (docs/operators.md "Who may use which route").

`POST /v1/verillm/jobs` runs a job for a correctly signed sender only when someone is accountable
for it:

- **committee**: the job fills a seat the chain says this node holds in an audit, sent by that
  audit's dispatcher (node/dispatcher/seats.py). It runs in the committee lane: its own queue
  slots, ahead of every other job, whoever floods the node;
- **peer**: the sender is active and staked for this node's model in the Registry (the dispatcher
  role's view of the chain, refreshed every `dispatcher.registry_refresh_s`), or named by the
  operator in `auth.allowed_senders`. A staked peer may have queued or running (429 above it) its
  stake's share of the ordinary queue: ⌊`queue.max_queued_jobs` × its weight / the weights of every
  other node serving the model⌋, weights as the Registry fixes them for the current epoch
  (node/dispatcher/stakes.py). Rounded down, so identities that split a stake get together at most
  what the whole stake gets (⌊a⌋ + ⌊b⌋ ≤ ⌊a + b⌋), and N minimum stakes no more than one of N×
  (issue 35: 16 jobs per identity let 14 minimum stakes fill every node's queue). A named sender
  (unstaked: the operator answers for it) may have `limits.max_jobs_per_sender`. All peers
  together leave `queue.reserved_for_committee` slots alone;
- anyone else: 403 forbidden, with the reason. Clients use the OpenAI routes, with their API
  keys and per-client limits (node/api/clients.py): the operator's customers, admitted by its
  tokens, not by stake; together they leave `queue.reserved_for_peers` slots to the peers.

A valid signature alone buys nothing: a fresh key is free, a stake is not.
"""

from aiohttp import web

from verillm.errors import Forbidden, TooManyRequests
from verillm.spec.types import Job

from verillm.node.appkeys import APP_CONFIG, APP_KEY, APP_SERVICE
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


def compute_stake_share(capacity: int, stake_wei: int, total_stake_wei: int) -> int:
    """Slots of ``capacity`` a sender holding ``stake_wei`` of ``total_stake_wei`` may fill, rounded down
    (so a stake split among identities buys together at most what it buys whole)."""
    if stake_wei <= 0 or total_stake_wei <= 0:
        return 0
    return capacity * min(stake_wei, total_stake_wei) // total_stake_wei


async def get_peer_job_limit(app: web.Application, sender: bytes) -> int:
    """How many peer-lane jobs ``sender`` (admitted by `verify_native_sender`) may have queued or running here:
    ``limits.max_jobs_per_sender`` for a named sender, else its stake's share; TooManyRequests (429) for a share of 0."""
    config = app[APP_CONFIG]
    stakes = getattr(app.get(APP_SERVICE), "stakes", None)
    if sender in get_allowed_senders(app) or stakes is None:
        return config.limits.max_jobs_per_sender
    epoch, weights = await stakes.get_weights()
    total = sum(weight for address, weight in weights.items() if address != app[APP_KEY].address)
    share = compute_stake_share(config.queue.max_queued_jobs, weights.get(sender, 0), total)
    if share == 0:
        raise TooManyRequests(f"sender 0x{sender.hex()} weighs {weights.get(sender, 0)} wei of the {total} wei its peers stake for this model "
                              f"in epoch {epoch}: a share of 0 of queue.max_queued_jobs = {config.queue.max_queued_jobs} slots; "
                              "a new or added stake weighs from the next epoch")
    return share
