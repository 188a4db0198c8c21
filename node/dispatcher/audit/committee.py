"""Committee jobs (docs/protocol.md §12 "Messages, in order", step 3): the verification job to each drawn member, its receipt on-chain.

For member slot i of a round the dispatcher builds `compute_verification_job(job, output,
nonce)` — the prompt ‖ output, one new token, the worker's model and sampling — writes it to
`committee_jobs` before sending it (a resend is the same job, hence the same receipt), sends
it over the ordinary native job API, checks the member's receipt and relays it with
`postCommitteeReceipt` (anyone may). The member cannot tell the job from a scoring request.

A member that does not answer before the round's commit deadline is replaced with
`replaceMissing` when the state machine says it is due (`spec.audit.compute_due_steps`: not
while a member's claim waits for the worker's publication) — the contract redraws the empty
seats; it does not slash: nobody can prove the member was ever asked. After
MAX_COMMITTEE_REDRAWS the contract abandons the audit.
"""

import logging
import os

from verillm.spec.audit import compute_due_steps
from verillm.spec.job import compute_job_hash, compute_verification_job

from verillm.node.dispatcher.chainio import ChainIO, RoundInfo, is_revert
from verillm.node.dispatcher.router import NetworkDispatcher, RegistryView
from verillm.node.store.dispatcher_tables import CommitteeJob, DispatcherTables
from verillm.node.dispatcher.tasks import KeyedTasks

log = logging.getLogger(__name__)

EMPTY_ROOT = b"\x00" * 32


class CommitteeDriver:
    """Fills the committee seats of this dispatcher's audits."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, router: NetworkDispatcher, view: RegistryView, tasks: KeyedTasks):
        self.chainio, self.tables, self.router, self.view, self.tasks = chainio, tables, router, view, tasks
        self.withhold_jobs = False  # PartyFaults.committee_jobs == "withhold": a dishonest dispatcher (tests only)

    async def advance(self, audit_id: int, round_index: int, info: RoundInfo, head: int) -> None:
        """Send, collect and post every seat of the round still without a receipt on-chain."""
        open_slots = []
        for slot, member in enumerate(info.members):
            party = await self.chainio.read(self.chainio.protocol.get_party, audit_id, round_index, slot + 1)
            if party["root"] != EMPTY_ROOT:
                continue
            open_slots.append(slot)
            if self.withhold_jobs:
                continue
            committee_job = self.get_or_create(audit_id, round_index, slot, member)
            key = f"seat:{audit_id}:{round_index}:{slot}:{member.hex()}"
            self.tasks.spawn(key, lambda cj=committee_job: self._fill_seat(cj))
        if open_slots and "replace_missing" in compute_due_steps(await self.chainio.get_round_state(audit_id, round_index), head + 1):
            self.tasks.spawn(f"replace:{audit_id}:{round_index}", lambda: self._replace_missing(audit_id, open_slots))

    def get_or_create(self, audit_id: int, round_index: int, slot: int, member: bytes) -> CommitteeJob:
        existing = self.tables.get_committee_job(audit_id, round_index, slot, member)
        if existing is not None:
            return existing
        dispatched = self.tables.get_dispatched_job(bytes.fromhex(self.tables.get_audit_row(audit_id)["job_hash"]))
        job = compute_verification_job(dispatched.job, dispatched.output_tokens, nonce=os.urandom(32))
        self.tables.insert_committee_job(audit_id, round_index, slot, member, job, compute_job_hash(job))
        return self.tables.get_committee_job(audit_id, round_index, slot, member)

    async def _fill_seat(self, seat: CommitteeJob) -> None:
        seat = await self.run_seat(seat)
        if seat.status == "answered":
            await self._post(seat)

    async def run_seat(self, seat: CommitteeJob) -> CommitteeJob:
        """Send the seat's job to its member (unless it answered already); return the seat as stored."""
        seat = self.tables.get_committee_job(seat.audit_id, seat.round, seat.slot, seat.member)
        if seat.status == "sending":
            url = await self.view.get_endpoint(seat.member)
            try:
                output_tokens, receipt = await self.router.run_on(seat.member, url, seat.job, for_duty=True)
            except Exception as exc:
                self.tables.update_committee_job(seat, error=f"{type(exc).__name__}: {exc}")
                raise
            self.tables.update_committee_job(seat, status="answered", output_tokens=output_tokens, receipt=receipt, error=None)
            seat = self.tables.get_committee_job(seat.audit_id, seat.round, seat.slot, seat.member)
        return seat

    async def _post(self, seat: CommitteeJob) -> None:
        info = await self.chainio.get_round(seat.audit_id, seat.round)
        if seat.slot >= len(info.members) or info.members[seat.slot] != seat.member:
            log.info("audit %d: member 0x%s was replaced before its receipt arrived", seat.audit_id, seat.member.hex())
            return
        try:
            await self.chainio.send("post_committee_receipt", seat.audit_id, seat.slot, seat.receipt, audit_id=seat.audit_id)
        except Exception as exc:
            if not is_revert(exc, "AlreadyOpened"):  # AlreadyOpened: this seat's receipt is on-chain already
                self.tables.update_committee_job(seat, error=f"{type(exc).__name__}: {exc}")
                raise
        self.tables.update_committee_job(seat, status="posted", error=None)

    async def _replace_missing(self, audit_id: int, slots: list[int]) -> None:
        log.warning("audit %d: no receipt from member slots %s by the commit deadline; redrawing", audit_id, slots)
        try:
            await self.chainio.send("replace_missing", audit_id, audit_id=audit_id)
        except Exception as exc:
            if not is_revert(exc, "UnexpectedPhase", "ClaimStanding"):  # replaced by someone else, the round moved on, or a claim waits for its publication
                raise
