"""Issue 20's adversaries in the protocol fuzzer (`protocol_fuzz.py`; docs/protocol.md §13 threat
table): each tries the attack the fuzzer did not try before, and the invariant "an honest party
never loses stake or credit" is checked after every step, as for every other rule.

    shop_committees   node 5 shops for a committee: re-batches an honest worker's receipt under
                      its own identity and starts it (the receipt has its audit: skipped, id 0,
                      no second committee), and tries to re-roll a round still DRAWING whose seed
                      is public (an early `lapse`, a second start): each must revert or do nothing
    edge_timer        the window-edge timer: mines toward the last block of a window in which an
                      adversary has a move (node 5's claim: the commit deadline; the cheater's
                      publication: the publish deadline; its late opening: the worker's open
                      window), at most 4 blocks a step as `mine`, and makes the move in the last block
    hostage           node 5 batches a receipt of the honest node that is leaving (one it kept)
                      and starts its audit: within the leaver's horizon a real audit it answers,
                      after it a skip; the leaver is never held (StakeLocked) past the block its
                      duties end (+ SLACK_BLOCKS: the fuzzer's honest calls come a few blocks late)
    long_transcript   the client asks for a job over MAX_TRANSCRIPT_TOKENS: an honest dispatcher
                      refuses it (no promise, nothing batched); the cheater serving and dispatching
                      it batches it, cannot start it, and an honest party slashes the missed start
    cheater_draws     the cheater draws the round only it owes (round 0 of its self-dispatched
                      job, an escalation it dispatches); if this never fires in time the round
                      lapses and the cheater is slashed as its dispatcher
The false claimant is node 5's `adversary_claims` (fuzz_delivery), at the commit window's last
block through `edge_timer`. Counts: `STATS["issue20"]`.
"""

import random

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from verillm.chain import TransactionReverted
from verillm.spec.hashing import keccak256
from verillm.spec.job import compute_tokens_hash, compute_transcript_hash
from verillm.spec.params import compute_leaver_schedule
from verillm.spec.receipt import compute_auditable_until_block, sign_receipt
from verillm.spec.types import Receipt, SamplingParams

from helpers.contracts import MODEL_ID, PRESET, AuditRun, Party
from fuzz_delivery import TRANSCRIPT
from fuzz_exits import _error
from fuzz_honest import ADVERSARY, CHEATER, COMMITTING, DRAWING, MAX_AUDITS, OPENING

SLACK_BLOCKS = 60  # as protocol_fuzz: honest calls come up to a few blocks after they are due
EDGE_MOVES = ("claim", "publish", "open")
ABANDONED_TOPIC = "0x" + keccak256(b"AuditAbandoned(uint256,uint8,string)").hex()


