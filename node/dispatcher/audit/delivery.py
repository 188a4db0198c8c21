"""Undelivered committee jobs (docs/protocol.md §12 "Undelivered jobs"; contracts/src/Delivery.sol).

    member   sees `CommitteeDrawn` name it; if its seat still has no receipt CLAIM_DELAY of the
             commit window later (the dispatcher never sent the job), it claims the job
             (`claimUndelivered`), and slashes the worker (`slashUndelivered`) if the
             publication window passes with nothing published. Once the transcript is published (`TranscriptPublished`), it
             runs the verification job itself — the published input ‖ output, the published
             sampling, one new token — and posts its own receipt; from there its seat is an
             ordinary member duty (`duties.py`), found through the receipt like any other.
             A claim bonds DELIVERY_CLAIM_BOND_WEI (issue 34, Standing): a publication pays its
             cost out of it, a default returns it; if every seat's receipt came with nothing
             published, the member takes it back (`releaseClaimBonds`) once the round opens.
    worker   answers every `DeliveryClaimed` on an audit of its own receipt, while the round is
             committing, by publishing the transcript its receipt signed (`publishTranscript`),
             whoever claimed and whether or not the claimant's job came since: once claimed, only
             a publication lets the round go on (a publication costs gas, a missed one the stake).

Stateless between ticks: every step re-reads the recorded events and the chain, so a restart
repeats nothing (claims and publications are one per seat and audit; repeats revert, ignored).
"""

import logging

from verillm.spec.audit import Phase
from verillm.spec import delivery as spec_delivery
from verillm.spec.hashing import keccak256
from verillm.spec.job import compute_tokens_hash
from verillm.spec.types import Job, SamplingParams

from verillm.node.dispatcher.chainio import ChainIO, is_revert
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.store.store import Store
from verillm.node.worker.worker import Worker

log = logging.getLogger(__name__)

EMPTY_ROOT = b"\x00" * 32
CLAIM_DELAY = 0.5
"""Share of the commit window a member waits for its job before claiming it."""
HORIZON_WINDOWS = 4
"""A draw's claims and publication all fall within this many commit windows of it."""


def compute_claim_block(draw_block: int, commit_window_blocks: int) -> int:
    """Return the first block in which a member whose job has not come claims it."""
    return draw_block + max(1, int(commit_window_blocks * CLAIM_DELAY))


def compute_verification_nonce(audit_id: int, round_index: int, slot: int, member: bytes) -> bytes:
    """The nonce of a member's self-run verification job: the same job (hence receipt) on a rerun."""
    return keccak256(b"undelivered" + audit_id.to_bytes(8, "big") + bytes([round_index, slot]) + member)


def compute_self_run_job(model_id: bytes, tokens, sampling: SamplingParams, audit_id: int, round_index: int, slot: int,
                         member: bytes) -> Job:
    """The verification job a member runs from a published transcript (member slot 0-based);
    the audit's dispatcher rebuilds it to find the member's job hash."""
    return Job(model_id=model_id, input_tokens=tuple(tokens), sampling=sampling, max_new_tokens=1,
               nonce=compute_verification_nonce(audit_id, round_index, slot, member))


