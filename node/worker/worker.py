"""The worker role: run whatever job arrives, commit to it, sign, keep what openings need.

One path for every job: admission → durable `received` → engine queue → commit and sign in
the engine thread → durable `done` (receipt, trace blob) → result.
Nothing here knows, or could know, whether a job is an inference or an audit.

Three lanes in, one path through: ``local`` (this node's own API and dispatcher), ``peer`` (the
native route's admitted senders: each may have its share queued or running — its stake's, or
`limits.max_jobs_per_sender` for a named sender) and ``committee`` (verification jobs of an audit the chain says this node sits on:
their own queue slots, run first; node/api/admission.py decides). The engine never sees a lane.

Finished jobs are kept `retention_s` (node/store/retention.py: at least the audit horizon), then
pruned a few hundred at a time as later jobs finish.

Jobs are idempotent by job hash: the same job submitted twice (a dispatcher's retry) waits
for the same run or returns the stored receipt; a failed job submitted again runs again.
After a restart every job still `received` or `running` is re-run (`on_startup`): engines
are deterministic for a given machine, thread count and batch composition, so the re-run
reproduces the outputs and, up to that determinism, the same commitment root — the receipt
returned and stored is the re-run's, and it is the only one ever acknowledged.
"""

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass

from verillm.errors import EngineError, InvalidInput, NotFound, PromptTooLong, TooManyRequests, UnknownModel, VerillmError
from verillm.spec.job import compute_job_hash, verify_job_admission
from verillm.spec.receipt import SigningDomain
from verillm.spec.types import Challenge, Job, Opening, Receipt

from verillm.node.worker.commit import BatchRunner
from verillm.node.worker.openings import Openings
from verillm.node.config import LimitsConfig, QueueConfig
from verillm.node.worker.engine_queue import EngineQueue
from verillm.node.worker.engines import ServedModel
from verillm.node.keys import NodeKey
from verillm.node.metrics import NodeMetrics
from verillm.node.store.outputs import JobOutput
from verillm.node.store.store import JobRecord, Store

log = logging.getLogger(__name__)

LANES = ("local", "peer", "committee")
PRUNE_EVERY_S = 60.0
"""How often finishing jobs look for jobs past their retention (each pass deletes at most PRUNE_BATCH)."""
PRUNE_BATCH = 500


@dataclass(frozen=True)
class JobResult:
    """A finished job as the API returns it."""

    job_hash: bytes
    job: Job
    receipt: Receipt
    output_tokens: tuple[int, ...]
    promise: object = None
    """The dispatcher's signed batching promise (verillm.spec.promise.SignedPromise), when
    this node dispatched the job with a chain; None on a worker-only or local node."""


