"""The dispatcher role: where a client's request goes, and what the dispatcher remembers.

Every node is a worker and a dispatcher. The OpenAI edge hands each job to the app's
`Dispatcher`; `LocalDispatcher` routes it to this node's own worker. A routing dispatcher
(remote workers chosen from the Registry, audit scheduling) implements the same two methods
and is installed under `APP_DISPATCHER` by `create_app`. Whatever it does, the worker that runs
the job sees only the job: `audit_requested` stays in the dispatcher's table (`dispatched`).
"""

from contextlib import contextmanager
from typing import Protocol

from verillm.spec.job import compute_job_hash
from verillm.spec.types import Job

from verillm.node.store.store import Store
from verillm.node.worker.stream_signer import OnChunk, PrefixSigner, sign_each_token
from verillm.node.worker.worker import JobResult, Worker


class Dispatcher(Protocol):
    """Routes client jobs to workers."""

    def verify_admission(self, job: Job) -> None:
        """Check ``job`` can be served, before any response starts; raise with the reason."""
        ...

    async def dispatch(self, job: Job, audit_requested: bool, on_chunk: OnChunk | None = None) -> JobResult:
        """Run ``job`` on some worker and return its durable result (receipt included); with ``on_chunk``,
        hand over the output tokens as the worker running the job samples them, each batch with that
        worker's signature over the prefix so far, checked (node/api/streaming.py, verillm/spec/stream.py)."""
        ...


class LocalDispatcher:
    """Dispatches every job to this node's own worker."""

    def __init__(self, worker: Worker, store: Store):
        self.worker = worker
        self.store = store

    def verify_admission(self, job: Job) -> None:
        """Check the job against the served model, the limits and the queue's capacity."""
        self.worker.verify_acceptance(job)

    async def dispatch(self, job: Job, audit_requested: bool, on_chunk: OnChunk | None = None) -> JobResult:
        """Record the dispatch, then run the job on the local worker."""
        job_hash = compute_job_hash(job)
        record = self.worker.verify_acceptance(job, job_hash)
        self.store.insert_dispatched(job_hash, None, "", audit_requested)  # no await from the check to the acceptance
        with _subscribed(self.worker, job_hash, record, on_chunk):
            return await self.worker.wait_job(self.worker.accept_checked_job(job, None, job_hash, record))


async def run_local_job(worker: Worker, job: Job, on_chunk: OnChunk | None = None) -> JobResult:
    """Run ``job`` on this node's own worker (or join its run, or return its stored result), handing
    ``on_chunk`` each token of a run it sees start, signed by this worker's key as it is sampled."""
    job_hash = compute_job_hash(job)
    record = worker.verify_acceptance(job, job_hash)
    with _subscribed(worker, job_hash, record, on_chunk):
        return await worker.wait_job(worker.accept_checked_job(job, None, job_hash, record))


@contextmanager
def _subscribed(worker: Worker, job_hash: bytes, record, on_chunk: OnChunk | None):
    """Subscribe ``on_chunk`` to the job's tokens, each signed, when its run starts now (a run under way
    would be seen from its middle, where no signed prefix of ours began)."""
    fresh = on_chunk is not None and worker.is_fresh_run(job_hash, record)
    signer = PrefixSigner(job_hash, worker.key, worker.domain)
    unsubscribe = worker.queue.subscribe(job_hash, sign_each_token(signer, on_chunk)) if fresh else None
    try:
        yield
    finally:
        if unsubscribe is not None:
            unsubscribe()
