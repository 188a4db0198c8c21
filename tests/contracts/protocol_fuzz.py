"""A stateful fuzzer over the real contracts (anvil): honest workers, members and dispatchers,
a cheating worker, a lazy/colluding member, and a griefer calling public functions with
adversarial arguments in any order at any block (docs/protocol.md §13, "The fuzzer").

Cast (the six nodes of `contract_scenario.World`):
    nodes 0, 1      honest; workers and dispatchers
    node 2          cheats whenever it is a worker (four ways: see `CHEAT_MODES`) and then
                    dispatches its own job too, withholding its committee's jobs; an honest member
    nodes 3, 4      honest members
    node 5          adversarial member: a lazy receipt (data it never computed), any vote
    outsider        griefer: finalize, settle, replaceMissing, drawChallenge, drawEscalation,
                    escalate, contest, adjudicate, claim, at any time with any arguments
Honest parties follow docs/protocol.md: after every step each does what is due (post its
receipt when its dispatcher sends it the job, open, vote on what the worker posted, answer
contests, contest an opening that does not prove, adjudicate a lying "agree").

Invariants, after every step:
    conservation  each contract's balance = what it owes, to the wei (Registry: stakes; Jobs:
                  credits + fee pool + escalation bonds held; Disputes: open contest bonds)
    honest        an honest node's stake and credit never decrease
At the end of every run (teardown), whatever happened:
    termination   every audit reaches SETTLED or ABANDONED within a bounded number of blocks
                  of permissionless calls, and every stake lock is back to 0
    cheater       a cheating worker whose audit was not abandoned is slashed (abandonment —
                  its own dispatcher withholding the committee's jobs — is the §13 condition)
Honest-majority: node 5 is the only adversarial member, so a committee of 3 has at most one.
"""

import os
import random
import time

import requests
from types import SimpleNamespace
from dataclasses import dataclass, field

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_utils import function_abi_to_4byte_selector
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from eth_utils import to_checksum_address

from verillm.chain import TransactionReverted
from verillm.spec import audit as spec_audit

from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.commitment import compute_opening

from contract_scenario import CHEAT_OFFSET, LAYERS, MODEL, OUTPUT_TOKENS, PRESET, PROMPT_LEN, AuditRun, World

COMMITTING, OPENING, DECIDED, ESCALATING, SETTLED, ABANDONED = 1, 2, 3, 4, 5, 6
HONEST = (0, 1, 3, 4)
CHEATER, ADVERSARY = 2, 5
# open its cheat / never open / post uncommitted leaves / open only when the griefer rule says / dispatch itself, withhold the jobs
CHEAT_MODES = ("open", "skip", "forge", "late", "withhold")
MAX_AUDITS = 3
TEARDOWN_ROUNDS = 60

STATS = {"steps": 0, "runs": 0, "paths": set()}


class FastReader:
    """Raw eth_call with selectors and types computed once: web3's per-call ABI matching costs
    ~80 ms a read, which would make the invariants (dozens of reads a step) the whole run."""

    def __init__(self, w3, handle):
        self.w3, self.address, self.functions = w3, handle.address, {}
        for item in handle.web3.abi:
            if item.get("type") == "function" and item["stateMutability"] in ("view", "pure"):
                self.functions.setdefault(item["name"], (function_abi_to_4byte_selector(item),
                                                         [_abi_type(i) for i in item["inputs"]], [_abi_type(o) for o in item["outputs"]]))

    def __call__(self, name: str, *args):
        return self.decode(name, bytes(self.w3.eth.call(self.request(name, *args))))

    def request(self, name: str, *args) -> dict:
        selector, inputs, _ = self.functions[name]
        return {"to": self.address, "data": "0x" + (selector + abi_encode(inputs, list(args))).hex()}

    def decode(self, name: str, raw: bytes):
        values = abi_decode(self.functions[name][2], raw)
        return values[0] if len(values) == 1 else values


