"""Sealed votes in the protocol fuzzer (`protocol_fuzz.py`; docs/protocol.md §12, `Jobs.sealVote` /
`Jobs.openAndVote`): once the worker opened, each honest member seals its vote and opening
(`Protocol.seal_vote`, its salt `spec.audit.compute_vote_salt` of its key), then opens what it
sealed once every member of its round sealed or the round's members_seal_by passed.

Timing. Each honest seat acts in the first block it can (the pass after its move is allowed) or in
its window's last block: `new_audit` draws which seats of its audit are late for the seal, the
opening, or both, and the rule `members_timing` redraws it for a live audit from its current round
on. Every late move whose window ends in block B lands in B, all in that one block (anvil's
automine off for it). Until B is STEER_BLOCKS away the adversaries' rules run (a copier tries to
open while a late member has not sealed); then the honest parties steer: mine up to 4 blocks at a
time with a full honest pass between (as `mine` steps do). Every honest pass hooks the sender: the
late moves land in B before any other transaction of the pass would take it.

Invariants:
    seals first   after every step: no member's Opened event lands in a block before every member
                  of its round sealed, unless the round's members_seal_by has passed (the
                  VoteSealed and Opened logs, read as they come)
    missed seal   at the end of a run: a seat that sealed and never opened, in an audit that
                  settled, is slashed (a missed opening: node 5 withholding, or its copied seal)
Counts: `STATS["votes"]`.
"""

from contextlib import contextmanager

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from verillm.spec.audit import Phase, compute_vote_salt, is_onchain_agreement
from verillm.spec.hashing import keccak256
from verillm.spec.receipt import compute_receipt_hash

from helpers.contracts import MODEL, OUTPUT_TOKENS, PRESET, PROMPT_LEN
from fuzz_rpc import GAS_LIMIT
from fuzz_honest import COMMITTING, DRAWING, MAX_AUDITS, OPENING, SETTLED

SEAL, OPEN = "seal", "open"
STEER_BLOCKS = 12  # a late move this close to its block: time moves on under the honest parties' control
STEER_ROUNDS = 200  # a bound on one steering (each round mines a block or makes a move)
SEALED_TOPIC = "0x" + keccak256(b"VoteSealed(uint256,uint8,uint8,address)").hex()
OPENED_TOPIC = "0x" + keccak256(b"Opened(uint256,uint8,uint8,address,bytes32,uint8)").hex()


def compute_early_openings(events: list, sealed_at: dict, rounds: dict) -> list[str]:
    """The member openings among ``events`` that came too early. ``events``: (kind "sealed" or
    "opened", audit id, round, seat, block), in chain order; ``sealed_at``: (audit id, round) →
    {seat: block}, the seals seen before (updated in place); ``rounds``: (audit id, round) →
    (members, members_seal_by). An opening is early unless every member of its round had sealed
    by its block or its block is past members_seal_by."""
    early = []
    for kind, audit_id, round_index, slot, block in events:
        if kind == "sealed":
            sealed_at.setdefault((audit_id, round_index), {})[slot] = block
            continue
        members, seal_by = rounds[(audit_id, round_index)]
        sealed = sum(1 for b in sealed_at.get((audit_id, round_index), {}).values() if b <= block)
        if sealed < members and block <= seal_by:
            early.append(f"audit {audit_id} round {round_index}: seat {slot} opened in block {block} with {sealed}/{members} sealed, "
                         f"members_seal_by {seal_by}")
    return early