class Issue20Rules:
    """Mixin of `ProtocolMachine` (see the module note)."""

    def _count20(self, what: str) -> None:
        self.stats["issue20"][what] = self.stats["issue20"].get(what, 0) + 1

    def _abandon_reason(self, audit_id: int) -> str | None:
        """The reason of the audit's AuditAbandoned event, None if it has none."""
        logs = self.rpc.call("eth_getLogs", [{"fromBlock": "0x0", "toBlock": "latest", "address": self.p.jobs.address,
                                               "topics": [ABANDONED_TOPIC, "0x" + audit_id.to_bytes(32, "big").hex()]}])
        if not logs:
            return None
        data = bytes.fromhex(logs[-1]["data"][2:])
        offset = int.from_bytes(data[32:64], "big")
        length = int.from_bytes(data[offset:offset + 32], "big")
        return data[offset + 32:offset + 32 + length].decode()

    # --- committee shopping -------------------------------------------------------------------
    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1))
    def shop_committees(self, pick):
        t = self.audits[pick % len(self.audits)]
        shopper = self._node(ADVERSARY)
        count = self.jobs("auditCount")
        if self.registry("getNode", shopper.address)[4]:  # active: it may post batches
            batch, _, _ = self._post_and_draw(shopper, [t.run.worker.receipt])
            tx = self._try(self.p.start_audit, shopper.account, batch.batch_id, 0, t.run.worker.receipt, batch.levels)
            if tx is None or tx.value != 0 or self.jobs("auditCount") != count:
                self._fail(f"a receipt audited already (audit {t.run.audit_id}) was started again: {tx and tx.value}")
            self._count20("shop:rebatch_skipped")
        rs = self.round_state(t.run.audit_id)
        if rs.phase == DRAWING:  # the seed may be public: nothing re-rolls the draw
            last = rs.deadlines.reveal_by if rs.private_draw else rs.deadlines.draw_by  # a private draw: its late reveal's grace too
            if self.reads.head() + 1 <= last and self._try(self.p.lapse, shopper.account, t.run.audit_id) is not None:
                self._fail(f"audit {t.run.audit_id}: a round lapsed inside its draw window")
            self._count20("shop:drawing_reroll_refused")
        self._step("shop_committees")

    # --- the window-edge timer ------------------------------------------------------------------
    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1), move=st.sampled_from(EDGE_MOVES))
    def edge_timer(self, pick, move):
        t = self.audits[pick % len(self.audits)]
        state = self.audit(t.run.audit_id)
        rs = self.round_state(t.run.audit_id)
        target, act = self._edge_move(t, state, rs, move)
        if target is None:
            self._step(f"edge_timer:{move}:none")
            return
        head = self.reads.head()
        if head + 1 < target:
            self._mine(min(4, target - head - 1))
        if self.reads.head() + 1 == target:
            if act() is not None:
                self._count20(f"edge:{move}")
        self._step(f"edge_timer:{move}")

    def _edge_move(self, t, state, rs, move):
        """(the last block of the window of ``move`` on this audit, the move), or (None, None)."""
        if move == "claim" and state.phase == COMMITTING:
            committee = self.committee(t.run.audit_id, state.round)
            adversary = self._node(ADVERSARY)
            if adversary.address in committee:
                slot = committee.index(adversary.address)
                return rs.deadlines.commit_by, lambda: self._try(self.p.claim_undelivered, adversary.account, t.run.audit_id, slot)
        if move == "publish" and state.phase == COMMITTING and t.worker == CHEATER and rs.publish_deadline and not rs.published:
            return rs.publish_deadline, lambda: self._try(self.p.publish_transcript, t.run.worker.node.account, t.run.audit_id,
                                                          list(TRANSCRIPT), SamplingParams())
        if move == "open" and state.phase == OPENING and t.mode == "late" and rs.challenge_drawn and not rs.worker_opened:
            return rs.deadlines.worker_open_by, lambda: self._late_open(t)
        return None, None

    def _late_open(self, t):
        opening = self._opening(t, t.run.worker)
        tx = self._try(self.p.open_worker, t.run.worker.node.account, t.run.audit_id, opening)
        if tx is not None:
            t.posted = opening
            t.posted_by_round[self.audit(t.run.audit_id).round] = opening
        return tx

    # --- the hostage-taker ----------------------------------------------------------------------
    @precondition(lambda self: self.leaving and len(self.audits) < MAX_AUDITS)
    @rule()
    def hostage(self):
        leaver, end = next(iter(self.leaving.items()))
        taker = self._node(ADVERSARY)
        if not self.registry("getNode", taker.address)[4]:
            self._step("hostage:taker-gone")
            return
        self.nonce += 1
        party = self._worker(leaver, False, self.nonce)  # a job it served before it left: the taker kept the receipt
        left = end - PRESET.UNBONDING_BLOCKS
        batch, _, _ = self._post_and_draw(taker, [party.receipt])
        within = self.batches("getBatch", batch.batch_id)[3] <= left + PRESET.AUDIT_HORIZON_BLOCKS
        tx = self.p.start_audit(taker.account, batch.batch_id, 0, party.receipt, batch.levels)
        if within != (tx.value != 0):
            self._fail(f"hostage on node {leaver} (left {left}): batch within the horizon {within}, audit {tx.value}")
        if tx.value:
            self._track(AuditRun(tx.value, party), leaver, ADVERSARY, "honest")
        self._count20("hostage:audited" if tx.value else "hostage:skipped")
        self._step("hostage")

    def _check_leaver_not_held(self, i: int, end: int, locks: int) -> None:
        """A withdrawal past the leaver's duties (+ slack) never finds its stake locked."""
        duties_end = compute_leaver_schedule(end - PRESET.UNBONDING_BLOCKS, PRESET).duties_end_block
        if locks and self.reads.head() + 1 > duties_end + SLACK_BLOCKS:
            self._fail(f"node {i} left at {end - PRESET.UNBONDING_BLOCKS}: still locked ({locks}) at block {self.reads.head() + 1}, "
                       f"its duties ended at {duties_end}")

    # --- the long-transcript client ---------------------------------------------------------------
    @precondition(lambda self: len(self.promises) < 40)
    @rule(dispatcher=st.sampled_from([0, 1, CHEATER]), seed=st.integers(0, 2**16))
    def long_transcript(self, dispatcher, seed):
        bound = PRESET.MAX_TRANSCRIPT_TOKENS
        if dispatcher != CHEATER:  # an honest dispatcher refuses the job before serving it (node/dispatcher/router.py)
            self._count20("long:refused_by_honest_dispatcher")
            self._step("long_transcript:refused")
            return
        if not self.registry("getNode", self._node(CHEATER).address)[4]:
            self._step("long_transcript:cheater-gone")
            return
        receipt = self._long_receipt(bound + 1 + seed % 64, seed)
        batch, _, _ = self._post_and_draw(self._node(CHEATER), [receipt])
        try:
            self.p.start_audit(self._node(CHEATER).account, batch.batch_id, 0, receipt, batch.levels)
        except TransactionReverted as exc:
            self._count20(f"long:start_refused:{_error(exc) or 'revert'}")
        else:
            self._fail("an audit of a transcript over the bound started")
        self.unstartable.append((batch.batch_id, self.reads.head()))
        self._step("long_transcript")

    def _long_receipt(self, tokens: int, seed: int) -> Receipt:
        rng = random.Random(seed)
        words = [rng.randrange(49_152) for _ in range(tokens)]
        output = 16
        node = self._node(CHEATER)
        receipt = Receipt(job_hash=keccak256(b"long" + seed.to_bytes(4, "big") + tokens.to_bytes(4, "big")), model_id=MODEL_ID,
                          input_hash=compute_tokens_hash(words[:-output]), output_hash=compute_transcript_hash(words[:-output], words[-output:]),
                          sampling=SamplingParams(), max_new_tokens=output, commitment_root=b"\x44" * 32, num_positions=tokens - 1,
                          worker=bytes.fromhex(node.address[2:]), signature=b"\x00" * 65, input_tokens=tokens - output, output_tokens=output,
                          auditable_until_block=compute_auditable_until_block(self.world.chain.get_block_number(), self.world.preset))
        return sign_receipt(receipt, node.account.key, self.world.domain)

    def _honest_missed_starts(self) -> None:
        """An honest party slashes the cheater's missed starts once the start window has passed."""
        for entry in list(self.unstartable):
            batch_id, drawn = entry
            if self.reads.head() + 1 > drawn + PRESET.START_WINDOW_BLOCKS + 1:
                if self._try(self.p.slash_missed_start, self._node(0).account, batch_id, 0) is not None:
                    self._count20("long:missed_start_slashed")
                self.unstartable.remove(entry)

    # --- the cheater's own draws ------------------------------------------------------------------
    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1))
    def cheater_draws(self, pick):
        t = self.audits[pick % len(self.audits)]
        if t.dispatcher == CHEATER and self.audit(t.run.audit_id).phase == DRAWING:
            secret = self.draw_secrets.get(t.run.audit_id)
            if secret is not None and self.round_state(t.run.audit_id).private_draw:
                # its private draw, revealed without receipts: it never sends its members their jobs
                # (left undrawn, its lapse slashes it and the round is drawn publicly)
                if self._try(self.p.reveal_round, self._node(CHEATER).account, t.run.audit_id, secret, t.run.worker.receipt, []) is not None:
                    self._count20("cheater_revealed")
            elif self._try(self.p.draw_round, self._node(CHEATER).account, t.run.audit_id) is not None:
                self._count20("cheater_drew")
        self._step("cheater_draws")