def read_batch(url: str, calls: list) -> list:
    """Many reads in one JSON-RPC batch: (reader, name, args) → eth_call, or an address string
    → eth_getBalance. One round trip instead of dozens on a loaded machine."""
    payload = []
    for i, call in enumerate(calls):
        if isinstance(call, str):
            payload.append({"jsonrpc": "2.0", "id": i, "method": "eth_getBalance", "params": [call, "latest"]})
        else:
            payload.append({"jsonrpc": "2.0", "id": i, "method": "eth_call", "params": [call[0].request(call[1], *call[2]), "latest"]})
    answers = {a["id"]: a["result"] for a in requests.post(url, json=payload, timeout=30).json()}
    return [int(answers[i], 16) if isinstance(c, str) else c[0].decode(c[1], bytes.fromhex(answers[i][2:])) for i, c in enumerate(calls)]


def _abi_type(item: dict) -> str:
    if item["type"].startswith("tuple"):
        return "(" + ",".join(_abi_type(c) for c in item["components"]) + ")" + item["type"][5:]
    return item["type"]


@dataclass
class Tracked:
    run: AuditRun
    worker: int
    dispatcher: int
    mode: str  # "honest" or a cheat mode
    posted: object = None  # the worker's opening as posted in the current round
    posted_by_round: dict = field(default_factory=dict)
    contested: set = field(default_factory=set)
    answered: set = field(default_factory=set)


