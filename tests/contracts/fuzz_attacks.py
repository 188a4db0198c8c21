"""Adversaries inside an audit round, in the protocol fuzzer (`protocol_fuzz.py`): the cheater
opening late, the griefer's contests and adjudications, and node 5 (the lazy/colluding member),
which seals and opens its votes as any member must (`Jobs.sealVote`, `Jobs.openAndVote`) and, as:
    adversary_member  seals a vote either way on data it never computed, opens it later (a vote
                      other than the sealed one must revert SealMismatch)
    copier            opens before every member sealed (must revert TooEarly); seals a copy of
                      another member's seal; once that member opened, seals its revealed
                      preimage for its own seat (must revert: sealing is over) and opens with it
                      (must revert SealMismatch)
    withholder        seals, then never opens after seeing the others: slashed as a missed
                      opening at settle (`fuzz_votes`, the "missed seal" invariant)
Counts: `STATS["votes"]`."""

import random

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from verillm.chain import TransactionReverted
from verillm.spec.audit import compute_appeal_cells, compute_opening_hash, compute_vote_salt, compute_vote_seal
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.hashing import keccak256

from helpers.contracts import LAYERS, OUTPUT_TOKENS, PRESET, PROMPT_LEN
from fuzz_honest import ADVERSARY, COMMITTING, MAX_AUDITS, OPENING

COPIER_MOVES = ("open-early", "copy-seal", "copy-open")
TOO_EARLY, TOO_LATE, ALREADY_OPENED, SEAL_MISMATCH = (keccak256(e)[:4] for e in (
    b"TooEarly(uint256)", b"TooLate(uint256)", b"AlreadyOpened()", b"SealMismatch(uint8)"))


