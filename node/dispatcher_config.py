"""The `[dispatcher]` section of the node config (composed into `NodeConfig`)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class DispatcherConfig:
    """Routing dispatcher, audit scheduler and chain watcher (off: every job runs here, nothing is posted)."""

    enabled: bool = False
    """Route jobs to registered workers, post receipt batches and run audits (needs chain.rpc_url and deployment_file)."""
    deployment_file: str = ""
    """Address book written by `verillm chain deploy` or `verillm devnet` (Registry, Jobs, Disputes)."""
    batch_max_receipts: int = 8
    """Post a receipt batch as soon as this many receipts wait."""
    batch_max_wait_s: float = 3.0
    """Post a receipt batch once its oldest receipt has waited this long."""
    poll_interval_s: float = 0.5
    """How often the chain watcher reads new blocks and advances pending items."""
    confirmations: int = 0
    """Blocks on top of an event before the watcher acts on it (0 on a dev chain without reorgs)."""
    request_timeout_s: float = 300.0
    """How long to wait for a worker or committee member to answer one job."""
    stream_first_token_s: float = 30.0
    """How long a relayed stream waits for the worker's first token (queue wait included) before the job fails over, unseen."""
    stream_idle_s: float = 20.0
    """How long a relayed stream waits between two tokens before it ends with an error (each stall benches the worker longer)."""
    registry_refresh_s: float = 2.0
    """How long the view of registered workers (addresses, endpoints, stakes) is cached."""
    escalate: bool = True
    """Bond and escalate a round that slashes a worker while a proven member's data agree with it."""
    client_jobs_per_worker: int = 12
    """Client jobs this gateway keeps in flight at any one other worker: keep it below that worker's `limits.max_jobs_per_sender` (16 by default), so the rest of this gateway's share there is always free for its committee jobs (node/dispatcher/router.py)."""
    shed_at_slack_blocks: int = 4
    """While a slashable duty of this node (an opening, a seal, a reveal, a batch a promise falls due on) is pending with this many blocks or fewer left in its window (an audit step: or in the second half of its window; a promise: unbatched past half its span), new client requests are refused 503 `shedding_for_duty` until it lands (node/dispatcher/deadlines.py)."""