class ProtocolMachine(RuleBasedStateMachine):
    """One deployment, reverted to its registered state before every run."""

    world: World = None
    base = [None]

    def __init__(self):
        super().__init__()
        chain = self.world.chain
        chain.revert(self.base[0])
        self.base[0] = chain.snapshot()
        self.jobs = FastReader(chain.w3, self.p.jobs)
        self.registry = FastReader(chain.w3, self.p.registry)
        self.disputes = FastReader(chain.w3, self.p.disputes)
        self.audits: list[Tracked] = []
        self.nonce = 0
        self.cells: dict[int, list] = {}  # contest id → its cells
        self.path: list[str] = []
        self.floor = {}
        STATS["runs"] += 1

    # --- helpers ---------------------------------------------------------------------------
    @property
    def p(self):
        return self.world.protocol

    def _node(self, i):
        return self.world.nodes[i]

    def _try(self, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except TransactionReverted:
            return None

    def _step(self, name: str) -> None:
        STATS["steps"] += 1
        self.path.append(name)
        self._honest()

    def _addresses(self):
        return [n.address for n in self.world.nodes] + [self.world.outsider.address]

    # --- the honest parties ----------------------------------------------------------------
    def _honest(self) -> None:
        for t in self.audits:
            state = self.audit(t.run.audit_id)
            if state.phase in (SETTLED, ABANDONED):
                continue
            if state.phase == COMMITTING:
                self._honest_receipts(t, state)
            elif state.phase == OPENING:
                self._honest_opening(t, state)
            self._honest_disputes(t, state)

    def _honest_receipts(self, t: Tracked, state) -> None:
        if t.dispatcher == CHEATER:
            return  # the cheater's dispatcher never sends its committee their jobs
        for slot, address in enumerate(self.committee(t.run.audit_id, state.round)):
            i = self._index(address)
            if i == ADVERSARY or self.party(t.run.audit_id, state.round, slot + 1)["root"] != bytes(32):
                continue
            member = self.world.make_member(self._node(i))
            self._try(self.p.post_committee_receipt, self.world.outsider, t.run.audit_id, slot, member.receipt)

    def _honest_opening(self, t: Tracked, state) -> None:
        audit_id = t.run.audit_id
        if state.challenge_seed == bytes(32):
            if self._try(self.p.draw_challenge, self.world.outsider, audit_id) is None:
                return
            state = self.audit(audit_id)
        worker_party = self.party(audit_id, state.round, 0)
        if not worker_party["opened"] and t.mode in ("honest", "open", "forge"):
            t.posted = self._worker_opening(t, state)
            if self._try(self.p.open, t.run.worker.node.account, audit_id, t.posted) is not None:
                t.posted_by_round[state.round] = t.posted
        worker_party = self.party(audit_id, state.round, 0)
        posted = t.posted_by_round.get(state.round)
        if not worker_party["opened"] or posted is None:
            return
        shown = {(i.leaf.position, i.leaf.layer): i.leaf for i in posted.leaves}
        for slot, address in enumerate(self.committee(audit_id, state.round)):
            i = self._index(address)
            party = self.party(audit_id, state.round, slot + 1)
            if i == ADVERSARY or party["opened"] or party["root"] == bytes(32):
                continue
            member = self.world.make_member(self._node(i))
            opening = self.world.opening(t.run, member)
            mine = {(x.leaf.position, x.leaf.layer): x.leaf for x in opening.leaves}
            agree = spec_audit.is_onchain_agreement(shown, mine, MODEL, PROMPT_LEN, OUTPUT_TOKENS)
            self._try(self.p.open_and_vote, self._node(i).account, audit_id, slot, opening, agree)

    def _worker_opening(self, t: Tracked, state):
        if t.mode == "forge":  # leaves of the honest trace: they look right but its root does not commit them
            return self.world.opening(t.run, self.world.make_worker(t.run.worker.node))
        return self.world.opening(t.run, t.run.worker)

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
        # Honest parties answer every contest against them.
        for cid in range(self.disputes("contestCount")):
            c = self.disputes("getContest", cid)
            if not c[3] or c[0] != audit_id or cid in t.answered:
                continue
            opening = self._party_opening(t, c[1], c[2])
            if opening is not None:
                cells = self.cells[cid]
                if self._try(self.p.answer_contest, self.world.outsider, cid, cells, opening) is not None:
                    t.answered.add(cid)
            if self._try(self.p.resolve_contest, self.world.outsider, cid) is not None:
                t.answered.add(cid)
        # A lying "agree" (data that fail against what the worker posted) is adjudicated.
        posted = t.posted_by_round.get(state.round)
        if state.phase in (OPENING, DECIDED) and posted is not None and t.mode != "forge":
            for slot, address in enumerate(self.committee(audit_id, state.round)):
                party = self.party(audit_id, state.round, slot + 1)
                if self._index(address) == ADVERSARY and party["opened"] and not party["slashed"] and party["vote"] == 1:
                    lazy = self.world.make_member(self._node(ADVERSARY), offset=0.3)
                    self._try(self.p.adjudicate, self.world.outsider, audit_id, state.round, slot + 1, posted, self.world.opening(t.run, lazy))

    def _party_opening(self, t: Tracked, round_index: int, slot: int):
        """The opening an honest party posted, with proofs; None for the cheater and node 5."""
        if slot == 0:
            return None if t.mode != "honest" else t.posted_by_round.get(round_index)
        address = self.committee(t.run.audit_id, round_index)[slot - 1]
        i = self._index(address)
        return None if i == ADVERSARY else self._round_opening(t, round_index, self.world.make_member(self._node(i)))

    def _round_opening(self, t: Tracked, round_index: int, party):
        """``party``'s opening for the challenge of ``round_index`` (a contest may name round 0
        while round 1 runs)."""
        seed = bytes(self.jobs("getRound", t.run.audit_id, round_index)[4])
        challenge = compute_challenge(seed, PROMPT_LEN, OUTPUT_TOKENS, LAYERS, PRESET.CHALLENGE_POSITIONS)
        return compute_opening(party.trace, party.commitment, compute_opened_cells(challenge, party.trace.num_positions))

    def audit(self, audit_id: int) -> SimpleNamespace:
        """Phase, round, challenge seed and numPositions of the audit's current round."""
        v = self.jobs("getAudit", audit_id)
        return SimpleNamespace(phase=v[5], round=v[4], challenge_seed=bytes(v[7]), num_positions=v[2])

    def party(self, audit_id: int, round_index: int, slot: int) -> dict:
        node, root, _, _, opened, vote, slashed = self.jobs("getParty", audit_id, round_index, slot)
        return {"root": bytes(root), "opened": opened, "vote": vote, "slashed": slashed}

    def committee(self, audit_id: int, round_index: int) -> list[str]:
        return [to_checksum_address(a) for a in self.jobs("getRound", audit_id, round_index)[6]]

    def stake(self, address: str) -> int:
        return self.registry("getNode", address)[0]

    def _index(self, address: str) -> int:
        return next(i for i, n in enumerate(self.world.nodes) if n.address == address)

    # --- rules -----------------------------------------------------------------------------
    @initialize()
    def record_floor(self):
        self.floor = {i: (self.stake(self._node(i).address), self.jobs("credits", self._node(i).address)) for i in HONEST}

    @precondition(lambda self: len(self.audits) < MAX_AUDITS)
    @rule(worker=st.sampled_from([0, 1, CHEATER]), dispatcher=st.sampled_from([0, 1]), mode=st.sampled_from(CHEAT_MODES))
    def new_audit(self, worker, dispatcher, mode):
        self.nonce += 1
        cheat = worker == CHEATER
        party = self.world.make_worker(self._node(worker), offset=CHEAT_OFFSET if cheat else 0.0, nonce=self.nonce)
        dispatcher = CHEATER if cheat and mode == "withhold" else dispatcher  # it dispatches its own job
        run = self.world.start(party, dispatcher=self._node(dispatcher))
        self.audits.append(Tracked(run, worker, dispatcher, mode if cheat else "honest"))
        self._step("new_audit")

    @rule(blocks=st.integers(1, 4))
    def mine(self, blocks):
        self.world.chain.mine(blocks)
        self._step("mine")

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1), call=st.sampled_from(["finalize", "settle", "replaceMissing", "drawChallenge", "drawEscalation"]))
    def poke(self, pick, call):
        t = self.audits[pick % len(self.audits)]
        self._try(self.world.chain.transact, self.p.jobs, call, t.run.audit_id, sender=self.world.outsider)
        self._step(f"poke:{call}")

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1))
    def late_cheater_opens(self, pick):
        t = self.audits[pick % len(self.audits)]
        if t.mode in ("late", "skip", "withhold") and self.audit(t.run.audit_id).challenge_seed != bytes(32):
            opening = self.world.opening(t.run, t.run.worker)
            if self._try(self.p.open, t.run.worker.node.account, t.run.audit_id, opening) is not None:
                t.posted = opening
                t.posted_by_round[self.audit(t.run.audit_id).round] = opening
        self._step("late_open")

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1), slot=st.integers(0, 3), count=st.integers(1, 20), shuffle=st.booleans())
    def grief_contest(self, pick, slot, count, shuffle):
        t = self.audits[pick % len(self.audits)]
        state = self.audit(t.run.audit_id)
        if state.challenge_seed != bytes(32):
            cells = sorted(set(self.world.challenge_cells(t.run, state.num_positions + (1 if slot else 0))))[:count]
            if shuffle:
                random.Random(count).shuffle(cells)
            tx = self._try(self.p.contest, self.world.outsider, t.run.audit_id, state.round, slot, cells)
            if tx is not None:
                self.cells[tx.value] = cells
        self._step("grief_contest")

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1))
    def grief_escalate(self, pick):
        self._try(self.p.escalate, self.world.outsider, self.audits[pick % len(self.audits)].run.audit_id)
        self._step("grief_escalate")

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1), slot=st.integers(1, 3))
    def grief_adjudicate(self, pick, slot):
        t = self.audits[pick % len(self.audits)]
        state = self.audit(t.run.audit_id)
        committee = self.committee(t.run.audit_id, state.round)
        if t.posted is not None and slot <= len(committee) and state.challenge_seed != bytes(32):
            i = self._index(committee[slot - 1])
            member = self.world.make_member(self._node(i), offset=0.3 if i == ADVERSARY else 0.0)
            self._try(self.p.adjudicate, self.world.outsider, t.run.audit_id, state.round, slot, t.posted, self.world.opening(t.run, member))
        self._step("grief_adjudicate")

    @precondition(lambda self: self.audits)
    @rule(pick=st.integers(0, MAX_AUDITS - 1), agree=st.booleans())
    def adversary_member(self, pick, agree):
        """Node 5, if on the committee: a lazy receipt, then a vote either way on garbage data."""
        t = self.audits[pick % len(self.audits)]
        state = self.audit(t.run.audit_id)
        committee = self.committee(t.run.audit_id, state.round)
        if self._node(ADVERSARY).address in committee:
            slot = committee.index(self._node(ADVERSARY).address)
            lazy = self.world.make_member(self._node(ADVERSARY), offset=0.3)
            if state.phase == COMMITTING:
                self._try(self.p.post_committee_receipt, self.world.outsider, t.run.audit_id, slot, lazy.receipt)
            elif state.phase == OPENING and state.challenge_seed != bytes(32):
                self._try(self.p.open_and_vote, self._node(ADVERSARY).account, t.run.audit_id, slot, self.world.opening(t.run, lazy), agree)
        self._step("adversary_member")

    @rule(amount=st.integers(1, 10**6))
    def grief_top_up(self, amount):
        self._try(self.p.top_up, self._node(ADVERSARY).account, amount)
        self._step("top_up")

    @rule()
    def grief_claim(self):
        self._try(self.p.claim, self.world.outsider)
        self._step("claim")

    # --- invariants ------------------------------------------------------------------------
    @invariant()
    def invariants_hold(self):
        """ETH conservation to the wei, and honest parties never lose (one batched read)."""
        p, url = self.p, self.world.chain.url
        nodes = [n.address for n in self.world.nodes]
        creditors = self._addresses() + [self.world.owner.address]
        count = self.disputes("contestCount")
        calls = [p.registry.address, p.jobs.address, p.disputes.address, (self.jobs, "feePoolWei", ())]
        calls += [(self.registry, "getNode", (a,)) for a in nodes] + [(self.jobs, "credits", (a,)) for a in creditors]
        calls += [(self.disputes, "getContest", (i,)) for i in range(count)]
        calls += [(self.jobs, "getAuditExtra", (t.run.audit_id,)) for t in self.audits]
        calls += [(self.jobs, "getAudit", (t.run.audit_id,)) for t in self.audits]
        got = read_batch(url, calls)
        registry_wei, jobs_wei, disputes_wei, pool = got[:4]
        at = 4
        node_rows, at = got[at:at + len(nodes)], at + len(nodes)
        credits, at = got[at:at + len(creditors)], at + len(creditors)
        contests, at = got[at:at + count], at + count
        extras, views = got[at:at + len(self.audits)], got[at + len(self.audits):]
        bonds = sum(p.params["disputeBondWei"] for e, v in zip(extras, views, strict=True)
                    if int(e[3], 16) != 0 and v[4] == 1 and v[5] != SETTLED)
        assert registry_wei == sum(row[0] for row in node_rows), "Registry balance != stakes"
        assert jobs_wei == sum(credits) + pool + bonds, "Jobs balance != credits + pool + escalation bonds"
        assert disputes_wei == sum(c[6] for c in contests if c[3]), "Disputes balance != open contest bonds"
        for i, (stake, credit) in self.floor.items():
            assert node_rows[i][0] >= stake, f"honest node {i} lost stake"
            assert credits[i] >= credit, f"honest node {i} lost credit"

    def teardown(self):
        STATS["paths"].add(tuple(self.path))
        progress = os.environ.get("FUZZ_PROGRESS")
        if progress and STATS["runs"] % 20 == 0:  # a long run reports as it goes
            with open(progress, "a") as f:
                f.write(f"{time.strftime('%H:%M:%S')} steps {STATS['steps']} runs {STATS['runs']} paths {len(STATS['paths'])}\n")
        for _ in range(TEARDOWN_ROUNDS):
            if all(self.audit(t.run.audit_id).phase in (SETTLED, ABANDONED) for t in self.audits):
                break
            self.world.chain.mine(4)
            self._honest()
            for t in self.audits:
                for call in ("replaceMissing", "finalize", "settle"):
                    self._try(self.world.chain.transact, self.p.jobs, call, t.run.audit_id, sender=self.world.outsider)
            self.invariants_hold()
        for t in self.audits:
            state = self.audit(t.run.audit_id)
            assert state.phase in (SETTLED, ABANDONED), f"audit {t.run.audit_id} stuck in phase {state.phase}"
            if t.mode != "honest" and state.phase == SETTLED:
                assert self.party(t.run.audit_id, 0, 0)["slashed"], f"cheater ({t.mode}) kept its stake"
        assert all(self.registry("getNode", n.address)[2] == 0 for n in self.world.nodes), "a lock outlived its audits"