class SealedVotes:
    """Mixin of `ProtocolMachine` (see the module note)."""

    def _count_vote(self, what: str) -> None:
        self.stats["votes"][what] = self.stats["votes"].get(what, 0) + 1

    # --- what an honest member seals and opens ---------------------------------------------------
    def _vote_of(self, t, i: int, round_index: int, slot: int) -> tuple:
        """(opening, agree, salt) of honest node ``i`` in seat ``slot``: its vote on what the worker
        posted, its salt derived from its key (the same after a restart, unknown to anyone else)."""
        posted = t.posted_by_round[round_index]
        opening = self._opening(t, self._member(i), round_index)
        shown = {(x.leaf.position, x.leaf.layer): x.leaf for x in posted.leaves}
        mine = {(x.leaf.position, x.leaf.layer): x.leaf for x in opening.leaves}
        agree = is_onchain_agreement(shown, mine, MODEL, PROMPT_LEN, OUTPUT_TOKENS)
        return opening, agree, compute_vote_salt(bytes(self._node(i).account.key), t.run.audit_id, round_index, slot)

    def _pending_moves(self, t, rs) -> list[tuple[int, int, str]]:
        """(slot, node, move) of each honest seat of the round whose seal or opening is still to come."""
        audit_id = t.run.audit_id
        if rs.phase != OPENING or not rs.worker_opened or rs.round not in t.posted_by_round:
            return []
        out = []
        for slot, address in enumerate(self.committee(audit_id, rs.round)):
            i = self._index(address)
            party = self.party(audit_id, rs.round, slot + 1)
            if i in self.adversaries or party["opened"] or party["root"] == bytes(32):
                continue
            out.append((slot, i, OPEN if party["hash"] != bytes(32) else SEAL))
        return out

    @staticmethod
    def _deadline(rs, move: str) -> int:
        return rs.deadlines.members_seal_by if move == SEAL else rs.deadlines.members_open_by

    @staticmethod
    def _allowed(rs, move: str, block: int) -> bool:
        """Whether ``move`` lands in its window in ``block`` (the contract's guards)."""
        d = rs.deadlines
        if move == SEAL:
            return block <= d.members_seal_by
        return (rs.seals == rs.members or block > d.members_seal_by) and block <= d.members_open_by

    def _member_move(self, t, slot: int, i: int, move: str):
        """Honest node ``i`` seals or opens in seat ``slot`` (the Tx, or None if refused)."""
        audit_id = t.run.audit_id
        rs = self.round_state(audit_id)
        opening, agree, salt = self._vote_of(t, i, rs.round, slot)
        if move == SEAL:
            return self._try(self.p.seal_vote, self._node(i).account, audit_id, rs.round, slot, opening, agree, salt)
        tx = self._try(self.p.open_and_vote, self._node(i).account, audit_id, slot, opening, agree, salt)
        if tx is not None:
            t.revealed[(rs.round, slot)] = (opening, agree, salt)  # public now: its calldata shows it
        return tx

    # --- the honest pass ------------------------------------------------------------------------
    def _honest_votes(self, t) -> None:
        """Every honest seat of the audit's round that acts first seals, or opens, where its move
        is allowed now (a late seat's move is made in its window's last block: `_make_due_late`)."""
        rs = self.round_state(t.run.audit_id)
        for slot, i, move in self._pending_moves(t, rs):
            if t.late.get((rs.round, slot, move)) or not self._allowed(rs, move, self.reads.head() + 1):
                continue
            if self._member_move(t, slot, i, move) is not None:
                self._count_vote(f"{move}_first")
            rs = self.round_state(t.run.audit_id)

    def _late_schedule(self) -> list[tuple]:
        """(deadline, audit id, slot, node, move, tracked) of every late move still to come: it
        lands in its window's last block; one whose window has closed is no longer to come (the
        honest invariant reports the missed move)."""
        moves, head = [], self.reads.head()
        for t in self.audits:
            if self.audit(t.run.audit_id).phase != OPENING:
                continue
            rs = self.round_state(t.run.audit_id)
            for slot, i, move in self._pending_moves(t, rs):
                if t.late.get((rs.round, slot, move)) and self._deadline(rs, move) > head:
                    moves.append((self._deadline(rs, move), t.run.audit_id, slot, i, move, t))
        return moves

    def _make_due_late(self) -> int:
        """Land every late move whose window ends in the next block, all in that one block (anvil
        mines a block per transaction unless told otherwise: one after another, ten late members
        of three rounds took ten blocks from a dispatcher's 10-block private-draw window, seed
        120001's third long run), with the moves whose window ends in the block after it: the
        hooked transaction that follows takes that block (seed 140001's long run: a late seal of
        audit 5 due in block 328 was lost so behind a startAudit). One block a hook at most:
        landing block after block in a loop could take an honest dispatcher's 5-block window to
        answer an omission claim. Return how many landed."""
        if self.making_late:
            return 0
        block = self.reads.head() + 1
        schedule = self._late_schedule()
        if not any(s[0] == block for s in schedule):
            return 0
        self.making_late = True
        try:
            return self._land_together([s for s in schedule if s[0] in (block, block + 1)], block)
        finally:
            self.making_late = False

    def _land_together(self, due: list, block: int) -> int:
        """Send the moves of ``due`` with anvil's automine off and mine them in one block."""
        fast, sent = self.sender, []

        def queue(handle, function, *args, sender, value: int = 0, **_):
            selector, types = fast._function(handle, function)
            tx = {"from": sender.address, "to": handle.address, "data": "0x" + (selector + abi_encode(types, list(args))).hex(),
                  "value": hex(value), "gas": hex(GAS_LIMIT)}
            with self.world.chain.nonces.reserve(sender.address) as nonce:
                return self.rpc.call("eth_sendTransaction", [{**tx, "nonce": hex(nonce)}])

        inner = self.p._send
        self.p._send = queue
        self.rpc.call("evm_setAutomine", [False])
        try:
            for deadline, audit_id, slot, i, move, t in due:
                rs = self.round_state(audit_id)
                if self._allowed(rs, move, block):
                    opening, agree, salt = self._vote_of(t, i, rs.round, slot)
                    if move == SEAL:
                        tx_hash = self.p.seal_vote(self._node(i).account, audit_id, rs.round, slot, opening, agree, salt)
                    else:
                        tx_hash = self.p.open_and_vote(self._node(i).account, audit_id, slot, opening, agree, salt)
                    sent.append((tx_hash, t, rs.round, slot, move, (opening, agree, salt), deadline))
            self.rpc.call("evm_mine", [])
        finally:
            self.rpc.call("evm_setAutomine", [True])
            self.p._send = inner
            self.reads.clear()
        landed = 0
        for tx_hash, t, round_index, slot, move, vote, deadline in sent:
            receipt = self.rpc.call("eth_getTransactionReceipt", [tx_hash])
            if receipt is None or int(receipt["status"], 16) != 1:
                continue  # refused: the honest invariant reports what that costs
            assert int(receipt["blockNumber"], 16) == block, f"a late {move} landed in block {receipt['blockNumber']}, not {block}"
            landed += 1
            self._count_vote(f"{move}_late_in_last_block" if deadline == block else f"{move}_late_a_block_early")
            if move == OPEN:
                t.revealed[(round_index, slot)] = vote
        return landed

    def _honest(self) -> None:
        """An honest pass with the late moves hooked to the sender: before any of its transactions
        takes a late move's block, the move is made (a pass of eight audits sends tens of
        transactions, a block each on anvil: seed 120001's long run saw one take 18 blocks and
        pass over a late seal's whole steering range)."""
        with self.late_hooked():
            super()._honest()

    @contextmanager
    def late_hooked(self):
        """Hook the sender: before any transaction takes a late move's block, the move is made."""
        if self.hooked:
            yield  # inside a hooked pass or the steering: the hook is on
            return
        inner = self.p._send

        def hooked(*args, **kw):
            self._make_due_late()
            return inner(*args, **kw)

        self.p._send, self.hooked = hooked, True
        try:
            yield
        finally:
            self.p._send, self.hooked = inner, False

    def mine_up_to_late(self, blocks: int) -> None:
        """Mine up to ``blocks`` blocks, but none past the next late move's block, and make the
        moves due in the next block (the teardown's 4 blocks a round, and its pokes, which are
        hooked as a pass is: neither may take a late move's block)."""
        schedule = self._late_schedule()
        if schedule:
            blocks = min(blocks, min(s[0] for s in schedule) - (self.reads.head() + 1))
        if blocks > 0:
            self._mine(blocks)
        self._make_due_late()

    def _post_and_draw(self, node, receipts: list):
        """`World.post_and_draw` (post a batch, wait past its seed block, draw) with the wait mined
        as `mine_up_to_late` mines: a dispatcher waiting for its batch's seed block does not stop
        the other nodes, so a late member's move due in one of those blocks lands in it. The
        World's plain `chain.mine` took them unhooked: seed 291106's run 12 (60 examples), an
        honest dispatcher's deferred batch posted in block 472 of a steering pass, blocks 473–474
        mined for its draw — 473 the last block of honest node 6's late opening (audit 5, its
        seal in block 453): never opened, "missed opening" at settle, the ledger's bound 0 broken
        by the harness, not the protocol."""
        with self.late_hooked():
            posted = self.p.post_batch(node.account, [compute_receipt_hash(r) for r in receipts])
            until = self.reads.head() + PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1
            while self.reads.head() < until:
                head = self.reads.head()
                self.mine_up_to_late(until - head)
                if self.reads.head() == head:
                    self._mine(1)
            drawn = self.p.draw_audit(node.account, posted.value.batch_id, node.vrf_key)
        return posted.value, posted.gas_used, drawn.gas_used

    def _steer_late(self) -> None:
        """Once a late move's block is STEER_BLOCKS away, move time on under the honest parties'
        control until every late move in reach is made in its block (called in a hooked pass)."""
        if self.steering:
            return
        schedule = self._late_schedule()
        if not schedule or min(s[0] for s in schedule) - (self.reads.head() + 1) > STEER_BLOCKS:
            return
        self.steering = True
        try:
            for _ in range(STEER_ROUNDS):
                schedule = self._late_schedule()
                if not schedule:
                    return
                gap = min(s[0] for s in schedule) - (self.reads.head() + 1)
                if gap > STEER_BLOCKS:
                    return
                if gap <= 0:
                    if not self._make_due_late():
                        return  # none can land now (an opening before every seal): time moves on with the rules
                    self._honest()  # the parties' turn after the moves, as after any step
                    continue
                self._mine(min(4, gap))  # at most 4 blocks without a pass, as `mine`
                if gap > 4:
                    self._honest()
        finally:
            self.steering = False

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1), seal=st.integers(0, 31), opening=st.integers(0, 31))
    def members_timing(self, pick, seal, opening):
        """The honest seats of a live audit, from its current round on, act in the first or the last
        block of their seal and open windows: bit k of ``seal`` / ``opening`` makes seat k late
        (`new_audit` draws the timing of its audit's seats too)."""
        live = [t for t in self.audits if self.audit(t.run.audit_id).phase in (DRAWING, COMMITTING, OPENING)]
        if not live:
            self._step("members_timing:none")
            return
        t = live[pick % len(live)]
        self._set_timing(t, seal | opening << 5, self.audit(t.run.audit_id).round)
        self._count_vote(f"timing:{Phase(self.audit(t.run.audit_id).phase).name.lower()}")
        self._step("members_timing")

    @staticmethod
    def _set_timing(t, timing: int, first_round: int = 0) -> None:
        """Bits 0–4 of ``timing``: seat k seals in its window's last block; bits 5–9: it opens in
        it; for ``first_round`` and the rounds after it."""
        for round_index in range(first_round, 2):
            for slot in range(5):
                t.late[(round_index, slot, SEAL)] = bool(timing >> slot & 1)
                t.late[(round_index, slot, OPEN)] = bool(timing >> (5 + slot) & 1)

    # --- invariants -----------------------------------------------------------------------------
    def _check_seals_first(self) -> None:
        """No member opens before every member of its round sealed or members_seal_by passed."""
        head = self.reads.head()
        if head < self.logs_from:
            return
        logs = self.rpc.call("eth_getLogs", [{"fromBlock": hex(self.logs_from), "toBlock": hex(head), "address": self.p.jobs.address,
                                               "topics": [[SEALED_TOPIC, OPENED_TOPIC]]}])
        self.logs_from = head + 1
        events, rounds = [], {}
        for log in logs:
            audit_id, block = int(log["topics"][1], 16), int(log["blockNumber"], 16)
            # the data's first two words: round, slot (members count from 1; the worker is 0)
            round_index, slot = abi_decode(["uint8", "uint8"], bytes.fromhex(log["data"][2:130]))
            if log["topics"][0] == OPENED_TOPIC and slot == 0:
                continue  # the worker's opening
            kind = "sealed" if log["topics"][0] == SEALED_TOPIC else "opened"
            events.append((kind, audit_id, round_index, slot, block))
            if kind == "opened":
                self.opened_seats.add((audit_id, round_index, slot))
                rs = self.round_state(audit_id, round_index)
                rounds[(audit_id, round_index)] = (rs.members, rs.deadlines.members_seal_by)
        early = compute_early_openings(events, self.sealed_at, rounds)
        assert not early, f"an opening before the seals: {early}"

    def _check_missed_seals(self) -> None:
        """A seal never opened, in a settled audit, was slashed."""
        self._check_seals_first()
        settled = {t.run.audit_id for t in self.audits if self.audit(t.run.audit_id).phase == SETTLED}
        for (audit_id, round_index), seats in self.sealed_at.items():
            for slot in seats:
                if audit_id in settled and (audit_id, round_index, slot) not in self.opened_seats:
                    party = self.party(audit_id, round_index, slot)
                    assert party["slashed"], f"audit {audit_id} round {round_index}: seat {slot} sealed, never opened, not slashed"
                    self._count_vote("sealed_unopened_slashed")
