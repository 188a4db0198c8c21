"""Openings: committed leaves of a done job, for its submitter only, at a cost bounded by the answer.

An opening costs the node a rebuild of the job's tree and one Merkle proof per cell, and hands
out committed leaves, so:

- only the job's submitter (or this node) may ask, checked before anything is read or built;
- the cells opened are the distinct ones, sorted (`compute_unique_cells`): 65,536 copies of one
  cell cost one leaf, and an answer never holds more leaves than the job has cells;
- at most `limits.max_opened_cells` cells per request (duplicates counted), at most
  `limits.max_openings_per_sender` requests in flight per sender (429), and at most
  `limits.max_concurrent_openings` computed at once by the whole node (the rest wait their turn);
- the work runs in a thread, never on the event loop (the handler also parses and serializes
  off the loop: node/api/native_views.py), so `/healthz`, the chain watcher and committee duties
  keep their pace during a burst of openings.
"""

import asyncio
import time
from collections import Counter
from collections.abc import Iterable

from verillm.errors import InvalidInput, InvalidSignature, NotFound, TooManyRequests
from verillm.spec.challenge import compute_opened_cells
from verillm.spec.types import Challenge, Opening

from verillm.node import faults
from verillm.node.config import LimitsConfig
from verillm.node.keys import NodeKey
from verillm.node.metrics import NodeMetrics
from verillm.node.store.store import Store
from verillm.node.worker.commit import compute_opening_from_blob


def compute_unique_cells(cells: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The distinct (position, layer) cells, sorted: what an opening answers, whatever was asked twice."""
    return sorted(set(cells))


class Openings:
    """Serves openings of the worker's done jobs under the limits above."""

    def __init__(self, served, store: Store, key: NodeKey, limits: LimitsConfig, metrics: NodeMetrics):
        self.served, self.store, self.key, self.limits, self.metrics = served, store, key, limits, metrics
        self._by_sender: Counter[bytes] = Counter()
        self._slots: asyncio.Semaphore | None = None  # made on the loop that uses it

    def verify_cells(self, cells: list | None) -> None:
        """Check a request's cell count (duplicates included); InvalidInput (400) outside 1..max_opened_cells."""
        if not cells or len(cells) > self.limits.max_opened_cells:
            raise InvalidInput(f"cells: between 1 and {self.limits.max_opened_cells} cells per opening, got {len(cells or [])}")

    async def open(self, job_hash: bytes, requester: bytes, cells: list[tuple[int, int]] | None = None,
                   challenge: Challenge | None = None) -> Opening:
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
        self.verify_cells(cells)
        if self._by_sender[requester] >= self.limits.max_openings_per_sender:
            raise TooManyRequests(f"0x{requester.hex()} already has {self._by_sender[requester]} openings in flight "
                                  "(limits.max_openings_per_sender); retry when one ends")
        self._by_sender[requester] += 1
        try:
            return await self._compute(job_hash, receipt, compute_unique_cells(cells))
        finally:
            self._by_sender[requester] -= 1
            if not self._by_sender[requester]:
                del self._by_sender[requester]

    async def _compute(self, job_hash: bytes, receipt, cells: list[tuple[int, int]]) -> Opening:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limits.max_concurrent_openings)
        async with self._slots:
            started = time.perf_counter()
            blob = self.store.get_trace_blob(job_hash)
            faults.reach("opening_served")
            layers = self.served.manifest.committed_layers
            opening = await asyncio.get_running_loop().run_in_executor(None, compute_opening_from_blob, blob, receipt, layers, cells)
        self.metrics.opening_seconds.observe(time.perf_counter() - started)
        self.metrics.openings.inc()
        self.metrics.opened_cells.inc(len(cells))
        return opening
