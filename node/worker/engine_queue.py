"""The one engine queue: every job, whatever it is for, reaches the engine through here.

FIFO, bounded (`QueueFull`, 503, when `max_queued_jobs` wait), batched (after the first job
arrives the batcher waits `batch_wait_s` for more, up to `max_batch_size`), and run in one
dedicated thread (torch blocks, and one engine must not run two batches at once). The queue
knows nothing about jobs beyond their hash: `run_batch` (the worker's) does the work.

One priority lane beside it: jobs submitted with ``priority=True`` (the worker does so only for
the verification jobs of audits the chain says this node sits on) have `max_priority_jobs` slots
of their own, which no other job can take, and go into the next batch before any other job: a
flood of ordinary jobs, however large, delays a committee job by at most the batch running now.

Streaming: `subscribe(job_hash, callback)` gets each output token of that job as the engine
samples it, on the event loop (the engine thread hands tokens over with
`call_soon_threadsafe`), when `run_batch` takes an ``on_token`` argument (BatchRunner does).
"""

import asyncio
import functools
import inspect
import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from verillm.errors import QueueFull, StorageError
from verillm.spec.types import Job

from verillm.node import faults
from verillm.node.metrics import NodeMetrics

log = logging.getLogger(__name__)

# run_batch(jobs) -> one result per job: a value, or the exception that job failed with.
RunBatch = Callable[[Sequence[Job]], list[Any]]


@dataclass
class QueuedJob:
    """A job waiting for the engine, and the future its result is delivered to."""

    job_hash: bytes
    job: Job
    future: asyncio.Future


