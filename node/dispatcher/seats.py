"""The verification jobs this node is drawn to run, as the chain proves them: the committee lane's key.

A member's job is the worker's prompt ‖ output with one new token (`compute_verification_job`),
sent by the audit's dispatcher; the chain names the member (`CommitteeDrawn`), the audit's
dispatcher and model (`getAudit`) and the worker's signed transcript hash and length
(`transcriptOf`). A job whose input hashes to the transcript of an audit that draws this node,
of that length, with one new token, for that model, signed by that audit's dispatcher, is a
committee job: the worker runs it in the committee lane (`reserved_for_committee` slots of its
own, ahead of every other job), so no flood of other jobs can make this node miss its commit
window. Nothing else can enter that lane: a sender needs the dispatcher's key, and each seat
admits at most `JOBS_PER_SEAT` distinct jobs (a resend is the same job: the dispatcher keeps it).

A committee job usually arrives within a second of its draw, before this node's watcher has
recorded the draw: it is then admitted as its dispatcher's peer job, and promoted into the
committee lane as soon as the seat is known (`run_forever` re-reads the draws every REFRESH_S and
hands each new seat to `on_seat`, the worker's `promote_committee_job`), unless the engine has
already started it.

A first round its dispatcher draws privately (docs/protocol.md §12 "Private draws") is named
on-chain only together with the receipts of the members that answered: their jobs ran as any
other, in the peer lane, not knowing they were audits. This lane serves the seats the reveal named
without a receipt (and every public draw: escalations, requests), and does not change what the
engine sees: the job runs as any other.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from verillm.spec.job import compute_tokens_hash
from verillm.spec.types import Job

from verillm.node.dispatcher.chainio import ChainIO
from verillm.node.store.dispatcher_tables import DispatcherTables

log = logging.getLogger(__name__)

JOBS_PER_SEAT = 2
"""Distinct jobs one drawn seat admits to the committee lane (the dispatcher resends the same one)."""
REFRESH_S = 1.0
"""Least time between two reads of the recorded draws."""


@dataclass(frozen=True)
class Seat:
    """One seat this node holds in a round, and the job that fills it."""

    audit_id: int
    round: int
    dispatcher: bytes
    model_id: bytes
    transcript_hash: bytes
    num_tokens: int


class SeatBook:
    """Seats of this node in the rounds drawn within the last horizon, refreshed from the recorded events."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, get_head, horizon_blocks: int):
        self.chainio, self.tables, self.get_head, self.horizon_blocks = chainio, tables, get_head, horizon_blocks
        self.me = "0x" + chainio.address.hex()
        self.seats: dict[bytes, Seat] = {}
        self._audits: dict[int, tuple[bytes, bytes, bytes, int]] = {}  # audit id -> (dispatcher, model, transcript hash, tokens)
        self._admitted: dict[tuple[int, int], set[bytes]] = {}
        self._refreshed_at = 0.0
        self._lock = asyncio.Lock()
        self.on_seat: Callable[[Seat], None] | None = None
        """Called once per seat when it is first seen (the worker promotes a job already queued for it)."""

    async def match(self, job: Job, job_hash: bytes, sender: bytes) -> Seat | None:
        """The seat ``job`` from ``sender`` fills, if the chain proves one; None for any other job."""
        if job.max_new_tokens != 1:
            return None
        await self.refresh()
        return self.admit(job, job_hash, sender)

    def admit(self, job: Job, job_hash: bytes, sender: bytes | None) -> Seat | None:
        """The known seat ``job`` from ``sender`` fills, counted against JOBS_PER_SEAT; None if none (no chain read)."""
        if job.max_new_tokens != 1:
            return None
        seat = self.seats.get(compute_tokens_hash(job.input_tokens))
        if seat is None or seat.dispatcher != sender or seat.model_id != job.model_id or seat.num_tokens != len(job.input_tokens):
            return None
        admitted = self._admitted.setdefault((seat.audit_id, seat.round), set())
        if job_hash not in admitted and len(admitted) >= JOBS_PER_SEAT:
            return None
        admitted.add(job_hash)
        return seat

    async def run_forever(self) -> None:
        """Re-read the draws every REFRESH_S until cancelled, so a seat is known without waiting for a job."""
        while True:
            try:
                await self.refresh(force=True)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a chain outage: the next pass reads again
                log.warning("seat refresh failed: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(REFRESH_S)

    async def refresh(self, force: bool = False) -> None:
        """Re-read the draws naming this node (at most every REFRESH_S)."""
        async with self._lock:
            if not force and time.monotonic() - self._refreshed_at < REFRESH_S:
                return
            self._refreshed_at = time.monotonic()
            since = self.get_head() - self.horizon_blocks
            seats = {}
            for event in self.tables.get_events_since("CommitteeDrawn", since):
                if self.me in [m.lower() for m in event["args"]["members"]]:
                    seat = await self._seat(event["audit_id"], event["args"]["round"])
                    seats[seat.transcript_hash] = seat
            new = [seat for key, seat in seats.items() if key not in self.seats]
            self.seats = seats
            live = {(s.audit_id, s.round) for s in seats.values()}
            self._admitted = {key: jobs for key, jobs in self._admitted.items() if key in live}
        for seat in new:
            log.info("audit %d: this node sits on round %d's committee; its job takes the committee lane", seat.audit_id, seat.round)
            if self.on_seat is not None:
                self.on_seat(seat)

    async def _seat(self, audit_id: int, round_index: int) -> Seat:
        if audit_id not in self._audits:
            protocol = self.chainio.protocol
            state = await self.chainio.read(protocol.get_audit, audit_id)
            output_hash, _, count = await self.chainio.read(protocol.jobs.call, "transcriptOf", audit_id)
            self._audits[audit_id] = (bytes.fromhex(state.dispatcher[2:]), state.model_id, bytes(output_hash), count)
        dispatcher, model_id, transcript_hash, count = self._audits[audit_id]
        return Seat(audit_id, round_index, dispatcher, model_id, transcript_hash, count)
