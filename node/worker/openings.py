"""Openings: committed leaves of a done job, for its submitter only, at a cost bounded by the answer.

An opening costs the node a rebuild of the job's tree and one Merkle proof per cell, and hands
out committed leaves, so:

- only the job's submitter (or this node) may ask, checked before anything is parsed or built
  (`verify_access`);
- the cells opened are the distinct ones, sorted (`compute_unique_cells`): 65,536 copies of one
  cell cost one leaf, and an answer never holds more leaves than the job has cells;
- at most `limits.max_opened_cells` cells per request (duplicates counted), at most
  `limits.max_openings_per_sender` requests in flight per sender (429), and at most
  `limits.max_concurrent_openings` computed at once for all senders (the rest wait their turn);
- an opening of a job that holds a seat of this node in an audit round (`seat`: it is the worker
  or a member there) is that audit's check, and counts against its sender's quota **for that round**,
  not against the sender's one quota: a dispatcher checking ten audits at once checks each at the
  pace of one, where one quota of 2 made its audits queue for minutes behind each other (issue 35,
  the two-cheater devnet: ~150 s between reveal and verdict). A sender gets another round's quota only
  by an audit on chain naming this node's job, which it cannot make for free;
- a request from the HTTP route is parsed, computed and serialized in a separate process
  (node/worker/opening_process.py), so `/healthz`, the chain watcher and committee duties keep
  their pace during a burst;
- this node's own duties (opening its cells as a worker or member, answering a contest, its
  dispatcher's checks of its own worker) take another path by construction (`open_for_duty`): no
  requester, so no sender's quota; `limits.duty_openings` slots and threads of their own, never
  the HTTP senders' slots or process pool, nor the event loop's default threads. Nothing a client
  or peer sends can make this node refuse, or queue, its own slashable opening (issue 35: the
  node refused itself 429 under client load and was slashed for a late reveal);
- a job whose trace was not retained (exact mode, `engine.retention = tokens`: an empty blob) is
  opened from a trace rebuilt by one prefill over its tokens, in a thread (the engine lives in
  this process), and only if the rebuilt tree gives the receipt's root (`docs/protocol.md` §9).
"""

import asyncio
import contextlib
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from verillm.errors import InvalidInput, InvalidSignature, NotFound, TooManyRequests
from verillm.spec.challenge import compute_opened_cells
from verillm.spec.encoding import encode
from verillm.spec.types import Challenge, Opening, Receipt

from verillm.node import faults
from verillm.node.config import LimitsConfig
from verillm.node.keys import NodeKey
from verillm.node.metrics import NodeMetrics
from verillm.node.store.store import Store
from verillm.node.worker.commit import compute_opening_from_blob, compute_opening_from_rebuild
from verillm.node.worker.opening_process import (compute_answer_cells, compute_answer_json, compute_opening_answer, compute_unique_cells,
                                                 start_pool, verify_opening_payload)