class RoundAttacks:
    """Mixin of `ProtocolMachine`: late_open, grief_contest, grief_adjudicate, grief_adjudicate_across,
    adversary_member, copier, withholder."""

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1))
    def late_cheater_opens(self, pick):
        t = self.audits[pick % len(self.audits)]
        if t.mode in ("late", "skip", "withhold") and self.audit(t.run.audit_id).challenge_seed != bytes(32):
            opening = self._opening(t, t.run.worker)
            if self._try(self.p.open_worker, t.run.worker.node.account, t.run.audit_id, opening) is not None:
                t.posted = opening
                t.posted_by_round[self.audit(t.run.audit_id).round] = opening
        self._step("late_open")

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1), slot=st.integers(0, 3), count=st.integers(1, 20), shuffle=st.booleans(),
          first_round=st.booleans())
    def grief_contest(self, pick, slot, count, shuffle, first_round=False):
        """Contest any party's cells; with ``first_round``, round 0's while an appeal runs (issue 20
        keeps round 0 contestable through the appeal's dispute window: its honest seats answer)."""
        t = self.audits[pick % len(self.audits)]
        state = self.audit(t.run.audit_id)
        round_index = 0 if first_round else state.round
        seed = bytes(self.jobs("getRound", t.run.audit_id, round_index)[4])
        if seed != bytes(32):
            challenge = compute_challenge(seed, PROMPT_LEN, OUTPUT_TOKENS, LAYERS, PRESET.CHALLENGE_POSITIONS)
            cells = sorted(set(compute_opened_cells(challenge, state.num_positions + (1 if slot else 0))))[:count]
            if shuffle:
                random.Random(count).shuffle(cells)
            tx = self._try(self.p.contest, self.world.outsider, t.run.audit_id, round_index, slot, cells)
            if tx is not None:
                self.cells[tx.value] = cells
        self._step("grief_contest:round0" if first_round and state.round else "grief_contest")

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1), slot=st.integers(1, 3))
    def grief_adjudicate(self, pick, slot):
        t = self.audits[pick % len(self.audits)]
        state = self.audit(t.run.audit_id)
        committee = self.committee(t.run.audit_id, state.round)
        posted = t.posted_by_round.get(state.round)  # the opening of this round's challenge (found: round 0's against round 1's)
        if posted is not None and slot <= len(committee) and state.challenge_seed != bytes(32):
            i = self._index(committee[slot - 1])
            member = self._opening(t, self._member(i, lazy=i == ADVERSARY))
            self._try(self.p.adjudicate, self.world.outsider, t.run.audit_id, state.round, slot, posted, member)
        self._step("grief_adjudicate")

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1), slot=st.integers(1, 3), appeal_slot=st.integers(1, 5))
    def grief_adjudicate_across(self, pick, slot, appeal_slot):
        """Adjudicate any first-round member against any appeal member, on the token cells
        (`adjudicateAcrossRounds`), each with the data its node committed (node 5's lazy data)."""
        t = self.audits[pick % len(self.audits)]
        state = self.audit(t.run.audit_id)
        first, appeal = self.committee(t.run.audit_id, 0), self.committee(t.run.audit_id, state.round) if state.round else []
        if state.round and slot <= len(first) and appeal_slot <= len(appeal) and state.challenge_seed != bytes(32):
            i, j = self._index(first[slot - 1]), self._index(appeal[appeal_slot - 1])
            member = self._opening(t, self._member(i, lazy=i == ADVERSARY), 0)
            reference = self._opening(t, self._member(j, lazy=j == ADVERSARY))
            cells = sorted(compute_appeal_cells(PROMPT_LEN, OUTPUT_TOKENS, LAYERS))
            self._try(self.p.adjudicate_across_rounds, self.world.outsider, t.run.audit_id, slot, appeal_slot, member, reference, cells)
        self._step("grief_adjudicate_across")

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1), agree=st.booleans())
    def adversary_member(self, pick, agree):
        """Node 5, if on the committee: a lazy receipt, then a sealed vote either way on garbage
        data, opened in a later call (with ``agree`` then: another vote must not open the seal)."""
        t = self.audits[pick % len(self.audits)]
        state = self.audit(t.run.audit_id)
        committee = self.committee(t.run.audit_id, state.round)
        if self._node(ADVERSARY).address in committee:
            slot = committee.index(self._node(ADVERSARY).address)
            lazy = self._member(ADVERSARY, lazy=True)
            if state.phase == COMMITTING:
                self._try(self.p.post_committee_receipt, self.world.outsider, t.run.audit_id, slot, lazy.receipt)
            elif state.phase == OPENING and state.challenge_seed != bytes(32):
                self._adversary_votes(t, state.round, slot, agree)
        self._step("adversary_member")

    # --- node 5's sealed votes ------------------------------------------------------------------
    def _lazy_vote(self, t, round_index: int, slot: int, agree: bool) -> tuple:
        """(opening, agree, salt) of node 5's garbage data in seat ``slot``."""
        salt = compute_vote_salt(bytes(self._node(ADVERSARY).account.key), t.run.audit_id, round_index, slot)
        return self._opening(t, self._member(ADVERSARY, lazy=True), round_index), agree, salt

    def _seated(self) -> list:
        """The audits whose current round seats node 5 and is committing or opening."""
        address = self._node(ADVERSARY).address
        return [t for t in self.audits if self.audit(t.run.audit_id).phase in (COMMITTING, OPENING)
                and address in self.committee(t.run.audit_id, self.audit(t.run.audit_id).round)]

    def _seated_pick(self, pick: int):
        """One of `_seated` (it posts its lazy receipt if the round is still committing), or None."""
        seated = self._seated()
        if not seated:
            return None
        t = seated[pick % len(seated)]
        state = self.audit(t.run.audit_id)
        if state.phase == COMMITTING:
            slot = self.committee(t.run.audit_id, state.round).index(self._node(ADVERSARY).address)
            self._try(self.p.post_committee_receipt, self.world.outsider, t.run.audit_id, slot, self._member(ADVERSARY, lazy=True).receipt)
        return t

    def _adversary_seat(self, t):
        """(round state, slot, its party) of node 5 in the audit's round while it is OPENING, or None."""
        state = self.audit(t.run.audit_id)
        committee = self.committee(t.run.audit_id, state.round)
        if state.phase != OPENING or self._node(ADVERSARY).address not in committee:
            return None
        slot = committee.index(self._node(ADVERSARY).address)
        return self.round_state(t.run.audit_id), slot, self.party(t.run.audit_id, state.round, slot + 1)

    def _expect(self, what: str, errors: tuple, send) -> bytes:
        """``send()`` must revert with one of ``errors`` (selectors); returns the revert data."""
        try:
            send()
        except TransactionReverted as exc:
            if exc.data[:4] not in errors:
                self._fail(f"{what}: reverted 0x{exc.data[:4].hex()}, expected {[e.hex() for e in errors]}")
            return exc.data
        self._fail(f"{what}: succeeded")

    def _adversary_votes(self, t, round_index: int, slot: int, agree: bool) -> None:
        seat = self._adversary_seat(t)
        if seat is None or seat[2]["opened"]:
            return
        rs, _, me = seat
        audit_id, account, block = t.run.audit_id, self._node(ADVERSARY).account, self.reads.head() + 1
        sealed = t.adversary.get(round_index)
        if me["hash"] == bytes(32):
            if rs.worker_opened and block <= rs.deadlines.members_seal_by:
                vote = self._lazy_vote(t, round_index, slot, agree)
                if self._try(self.p.seal_vote, account, audit_id, round_index, slot, *vote) is not None:
                    t.adversary[round_index] = {"kind": "own", "vote": vote}
            return
        if sealed is None or sealed["kind"] != "own" or not self._allowed(rs, "open", block):
            return  # a copied seal cannot be opened; a withholder never opens
        opening, sealed_agree, salt = sealed["vote"]
        if agree != sealed_agree:  # it saw the others' votes and would turn: the seal holds it
            self._expect("node 5 opened another vote than it sealed", (SEAL_MISMATCH,),
                         lambda: self.p.open_and_vote(account, audit_id, slot, opening, agree, salt))
            self._count_vote("adversary:vote_change_refused")
        elif self._try(self.p.open_and_vote, account, audit_id, slot, opening, agree, salt) is not None:
            self._count_vote("adversary:opened")

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1), move=st.sampled_from(COPIER_MOVES), agree=st.booleans())
    def copier(self, pick, move, agree):
        """Node 5, where it sits, tries to vote as another member did (see the module note)."""
        t = self._seated_pick(pick)
        seat = None if t is None else self._adversary_seat(t)
        acted = seat is not None and not seat[2]["opened"] and getattr(self, f"_copier_{move.replace('-', '_')}")(t, *seat, agree)
        self._step(f"copier:{move}" if acted else f"copier:{move}:none")

    def _copier_open_early(self, t, rs, slot, me, agree) -> bool:
        block = self.reads.head() + 1
        if rs.seals == rs.members or block > rs.deadlines.members_seal_by:
            return False
        sealed = t.adversary.get(rs.round)
        vote = sealed["vote"] if sealed and sealed["kind"] == "own" else self._lazy_vote(t, rs.round, slot, agree)
        self._expect("node 5 opened before every member sealed", (TOO_EARLY,),
                     lambda: self.p.open_and_vote(self._node(ADVERSARY).account, t.run.audit_id, slot, *vote))
        self._count_vote("copier:too_early")
        return True

    def _copier_copy_seal(self, t, rs, slot, me, agree) -> bool:
        """Seal the seal of another member that sealed and has not opened (its openingHash)."""
        if me["hash"] != bytes(32) or not rs.worker_opened or self.reads.head() + 1 > rs.deadlines.members_seal_by:
            return False
        others = [j for j in range(rs.members) if j != slot]
        sealed = [j for j in others if (p := self.party(t.run.audit_id, rs.round, j + 1))["hash"] != bytes(32) and not p["opened"]]
        if not sealed:
            return False
        j = sealed[agree % len(sealed)]
        copied = self.party(t.run.audit_id, rs.round, j + 1)["hash"]
        try:  # its own seat, the seal window open, not sealed yet: nothing tells a copy from a seal
            self.p._send(self.p.jobs, "sealVote", t.run.audit_id, slot, copied, sender=self._node(ADVERSARY).account)
        except TransactionReverted as exc:
            self._fail(f"node 5's seal (a copy of seat {j}'s) was refused: {exc}")
        t.adversary[rs.round] = {"kind": "copy", "of": j}
        self._count_vote("copier:sealed_a_copy")
        return True

    def _copier_copy_open(self, t, rs, slot, me, agree) -> bool:
        """Once another member opened: seal its revealed preimage for its own seat (sealing is over
        for it: TooLate or AlreadyOpened), then open with it (SealMismatch)."""
        revealed = [v for (r, j), v in sorted(t.revealed.items(), key=lambda kv: kv[0]) if r == rs.round and j != slot]
        block = self.reads.head() + 1
        if not revealed or block > rs.deadlines.members_open_by:
            return False
        opening, their_agree, salt = revealed[agree % len(revealed)]
        account, audit_id = self._node(ADVERSARY).account, t.run.audit_id
        seal = compute_vote_seal(audit_id, rs.round, slot, their_agree, compute_opening_hash(opening), salt)
        self._expect("node 5 sealed after a member opened", (TOO_LATE, ALREADY_OPENED),
                     lambda: self.p._send(self.p.jobs, "sealVote", audit_id, slot, seal, sender=account))
        data = self._expect("node 5 opened another member's preimage", (SEAL_MISMATCH,),
                            lambda: self.p.open_and_vote(account, audit_id, slot, opening, their_agree, salt))
        if int.from_bytes(data[4:36], "big") != slot:
            self._fail(f"SealMismatch names seat {int.from_bytes(data[4:36], 'big')}, node 5 sits in {slot}")
        self._count_vote("copier:seal_mismatch")
        return True

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1), agree=st.booleans())
    def withholder(self, pick, agree):
        """Node 5, where it sits, seals (or keeps what it sealed) and never opens, whatever the
        others show."""
        t = self._seated_pick(pick)
        seat = None if t is None else self._adversary_seat(t)
        acted = False
        if seat is not None and not seat[2]["opened"]:
            rs, slot, me = seat
            if me["hash"] == bytes(32) and rs.worker_opened and self.reads.head() + 1 <= rs.deadlines.members_seal_by:
                vote = self._lazy_vote(t, rs.round, slot, agree)
                acted = self._try(self.p.seal_vote, self._node(ADVERSARY).account, t.run.audit_id, rs.round, slot, *vote) is not None
            elif me["hash"] != bytes(32):
                acted = True
            if acted:
                t.adversary[rs.round] = {"kind": "withhold"}
                self._count_vote("withholder:withheld")
        self._step("withholder" if acted else "withholder:none")