class DeliveryDuties:
    """Claims for this node's undelivered member jobs, and publications for its worker seats."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, store: Store, worker: Worker):
        self.chainio, self.tables, self.store, self.worker = chainio, tables, store, worker
        self.me = "0x" + chainio.address.hex()

    async def advance(self, head: int) -> None:
        """Answer claims on this node's worker seats, then claim or run its undelivered jobs."""
        since = head - HORIZON_WINDOWS * self.chainio.preset.COMMIT_WINDOW_BLOCKS
        for audit_id in sorted({e["audit_id"] for e in self._recent("DeliveryClaimed", since)}):
            await self._answer_claim(audit_id)
        for (audit_id, round_index), event in self._latest_draws(since).items():
            members = [m.lower() for m in event["args"]["members"]]
            if self.me in members:
                await self._member_step(audit_id, round_index, members.index(self.me), event["block_number"], head)
        for event in self._recent("DeliveryClaimed", since):
            if event["args"]["member"].lower() == self.me:
                await self._release_bond(event["audit_id"], event["args"]["round"])

    def _recent(self, name: str, since: int) -> list[dict]:
        return [e for e in self.tables.get_events(name) if e["block_number"] >= since]

    def _latest_draws(self, since: int) -> dict[tuple[int, int], dict]:
        latest = {}
        for event in self._recent("CommitteeDrawn", since):
            latest[(event["audit_id"], event["args"]["round"])] = event  # events come in chain order
        return latest

    # --- worker --------------------------------------------------------------------------------

    async def _answer_claim(self, audit_id: int) -> None:
        seats = [d for d in self.tables.get_duties(("waiting", "opened", "closed")) if d.audit_id == audit_id and d.slot == 0]
        if not seats or self.tables.get_events("TranscriptPublished", audit_id):
            return
        if (await self.chainio.read(self.chainio.protocol.get_audit, audit_id)).phase != Phase.COMMITTING:
            return  # every seat's receipt came: the round went on, nothing owed
        record = self.store.get_job(seats[0].job_hash)
        tokens = list(record.job.input_tokens) + list(record.output_tokens or ())
        try:
            await self.chainio.send("publish_transcript", audit_id, tokens, record.job.sampling, audit_id=audit_id)
        except Exception as exc:
            if not is_revert(exc, "AlreadyPublished", "TooLate", "UnexpectedPhase"):
                raise
            return
        log.info("audit %d: a member claimed its job; published the transcript (%d tokens)", audit_id, len(tokens))

    # --- member --------------------------------------------------------------------------------

    async def _member_step(self, audit_id: int, round_index: int, slot: int, draw_block: int, head: int) -> None:
        info = await self.chainio.get_round(audit_id, round_index)
        if info.phase != Phase.COMMITTING or slot >= len(info.members) or "0x" + info.members[slot].hex() != self.me:
            return
        party = await self.chainio.read(self.chainio.protocol.get_party, audit_id, round_index, slot + 1)
        if party["root"] != EMPTY_ROOT:
            return  # the job came and its receipt is on-chain
        published = self.tables.get_events("TranscriptPublished", audit_id)
        if published:
            await self._run_published(audit_id, round_index, slot, published[0]["args"])
        elif head >= compute_claim_block(draw_block, self.chainio.preset.COMMIT_WINDOW_BLOCKS):
            if await self._job_arrived(audit_id):
                return  # it is running (or its receipt is on its way): a claim would only cost gas
            await self._claim(audit_id, round_index, slot, head)

    async def _job_arrived(self, audit_id: int) -> bool:
        """Whether this node holds a one-token job over the audit's transcript (its verification
        job came: the member cannot tell it from any scoring request, but its input hashes to
        the worker's signed outputHash)."""
        output_hash, _, count = await self.chainio.read(self.chainio.protocol.jobs.call, "transcriptOf", audit_id)
        rows = self.store.db.query("SELECT job_hash FROM jobs WHERE num_input_tokens = ? ORDER BY received_at DESC LIMIT 64", [count])
        for row in rows:
            job = self.store.get_job(bytes.fromhex(row["job_hash"])).job
            if job.max_new_tokens == 1 and compute_tokens_hash(job.input_tokens) == bytes(output_hash):
                return True
        return False

    async def _claim(self, audit_id: int, round_index: int, slot: int, head: int) -> None:
        claimant = await self.chainio.read(self.chainio.protocol.jobs.call, "claimants", audit_id, (round_index << 8) | slot)
        if claimant.lower() == self.me:
            await self._slash_if_unanswered(audit_id, round_index, slot, head)
            return
        try:
            await self.chainio.send("claim_undelivered", audit_id, slot, audit_id=audit_id)
        except Exception as exc:
            if not is_revert(exc, "AlreadyClaimed", "AlreadyPublished", "ClaimClosed", "JobDelivered", "UnexpectedPhase"):
                raise
            return
        log.warning("audit %d: no verification job for member slot %d of round %d; claimed it on-chain", audit_id, slot, round_index)

    async def _release_bond(self, audit_id: int, round_index: int) -> None:
        """Take back this node's claim bond when its round left COMMITTING with nothing published."""
        held = await self.chainio.read(self.chainio.protocol.get_claim_bonds, audit_id, round_index)
        if self.me not in [a.lower() for a in held]:
            return  # resolved: paid to a publisher, or returned
        state = await self.chainio.read(self.chainio.protocol.get_round_state, audit_id, round_index)
        if state.phase == Phase.COMMITTING:
            return
        try:
            await self.chainio.send("release_claim_bonds", audit_id, round_index, audit_id=audit_id)
        except Exception as exc:
            if not is_revert(exc, "NoBonds", "ClaimsOpen"):
                raise

    async def _slash_if_unanswered(self, audit_id: int, round_index: int, slot: int, head: int) -> None:
        """After an unanswered publication window, slash the worker (the caller is rewarded)."""
        availability = await self.chainio.read(self.chainio.protocol.get_availability, audit_id)
        if availability["published"] or availability["round"] != round_index or head <= availability["publish_deadline"]:
            return
        try:
            await self.chainio.send("slash_undelivered", audit_id, audit_id=audit_id)
        except Exception as exc:
            if not is_revert(exc, "AlreadyHandled", "TooEarly", "UnexpectedPhase", "NoClaim"):
                raise
            return
        log.warning("audit %d: the worker never published the job claimed for slot %d; slashed it", audit_id, slot)

    async def _run_published(self, audit_id: int, round_index: int, slot: int, args: dict) -> None:
        tokens = spec_delivery.decode_transcript_tokens(bytes.fromhex(args["tokens"].removeprefix("0x")))
        state = await self.chainio.read(self.chainio.protocol.get_audit, audit_id)
        sampling = SamplingParams(args["temperatureMilli"], args["topK"], args["topPPpm"], args["seed"])
        job = compute_self_run_job(state.model_id, tokens, sampling, audit_id, round_index, slot, self.chainio.address)
        # Submitted in the dispatcher's name: it asks for this job's openings as for one it sent.
        result = await self.worker.run_job(job, sender=bytes.fromhex(state.dispatcher[2:]))
        try:
            await self.chainio.send("post_committee_receipt", audit_id, slot, result.receipt, audit_id=audit_id)
        except Exception as exc:
            if not is_revert(exc, "AlreadyOpened", "UnexpectedPhase", "TooLate"):
                raise
            return
        log.info("audit %d: ran the published job of member slot %d of round %d and posted its receipt", audit_id, slot, round_index)