class Openings:
    """Serves openings of the worker's done jobs under the limits above."""

    def __init__(self, served, store: Store, key: NodeKey, limits: LimitsConfig, metrics: NodeMetrics):
        self.served, self.store, self.key, self.limits, self.metrics = served, store, key, limits, metrics
        self._by_sender: Counter[bytes | tuple[bytes, int, int]] = Counter()  # a sender, or a sender in one audit round
        self._slots: asyncio.Semaphore | None = None  # made on the loop that uses it
        self._duty_slots: asyncio.Semaphore | None = None  # the duties' own, apart from every sender's
        self._duty_threads = ThreadPoolExecutor(max_workers=limits.duty_openings, thread_name_prefix="verillm-duty-opening")
        self.duty_waits = 0
        """Duty openings that found every duty slot taken (only this node's own duties can take one)."""

    def verify_access(self, job_hash: bytes, requester: bytes) -> Receipt:
        """Check ``requester`` submitted the done job ``job_hash`` (or is this node); return its receipt."""
        record = self.store.get_job(job_hash)
        if record is None:
            raise NotFound(f"no job {job_hash.hex()} on this node")
        if requester not in (record.sender, self.key.address):
            raise InvalidSignature(f"0x{requester.hex()} did not submit job {job_hash.hex()}; only its submitter may ask for openings")
        if record.status != "done":
            raise NotFound(f"job {job_hash.hex()} is {record.status}: it has no commitment to open yet")
        return self.store.get_receipt(job_hash)

    async def verify_payload(self, payload: bytes) -> None:
        """Check an opening request's payload parses, in the pool; InvalidInput (400) naming what is wrong."""
        pool = await start_pool(self.limits.max_concurrent_openings)
        await asyncio.get_running_loop().run_in_executor(pool, verify_opening_payload, payload, self.limits.max_opened_cells)

    async def answer(self, job_hash: bytes, requester: bytes, payload: bytes, seat: tuple[int, int] | None = None) -> bytes:
        """The JSON answer to an opening request from the HTTP route, computed in the pool (or rebuilt).
        ``seat``: the (audit, round) in which ``job_hash`` holds a seat of this node, if any: the quota is that round's."""
        receipt = self.verify_access(job_hash, requester)
        async with self._turn(requester, seat):
            started = time.perf_counter()
            blob = self.store.get_trace_blob(job_hash)
            faults.reach("opening_served")
            layers = self.served.manifest.committed_layers
            if blob:
                pool = await start_pool(self.limits.max_concurrent_openings)
                body, leaves = await asyncio.get_running_loop().run_in_executor(
                    pool, compute_opening_answer, job_hash, payload, blob, encode(receipt), layers, self.limits.max_opened_cells)
            else:  # parsed in the thread too: a payload of many cells is never parsed on the loop
                opening = await asyncio.to_thread(self._rebuild_answer, self.store.get_job(job_hash), receipt, payload)
                body, leaves = compute_answer_json(job_hash, opening), len(opening.leaves)
        self._count(started, leaves)
        return body

    async def open_for_duty(self, job_hash: bytes, cells: list[tuple[int, int]] | None = None,
                            challenge: Challenge | None = None) -> Opening:
        """Open ``cells`` (or the cells of ``challenge``) of a job this node ran, for one of its own duties.

        The duty lane: only in-process callers reach it (no route does), it has no sender, so no
        sender's quota (`_turn`) applies, and it computes on `limits.duty_openings` slots and threads
        of its own; the HTTP senders' slots, process pool and quotas are never touched."""
        receipt = self.verify_access(job_hash, self.key.address)
        if challenge is not None:
            cells = compute_opened_cells(challenge, receipt.num_positions)
        verify_cell_count(cells, self.limits.max_opened_cells)
        if self._duty_slots is None:
            self._duty_slots = asyncio.Semaphore(self.limits.duty_openings)
        if self._duty_slots.locked():
            self.duty_waits += 1
        async with self._duty_slots:
            started = time.perf_counter()
            blob = self.store.get_trace_blob(job_hash)
            faults.reach("opening_served")
            layers = self.served.manifest.committed_layers
            unique = compute_unique_cells(cells)
            loop = asyncio.get_running_loop()
            if blob:
                opening = await loop.run_in_executor(self._duty_threads, compute_opening_from_blob, blob, receipt, layers, unique)
            else:
                record = self.store.get_job(job_hash)
                opening = await loop.run_in_executor(self._duty_threads, self._rebuild_opening, record, receipt, unique)
        self._count(started, len(opening.leaves))
        return opening

    def _rebuild_answer(self, record, receipt: Receipt, payload: bytes) -> Opening:
        """The opening an HTTP payload asks for, from a rebuilt trace (in a thread, like `_rebuild_opening`)."""
        return self._rebuild_opening(record, receipt, compute_answer_cells(payload, receipt, self.limits.max_opened_cells))

    def _rebuild_opening(self, record, receipt: Receipt, cells: list[tuple[int, int]]) -> Opening:
        """Open ``cells`` from the trace rebuilt from the job's tokens (blocks for one prefill; the
        record is read on the loop: the store's connection belongs to the loop's thread)."""
        return compute_opening_from_rebuild(self.served.engine, record.job, record.output_tokens or (), receipt,
                                            self.served.manifest.committed_layers, cells)

    @contextlib.asynccontextmanager
    async def _turn(self, requester: bytes, seat: tuple[int, int] | None = None):
        """One HTTP opening of ``requester``: its share first (429), then one of the senders' slots (waits).
        The share is the sender's own, or its share for the audit round ``seat`` names.
        This node's own duties never come here (`open_for_duty`)."""
        key = requester if seat is None else (requester, *seat)
        if self._by_sender[key] >= self.limits.max_openings_per_sender:
            quota = "" if seat is None else f" for audit {seat[0]} round {seat[1]}"
            raise TooManyRequests(f"0x{requester.hex()} already has {self._by_sender[key]} openings in flight{quota} "
                                  "(limits.max_openings_per_sender); retry when one ends")
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limits.max_concurrent_openings)
        self._by_sender[key] += 1
        try:
            async with self._slots:
                yield
        finally:
            self._by_sender[key] -= 1
            if not self._by_sender[key]:
                del self._by_sender[key]

    def _count(self, started: float, leaves: int) -> None:
        self.metrics.opening_seconds.observe(time.perf_counter() - started)
        self.metrics.openings.inc()
        self.metrics.opened_cells.inc(leaves)


def verify_cell_count(cells, max_cells: int) -> None:
    """Check 1..max_cells cells (duplicates included); InvalidInput (400) otherwise."""
    if not cells or len(cells) > max_cells:
        raise InvalidInput(f"cells: between 1 and {max_cells} cells per opening, got {len(cells or [])}")
