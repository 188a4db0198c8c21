"""The honest parties of the protocol fuzzer (`protocol_fuzz.py`): after every step each does
what docs/protocol.md says is due — post its receipt when its dispatcher sent it the job, draw
the challenge, open, seal a vote on what the worker posted and open it once every member sealed
(`fuzz_votes.py`), answer contests, contest an opening that
does not prove, adjudicate a lying "agree", finalize, settle, draw an escalation — and never
anything a window forbids. A mixin of `ProtocolMachine`, which provides the chain handles
(`p`, `world`, `jobs`, `registry`, `disputes`, `reads`) and the helpers `_try`, `_send`,
`_member`, `_worker`, `_opening`, `_node`. New honest behaviour goes here; new adversarial moves
are rules in `protocol_fuzz.py`.
"""

from dataclasses import dataclass, field
from types import SimpleNamespace

from eth_abi import decode as abi_decode
from eth_utils import to_checksum_address

from verillm.spec import audit as spec_audit
from verillm.spec.audit import Phase, compute_due_steps
from verillm.spec.hashing import keccak256

from helpers.contracts import PRESET, AuditRun
from verillm.chain.errors import TransactionReverted

CONTESTED_TOPIC = "0x" + keccak256(b"Contested(uint256,uint256,uint8,uint8,address,uint32[],uint16[])").hex()
PRIVATE_START_REFUSALS = {keccak256(sig)[:4] for sig in (b"ReceiptExpired(uint256)", b"NotActiveNode(address)")}

COMMITTING, OPENING, DECIDED, DRAWING, SETTLED, ABANDONED, LAPSED = (
    Phase.COMMITTING, Phase.OPENING, Phase.DECIDED, Phase.DRAWING, Phase.SETTLED, Phase.ABANDONED, Phase.LAPSED)
HONEST = (0, 1, 3, 4, 6, 7, 8, 9)
EXTRA_NODES = 4
MAX_ACTIVE = 3  # audits in flight at once
MAX_AUDITS = 8  # audits per run
CHEATER, ADVERSARY = 2, 5


@dataclass
class Tracked:
    run: AuditRun
    worker: int
    dispatcher: int
    mode: str  # "honest" or a cheat mode
    start_block: int = 0
    seen: list = field(default_factory=list)  # (round, phase) states, in order
    posted: object = None  # the worker's opening as posted in the current round
    posted_by_round: dict = field(default_factory=dict)
    contested: set = field(default_factory=set)
    answered: set = field(default_factory=set)
    tried: set = field(default_factory=set)  # contests an honest party tried to answer
    adjudicated: set = field(default_factory=set)  # (round, slot) of lying votes already taken to adjudication
    windows: set = field(default_factory=set)  # publish deadlines of the claim windows seen (fuzz_delivery)
    published: bool = False  # its transcript was published (fuzz_delivery)
    late: dict = field(default_factory=dict)  # (round, slot, "seal"/"open") → an honest member acts in the window's last block (fuzz_votes)
    revealed: dict = field(default_factory=dict)  # (round, slot) → (opening, agree, salt) an honest member opened: public (fuzz_votes)
    adversary: dict = field(default_factory=dict)  # round → what node 5 sealed: {"kind": own / copy / withhold, ...} (fuzz_attacks)