class Worker:
    """Runs jobs on one served model and answers openings from the store."""

    def __init__(self, served: ServedModel, store: Store, key: NodeKey, domain: SigningDomain, limits: LimitsConfig, queue: QueueConfig,
                 metrics: NodeMetrics, retention_s: float | None = None):
        self.served = served
        self.store = store
        self.key = key
        self.domain = domain
        self.limits = limits
        self.metrics = metrics
        engine = served.engine
        self.runner = BatchRunner(engine, key, domain, metrics, retain_traces=not served.rebuilds_traces)
        """Signs each receipt; its ``horizon`` is set by the network dispatcher (node/dispatcher/service.py)."""
        self.queue = EngineQueue(
            self.runner,
            metrics,
            max_queued_jobs=queue.max_queued_jobs,
            max_batch_size=queue.max_batch_size or engine.max_batch_size,
            batch_wait_s=queue.batch_wait_ms / 1000,
            max_priority_jobs=queue.reserved_for_committee,
            on_batch_start=store.mark_running,
            on_batch_end=lambda hashes, results: store.record_outcomes(list(zip(hashes, results))),
        )
        self._in_flight: dict[bytes, asyncio.Task] = {}
        self._by_sender: Counter[bytes] = Counter()
        """Peer-lane jobs queued or running, per sender (limits.max_jobs_per_sender)."""
        self._senders: dict[bytes, bytes] = {}
        """The sender of each peer-lane job in flight (a committee job may arrive as one: `promote_committee_job`)."""
        self.openings = Openings(served, store, key, limits, metrics)
        self.retention_s = retention_s
        self._pruned_at = 0.0

    # --- jobs -------------------------------------------------------------------------------

    def verify_admission(self, job: Job) -> None:
        """Check ``job`` against the served model and this node's limits; raise with the reason."""
        if job.model_id != self.served.model_id:
            raise UnknownModel(f"model 0x{job.model_id.hex()} is not served here; this node serves {self.served.name}")
        if len(job.input_tokens) > self.limits.max_prompt_tokens:
            raise PromptTooLong(f"prompt: {len(job.input_tokens)} tokens exceed this node's limit of {self.limits.max_prompt_tokens}")
        if job.max_new_tokens > self.limits.max_new_tokens:
            raise InvalidInput(f"max_new_tokens: {job.max_new_tokens} exceeds this node's limit of {self.limits.max_new_tokens}")
        verify_job_admission(job, self.served.manifest, self.served.model_id)

    def verify_acceptance(self, job: Job, job_hash: bytes | None = None, sender: bytes | None = None, lane: str = "local",
                          sender_limit: int | None = None) -> JobRecord | None:
        """Check ``job`` would be accepted now in ``lane`` (admission, then room unless known; a peer's room is
        ``sender_limit``, its stake's share: node/api/admission.py); return its stored record."""
        if lane not in LANES:
            raise ValueError(f"unknown lane {lane!r}")
        self.verify_admission(job)
        job_hash = job_hash or compute_job_hash(job)
        if job_hash in self._in_flight:
            return None
        record = self.store.get_job(job_hash)
        if record is None or record.status == "failed":
            self.queue.verify_capacity(priority=lane == "committee")
            if lane == "peer":
                self.verify_sender_room(sender, sender_limit)
        return record

    def verify_sender_room(self, sender: bytes | None, limit: int | None = None) -> None:
        """Check a peer may queue one more job; TooManyRequests (429) at ``limit`` (default limits.max_jobs_per_sender)."""
        limit = self.limits.max_jobs_per_sender if limit is None else limit
        if self._by_sender[sender] >= limit:
            raise TooManyRequests(f"sender 0x{(sender or b'').hex()} already has {limit} jobs queued or running here "
                                  "(its share: limits.max_jobs_per_sender for a named sender, its stake's share of "
                                  "queue.max_queued_jobs for a staked peer); retry when one ends")

    def accept_job(self, job: Job, sender: bytes | None = None, job_hash: bytes | None = None, lane: str = "local") -> bytes:
        """Admit ``job``, make it durable and queue it (unless known); return its job hash."""
        job_hash = job_hash or compute_job_hash(job)
        if job_hash in self._in_flight:
            return job_hash
        record = self.verify_acceptance(job, job_hash, sender, lane)  # a refused job leaves no trace
        return self.accept_checked_job(job, sender, job_hash, record, lane)

    def accept_checked_job(self, job: Job, sender: bytes | None, job_hash: bytes, record: JobRecord | None, lane: str = "local") -> bytes:
        """`accept_job` for a caller that has just run `verify_acceptance(job, job_hash, sender, lane)` (which
        returned ``record``) with no await since, so the check and its store read are not repeated; return the job hash."""
        if job_hash in self._in_flight:
            return job_hash
        if record is not None and record.status == "done":
            return job_hash
        if record is None:
            self.store.insert_job(job_hash, job, sender)
        else:
            self.store.reset_failed_job(job_hash)
        self._start(job_hash, job, force=True, lane=lane, sender=sender)
        return job_hash

    def is_fresh_run(self, job_hash: bytes, record: JobRecord | None) -> bool:
        """Whether accepting ``job_hash`` now (``record``: what `verify_acceptance` returned) starts its
        run, so that a subscriber from now on sees every token (not a run under way, nor a stored result)."""
        return job_hash not in self._in_flight and (record is None or record.status == "failed")

    async def wait_job(self, job_hash: bytes) -> JobResult:
        """Return the result of an accepted job, waiting for its run if it is in flight."""
        if job_hash in self._in_flight:
            return await asyncio.shield(self._in_flight[job_hash])
        record = self.store.get_job(job_hash)
        if record is None:
            raise NotFound(f"no job {job_hash.hex()} on this node")
        if record.status == "failed":
            raise EngineError(f"job {job_hash.hex()} failed: {record.error}")
        if record.status != "done":
            raise VerillmError(f"job {job_hash.hex()} is {record.status} but not queued; restart the node to re-run it")
        return self.get_result(record)

    async def run_job(self, job: Job, sender: bytes | None = None, job_hash: bytes | None = None) -> JobResult:
        """Run ``job`` (or join its run, or return its stored receipt); the result is durable."""
        return await self.wait_job(self.accept_job(job, sender, job_hash))

    def _start(self, job_hash: bytes, job: Job, force: bool, lane: str = "local", sender: bytes | None = None) -> None:
        future = self.queue.submit(job_hash, job, force=force, priority=lane == "committee")
        owner = sender if lane == "peer" else None
        if owner is not None:
            self._by_sender[owner] += 1
            self._senders[job_hash] = owner
        task = asyncio.get_running_loop().create_task(self._finish(job_hash, job, future, owner))
        task.add_done_callback(_retrieve_exception)
        self._in_flight[job_hash] = task

    async def _finish(self, job_hash: bytes, job: Job, future: asyncio.Future, owner: bytes | None = None) -> JobResult:
        # The queue records the batch's outcomes in the store before it resolves ``future``.
        started = time.perf_counter()
        try:
            output: JobOutput = await future
        except VerillmError:
            self.metrics.on_job_finished("failed", len(job.input_tokens), 0)
            raise
        finally:
            self._in_flight.pop(job_hash, None)
            self._senders.pop(job_hash, None)
            self._release(owner)
        self.metrics.on_job_finished("done", len(job.input_tokens), len(output.output_tokens))
        took = time.perf_counter() - started
        self.metrics.job_seconds.observe(took)
        # one line per served job (issue 36: an operator could not tell from the log that the node worked)
        log.info("served job 0x%s: %d prompt + %d output tokens in %.2f s%s", job_hash.hex()[:16], len(job.input_tokens),
                 len(output.output_tokens), took, f" for 0x{owner.hex()[:10]}" if owner else "")
        self._maybe_prune()
        return JobResult(job_hash, job, output.receipt, output.output_tokens)

    def promote_committee_job(self, admit) -> int:
        """Move each waiting peer job that ``admit(job, job_hash, sender)`` finds a seat for into the
        committee lane (it came before this node knew its seat: node/dispatcher/seats.py); return how many."""
        moved = 0
        for item in self.queue.get_waiting():
            if admit(item.job, item.job_hash, self._senders.get(item.job_hash)) is not None and self.queue.promote(item.job_hash):
                moved += 1
                log.info("job 0x%s moved into the committee lane", item.job_hash.hex())
        return moved

    def _release(self, owner: bytes | None) -> None:
        if owner is not None:
            self._by_sender[owner] -= 1
            if self._by_sender[owner] <= 0:
                del self._by_sender[owner]

    def _maybe_prune(self) -> None:
        """Delete a batch of jobs past their retention, at most every PRUNE_EVERY_S (node/store/retention.py)."""
        now = time.time()
        if self.retention_s is None or now - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = now
        pruned = self.store.prune_finished(now - self.retention_s, PRUNE_BATCH)
        if pruned:
            log.info("pruned %d jobs older than store.retention_s = %g s", pruned, self.retention_s)

    def get_result(self, record: JobRecord) -> JobResult:
        """Return the stored result of a done job."""
        return JobResult(record.job_hash, record.job, self.store.get_receipt(record.job_hash), record.output_tokens or ())

    def on_startup(self) -> int:
        """Re-queue every job the store holds as received or running; return how many."""
        count = 0
        for record in self.store.get_unfinished_jobs():
            try:
                self.verify_admission(record.job)
            except VerillmError as exc:
                self.store.fail_job(record.job_hash, f"not runnable after restart: {exc}")
                continue
            self._start(record.job_hash, record.job, force=True)
            count += 1
        self.metrics.recovered_jobs.inc(count)
        if count:
            log.info("re-running %d jobs accepted before the last shutdown", count)
        return count

    # --- openings ---------------------------------------------------------------------------

    async def open_own_cells(self, job_hash: bytes, cells: list[tuple[int, int]] | None = None, challenge: Challenge | None = None) -> Opening:
        """Open ``cells`` (or the cells of ``challenge``) of a done job for one of this node's own duties: the
        duty lane (node/worker/openings.py `open_for_duty`), which no sender's quota, slot or pool reaches."""
        return await self.openings.open_for_duty(job_hash, cells, challenge)


def _retrieve_exception(task: asyncio.Task) -> None:
    # The submitter may have gone away; the failure is already stored and counted.
    if not task.cancelled():
        task.exception()
