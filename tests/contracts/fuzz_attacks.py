"""Adversaries inside an audit round, in the protocol fuzzer (`protocol_fuzz.py`): the cheater
opening late, the griefer's contests and adjudications, and node 5 (the lazy/colluding member).
Mixed into `ProtocolMachine` (moved out of it unchanged)."""

import random

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from verillm.spec.audit import compute_appeal_cells
from verillm.spec.challenge import compute_challenge, compute_opened_cells

from helpers.contracts import LAYERS, OUTPUT_TOKENS, PRESET, PROMPT_LEN
from fuzz_honest import ADVERSARY, COMMITTING, MAX_AUDITS, OPENING


class RoundAttacks:
    """Mixin of `ProtocolMachine`: late_open, grief_contest, grief_adjudicate, grief_adjudicate_across,
    adversary_member."""

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
        """Node 5, if on the committee: a lazy receipt, then a vote either way on garbage data."""
        t = self.audits[pick % len(self.audits)]
        state = self.audit(t.run.audit_id)
        committee = self.committee(t.run.audit_id, state.round)
        if self._node(ADVERSARY).address in committee:
            slot = committee.index(self._node(ADVERSARY).address)
            lazy = self._member(ADVERSARY, lazy=True)
            if state.phase == COMMITTING:
                self._try(self.p.post_committee_receipt, self.world.outsider, t.run.audit_id, slot, lazy.receipt)
            elif state.phase == OPENING and state.challenge_seed != bytes(32):
                self._try(self.p.open_and_vote, self._node(ADVERSARY).account, t.run.audit_id, slot, self._opening(t, lazy), agree)
        self._step("adversary_member")
