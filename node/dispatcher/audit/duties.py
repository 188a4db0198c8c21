"""What every node owes as a party to an audit (docs/protocol.md §12 "Messages, in order", steps 4–5), whoever dispatched it.

The node learns it holds a seat from the contracts' events: `AuditStarted` names it the
worker of one of its receipts, `CommitteeReceiptPosted` shows one of its receipts filling a
member seat (a member never knew its job was an audit until then; it ran and committed
first). From there:

    worker   once the challenge is drawn (it draws it itself if nobody has), opens the
             challenged cells of its own commitment: `openWorker`
    member   once the worker has opened, reads the worker's leaves from that transaction,
             computes its own cells and its vote (`honest.compute_member_vote`) and seals
             both (`sealVote`, the salt derived from its key); once every member has sealed
             or the seal window has closed, opens what it sealed: `openAndVote` (nobody can
             read a vote before every member has cast its own)
    either   answers every contest against its seat with Merkle proofs (`answerContest`); a
             member's answered contest holds its bond until the member can no longer be proven
             a liar: the seat collects it (`releaseBond`) before it closes
    worker   appeals a FAIL or a TIE of its first round (`escalate`, standing: the worker;
             `honest.is_worker_appeal_warranted`; the bond refunded when the appeal passes it):
             its node ran the job, so a FAIL of its data is a committee's lie or error, and a TIE
             (a lazy "agree" voided against a false "disagree") leaves honest work unverified —
             a new round verifies it and the vote it contradicts pays (docs/protocol.md §12
             "Honest work gets verified"); faults.appeal = "never" turns it off
    worker   once its appeal passed, hunts the first-round members whose posted data the
             passed appeal contradicts: contest, then adjudicate with the answer's proofs
             (`hunt.py`; only members that provably fail, never an honest "disagree")
    member   of an appeal round that decided FAIL, having voted "disagree" in it, or in which
             the worker defaulted: hunts the first-round "agree" voters whose posted data fail
             against its own on the token cells (`hunt.py`, `adjudicateAcrossRounds`, one count
             per appeal seat, a majority slashes; never a first-round "disagree")

    either   once its round is decided, draws the audit's next public round when it is due
             (`drawRound`: the appeal, or its decider — round 2, entered when the appeal decided
             the opposite of round 0's majority, docs/protocol.md §12 "Escalate"): a decider
             nobody draws abandons the audit, so no party relies on the dispatcher for it

A seat is kept until the audit settles or its dispute and proof windows have passed.
"""

import dataclasses
import logging
from dataclasses import dataclass

import numpy as np

from verillm.spec.audit import Phase, compute_due_steps
from verillm.spec.challenge import compute_challenge
from verillm.spec.settlement import AGREE, DISAGREE, FAIL

from verillm.node.dispatcher.chainio import ChainIO, is_revert
from verillm.node.dispatcher.deadlines import Due
from verillm.node.dispatcher.audit.hunt import LiarHunt
from verillm.spec.audit import decode_opening_leaves
from verillm.node.store.dispatcher_tables import DispatcherTables, Duty
from verillm.spec.honest import compute_member_vote, is_worker_appeal_warranted
from verillm.node.store.store import Store
from verillm.node.worker.worker import Worker

log = logging.getLogger(__name__)

WORKER_DRAW_GRACE_BLOCKS = 3


@dataclass(frozen=True)
class PartyFaults:
    """Dishonest behaviour injected by the devnet and the end-to-end tests (never configured)."""

    member_vote: str = "honest"
    """"honest", or "always_agree": a lazy member that rubber-stamps every worker."""
    worker_opening: str = "honest"
    """"honest", or "tampered": the worker posts leaves nudged by two ulps (inside every band, so
    members still agree) that no longer match its committed root — caught only by a contest."""
    committee_jobs: str = "deliver"
    """"deliver", or "withhold": as dispatcher, never send the committee their verification jobs
    (their claims then make the worker publish its transcript, docs/protocol.md §12)."""
    appeal: str = "fail"
    """"fail": as worker, escalate a first-round FAIL or TIE of its own job (an honest node's data
    are honest: the FAIL is the committee's, a TIE leaves it unverified) and, once the appeal
    passes, hunt the first-round liars;
    "never": leave both (a cheater's node, in the tests)."""


def compute_tampered_opening(opening):
    """Return ``opening`` with its first fingerprint moved two float32 ulps up (proofs unchanged)."""
    items = list(opening.leaves)
    leaf = items[0].leaf
    nudged = float(np.nextafter(np.nextafter(np.float32(leaf.fingerprint[0]), np.float32(np.inf)), np.float32(np.inf)))
    items[0] = dataclasses.replace(items[0], leaf=dataclasses.replace(leaf, fingerprint=(nudged, *leaf.fingerprint[1:])))
    return dataclasses.replace(opening, leaves=tuple(items))


