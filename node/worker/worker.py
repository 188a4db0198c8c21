"""The worker role: run whatever job arrives, commit to it, sign, keep what openings need.

One path for every job: admission → durable `received` → engine queue → commit and sign in
the engine thread → durable `done` (receipt, trace blob) → result.
Nothing here knows, or could know, whether a job is an inference or an audit.

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
from dataclasses import dataclass

from verillm.errors import EngineError, InvalidInput, InvalidSignature, NotFound, PromptTooLong, UnknownModel, VerillmError
from verillm.spec.challenge import compute_opened_cells
from verillm.spec.job import compute_job_hash, verify_job_admission
from verillm.spec.receipt import SigningDomain
from verillm.spec.types import Challenge, Job, Opening, Receipt

from verillm.node import faults
from verillm.node.worker.commit import BatchRunner, JobOutput, compute_opening_from_blob, compute_opening_from_rebuild
from verillm.node.config import LimitsConfig, QueueConfig
from verillm.node.worker.engine_queue import EngineQueue
from verillm.node.worker.engines import ServedModel
from verillm.node.keys import NodeKey
from verillm.node.metrics import NodeMetrics
from verillm.node.store.store import JobRecord, Store

log = logging.getLogger(__name__)


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

    def __init__(self, served: ServedModel, store: Store, key: NodeKey, domain: SigningDomain, limits: LimitsConfig, queue: QueueConfig, metrics: NodeMetrics):
        self.served = served
        self.store = store
        self.key = key
        self.domain = domain
        self.limits = limits
        self.metrics = metrics
        engine = served.engine
        self.queue = EngineQueue(
            BatchRunner(engine, key, domain, metrics, retain_traces=not served.rebuilds_traces),
            metrics,
            max_queued_jobs=queue.max_queued_jobs,
            max_batch_size=queue.max_batch_size or engine.max_batch_size,
            batch_wait_s=queue.batch_wait_ms / 1000,
            on_batch_start=store.mark_running,
            on_batch_end=lambda hashes, results: store.record_outcomes(list(zip(hashes, results))),
        )
        self._in_flight: dict[bytes, asyncio.Task] = {}

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

    def verify_acceptance(self, job: Job, job_hash: bytes | None = None) -> JobRecord | None:
        """Check ``job`` would be accepted now (admission, then queue room unless known); return its stored record."""
        self.verify_admission(job)
        job_hash = job_hash or compute_job_hash(job)
        if job_hash in self._in_flight:
            return None
        record = self.store.get_job(job_hash)
        if record is None or record.status == "failed":
            self.queue.verify_capacity()
        return record

    def accept_job(self, job: Job, sender: bytes | None = None, job_hash: bytes | None = None) -> bytes:
        """Admit ``job``, make it durable and queue it (unless known); return its job hash."""
        job_hash = job_hash or compute_job_hash(job)
        if job_hash in self._in_flight:
            return job_hash
        return self.accept_checked_job(job, sender, job_hash, self.verify_acceptance(job, job_hash))  # a refused job leaves no trace

    def accept_checked_job(self, job: Job, sender: bytes | None, job_hash: bytes, record: JobRecord | None) -> bytes:
        """`accept_job` for a caller that has just run `verify_acceptance(job, job_hash)` (which returned
        ``record``) with no await since, so the check and its store read are not repeated; return the job hash."""
        if job_hash in self._in_flight:
            return job_hash
        if record is not None and record.status == "done":
            return job_hash
        if record is None:
            self.store.insert_job(job_hash, job, sender)
        else:
            self.store.reset_failed_job(job_hash)
        self._start(job_hash, job, force=True)
        return job_hash

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

    def _start(self, job_hash: bytes, job: Job, force: bool) -> None:
        future = self.queue.submit(job_hash, job, force=force)
        task = asyncio.get_running_loop().create_task(self._finish(job_hash, job, future))
        task.add_done_callback(_retrieve_exception)
        self._in_flight[job_hash] = task

    async def _finish(self, job_hash: bytes, job: Job, future: asyncio.Future) -> JobResult:
        # The queue records the batch's outcomes in the store before it resolves ``future``.
        started = time.perf_counter()
        try:
            output: JobOutput = await future
        except VerillmError:
            self.metrics.on_job_finished("failed", len(job.input_tokens), 0)
            raise
        finally:
            self._in_flight.pop(job_hash, None)
        self.metrics.on_job_finished("done", len(job.input_tokens), len(output.output_tokens))
        self.metrics.job_seconds.observe(time.perf_counter() - started)
        return JobResult(job_hash, job, output.receipt, output.output_tokens)

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

    async def open_cells(self, job_hash: bytes, requester: bytes, cells: list[tuple[int, int]] | None = None, challenge: Challenge | None = None) -> Opening:
        """Open ``cells`` (or the cells of ``challenge``) of a done job for the job's submitter."""
        record = self.store.get_job(job_hash)
        if record is None:
            raise NotFound(f"no job {job_hash.hex()} on this node")
        if requester not in (record.sender, self.key.address):
            raise InvalidSignature(f"0x{requester.hex()} did not submit job {job_hash.hex()}; only its submitter may ask for openings")
        if record.status != "done":
            raise NotFound(f"job {job_hash.hex()} is {record.status}: it has no commitment to open yet")
        receipt = self.store.get_receipt(job_hash)
        if challenge is not None:
            cells = compute_opened_cells(challenge, receipt.num_positions)
        if not cells or len(cells) > self.limits.max_opened_cells:
            raise InvalidInput(f"cells: between 1 and {self.limits.max_opened_cells} cells per opening, got {len(cells or [])}")
        started = time.perf_counter()
        blob = self.store.get_trace_blob(job_hash)
        faults.reach("opening_served")
        opening = await asyncio.get_running_loop().run_in_executor(None, self._compute_opening, record, blob, receipt, cells)
        self.metrics.opening_seconds.observe(time.perf_counter() - started)
        self.metrics.openings.inc()
        self.metrics.opened_cells.inc(len(cells))
        return opening


    def _compute_opening(self, record: JobRecord, blob: bytes, receipt: Receipt, cells: list[tuple[int, int]]) -> Opening:
        """Open from the retained blob, or (an empty blob: exact mode, token retention) from a rebuilt trace."""
        layers = self.served.manifest.committed_layers
        if blob:
            return compute_opening_from_blob(blob, receipt, layers, cells)
        return compute_opening_from_rebuild(self.served.engine, record.job, record.output_tokens or (), receipt, layers, cells)


def _retrieve_exception(task: asyncio.Task) -> None:
    # The submitter may have gone away; the failure is already stored and counted.
    if not task.cancelled():
        task.exception()