class HonestParties:
    """What every honest party does on every step (see the module note)."""

    def _prefetch(self) -> None:
        """Every read the honest parties are about to make, in two batches."""
        jobs, disputes = self.jobs.raw, self.disputes.raw
        self.reads.prefetch([(jobs, "getAudit", (t.run.audit_id,)) for t in self.audits] + [(disputes, "contestCount", ()), "head"])
        calls = [(disputes, "getContest", (i,)) for i in range(self.disputes("contestCount"))]
        for t in self.audits:
            view = self.jobs("getAudit", t.run.audit_id)
            if view[5] in (SETTLED, ABANDONED):
                continue
            calls += [(jobs, "getRound", (t.run.audit_id, r)) for r in range(view[4] + 1)]
            calls += [(jobs, "getRoundState", (t.run.audit_id, view[4]))]
            calls += [(jobs, "getParty", (t.run.audit_id, view[4], slot)) for slot in range(view[8] + 1)]
        self.reads.prefetch(calls)

    def _honest(self) -> None:
        self._prefetch()
        # Answers first, for every audit: anvil mines one block per transaction, so each honest
        # transaction sent before an answer (receipts, openings and votes of a 5-seat escalation
        # round, other audits' turns) is a block of the contest's proofWindowBlocks (5 on
        # MINIMAL) gone. Answering after them let a contest's window close on an honest party
        # that had seen it at once: it was slashed (ContestLost), the fuzzer's "honest node lost
        # stake" (issue 9). On a real chain those transactions share blocks.
        # The same holds for a worker's publication when its job is claimed (fuzz_delivery): a
        # pass whose other audits sent ~15 transactions before this audit's turn let the
        # publication window (one commit window) close on an honest worker claimed at the end of
        # the previous pass: slashUndelivered, "honest node 1 lost stake" (seed 3002, harness).
        # Committee draws too (issue 20): a selected audit's round nobody draws in its window
        # (10 blocks on MINIMAL) lapses and slashes its honest dispatcher; a draw left for this
        # audit's turn came after a dozen other transactions of the pass (seed of
        # test_fuzzer_draws_come_first). And a member's claim of a job that never came (issue
        # 20's count, seed 30001: a claim window missed twice, the withholding cheater's round
        # abandoned "members missing"; test_fuzzer_members_claim_within_their_window).
        for t in self.audits:
            state = self.audit(t.run.audit_id)
            if state.phase not in (SETTLED, ABANDONED):
                self._honest_answers(t)
                if state.phase == COMMITTING:
                    self._honest_delivery(t, state)
                    if self.audit(t.run.audit_id).phase == COMMITTING:
                        self._honest_claims(t, self.audit(t.run.audit_id))  # a claim's window closes like an answer's
        # Batching promises (fuzz_coverage): an answer to an omission claim has the same 5-block
        # proof window, so it comes before the draws, whose receipts and reveals take a block
        # each (seed 160002, run 164: a griefer's claim at block 207 on honest dispatcher 0's
        # kept promise first met an answer at 212, its deadline: "honest node 0 lost stake", a
        # harness fault). The client's claims and slashes wait for the end of the pass.
        self._honest_coverage_answers()
        self._honest_draws()
        # Receipts next, of every round drawn or redrawn by now (sealed votes; a draw in this pass
        # posts them at once, `_honest_draws`): a seat has one commit window (20 blocks on MINIMAL),
        # and the openings loop below sends each opening round's challenge, opening, seals and
        # openings, a block each: three rounds opening at once took a pass 22 blocks past a
        # redrawn honest member's window before its audit's turn (seed 120001 at 120 examples:
        # abandoned "members missing", the cheater unslashed;
        # test_fuzzer_receipts_come_before_the_openings_of_a_pass).
        for t in self.audits:
            if self.audit(t.run.audit_id).phase == COMMITTING:
                self._honest_receipts(t, self.audit(t.run.audit_id))
        # Then every opening that is due, after the 5-block answers above: the worker's window is
        # 20 blocks on MINIMAL, and a pass over eight audits in their turn can mine more (one block
        # per transaction): a worker left for its audit's turn defaulted (seed 80002: the challenge drawn at its window's last
        # block, the honest worker slashed; test_fuzzer_openings_come_before_the_rest_of_a_pass).
        for t in self.audits:
            state = self.audit(t.run.audit_id)
            if state.phase == OPENING:
                self._honest_opening(t, state)
                self._honest_draws()  # a draw that fell due during these transactions, at once
        for t in self.audits:
            state = self.audit(t.run.audit_id)
            if state.phase not in (SETTLED, ABANDONED):
                self._delivery_marks(t)  # claims and publications since the last pass, before its phase
            if [x for x in t.seen if isinstance(x[0], int)][-1:] != [(state.round, state.phase)]:
                t.seen.append((state.round, state.phase))  # (round, phase), between fuzz_delivery's marks
            if state.phase in (SETTLED, ABANDONED):
                continue
            if state.phase == COMMITTING:
                self._honest_delivery(t, state)  # slash an unanswered claim, or publish (fuzz_delivery)
                self._honest_receipts(t, self.audit(t.run.audit_id))
                if self.audit(t.run.audit_id).phase == COMMITTING:
                    self._honest_claims(t, self.audit(t.run.audit_id))
            elif state.phase == OPENING:
                self._honest_opening(t, state)
            self._honest_disputes(t, state)
            self._honest_progress(t, state)
            self._honest_draws()  # a draw that fell due during this audit's transactions, at once
        self._honest_client()
        # A late member's last block is near: time moves on under the honest parties until it
        # (fuzz_votes). Only here, once this pass made its answers: steering at a pass's start
        # mined up to 4 blocks before them, on top of the step's (seed 120001's fourth long run:
        # the griefer's omission claim on an honest dispatcher's kept promise answered past its
        # 5-block proof window, "honest node 1 lost stake", a harness fault).
        self._steer_late()

    def _start_selected(self, node, batch, index: int, party) -> int:
        """The dispatcher starts a selected leaf: every other start privately (docs/protocol.md §12
        "Private draws"), as the node does for all; an honest dispatcher reveals at once
        (`_honest_reveal`), the cheater never does (its lapse slashes it, the round is drawn publicly)."""
        secret = keccak256(b"fuzz draw secret" + self.nonce.to_bytes(8, "big") + index.to_bytes(4, "big")) if (self.nonce + index) % 2 else None
        commitment = spec_audit.compute_draw_commitment(secret) if secret else bytes(32)
        try:
            tx = self.p.start_audit(node.account, batch.batch_id, index, party.receipt, batch.levels, draw_commitment=commitment)
        except TransactionReverted as exc:
            # A private start cannot prove an expired receipt taken, so it refuses it (the worker's
            # claimed horizon is checked only at the reveal); the node then starts it publicly,
            # which skips it (node/dispatcher/batches.py): seed 120002's late batch met this.
            if not secret or bytes(exc.data or b"")[:4] not in PRIVATE_START_REFUSALS:
                raise
            secret = None
            tx = self.p.start_audit(node.account, batch.batch_id, index, party.receipt, batch.levels, draw_commitment=bytes(32))
        audit_id = tx.value
        if secret and audit_id:
            # the invariant: a private start shows nothing a member's job is named by (its input
            # hash is the worker's outputHash) until the reveal puts the members' receipts on-chain
            calldata = bytes(self.world.chain.w3.eth.get_transaction(tx.receipt["transactionHash"])["input"])
            assert party.receipt.output_hash not in calldata, f"audit {audit_id}: a private start shows the members' job"
            self.draw_secrets[audit_id] = secret
            self.stats["issue20"]["private_start"] = self.stats["issue20"].get("private_start", 0) + 1
        return audit_id

    def _honest_reveal(self, t: Tracked, rs) -> None:
        """An honest dispatcher's private draw: preview with its secret, send the members their jobs
        (the honest members answer; the adversary, node 5, never does) and reveal with their receipts."""
        secret = self.draw_secrets.get(t.run.audit_id)
        head = self.reads.head()
        if secret is None or not rs.deadlines.draw_after < head + 1 <= rs.deadlines.reveal_by:  # late, in the grace: the penalty
            return
        seats = []
        for slot, address in enumerate(self.p.preview_committee(t.run.audit_id, secret)):
            i = self._index(address)
            if i not in self.adversaries:
                seats.append((slot, self._member(i).receipt))
        tx = self._try(self.p.reveal_round, self._node(t.dispatcher).account, t.run.audit_id, secret, t.run.worker.receipt, seats)
        if tx is None:
            return
        self.stats["issue20"]["private_reveal"] = self.stats["issue20"].get("private_reveal", 0) + 1
        # the invariant: every seat named by the reveal whose member answered has its receipt on-chain with it
        for slot, _ in seats:
            assert self.party(t.run.audit_id, 0, slot + 1)["root"] != bytes(32), f"audit {t.run.audit_id}: seat {slot} named without its receipt"

    def _honest_progress(self, t: Tracked, state) -> None:
        """Every permissionless call the state machine says is due (`spec.audit.compute_due_steps`
        over `Jobs.getRoundState`, the contract's guards mirrored), made at once by an honest
        party: draw a round once its seed block is mined, redraw, slash an unpublished claim,
        finalize, settle, lapse. Two draws are left to the cheater: round 0 of an audit it both
        works and dispatches (its own duty: a lapse slashes it) and an escalation of a cheat audit it
        dispatches (it escalated its own FAIL hoping for an unheard round, and draws it itself)."""
        rs = self.round_state(t.run.audit_id)
        if rs.private_draw and t.dispatcher != CHEATER:
            self._honest_reveal(t, rs)
            rs = self.round_state(t.run.audit_id)
        if rs.phase == DRAWING and not rs.private_draw and not rs.receipt_known and t.run.audit_id % 3:
            # A missed private draw: the client, which holds the worker's receipt, shows it so the
            # round is drawn publicly (every third audit nobody does: the lapse abandons it).
            if self._try(self.p.supply_receipt, self.world.outsider, t.run.audit_id, t.run.worker.receipt) is not None:
                self.stats["issue20"]["receipt_supplied"] = self.stats["issue20"].get("receipt_supplied", 0) + 1
            rs = self.round_state(t.run.audit_id)
        for step in compute_due_steps(rs, self.reads.head() + 1):
            # an honest worker's appeal (or a griefer's escalation of its job) is drawn by the honest
            # parties even when the cheater dispatched it: the appellant draws its own round (the
            # generic fuzzer's seed 34001 saw an honest worker's appeal lapse undrawn, its first
            # round's captured FAIL then settled: a harness gap, not the protocol's)
            if step == "draw_round" and CHEATER == t.dispatcher and (rs.round > 0 and t.mode != "honest" or t.worker == CHEATER):
                continue
            tx = self._try(getattr(self.p, step), self.world.outsider, t.run.audit_id)
            if tx is not None:
                self.stats["due_steps"][step] = self.stats["due_steps"].get(step, 0) + 1
            break  # one call a step per audit: the next reads the new state

    def _honest_draws(self) -> None:
        """Every committee draw that is due, for every audit (the rounds the cheater owes aside),
        and the drawn members' receipts at once (their commit window starts with the draw)."""
        for t in self.audits:
            state = self.audit(t.run.audit_id)
            if state.phase == DRAWING:
                self._honest_progress(t, state)
                if self.audit(t.run.audit_id).phase == COMMITTING:
                    self._honest_receipts(t, self.audit(t.run.audit_id))

    def round_state(self, audit_id: int, round_index: int | None = None):
        """`Jobs.getRoundState` as `spec.audit.RoundState`."""
        if round_index is None:
            round_index = self.audit(audit_id).round
        (phase, r, attempt, members, receipts, seals, opens, worker_opened, drawn, published, pending, publish_deadline,
         private_draw, receipt_known, d) = self.jobs("getRoundState", audit_id, round_index)
        return spec_audit.RoundState(Phase(phase), r, attempt, members, receipts, seals, opens, worker_opened, drawn, published, pending,
                                     publish_deadline, spec_audit.RoundDeadlines(*d, reveal_by=d[2] + PRESET.PRIVATE_REVEAL_GRACE_BLOCKS),
                                     private_draw, receipt_known)

    def _honest_receipts(self, t: Tracked, state) -> None:
        if state.phase != COMMITTING:
            return  # a slashUndelivered just decided the round
        if t.dispatcher == CHEATER and not self.availability(t.run.audit_id)["published"]:
            return  # the cheater's dispatcher never sends its committee their jobs: they wait for the event
        if self.reads.head() >= self.jobs("getRound", t.run.audit_id, state.round)[1]:
            return  # past the commit deadline: a receipt would revert (TooLate)
        for slot, address in enumerate(self.committee(t.run.audit_id, state.round)):
            i = self._index(address)
            if i in self.adversaries or self.party(t.run.audit_id, state.round, slot + 1)["root"] != bytes(32):
                continue
            member = self._member(i)
            self._try(self.p.post_committee_receipt, self.world.outsider, t.run.audit_id, slot, member.receipt)

    def _honest_opening(self, t: Tracked, state) -> None:
        audit_id = t.run.audit_id
        if state.challenge_seed == bytes(32):
            if self.reads.head() < self.jobs("getRound", audit_id, state.round)[2] + PRESET.AUDIT_DRAW_DELAY_BLOCKS:
                return  # the challenge's seed block is not mined yet (TooEarly)
            if self._try(self.p.draw_challenge, self.world.outsider, audit_id) is None:
                return
            state = self.audit(audit_id)
        worker_party = self.party(audit_id, state.round, 0)
        if not worker_party["opened"] and t.mode in ("honest", "open", "forge"):
            t.posted = self._worker_opening(t, state)
            if self._try(self.p.open_worker, t.run.worker.node.account, audit_id, t.posted) is not None:
                t.posted_by_round[state.round] = t.posted
        self._honest_votes(t)  # every member seals, then opens (fuzz_votes)

    def _worker_opening(self, t: Tracked, state):
        if t.mode == "forge":  # leaves of the honest trace: they look right but its root does not commit them
            return self._opening(t, self._worker(t.worker))
        return self._opening(t, t.run.worker)

    def _honest_disputes(self, t: Tracked, state) -> None:
        audit_id = t.run.audit_id
        # An honest party checks the worker's posted opening against its root: a forged one is contested.
        if t.mode == "forge" and t.posted is not None and 0 not in t.contested and self.party(audit_id, 0, 0)["opened"]:
            first = t.posted.leaves[0].leaf
            cells = [(first.position, first.layer)]
            tx = self._try(self.p.contest, self._node(3).account, audit_id, 0, 0, cells)
            if tx is not None:
                t.contested.add(0)
                self.cells[tx.value] = cells
        self._honest_answers(t)  # and answer what came in since this step's first pass
        # A lying "agree" (data that fail against what the worker posted) is adjudicated.
        self._honest_adjudications(t, state)

    def _honest_answers(self, t: Tracked) -> None:
        """Honest parties answer every contest against them; an unanswered one (the cheater's,
        node 5's) is resolved once its proof window has passed."""
        audit_id = t.run.audit_id
        for cid in range(self.disputes("contestCount")):
            c = self.disputes("getContest", cid)
            if not c[3] or c[0] != audit_id or cid in t.answered:
                continue
            opening = self._party_opening(t, c[1], c[2])
            if opening is not None and cid not in t.tried:
                t.tried.add(cid)  # an honest party answers when it sees the contest; a refused answer stays refused
                if self._try(self.p.answer_contest, self.world.outsider, cid, self._contest_cells(cid), opening) is not None:
                    t.answered.add(cid)
                    continue
            if self.reads.head() >= c[5] and self._try(self.p.resolve_contest, self.world.outsider, cid) is not None:
                t.answered.add(cid)

    def _contest_cells(self, cid: int) -> list:
        """The contested (position, layer) cells: as the harness sent them, else from the Contested
        event (a contest of the generic adversary's, `fuzz_generic`)."""
        if cid not in self.cells:
            logs = self.rpc.call("eth_getLogs", [{"fromBlock": "0x0", "toBlock": "latest", "address": self.p.disputes.address,
                                                   "topics": [CONTESTED_TOPIC, "0x" + cid.to_bytes(32, "big").hex()]}])
            _, _, positions, layers = abi_decode(["uint8", "uint8", "uint32[]", "uint16[]"], bytes.fromhex(logs[-1]["data"][2:]))
            self.cells[cid] = list(zip(positions, layers))
        return self.cells[cid]

    def _honest_adjudications(self, t: Tracked, state) -> None:
        audit_id = t.run.audit_id
        posted = t.posted_by_round.get(state.round)
        if state.phase in (OPENING, DECIDED) and posted is not None and t.mode != "forge":
            for slot, address in enumerate(self.committee(audit_id, state.round)):
                party = self.party(audit_id, state.round, slot + 1)
                key = (state.round, slot)
                i = self._index(address)
                if i in self.adversaries and party["opened"] and not party["slashed"] and party["vote"] == 1 and key not in t.adjudicated:
                    t.adjudicated.add(key)  # once: a refused adjudication (NoFault) stays refused
                    # what it opened is public (its calldata); node 5's named rules open its lazy data
                    shown = t.revealed.get(key, (self._opening(t, self._member(i, lazy=True)),))[0]
                    self._try(self.p.adjudicate, self.world.outsider, audit_id, state.round, slot + 1, posted, shown)

    def _party_opening(self, t: Tracked, round_index: int, slot: int):
        """The opening an honest party posted, with proofs; None for the cheater and node 5."""
        if slot == 0:
            return None if t.mode != "honest" else t.posted_by_round.get(round_index)
        address = self.committee(t.run.audit_id, round_index)[slot - 1]
        i = self._index(address)
        return None if i in self.adversaries else self._opening(t, self._member(i), round_index)

    def audit(self, audit_id: int) -> SimpleNamespace:
        """Phase, round, challenge seed and numPositions of the audit's current round."""
        v = self.jobs("getAudit", audit_id)
        return SimpleNamespace(phase=v[5], round=v[4], challenge_seed=bytes(v[7]), num_positions=v[2])

    def party(self, audit_id: int, round_index: int, slot: int) -> dict:
        node, root, _, opening_hash, opened, vote, slashed = self.jobs("getParty", audit_id, round_index, slot)
        # a member's openingHash is its seal until it opens (0: not sealed)
        return {"root": bytes(root), "hash": bytes(opening_hash), "opened": opened, "vote": vote, "slashed": slashed}

    def committee(self, audit_id: int, round_index: int) -> list[str]:
        return [to_checksum_address(a) for a in self.jobs("getRound", audit_id, round_index)[6]]

    def stake(self, address: str) -> int:
        return self.registry("getNode", address)[0]

    def _index(self, address: str) -> int:
        return next(i for i, n in enumerate(self.world.nodes) if n.address == address)
