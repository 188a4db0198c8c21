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

Committee membership is public on-chain (docs/protocol.md §12 "Known limits"); this lane uses
that, and does not change what the engine sees: the job runs as any other.
"""

import asyncio
import time
from dataclasses import dataclass

from verillm.spec.job import compute_tokens_hash
from verillm.spec.types import Job

from verillm.node.dispatcher.chainio import ChainIO
from verillm.node.store.dispatcher_tables import DispatcherTables

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

    async def match(self, job: Job, job_hash: bytes, sender: bytes) -> Seat | None:
        """The seat ``job`` from ``sender`` fills, if the chain proves one; None for any other job."""
        if job.max_new_tokens != 1:
            return None
        await self.refresh()
        seat = self.seats.get(compute_tokens_hash(job.input_tokens))
        if seat is None or seat.dispatcher != sender or seat.model_id != job.model_id or seat.num_tokens != len(job.input_tokens):
            return None
        admitted = self._admitted.setdefault((seat.audit_id, seat.round), set())
        if job_hash not in admitted and len(admitted) >= JOBS_PER_SEAT:
            return None
        admitted.add(job_hash)
        return seat

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
            self.seats = seats
            live = {(s.audit_id, s.round) for s in seats.values()}
            self._admitted = {key: jobs for key, jobs in self._admitted.items() if key in live}

    async def _seat(self, audit_id: int, round_index: int) -> Seat:
        if audit_id not in self._audits:
            protocol = self.chainio.protocol
            state = await self.chainio.read(protocol.get_audit, audit_id)
            output_hash, _, count = await self.chainio.read(protocol.jobs.call, "transcriptOf", audit_id)
            self._audits[audit_id] = (bytes.fromhex(state.dispatcher[2:]), state.model_id, bytes(output_hash), count)
        dispatcher, model_id, transcript_hash, count = self._audits[audit_id]
        return Seat(audit_id, round_index, dispatcher, model_id, transcript_hash, count)