class EngineQueue:
    """Bounded FIFO in front of the engine, drained in batches by `run_forever`."""

    def __init__(
        self,
        run_batch: RunBatch,
        metrics: NodeMetrics,
        max_queued_jobs: int,
        max_batch_size: int,
        batch_wait_s: float,
        max_priority_jobs: int = 0,
        on_batch_start: Callable[[list[bytes]], None] | None = None,
        on_batch_end: Callable[[list[bytes], list[Any]], None] | None = None,
    ):
        self.run_batch = run_batch
        self.metrics = metrics
        self.max_queued_jobs = max_queued_jobs
        self.max_priority_jobs = max_priority_jobs
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.on_batch_start = on_batch_start
        self.on_batch_end = on_batch_end
        self._pending: deque[QueuedJob] = deque()
        self._priority: deque[QueuedJob] = deque()
        self._listeners: dict[bytes, list[Callable[[int], None]]] = {}
        self._streams = "on_token" in inspect.signature(run_batch).parameters
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verillm-engine")

    @property
    def depth(self) -> int:
        """Ordinary jobs waiting (not yet handed to the engine)."""
        return len(self._pending)

    @property
    def priority_depth(self) -> int:
        """Priority (committee) jobs waiting."""
        return len(self._priority)

    def verify_capacity(self, priority: bool = False) -> None:
        """Check a new job would fit its lane; raise QueueFull (503) if not."""
        if priority and len(self._priority) >= self.max_priority_jobs:
            raise QueueFull(f"the committee lane holds {len(self._priority)} jobs (limit {self.max_priority_jobs}); retry later")
        if not priority and len(self._pending) >= self.max_queued_jobs:
            raise QueueFull(f"the engine queue holds {len(self._pending)} jobs (limit {self.max_queued_jobs}); retry later")

    def submit(self, job_hash: bytes, job: Job, force: bool = False, priority: bool = False) -> asyncio.Future:
        """Queue ``job`` in its lane; return the future of its result. ``force`` skips the capacity check (restart recovery)."""
        if not force:
            self.verify_capacity(priority)
        future = asyncio.get_running_loop().create_future()
        (self._priority if priority else self._pending).append(QueuedJob(job_hash, job, future))
        self.metrics.queue_depth.set(len(self._pending) + len(self._priority))
        self._wakeup.set()
        return future

    def get_waiting(self) -> list[QueuedJob]:
        """The ordinary jobs waiting, oldest first."""
        return list(self._pending)

    def promote(self, job_hash: bytes) -> bool:
        """Move a waiting ordinary job into the priority lane (if it has room); whether it moved."""
        if len(self._priority) >= self.max_priority_jobs:
            return False
        for item in self._pending:
            if item.job_hash == job_hash:
                self._pending.remove(item)
                self._priority.append(item)
                return True
        return False

    def subscribe(self, job_hash: bytes, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call ``callback(token)`` on the event loop for each token of ``job_hash`` as it is sampled; return the unsubscribe."""
        self._listeners.setdefault(job_hash, []).append(callback)

        def unsubscribe() -> None:
            callbacks = self._listeners.get(job_hash, [])
            if callback in callbacks:
                callbacks.remove(callback)
            if not callbacks:
                self._listeners.pop(job_hash, None)

        return unsubscribe

    def _token_callback(self, batch: list[QueuedJob]) -> Callable[[int, int], None] | None:
        """The engine thread's per-token hook for ``batch``, or None when nobody listens."""
        if not self._streams or not any(item.job_hash in self._listeners for item in batch):
            return None
        loop, hashes = asyncio.get_running_loop(), [item.job_hash for item in batch]

        def deliver(job_hash: bytes, token: int) -> None:
            for callback in list(self._listeners.get(job_hash, ())):
                callback(token)

        def on_token(index: int, token: int) -> None:  # engine thread
            if hashes[index] in self._listeners:
                loop.call_soon_threadsafe(deliver, hashes[index], token)

        return on_token

    async def run_forever(self) -> None:
        """Take batches and run them, one at a time, until cancelled."""
        while True:
            batch = await self._take_batch()
            await self._run(batch)

    async def _take_batch(self) -> list[QueuedJob]:
        while not self._pending and not self._priority:
            self._wakeup.clear()
            await self._wakeup.wait()
        await self._gather_more()
        # Committee jobs run in a batch of their own: one token each, not held until an ordinary
        # job of a thousand tokens ends beside them.
        lane = self._priority if self._priority else self._pending
        batch = [lane.popleft() for _ in range(min(len(lane), self.max_batch_size))]
        self.metrics.queue_depth.set(len(self._pending) + len(self._priority))
        return batch

    async def _gather_more(self) -> None:
        """Wait up to batch_wait_s for more jobs to join the batch; stop as soon as it is full."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.batch_wait_s
        while len(self._pending) + len(self._priority) < self.max_batch_size:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except TimeoutError:
                return

    async def _run(self, batch: list[QueuedJob]) -> None:
        try:
            results = await self._compute(batch)
        except BaseException:
            for item in batch:
                item.future.cancel()  # the jobs stay received/running in the store: re-run at restart
            raise
        faults.reach("engine_returned")
        results = self._record(batch, results)
        faults.reach("outcomes_recorded")
        for item, result in zip(batch, results, strict=True):
            if item.future.done():
                continue
            if isinstance(result, BaseException):
                item.future.set_exception(result)
            else:
                item.future.set_result(result)

    def _record(self, batch: list[QueuedJob], results: list[Any]) -> list[Any]:
        """Hand the results to on_batch_end (the store) before anyone sees them."""
        if self.on_batch_end is None:
            return results
        try:
            self.on_batch_end([item.job_hash for item in batch], results)
        except Exception as exc:  # e.g. disk full: nothing unrecorded may be acknowledged
            log.exception("could not record a batch of %d jobs", len(batch))
            return [StorageError(f"the node could not record the job's result: {exc}")] * len(batch)
        return results

    async def _compute(self, batch: list[QueuedJob]) -> list[Any]:
        if self.on_batch_start is not None:
            self.on_batch_start([item.job_hash for item in batch])
        self.metrics.batch_size.observe(len(batch))
        self.metrics.running_jobs.set(len(batch))
        loop = asyncio.get_running_loop()
        jobs, on_token = [item.job for item in batch], self._token_callback(batch)
        run = self.run_batch if on_token is None else functools.partial(self.run_batch, on_token=on_token)
        try:
            return await loop.run_in_executor(self._executor, run, jobs)
        finally:
            self.metrics.running_jobs.set(0)

    def close(self) -> None:
        """Stop the engine thread once its current batch ends; jobs still queued stay in the store."""
        self._executor.shutdown(wait=False, cancel_futures=True)