class PartyDuties:
    """This node's seats in audits, worker and member."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, store: Store, worker: Worker, faults: PartyFaults):
        self.chainio, self.tables, self.store, self.worker, self.faults = chainio, tables, store, worker, faults
        self.me = "0x" + chainio.address.hex()
        self.hunt = LiarHunt(chainio, tables, worker)

    # --- events -------------------------------------------------------------------------------

    def on_event(self, name: str, args: dict, audit_id: int | None) -> None:
        """Take up a seat named by a new event."""
        if name == "AuditStarted" and args["worker"].lower() == self.me:
            self._take_seat(audit_id, 0, 0, args["receiptHash"])
        elif name == "CommitteeReceiptPosted" and args["member"].lower() == self.me:
            self._take_seat(audit_id, args["round"], args["slot"] + 1, args["receiptHash"])
        elif name == "CommitteeDrawn" and args["round"] > 0:
            for duty in self.tables.get_duties(("waiting", "opened", "closed")):
                if duty.audit_id == audit_id and duty.slot == 0 and duty.round == 0:
                    self.tables.insert_duty(audit_id, args["round"], 0, duty.job_hash)

    def _take_seat(self, audit_id: int, round_index: int, slot: int, receipt_hash: str) -> None:
        row = self.store.db.execute("SELECT job_hash FROM receipts WHERE receipt_hash = ?", [receipt_hash.removeprefix("0x")]).fetchone()
        if row is None:
            log.error("audit %d names this node for receipt %s, which it never signed", audit_id, receipt_hash)
            return
        if self.tables.insert_duty(audit_id, round_index, slot, bytes.fromhex(row[0])):
            log.info("audit %d: this node holds party slot %d of round %d", audit_id, slot, round_index)

    # --- steps --------------------------------------------------------------------------------

    async def advance(self, duty: Duty, head: int) -> None:
        """Take the next step of one seat (as the store has it now: the watcher listed it on its own thread)."""
        duty = self.tables.get_duty(duty.audit_id, duty.round, duty.slot)
        if duty is None or duty.status not in ("waiting", "opened"):
            return  # an earlier step closed it after the watcher listed it
        info = await self.chainio.get_round(duty.audit_id, duty.round)
        party = await self.chainio.read(self.chainio.protocol.get_party, duty.audit_id, duty.round, duty.slot)
        if party["opened"]:
            if duty.status == "waiting":
                self.tables.update_duty(duty, status="opened")
            await self._answer_contests(duty, info)
            if duty.slot == 0 and duty.round == 0 and info.phase == Phase.DECIDED:
                await self._appeal(duty, info, head)
            if info.phase == Phase.DECIDED:
                await self._draw_later_round(duty, head)
            if (duty.slot == 0 and duty.round == 0 and self.faults.appeal == "fail") or (duty.slot > 0 and duty.round > 0):
                await self.hunt.advance(duty, head)
            if await self._is_over(duty, info, head) and await self._release_bonds(duty):
                self.tables.update_duty(duty, status="closed")
        elif info.phase == Phase.OPENING:
            await (self._open_worker(duty, info, head) if duty.slot == 0 else self._seal_or_open(duty, info, party, head))
        elif info.phase == Phase.DECIDED and duty.round > 0 and duty.slot > 0 and not await self._is_over(duty, info, head):
            await self.hunt.advance(duty, head)  # the appeal's worker defaulted before this seat opened: its committed data still count
        elif info.phase not in (Phase.COMMITTING, Phase.DRAWING):
            self.tables.update_duty(duty, status="closed", error=f"round reached phase {info.phase} before this node opened")
            log.error("audit %d: missed the opening of slot %d (phase %d)", duty.audit_id, duty.slot, info.phase)

    async def _appeal(self, duty: Duty, info, head: int) -> None:
        """Escalate a FAIL or a TIE of round 0 on this node's own job, once, within the dispute window."""
        if self.faults.appeal != "fail" or head >= info.verdict_block + self.chainio.preset.DISPUTE_WINDOW_BLOCKS:
            return
        state = await self.chainio.read(self.chainio.protocol.get_audit, duty.audit_id)
        verdict = await self.chainio.read(self.chainio.protocol.jobs.call, "currentVerdict", duty.audit_id)
        if state.round != 0 or state.escalator != "0x" + "00" * 20 or not is_worker_appeal_warranted(verdict):
            return
        try:
            await self.chainio.send("escalate", duty.audit_id, audit_id=duty.audit_id)
        except Exception as exc:
            if not is_revert(exc, "AlreadyHandled", "UnexpectedPhase", "TooLate"):
                raise
            return
        log.warning("audit %d: its first round %s this node's own job; appealed (escalated)", duty.audit_id,
                    "failed" if verdict == FAIL else "tied on")

    async def _draw_later_round(self, duty: Duty, head: int) -> None:
        """Draw the audit's public round after this seat's (the appeal; its decider, entered when
        the appeal contradicted round 0) once its seed block is mined: anyone may, and a round
        nobody draws ends the audit (an appeal lapses to round 0's verdict, a decider abandons
        it), so every party's node draws it, not only its dispatcher's."""
        state = await self.chainio.get_round_state(duty.audit_id)
        if state.round <= duty.round or compute_due_steps(state, head + 1) != ("draw_round",):
            return
        try:
            await self.chainio.send("draw_round", duty.audit_id, audit_id=duty.audit_id)
        except Exception as exc:
            if not is_revert(exc, "UnexpectedPhase", "TooEarly", "TooLate"):
                raise
            return
        log.info("audit %d: drew round %d (a party's duty: a public round nobody draws ends the audit)", duty.audit_id, state.round)

    async def _is_over(self, duty: Duty, info, head: int) -> bool:
        """Whether nothing can be asked of this seat any more: the audit has ended, or its last
        round's dispute and proof windows have passed (a first round's seats stay open while an
        appeal runs: contests of round 0 are accepted through the appeal's dispute window)."""
        preset = self.chainio.preset
        if info.phase in (Phase.SETTLED, Phase.ABANDONED, Phase.LAPSED):
            return True
        state = await self.chainio.read(self.chainio.protocol.get_audit, duty.audit_id)
        if state.phase in (Phase.SETTLED, Phase.ABANDONED):
            return True
        last = info if state.round == duty.round else await self.chainio.get_round(duty.audit_id, state.round)
        return last.phase == Phase.DECIDED and head > last.verdict_block + preset.DISPUTE_WINDOW_BLOCKS + preset.PROOF_WINDOW_BLOCKS

    async def _challenge(self, duty: Duty, seed: bytes):
        state = await self.chainio.read(self.chainio.protocol.get_audit, duty.audit_id)
        model = await self.chainio.get_model(state.model_id)
        prompt_len = state.num_positions - state.output_tokens + 1
        challenge = compute_challenge(seed, prompt_len, state.output_tokens, model.committed_layers, self.chainio.preset.CHALLENGE_POSITIONS)
        return state, model, prompt_len, challenge

    async def _open_worker(self, duty: Duty, info, head: int) -> None:
        # Pending from the round's OPENING phase on, drawn challenge or not: the window runs either way.
        due = await self._due(duty, "open_worker")
        if info.challenge_seed == b"\x00" * 32:
            # The dispatcher draws it as soon as it may; the worker only if that has not happened
            # a few blocks later (it must open within the window either way).
            if head > info.ready_block + self.chainio.preset.AUDIT_DRAW_DELAY_BLOCKS + WORKER_DRAW_GRACE_BLOCKS:
                await self.chainio.draw_challenge(duty.audit_id)
            return
        _, _, _, challenge = await self._challenge(duty, info.challenge_seed)
        opening = await self.worker.open_own_cells(duty.job_hash, challenge=challenge)
        if self.faults.worker_opening == "tampered":
            opening = compute_tampered_opening(opening)
        await self._send_once("open_worker", duty, opening, due=due)

    async def _seal_or_open(self, duty: Duty, info, party: dict, head: int) -> None:
        """A member seat: seal the vote once the worker opened, open the seal once the others
        sealed (or their window closed). The vote is kept in the duty: a restart opens the same."""
        if not info.worker_opened:
            return
        sealed = party["opening_hash"] != bytes(32)  # the seal, until it is opened
        state = await self.chainio.get_round_state(duty.audit_id, duty.round)
        due = self._make_due(duty, "open_and_vote" if sealed else "seal_vote", state)
        self.chainio.duties.expect(due)
        if sealed and state.seals < state.members and head <= state.deadlines.members_seal_by:
            return  # another member's seal may still come: nothing is shown before it
        cast = await self._cast_vote(duty, info)
        if cast is None:
            return
        opening, agree = cast
        salt = self.chainio.compute_vote_salt(duty.audit_id, duty.round, duty.slot - 1)
        if not sealed:
            # The seat stays "waiting" (its vote kept): the chain says it sealed (getParty's seal).
            await self._send_once("seal_vote", duty, duty.round, duty.slot - 1, opening, agree, salt, status="waiting", did="sealed the vote of", due=due)
        else:
            await self._send_once("open_and_vote", duty, duty.slot - 1, opening, agree, salt, due=due)

    async def _cast_vote(self, duty: Duty, info):
        """This seat's opening and vote: the vote computed once over the worker's posted leaves
        and this node's own cells (kept in the duty), the opening recomputed (deterministic)."""
        worker_open = [e for e in self.tables.get_events("Opened", duty.audit_id) if e["args"]["round"] == duty.round and e["args"]["slot"] == 0]
        if not worker_open:
            return None  # the watcher has not recorded the worker's opening yet
        state, model, prompt_len, challenge = await self._challenge(duty, info.challenge_seed)
        opening = await self.worker.open_own_cells(duty.job_hash, challenge=challenge)
        if duty.vote is not None:
            return opening, duty.vote == AGREE
        calldata = await self.chainio.get_calldata(bytes.fromhex(worker_open[0]["tx_hash"]))
        worker_cells = {(l.position, l.layer): l for l in decode_opening_leaves(calldata["leaves"], model.fingerprint_dims)}
        mine = {(i.leaf.position, i.leaf.layer): i.leaf for i in opening.leaves}
        agree = await self._vote(duty, state, model, prompt_len, worker_cells, mine)
        self.tables.update_duty(duty, vote=AGREE if agree else DISAGREE)
        return opening, agree

    async def _vote(self, duty: Duty, state, model, prompt_len: int, worker_cells: dict, mine: dict) -> bool:
        if self.faults.member_vote == "always_agree":
            return True
        record = self.store.get_job(duty.job_hash)
        output_tokens = tuple(record.job.input_tokens[prompt_len:])
        receipt = await self.chainio.get_worker_receipt(duty.audit_id)
        stop_tokens = tuple(self.worker.served.manifest.stop_tokens)
        return compute_member_vote(worker_cells, mine, model, prompt_len, output_tokens, receipt["maxNewTokens"], stop_tokens, record.output_tokens or ())

    async def _due(self, duty: Duty, kind: str) -> Due:
        """The seat's next duty with its deadline from the round's state, pending in the node's duty clock."""
        due = self._make_due(duty, kind, await self.chainio.get_round_state(duty.audit_id, duty.round))
        self.chainio.duties.expect(due)
        return due

    def _make_due(self, duty: Duty, kind: str, state) -> Due:
        by = {"open_worker": state.deadlines.worker_open_by, "seal_vote": state.deadlines.members_seal_by,
              "open_and_vote": state.deadlines.members_open_by}[kind]
        # Still pending in the second half of its window: client work yields from there on.
        return Due(f"{kind}:{duty.audit_id}:{duty.round}:{duty.slot}", kind, by, lead_blocks=self.chainio.preset.OPEN_WINDOW_BLOCKS // 2)

    async def _send_once(self, name: str, duty: Duty, *args, status: str = "opened", did: str = "opened", due: Due | None = None) -> None:
        try:
            await self.chainio.send(name, duty.audit_id, *args, audit_id=duty.audit_id, due=due)
        except Exception as exc:
            if not is_revert(exc, "AlreadyOpened"):
                raise
        self.tables.update_duty(duty, status=status, error=None)
        log.info("audit %d: %s party slot %d of round %d", duty.audit_id, did, duty.slot, duty.round)

    async def _release_bonds(self, duty: Duty) -> bool:
        """Collect the held bond of every contest this member seat answered; False while one is
        not yet payable (the seat stays open)."""
        if duty.slot == 0:
            return True
        for event in self.tables.get_events("Contested", duty.audit_id):
            args = event["args"]
            if args["round"] != duty.round or args["slot"] != duty.slot:
                continue
            contest = await self.chainio.read(self.chainio.protocol.disputes.call, "getContest", args["contestId"])
            if not contest[8] or contest[9]:  # not held: never answered, resolved, or paid already
                continue
            try:
                await self.chainio.send("release_bond", args["contestId"], audit_id=duty.audit_id)
            except Exception as exc:
                if is_revert(exc, "TooEarly"):
                    return False
                if not is_revert(exc, "NotHeld"):  # paid by someone else meanwhile
                    raise
        return True

    async def _answer_contests(self, duty: Duty, info) -> None:
        for event in self.tables.get_events("Contested", duty.audit_id):
            args = event["args"]
            if args["round"] != duty.round or args["slot"] != duty.slot:
                continue
            contest = await self.chainio.read(self.chainio.protocol.disputes.call, "getContest", args["contestId"])
            if not contest[3]:  # closed: answered or resolved
                continue
            _, _, _, challenge = await self._challenge(duty, info.challenge_seed)
            opening = await self.worker.open_own_cells(duty.job_hash, challenge=challenge)
            cells = list(zip(args["positions"], args["layers"]))
            await self.chainio.send("answer_contest", args["contestId"], cells, opening, audit_id=duty.audit_id)
            log.info("audit %d: answered contest %d against slot %d", duty.audit_id, args["contestId"], duty.slot)
