"""The stateful fuzzer of `protocol_fuzz.py`: a short run in the default suite (seed 0), a
long one under `make test-fuzz` (markers fuzz and slow; FUZZ_EXAMPLES sets its length,
FUZZ_SEED its seed, random when unset). Each run prints steps, distinct paths and the seed; a
failure prints hypothesis's minimal call sequence."""

import json
import os
import random
import time

import pytest
from eth_abi import decode as abi_decode
from eth_utils import to_checksum_address
from hypothesis import HealthCheck, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from verillm.chain.anvil import AnvilConfig, AnvilProcess
from verillm.chain import TransactionReverted
from verillm.spec import promise as spec_coverage
from verillm.spec.audit import compute_opening_hash, compute_vote_seal
from verillm.spec.hashing import keccak256

from fuzz_rpc import CachedReads, FastSender, RawRpc
from helpers.contracts import PRESET, World, connect
from fuzz_exits import EXIT_MEMBERS
from fuzz_honest import ABANDONED, ADVERSARY, CHEATER, COMMITTING, DECIDED, DRAWING, EXTRA_NODES, HONEST, OPENING, SETTLED
from fuzz_votes import STEER_BLOCKS, compute_early_openings
from protocol_fuzz import STATS, ProtocolMachine

STEPS_PER_RUN = 30


GENESIS_TIMESTAMP_S = 1_767_225_600  # 2026-01-01: any fixed value


@pytest.fixture(scope="module")
def fuzz_anvil(anvil_installed):
    """The fuzzer's own anvil, its genesis at a fixed timestamp and every block one second
    after its parent (set before the deployment): block hashes, hence seeds, committees and
    challenges, are the same in every process, so a seed replays exactly across runs and
    hypothesis shrinks a failure to its minimal call sequence."""
    with AnvilProcess(AnvilConfig(genesis_timestamp_s=GENESIS_TIMESTAMP_S)) as process:
        yield process


@pytest.fixture(scope="module")
def fuzz_world(fuzz_anvil):
    """Ten nodes (room for an escalation committee); anvil signs for every account, so the
    fuzzer's transactions skip local signing."""
    chain = connect(fuzz_anvil)
    chain.w3.provider.make_request("anvil_setBlockTimestampInterval", [1])
    world = World(chain, extra_nodes=EXTRA_NODES)
    world.chain.w3.provider.make_request("anvil_autoImpersonateAccount", [True])
    world.fresh = [chain.snapshot()]  # the registered state, for tests that need the same committees whatever ran before
    return world


def _registered_state(world) -> None:
    """Take ``world``'s chain back to its registered state (the fixture's snapshot; anvil drops a
    snapshot once reverted to, so it is taken again)."""
    world.chain.revert(world.fresh[0])
    world.fresh[0] = world.chain.snapshot()


def _run(world, examples: int, fuzz_seed: int, steps_per_run: int = STEPS_PER_RUN) -> dict:
    """Run the fuzzer from the registered state, whatever ran on the module's chain before (a
    seed replays the same runs in any test order); return what the runs saw."""
    seed(fuzz_seed)(ProtocolMachine)
    _registered_state(world)
    ProtocolMachine.world = world
    ProtocolMachine.rpc = RawRpc(world.chain.url)
    ProtocolMachine.base[0] = world.chain.snapshot()
    steps_before, runs_before, failures_before = STATS["steps"], STATS["runs"], STATS["failures"]
    seen_before = {key: STATS[key] for key in ("paths", "lifecycles", "omission_paths")}
    STATS.update({key: set() for key in seen_before})  # this call's own sets, merged back after it
    delivery_before, omission_before = dict(STATS["delivery"]), dict(STATS["omission"])
    exits_before, batches_before = dict(STATS["exits"]), dict(STATS["batches"])
    issue20_before, due_before, votes_before = dict(STATS["issue20"]), dict(STATS["due_steps"]), dict(STATS["votes"])
    started = time.monotonic()
    ProtocolMachine.sender = FastSender(world.chain, ProtocolMachine.rpc)
    ProtocolMachine.reads = CachedReads(ProtocolMachine.rpc, ProtocolMachine.sender)
    world.protocol._send = ProtocolMachine.sender  # the fuzzer's transactions skip web3
    try:
        run_state_machine_as_test(ProtocolMachine, settings=settings(
            max_examples=examples, stateful_step_count=steps_per_run, deadline=None, database=None,
            suppress_health_check=list(HealthCheck)))
    finally:
        del world.protocol._send
        seen = {key: STATS[key] for key in seen_before}
        STATS.update({key: seen_before[key] | seen[key] for key in seen_before})
    steps, runs, wall_s = STATS["steps"] - steps_before, STATS["runs"] - runs_before, time.monotonic() - started
    paths, lifecycles = len(seen["paths"]), len(seen["lifecycles"])
    delivery = {k: v - delivery_before[k] for k, v in STATS["delivery"].items()}
    omission = {k: v - omission_before[k] for k, v in STATS["omission"].items()}
    omission["paths"] = len(seen["omission_paths"])
    exits = {k: v - exits_before.get(k, 0) for k, v in sorted(STATS["exits"].items())}
    batches = {k: v - batches_before.get(k, 0) for k, v in sorted(STATS["batches"].items())}
    issue20 = {k: v - issue20_before.get(k, 0) for k, v in sorted(STATS["issue20"].items())}
    due_steps = {k: v - due_before.get(k, 0) for k, v in sorted(STATS["due_steps"].items())}
    votes = {k: v - votes_before.get(k, 0) for k, v in sorted(STATS["votes"].items())}
    print(f"\nprotocol fuzz: {steps} steps in {runs} runs, {paths} distinct paths, {lifecycles} distinct audit"
          f" lifecycles, seed {fuzz_seed}, {wall_s:.0f} s ({steps / wall_s:.1f} steps/s); delivery {delivery}; omission {omission}; exits {exits}; batches {batches};"
          f" issue 20 actors {issue20}; due steps made {due_steps}; sealed votes {votes}")
    report = os.environ.get("FUZZ_REPORT")
    if report:  # a long run in chunks: one JSON line per chunk, totals summed by whoever reads them
        with open(report, "a") as f:
            f.write(json.dumps({"seed": fuzz_seed, "steps": steps, "runs": runs, "paths": paths, "lifecycles": lifecycles,
                                "lifecycle_set": sorted(repr(x) for x in seen["lifecycles"]), "wall_s": round(wall_s, 1),
                                "failures": STATS["failures"] - failures_before, "delivery": delivery, "omission": omission,
                                "omission_path_set": sorted(repr(x) for x in seen["omission_paths"]),
                                "exits": exits, "batches": batches, "issue20": issue20, "due_steps": due_steps, "votes": votes}) + "\n")
    assert steps > 0
    head = world.chain.w3.eth.get_block("latest")
    return {"steps": steps, "runs": runs, "failures": STATS["failures"] - failures_before, **seen,
            "head": (head.number, head.hash.hex())}


def test_protocol_fuzz_short(fuzz_world):
    """The default suite's share: 6 runs of up to 30 steps (seed 0)."""
    _run(fuzz_world, int(os.environ.get("FUZZ_SHORT_EXAMPLES", "6")), 0)


@pytest.mark.fuzz
@pytest.mark.slow
def test_protocol_fuzz_long(fuzz_world):
    _run(fuzz_world, int(os.environ.get("FUZZ_EXAMPLES", "1200")), int(os.environ.get("FUZZ_SEED", random.randrange(2**32))),
         int(os.environ.get("FUZZ_STEPS_PER_RUN", "100")))


@pytest.mark.fuzz
@pytest.mark.slow
def test_protocol_fuzz_replays_seed_5(fuzz_world):
    """Regression: seed 5 slashed the cheater to zero, then drew a new cheat audit it dispatches
    itself; postBatch reverted NotActiveNode and crashed the run (a harness bug: a slashed-out
    cheater now starts no more audits). Block timestamps are fixed and `_run` starts from the
    registered state, so the seed replays exactly, after any other test."""
    _run(fuzz_world, 4, 5, 100)


def test_a_replay_does_not_depend_on_the_run_before(fuzz_world):
    """Regression (issue 24): `_run` used to start from whatever state the module's chain was
    left in, so the seed-5 replay after `make test-fuzz`'s long run (seed 424242) found receipts
    used and nodes gone (startAudit and deregister reverted) and passed alone. Each call now
    starts from the registered state: seed 5 replayed after a run of another seed takes the
    same steps, sees the same paths and lifecycles and leaves the chain at the same block, by
    hash (block timestamps are fixed: anvil resets its clock to the reverted block)."""
    first = _run(fuzz_world, 6, 5, 30)
    _run(fuzz_world, 6, 424242, 30)  # moves the chain on: audits, receipts used, exits, slashes
    again = _run(fuzz_world, 6, 5, 30)
    assert first["failures"] == 0 and first["lifecycles"], first
    assert again == first


def _machine(world, fresh: bool = False) -> ProtocolMachine:
    """A ProtocolMachine driven by hand (rules called in a fixed order), on the module's chain
    (``fresh``: from the registered state, so its committees do not depend on the tests before)."""
    if fresh:
        _registered_state(world)
    ProtocolMachine.world = world
    ProtocolMachine.rpc = RawRpc(world.chain.url)
    ProtocolMachine.base[0] = world.chain.snapshot()
    ProtocolMachine.sender = FastSender(world.chain, ProtocolMachine.rpc)
    ProtocolMachine.reads = CachedReads(ProtocolMachine.rpc, ProtocolMachine.sender)
    world.protocol._send = ProtocolMachine.sender
    return ProtocolMachine()


def _until(m: ProtocolMachine, done, steps: int = 180) -> None:
    moves = (lambda: m.adversary_member(pick=0, agree=False),  # node 5, where drawn, posts its receipt and votes
             lambda: m.adversary_member(pick=1, agree=False), lambda: m.mine(blocks=1))
    for i in range(steps):
        if done():
            return
        moves[i % len(moves)]()  # each a step: the honest parties act after it
    raise AssertionError(f"not reached in {steps} steps: {[m.audit(t.run.audit_id) for t in m.audits]}")


def test_contest_answered_while_an_escalation_round_is_staffed(fuzz_world):
    """Regression (issue 9): a griefer contests an honest member of audit C in the step where
    audit A's escalation committee (5 seats) posts its receipts, or draws its challenge and
    opens. Honest parties used to answer in C's turn, after A's transactions, each a block on
    anvil: past the 5-block proof window, so the contest resolved against the honest member
    ("honest node lost stake"). They now answer first."""
    # The committees, hence which audit opens first, follow the block hashes: any change to the
    # contracts' bytecode moves them. Try a few empty-block shifts for one where A's round 1 is
    # OPENING while an honest member of C has opened (as `_delivery_audits` does).
    for k in range(8):
        m = _machine(fuzz_world, fresh=True)  # not the last fuzz run's state (its cheater may be slashed out)
        m.record_floor()
        m._mine(k)
        m.new_audit(worker=CHEATER, dispatcher=0, mode="open")  # A: its cheat fails round 0
        a = m.audits[0].run.audit_id
        _until(m, lambda: m.audit(a).phase == DECIDED)
        m.cheat_escalates(pick=0)  # the worker has standing against its FAIL (an outsider has none since issue 34)
        assert m.audit(a).round == 1, "the escalation did not start"
        m.new_audit(worker=0, dispatcher=1, mode="open")  # C: honest (the mode is for cheaters), alongside A's round 1
        c = m.audits[1].run.audit_id

        def c_member_opened():
            seats = [slot + 1 for slot, address in enumerate(m.committee(c, 0)) if m._index(address) in HONEST]
            return [s for s in seats if m.party(c, 0, s)["opened"]]

        try:
            _until(m, lambda: m.audit(a).phase == OPENING and m.audit(c).phase in (OPENING, DECIDED) and c_member_opened())
            break
        except AssertionError:
            del fuzz_world.protocol._send
    else:
        raise AssertionError("no shift of 0-7 blocks puts A's round 1 in OPENING beside C's opened members")
    try:
        honest_seats = c_member_opened()
        assert m.audit(c).challenge_seed != bytes(32) and honest_seats, m.audit(c)
        count = m.disputes("contestCount")
        m.grief_contest(pick=1, slot=honest_seats[0], count=1, shuffle=False)  # A's challenge and openings land in this step
        assert m.disputes("contestCount") == count + 1, "the contest was refused"
        m._check_invariants()  # before the fix: "honest node … lost stake" (answered too late, resolved at once)
        m.teardown()  # drives both audits to the end, checking that no honest node lost stake
    finally:
        del fuzz_world.protocol._send


def _drawn(m: ProtocolMachine, required: bool = True) -> bool:
    """Until every audit's round is drawn: the honest parties draw theirs, the cheater its own
    self-dispatched ones (`cheater_draws`), a block at a time. Whether they were (``required``:
    raise if not)."""
    for _ in range(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 4):
        if all(m.audit(t.run.audit_id).phase != DRAWING for t in m.audits):
            return True
        for pick in range(len(m.audits)):
            m.cheater_draws(pick=pick)
        m.mine(blocks=1)
    if required:
        raise AssertionError(f"rounds still undrawn: {[m.audit(t.run.audit_id) for t in m.audits]}")
    return False


def _delivery_audits(world, tries: int = 12):
    """The three audits of the delivery test, from the registered state after ``k`` empty blocks,
    for the first k where node 5 sits on B's committee (it makes the false claim) and the cheater
    drew C's private round in its window: the committees are drawn from block hashes, so this holds
    whatever transactions the deployment has. (With sealed votes, B's honest round — challenge,
    opening, three seals, three openings, a block each on anvil — can take the step after C's start
    past C's 10-block draw window before the cheater's turn: C lapses, drawn publicly or abandoned.)"""
    for k in range(tries):
        m = _machine(world, fresh=True)
        m.record_floor()
        m._mine(k)
        drawn = True
        for worker, dispatcher, mode in ((CHEATER, 0, "withhold"), (1, 0, "open"), (CHEATER, 1, "withhold")):
            m.new_audit(worker=worker, dispatcher=dispatcher, mode=mode)
            drawn = drawn and _drawn(m, required=False)  # the cheater draws its self-dispatched rounds at once
        if drawn and len(m.audits) == 3 and m._node(ADVERSARY).address in m.committee(m.audits[1].run.audit_id, 0):
            return m
        del world.protocol._send
    raise AssertionError(f"node 5 on no committee B (with every round drawn by its dispatcher) in {tries} tries")


def test_fuzzer_delivery_paths_claim_publish_and_slash_undelivered(fuzz_world):
    """The job-delivery challenge as the fuzzer plays it (docs/protocol.md §12 "Undelivered jobs"),
    in a fixed order from the registered state (`_delivery_audits` picks the first offset at which
    node 5 sits on B's committee):
    A  the cheater dispatches itself and withholds; honest members claim; it publishes, then
       defaults (it never opens) and is slashed at settlement;
    B  an honest worker; node 5 claims its job falsely; the worker publishes in the same step;
    C  the cheater withholds and never publishes; the griefer's wrong publications, early slash
       and outsider claim all revert; an honest claimant slashes it after the window, and the
       round is decided (COMMITTING → DECIDED, no opening)."""
    m = _delivery_audits(fuzz_world)
    try:
        a, b, c = m.audits
        m.grief_delivery(pick=2, slot=0, move="slash")  # nothing claimed yet: NoClaim
        m.grief_delivery(pick=2, slot=0, move="publish-right")
        assert m.availability(c.run.audit_id)["deadline"] == 0
        m.adversary_claims(pick=1)  # B: node 5's false claim, answered at once by the honest worker
        assert m.availability(b.run.audit_id)["published"], m.availability(b.run.audit_id)
        for _ in range(PRESET.COMMIT_WINDOW_BLOCKS):  # honest members claim with half a commit window left
            if m.availability(a.run.audit_id)["deadline"] and not m.availability(a.run.audit_id)["published"]:
                m.cheat_publishes(pick=0)  # A publishes once claimed, within its window (C's claim may come later); C never does
            if all(m.availability(t.run.audit_id)["deadline"] for t in (a, c)):
                break
            m.mine(blocks=1)
        assert all(m.availability(t.run.audit_id)["deadline"] for t in (a, c)), "no honest member claimed its withheld job"
        if not m.availability(a.run.audit_id)["published"]:
            m.cheat_publishes(pick=0)
        assert m.availability(a.run.audit_id)["published"]
        for move in ("publish-token", "publish-length", "publish-sampling", "claim", "slash"):
            for slot in (0, 1):
                m.grief_delivery(pick=2, slot=slot, move=move)
        assert not m.availability(c.run.audit_id)["published"] and m.audit(c.run.audit_id).phase == COMMITTING
        _until(m, lambda: m.audit(c.run.audit_id).phase == DECIDED and m.audit(b.run.audit_id).phase != COMMITTING)
        m.teardown()  # every invariant, every audit terminal within its bound, the cheater slashed
        assert [("claim", 0), ("publish", 0), (0, 2)] == [x for x in a.seen if x in (("claim", 0), ("publish", 0), (0, 2))]
        assert ("claim", 0) in b.seen and ("publish", 0) in b.seen and not m.party(b.run.audit_id, 0, 0)["slashed"]
        assert c.seen[:4] == [(0, 4), (0, 1), ("claim", 0), (0, 3)] and not c.published, c.seen
        assert all(m.party(t.run.audit_id, 0, 0)["slashed"] for t in (a, c))
    finally:
        del fuzz_world.protocol._send



def _reverts(error: bytes):
    """The fuzzer's raw sender reports a custom error by its selector."""
    return pytest.raises(TransactionReverted, match=keccak256(error)[:4].hex())


def _claim_index(m: ProtocolMachine, promise) -> int:
    """The `pick` that names ``promise``'s claim in the rules over claims (sorted claim ids)."""
    claim_id = promise.claims[0][0]
    return sorted(m.claim_of).index(claim_id)


def test_fuzzer_omission_paths_claim_answer_and_slash(fuzz_world):
    """Batching promises as the fuzzer plays them (docs/protocol.md §12 "Batching promises"), in a
    fixed order from the registered state:
    P3  the cheater promises an honest worker's job and batches it one block after the deadline;
    P1  the cheater promises its own cheated job and never batches it;
    P2  the cheater batches a different leaf in time;
    P0  honest dispatcher 1 batches at once; the griefer's early, forged, altered and wrong-bond
        claims revert; its claim once due is answered by the dispatcher, which gains the bond;
    the client claims P1–P3 (it cannot see them); the cheater's proofs into its wrong-leaf and late
    batches and a proof into a foreign batch revert; unanswered, the client slashes each claim;
    every promise ends kept or slashed, every lock at 0, Coverage's balance 0."""
    m = _machine(fuzz_world, fresh=True)
    p = m.p
    try:
        m.record_floor()
        for worker, dispatcher, batching in ((1, CHEATER, "late"), (CHEATER, CHEATER, "never"), (CHEATER, CHEATER, "wrong"), (0, 1, "keep")):
            m.new_audit(worker=worker, dispatcher=dispatcher, mode="open", batching=batching)
            _drawn(m)  # the cheater draws the rounds it owes at once (a lapse would slash it as their dispatcher)
        p3, p1, p2, p0 = m.promises
        assert [x.fate for x in m.promises] == ["late", "never", "wrong", "keep"] and len(m.audits) == 2
        assert m.reads.head() < p3.batch_by - 1, "the setup ran past P3's deadline (the test's premise)"
        # The griefer's moves on P0 back to back: no honest pass between them, whose audit work
        # (seals, openings: how many depends on the committees the blockhashes draw) could run
        # the head past P1–P3's deadlines and let the client claim them first.
        m._honest = lambda: None
        try:
            for move in ("claim", "bond", "forge", "alter", "slash"):
                for other in (0, 1):
                    m.grief_coverage(pick=3, other=other, move=move)  # P0 not due yet: TooEarly; the rest bad signatures
        finally:
            del m._honest
        assert m.coverage("claimCount") == 0
        # head = P3's batchByBlock, with no honest pass between (its audit work could run past
        # it: a few blocks, within every honest window): a batch now lands one block late.
        m._mine(p3.batch_by - m.reads.head())
        m.cheat_batches_late(pick=0)  # then the client, seeing no batch in time, claims P1, P2, P3
        assert p3.batch_id is not None and len(m.audits) == 3
        assert m.batches("getBatch", p3.batch_id)[3] == p3.batch_by + 1
        assert all(x.claims and x.claims[0][1] == "client" for x in (p1, p2, p3)) and not p0.claims
        cheater = m._node(CHEATER).account
        with _reverts(b"BatchTooLate(uint256,uint256)"):
            p.prove_included(cheater, p3.claims[0][0], p3.batch_id, spec_coverage.compute_inclusion_proof([p3.leaf], p3.leaf))
        with _reverts(b"InvalidMerkleProof()"):
            p.prove_included(cheater, p2.claims[0][0], p2.batch_id, spec_coverage.compute_inclusion_proof([p2.leaf], p2.leaf))
        with _reverts(b"ForeignBatch(uint256,address)"):
            p.prove_included(fuzz_world.outsider, p2.claims[0][0], p0.batch_id, spec_coverage.compute_inclusion_proof([p2.leaf], p2.leaf))
        with _reverts(b"ProofWindowOpen(uint256)"):
            p.slash_omission(fuzz_world.outsider, p2.claims[0][0])
        for x in (p2, p3):  # the same moves as rules (each a step: the honest parties act after it)
            m.cheat_proves(pick=_claim_index(m, x))
            m.grief_coverage(pick=_claim_index(m, x), other=3, move="prove-foreign")
        while m.reads.head() < p0.batch_by:
            m.mine(blocks=1)
        credit = m.jobs("credits", m._node(1).address)
        m.grief_coverage(pick=3, other=0, move="claim")  # a kept promise: answered in the same step
        assert p0.claims[0][1] == "griefer" and m._claim_state(p0.claims[0][0])[0] == spec_coverage.ANSWERED
        assert m.jobs("credits", m._node(1).address) == credit + PRESET.OMISSION_CLAIM_BOND_WEI
        _until(m, lambda: all(m._claim_state(x.claims[0][0])[0] == spec_coverage.SLASHED for x in (p1, p2, p3)), steps=60)
        assert m.stake(m._node(CHEATER).address) == 0  # the first slash took it all (MINIMAL: 100%)
        m.teardown()  # every invariant; every promise kept or slashed; every lock 0
        assert fuzz_world.chain.w3.eth.get_balance(p.coverage.address) == 0
        assert m.jobs("credits", m.client.address) >= 3 * PRESET.OMISSION_CLAIM_BOND_WEI
    finally:
        del fuzz_world.protocol._send


def test_a_failure_record_dumps_every_audit_promise_and_claim(fuzz_world, tmp_path, monkeypatch):
    """A long run's failure record (`FUZZ_PROGRESS`.failures) carries what a replay needs first:
    the head, every audit with its phase on-chain, every batching promise with its fate and batch,
    every omission claim with its state and deadline (seed 160002's fault took an hour to rebuild
    by hand without it). Here: an honest audit, and the cheater's promise it never batches, which
    the client claims."""
    m = _machine(fuzz_world, fresh=True)
    try:
        m.record_floor()
        for worker, dispatcher, batching in ((0, 1, "keep"), (CHEATER, CHEATER, "never")):
            m.new_audit(worker=worker, dispatcher=dispatcher, mode="open", batching=batching)
            _drawn(m)
        kept, never = m.promises
        _until(m, lambda: bool(never.claims))
        claim_id = never.claims[0][0]
        progress = tmp_path / "progress.txt"
        monkeypatch.setenv("FUZZ_PROGRESS", str(progress))
        failures = m.stats["failures"]
        m._record_failure(AssertionError("honest node 9 lost stake"))
        m.stats["failures"] = failures  # not a failure of the module's count
        record = (tmp_path / "progress.txt.failures").read_text()
        assert "honest node 9 lost stake" in record and "  head " in record
        for t in m.audits:
            now = m.audit(t.run.audit_id)
            assert f"audit {t.run.audit_id}: worker {t.worker} dispatcher {t.dispatcher}" in record
            assert f"phase {now.phase} round {now.round}" in record
        assert f"fate keep batch {kept.batch_id}" in record and "fate never batch None" in record
        state, deadline = m._claim_state(claim_id)
        assert f"claim {claim_id}: on dispatcher {CHEATER}'s promise, state {state}, prove by block {deadline}" in record
        m.teardown()
    finally:
        del fuzz_world.protocol._send


def test_fuzzer_exits_and_a_multi_leaf_batch(fuzz_world):
    """Exits and multi-leaf batches as the fuzzer plays them (`fuzz_exits.py`, `fuzz_batches.py`),
    in a fixed order from the registered state: honest dispatcher 0 batches three jobs (the
    cheater's and two honest ones) under one root and starts leaf 0 at once; the cheater, locked
    by its audit, deregisters, and its withdrawal reverts StillUnbonding; an honest member with no
    lock deregisters; the griefer's slashMissedStart of a leaf out of the batch and of a pending
    leaf revert; leaf 1 starts by rule, leaf 2 by the dispatcher's duty; once every audit is over
    the member withdraws exactly its stake (+ credits), and the cheater — slashed by its audit
    while unbonding — withdraws nothing; both register again; every invariant holds."""
    m = _machine(fuzz_world, fresh=True)
    try:
        m.record_floor()
        m.new_batch(workers=[CHEATER, 0, 1], dispatcher=0, mode="open", first=0b001)
        assert len(m.audits) == 1 and len(m.pending_starts) == 2 and m.promises[-1].leaves
        m.cheater_exits(move="deregister", wait=False)
        assert m.stats["exits"].get("cheater_deregister_ok_locked", 0) >= 1
        m.cheater_exits(move="withdraw", wait=False)  # StillUnbonding (the helper asserts the error)
        member = next(i for i in EXIT_MEMBERS if m._row(i)[2] == 0)
        m.honest_deregisters(i=member)
        assert m.leaving and m._row(member)[1] > 0
        m.grief_missed_start(pick=0, index=5, draw=False)  # IndexOutOfBatch
        m.grief_missed_start(pick=0, index=1, draw=False)  # TooEarly: still in the start window
        m.start_batched_leaf(pick=0)
        for _ in range(400):  # node 5 posts and votes where drawn (any of the three audits), blocks pass
            if not m.pending_starts and all(m.audit(t.run.audit_id).phase in (SETTLED, ABANDONED) for t in m.audits):
                break
            for pick in range(len(m.audits)):
                m.adversary_member(pick=pick, agree=False)
            m.mine(blocks=1)
        assert len(m.audits) == 3
        stake = m._row(member)[0]
        m.honest_withdraws(wait=True)
        m.cheater_exits(move="withdraw", wait=True)
        assert [x[:2] for x in m.exited] == [(member, stake), (CHEATER, 0)], m.exited  # MINIMAL slashes 100%
        assert m._row(member)[3] and m._row(CHEATER)[3]  # registered again
        m.teardown()
    finally:
        del fuzz_world.protocol._send


def test_fuzzer_a_node_that_unbonds_sits_on_no_round_seeded_after_and_withdraws_on_time(fuzz_world):
    """Issue 20 (the unbond duty). Before it, a node that deregistered at the start of an epoch was
    still drawn into the committees of that epoch (the epoch's snapshot weighed it), and a
    stalled round could hold its stake past its unbonding end (StakeLocked: this test's
    predecessor reached it). Now no round seeded at or after its unbond draws it, the honest
    parties make every due call (`spec.audit.compute_due_steps`), and its withdrawal at its
    unbonding end goes through."""
    m = _machine(fuzz_world, fresh=True)
    try:
        m.record_floor()
        m._mine(PRESET.EPOCH_BLOCKS - m.reads.head() % PRESET.EPOCH_BLOCKS)
        m.cheater_exits(move="deregister", wait=False)
        left = m._row(CHEATER)[1] - PRESET.UNBONDING_BLOCKS
        for worker, dispatcher in ((0, 1), (1, 0), (0, 1)):
            m.new_audit(worker=worker, dispatcher=dispatcher, mode="open")
        _until(m, lambda: all(m.audit(t.run.audit_id).phase != DRAWING for t in m.audits))
        assert m.registry("currentEpoch") == left // PRESET.EPOCH_BLOCKS  # the epoch's snapshot still weighs it
        for t in m.audits:
            assert CHEATER not in {m._index(a) for a in m.committee(t.run.audit_id, 0)}, "a node that left was drawn"
        end = m._row(CHEATER)[1]
        while m.reads.head() + 1 < end:
            m.mine(blocks=min(4, end - 1 - m.reads.head()) or 1)
        assert m._row(CHEATER)[2] == 0, "a lock outlived the unbonding period"
        m.cheater_exits(move="withdraw", wait=False)
        assert m.stats["exits"].get("cheater_withdraw_ok", 0) >= 1
        m.teardown()
    finally:
        del fuzz_world.protocol._send


def test_fuzzer_draws_come_first(fuzz_world):
    """Regression (issue 20's fuzzer, seed 0 of the short run, shrunk): honest dispatcher 0 starts
    the last leaf of a three-leaf batch; its committee draw (a 10-block window on MINIMAL) waited
    for the audit's turn in the honest pass, after a dozen transactions of the other audits, and
    the teardown mined 4 blocks and poked every audit between two passes, each transaction a
    block on anvil: the round lapsed and slashed the honest dispatcher ("honest node 0 lost
    stake"). Honest parties now make due draws first in a pass, as contest answers, and the
    teardown draws right after its mined blocks."""
    m = _machine(fuzz_world, fresh=True)
    try:
        m.record_floor()
        m.honest_deregisters(i=3)
        m.hostage()  # node 5 audits an old receipt of the leaving node 3 (within its horizon)
        m.new_batch(dispatcher=0, first=14, mode="open", workers=[0, 0, 0])
        m.start_batched_leaf(pick=0)
        m.teardown()  # before the fix: the leaf's round lapsed, node 0 slashed as its dispatcher
        assert all(m._abandon_reason(t.run.audit_id) != "committee never drawn" for t in m.audits)
    finally:
        del fuzz_world.protocol._send


def test_fuzzer_members_claim_within_their_window(fuzz_world):
    """Regression (issue 20's count, seed 30001; its failing run replayed with a dump of the
    audit's events): the cheater dispatches its own job and withholds the committee's jobs. Its
    round was drawn (block D = 170) in a step whose honest pass first sent another audit's
    challenge and openings (a block each on anvil); the harness's members timed their claim from
    the block the pass first reached their seat (176), not from D as the node does
    (`compute_claim_block`), and claimed last in a pass: due at 186, they were next reached at 184
    and, after a 5-block step, at 192, past the commit deadline (190). Nobody claimed, the round
    was redrawn, the redraw's members missed theirs the same way, and the round was abandoned
    "members missing" with the cheater unslashed: "cheater (withhold) escaped by an
    abandonment", a harness fault, not a contract one (a live member claims within its window).
    Members now claim first in a pass, half a commit window after the draw block: here the claim
    is on-chain by D + 12 (before the fix: not before D + 14, the pass having reached B at D + 4)."""
    m = _machine(fuzz_world, fresh=True)
    try:
        m.record_floor()
        m.honest_deregisters(i=4)  # as in the failing run: one member out for the whole run
        m.new_audit(worker=0, dispatcher=1, mode="open")  # A: its pass sends a challenge and openings
        m.new_audit(worker=CHEATER, dispatcher=CHEATER, mode="withhold")  # B
        b = m.audits[1].run.audit_id
        m.adversary_member(pick=0, agree=True)  # node 5, on A's committee, posts its receipt: A is ready
        assert (m.audit(m.audits[0].run.audit_id).phase, m.audit(b).phase) == (OPENING, DRAWING)
        m.cheater_draws(pick=1)  # in the step where A's challenge falls due: A's transactions come first
        drawn = m.round_state(b).deadlines.commit_by - PRESET.COMMIT_WINDOW_BLOCKS
        while m.reads.head() < drawn + PRESET.COMMIT_WINDOW_BLOCKS // 2 + 2:
            m.mine(blocks=1)
        rs = m.round_state(b, 0)
        assert rs.attempt == 0 and rs.publish_deadline != 0, f"B's members (drawn at {drawn}) have not claimed by {m.reads.head()}"
        m.new_audit(worker=1, dispatcher=0, mode="open")
        m.teardown()  # the cheater invariant: B ends with the cheater judged or slashed
        assert m.round_state(b, 0).attempt == 0 and m.party(b, 0, 0)["slashed"]
    finally:
        del fuzz_world.protocol._send


# seed 80002's falsifying run (issue 20, after the private draws): eight audits in flight at the
# teardown; an honest worker's opening left for its audit's turn in a pass came after its window
SEED_80002_RULES = [
    ('cheater_restakes', dict()), ('cheater_restakes', dict()), ('cheater_restakes', dict()),
    ('cheater_restakes', dict()), ('new_batch', dict(dispatcher=1, first=11, mode='open', workers=[1, 2, 1, 1])),
    ('grief_exits', dict(amount=9058, move='deregister-value')), ('poke', dict(call='finalize', pick=4)),
    ('start_batched_leaf', dict(pick=3)), ('edge_timer', dict(move='claim', pick=7)),
    ('new_batch', dict(dispatcher=1, first=12, mode='open', workers=[2, 1, 0, 1])),
    ('grief_adjudicate_across', dict(appeal_slot=2, pick=6, slot=2)), ('late_cheater_opens', dict(pick=7)),
    ('cheater_restakes', dict()), ('adversary_member', dict(agree=True, pick=1)),
    ('new_batch', dict(dispatcher=0, first=13, mode='open', workers=[0, 0])),
    ('grief_exits', dict(amount=6711875, move='withdraw-value')), ('edge_timer', dict(move='publish', pick=4)),
    ('cheat_publishes', dict(pick=5)), ('cheater_exits', dict(move='deregister', wait=True)),
    ('grief_claim', dict()), ('grief_claim', dict()), ('edge_timer', dict(move='publish', pick=6)),
    ('cheater_exits', dict(move='deregister', wait=True)), ('grief_adjudicate', dict(pick=5, slot=3)),
    ('adversary_member', dict(agree=True, pick=0)), ('late_cheater_opens', dict(pick=4)),
    ('new_batch', dict(dispatcher=0, first=13, mode='late', workers=[0, 2, 0, 2])), ('grief_claim', dict()),
    ('grief_exits', dict(amount=300, move='top-up')),
    ('new_batch', dict(dispatcher=0, first=3, mode='forge', workers=[2, 1, 0, 2])),
    ('grief_coverage', dict(move='bond', other=8, pick=1)),
    ('grief_contest', dict(count=16, first_round=False, pick=4, shuffle=False, slot=1)),
    ('grief_adjudicate_across', dict(appeal_slot=4, pick=4, slot=3)),
    ('long_transcript', dict(dispatcher=0, seed=383)), ('edge_timer', dict(move='open', pick=0)),
    ('cheat_publishes', dict(pick=4)), ('grief_coverage', dict(move='bond', other=4, pick=8)),
    ('cheat_publishes', dict(pick=5)), ('long_transcript', dict(dispatcher=1, seed=63277)),
    ('grief_coverage', dict(move='alter', other=5, pick=1)), ('grief_exits', dict(amount=710, move='deregister')),
    ('grief_claim', dict()), ('cheater_exits', dict(move='withdraw', wait=True)), ('cheater_restakes', dict()),
    ('edge_timer', dict(move='claim', pick=3)), ('long_transcript', dict(dispatcher=2, seed=655)),
    ('grief_adjudicate_across', dict(appeal_slot=3, pick=2, slot=3)),
    ('grief_exits', dict(amount=257_333_312_888, move='adversary-withdraw')),
    ('new_batch', dict(dispatcher=1, first=9, mode='open', workers=[2, 2, 0])),
    ('grief_exits', dict(amount=3289, move='withdraw-value')),
    ('grief_exits', dict(amount=999_999_999_999_999_999, move='withdraw')),
    ('long_transcript', dict(dispatcher=1, seed=738)),
    ('grief_coverage', dict(move='prove-foreign', other=0, pick=5)),
    ('grief_exits', dict(amount=4096, move='deregister-value')), ('grief_escalate', dict(pick=4)),
    ('grief_coverage', dict(move='bond', other=5, pick=6)), ('grief_adjudicate', dict(pick=5, slot=2)),
    ('adversary_member', dict(agree=False, pick=1)), ('cheat_publishes', dict(pick=0)),
    ('edge_timer', dict(move='claim', pick=0)), ('poke', dict(call='settle', pick=6)),
    ('grief_adjudicate', dict(pick=0, slot=1)), ('long_transcript', dict(dispatcher=2, seed=13023)),
    ('cheater_restakes', dict()), ('grief_escalate', dict(pick=6)), ('cheat_publishes', dict(pick=4)),
    ('grief_adjudicate', dict(pick=1, slot=1)), ('cheater_restakes', dict()),
    ('grief_adjudicate', dict(pick=3, slot=2)), ('late_cheater_opens', dict(pick=1)),
    ('grief_coverage', dict(move='forge', other=8, pick=3)), ('cheater_exits', dict(move='deregister', wait=True)),
    ('poke', dict(call='drawChallenge', pick=6)), ('grief_escalate', dict(pick=7)), ('grief_escalate', dict(pick=4)),
    ('grief_claim', dict()), ('late_cheater_opens', dict(pick=2)), ('poke', dict(call='drawChallenge', pick=2)),
    ('poke', dict(call='lapse', pick=5)),
    ('grief_contest', dict(count=3, first_round=True, pick=5, shuffle=True, slot=2)),
    ('grief_adjudicate', dict(pick=7, slot=3)),
    ('new_batch', dict(dispatcher=0, first=10, mode='forge', workers=[1, 2])),
    ('grief_adjudicate_across', dict(appeal_slot=1, pick=1, slot=3)),
    ('cheater_exits', dict(move='withdraw', wait=True)), ('late_cheater_opens', dict(pick=2)),
    ('grief_claim', dict()), ('poke', dict(call='replaceMissing', pick=3)),
    ('grief_coverage', dict(move='forge', other=2, pick=7)), ('grief_claim', dict()),
    ('grief_exits', dict(amount=772, move='deregister')),
    ('grief_adjudicate_across', dict(appeal_slot=1, pick=2, slot=2)), ('edge_timer', dict(move='publish', pick=4)),
    ('cheat_publishes', dict(pick=6)), ('edge_timer', dict(move='open', pick=5)), ('cheater_restakes', dict()),
    ('grief_coverage', dict(move='alter', other=0, pick=2)), ('cheat_publishes', dict(pick=3)),
    ('adversary_member', dict(agree=True, pick=4)),
    ('new_batch', dict(dispatcher=1, first=4, mode='open', workers=[2, 1, 0, 2])),
]


def test_fuzzer_openings_come_before_the_rest_of_a_pass(fuzz_world):
    """Replays seed 80002's run: before the fix, audit 5's challenge was drawn at its window's last
    block and the honest worker (node 0) defaulted: "honest node 0 lost stake" at the teardown.
    Honest openings now come right after the draws in every pass (fuzz_honest.py)."""
    m = _machine(fuzz_world, fresh=True)
    try:
        m.record_floor()
        for rule, kwargs in SEED_80002_RULES:
            getattr(m, rule)(**kwargs)
            m._check_invariants()
        m.teardown()  # drives every audit to its end; raises if an honest node lost stake
    finally:
        del fuzz_world.protocol._send


# --- sealed votes (fuzz_votes.py, fuzz_attacks.py) ----------------------------------------------

ALL_LATE = 0b11111_11111  # every honest seat seals and opens in its window's last block


def _node5_seated(world, timing: int, tries: int = 16) -> ProtocolMachine:
    """An honest audit (worker 0, dispatcher 1) whose first committee seats node 5, from the
    registered state after the first ``k`` empty blocks that give one (committees follow block
    hashes); ``timing`` as `new_audit`'s."""
    for k in range(tries):
        m = _machine(world, fresh=True)
        m.record_floor()
        m._mine(k)
        m.new_audit(worker=0, dispatcher=1, mode="open", timing=timing)
        if _drawn(m, required=False) and m._node(ADVERSARY).address in m.committee(m.audits[0].run.audit_id, 0):
            return m
        del world.protocol._send
    raise AssertionError(f"node 5 on no first committee in {tries} tries")


def _worker_opened(m: ProtocolMachine) -> tuple[int, int]:
    """Node 5 posts its (lazy) receipt, blocks pass until the worker opened; (audit id, node 5's seat)."""
    a = m.audits[0].run.audit_id
    m.adversary_member(pick=0, agree=False)
    for _ in range(PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.OPEN_WINDOW_BLOCKS):
        if m.party(a, 0, 0)["opened"]:
            return a, m.committee(a, 0).index(m._node(ADVERSARY).address)
        m.mine(blocks=1)
    raise AssertionError(f"the worker has not opened: {m.round_state(a)}")


def _votes() -> dict:
    return dict(STATS["votes"])


def _delta(before: dict, key: str) -> int:
    return STATS["votes"].get(key, 0) - before.get(key, 0)


def test_fuzzer_copier_is_refused_and_slashed(fuzz_world):
    """Node 5 as the copier, in a fixed order: the honest members seal at once; it opens before
    it sealed (TooEarly), seals a copy of another member's seal (accepted: everyone has sealed,
    the honest members open); it then tries to seal that member's revealed preimage for its own
    seat (refused: AlreadyOpened) and to open it (SealMismatch naming its seat). It never opens:
    slashed as a missed opening at settle; no honest member loses (the teardown's invariants)."""
    m = _node5_seated(fuzz_world, timing=0)
    try:
        a, slot = _worker_opened(m)
        before = _votes()
        rs = m.round_state(a)
        assert rs.seals == rs.members - 1, rs  # the honest seats sealed at once; node 5 not yet
        m.copier(pick=0, move="open-early", agree=False)
        m.copier(pick=0, move="copy-seal", agree=False)
        assert all(m.party(a, 0, j + 1)["opened"] for j in range(rs.members) if j != slot), "the honest members did not open"
        j = m.audits[0].adversary[0]["of"]
        opening, agree, salt = m.audits[0].revealed[(0, j)]
        assert m.party(a, 0, slot + 1)["hash"] == compute_vote_seal(a, 0, j, agree, compute_opening_hash(opening), salt)  # seat j's seal
        m.copier(pick=0, move="copy-open", agree=True)
        assert [_delta(before, k) for k in ("copier:too_early", "copier:sealed_a_copy", "copier:seal_mismatch")] == [1, 1, 1]
        m.teardown()
        assert m.audit(a).phase == SETTLED
        me = m.party(a, 0, slot + 1)
        assert not me["opened"] and me["slashed"], me
        assert _delta(before, "sealed_unopened_slashed") == 1
    finally:
        del fuzz_world.protocol._send


def test_fuzzer_late_members_and_the_withholder(fuzz_world):
    """Every honest seat seals and opens in its window's last block (the steering), node 5 seals
    early and withholds: it cannot open before the late members sealed (TooEarly, although it
    sealed), then never opens; it is slashed at settle, no honest member loses, and no opening
    lands before every seal (the invariant, after every step)."""
    m = _node5_seated(fuzz_world, timing=ALL_LATE)
    try:
        a, slot = _worker_opened(m)
        before = _votes()
        m.withholder(pick=0, agree=True)
        m.copier(pick=0, move="open-early", agree=True)
        rs = m.round_state(a)
        assert rs.seals == 1 and _delta(before, "copier:too_early") == 1, rs
        for _ in range(3 * PRESET.OPEN_WINDOW_BLOCKS):
            if m.audit(a).phase != OPENING:
                break
            m.mine(blocks=1)
            m._check_invariants()  # honest stakes and credits, and "seals first", after every step
        honest = rs.members - 1
        assert _delta(before, "seal_late_in_last_block") == honest and _delta(before, "open_late_in_last_block") == honest, _votes()
        assert [m.sealed_at[(a, 0)][s + 1] for s in range(rs.members) if s != slot] == [rs.deadlines.members_seal_by] * honest
        m.teardown()
        me = m.party(a, 0, slot + 1)
        assert m.audit(a).phase == SETTLED and not me["opened"] and me["slashed"], me
    finally:
        del fuzz_world.protocol._send


def test_early_openings_are_found():
    """The "seals first" check (fuzz_votes.compute_early_openings) flags an opening while a seat
    has not sealed and members_seal_by has not passed, and nothing else."""
    rounds = {(1, 0): (3, 100)}
    sealed = [("sealed", 1, 0, slot, 90 + slot) for slot in (1, 2, 3)]
    assert compute_early_openings(sealed + [("opened", 1, 0, 1, 93)], {}, rounds) == []
    assert compute_early_openings(sealed[:2] + [("opened", 1, 0, 1, 101)], {}, rounds) == []  # the seal window closed
    early = compute_early_openings(sealed[:2] + [("opened", 1, 0, 1, 100)], {}, rounds)
    assert len(early) == 1 and "2/3 sealed" in early[0]
    assert compute_early_openings([("opened", 1, 0, 2, 95)], {(1, 0): {1: 90, 2: 91, 3: 96}}, rounds)  # a seal after the opening


def test_fuzzer_a_long_pass_makes_a_late_move_in_its_block(fuzz_world):
    """Regression (seed 120001's long run, shrunk): a late seal's block was 16 blocks ahead at a
    pass's start (no steering yet), and that pass — two new audits drawn, revealed, challenged,
    opened and sealed, a block per transaction on anvil — took 18 blocks: the seal window closed
    on the late member, "honest node 1 lost stake" (a missed opening at settle). Every pass now
    hooks the sender: the late move goes out in its block before the pass's next transaction.
    Here a pass's client turn sends 2·STEER_BLOCKS griefer top-ups while every seat is late."""
    m = _node5_seated(fuzz_world, timing=0b11111)
    try:
        a, slot = _worker_opened(m)
        m.adversary_member(pick=0, agree=False)  # node 5 seals: only the late seats are missing
        rs = m.round_state(a)
        gap = rs.deadlines.members_seal_by - (m.reads.head() + 1)
        assert rs.seals == 1 and gap > STEER_BLOCKS + 1, (rs, m.reads.head())
        before = _votes()
        busy = m._honest_client

        def client_turn():  # stands for the rest of a busy pass
            busy()
            for _ in range(gap + 4):
                m._try(m.p.top_up, m._node(ADVERSARY).account, 1)

        m._honest_client = client_turn
        m.mine(blocks=1)
        del m._honest_client
        assert m.reads.head() > rs.deadlines.members_seal_by, "the pass did not outrun the seal window"
        assert m.round_state(a).seals == rs.members and _delta(before, "seal_late_in_last_block") == rs.members - 1, \
            (m.round_state(a), _votes())
        m.teardown()  # no honest member lost stake
    finally:
        del fuzz_world.protocol._send


def test_fuzzer_late_moves_due_in_consecutive_blocks_all_land_before_a_hooked_transaction(fuzz_world):
    """Regression (seed 140001's long run): a late seal due in block B landed from the hook of an
    honest transaction, which then took block B + 1, another audit's late seal's last block: the
    member missed its seal, "honest node 6 lost stake". The hook now lands the moves due in B + 1
    with those of B (a block early), and takes one block at most (landing block after block could
    take an honest dispatcher's 5-block answer window). Here two late seats of one audit
    are given consecutive last blocks (a schedule of the fuzzer's own; both windows are still open
    on-chain) and one hooked top-up follows: both seals land in the first block, the top-up next."""
    m = _node5_seated(fuzz_world, timing=ALL_LATE)
    try:
        a, slot = _worker_opened(m)
        head = m.reads.head()
        real = m._late_schedule
        seals = sorted((s[2], s[4]) for s in real() if s[1] == a and s[4] == "seal")
        assert len(seals) >= 2 and all(s[0] > head + 2 for s in real() if s[1] == a), (real(), head)
        blocks = {(a, seat, move): head + 1 + k for k, (seat, move) in enumerate(seals[:2])}

        def consecutive():  # the real moves still to come, with the two last blocks above
            return [(blocks[s[1], s[2], s[4]], *s[1:]) for s in real()
                    if (s[1], s[2], s[4]) in blocks and blocks[s[1], s[2], s[4]] > m.reads.head()]

        m._late_schedule = consecutive
        before = _votes()
        with m.late_hooked():
            tx = m._try(m.p.top_up, m._node(ADVERSARY).account, 1)
        del m._late_schedule
        m._check_invariants()  # reads the seals' events (sealed_at)
        landed = {seat + 1: m.sealed_at[(a, 0)].get(seat + 1) for seat, _ in seals[:2]}
        assert list(landed.values()) == [head + 1, head + 1], landed
        assert tx is not None and int(tx.receipt["blockNumber"], 16) == head + 2
        assert _delta(before, "seal_late_in_last_block") == 1 and _delta(before, "seal_late_a_block_early") == 1, _votes()
        m.teardown()  # no honest member lost stake
    finally:
        del fuzz_world.protocol._send


def test_fuzzer_a_dispatchers_wait_for_its_seed_block_lands_a_late_move_in_its_block(fuzz_world):
    """Regression (the generic fuzzer's seed 291106, runs 12 and 19 of 60): a steering pass batched
    an honest dispatcher's deferred receipt one block before a late member's last block, and
    `World.post_and_draw` waited for the batch's seed block with a plain `chain.mine`: that block
    went by empty, the member never sealed (run 19: node 0, block 425) or opened (run 12: node 6,
    block 473), and settle took its "missed opening" — a harness fault, not the protocol's. The
    wait is now mined as the steering mines (`_post_and_draw`). Here a late seal's last block is
    the wait's first (a schedule of the fuzzer's own; its window is still open on-chain)."""
    m = _node5_seated(fuzz_world, timing=ALL_LATE)
    try:
        a, _ = _worker_opened(m)
        head = m.reads.head()
        real = m._late_schedule
        seat = min(s[2] for s in real() if s[1] == a and s[4] == "seal")
        due = head + 2  # the batch's post lands in head + 1
        assert all(s[0] > due for s in real()), (real(), head)

        def sooner():  # the real move still to come, its last block moved to the wait's first
            return [(due, *s[1:]) for s in real() if (s[1], s[2], s[4]) == (a, seat, "seal") and due > m.reads.head()]

        m._late_schedule = sooner
        m.nonce += 1
        before = _votes()
        run, _ = m._start_batched(m._worker(0, False, m.nonce), 1)
        del m._late_schedule
        if run.audit_id:
            m._track(run, 0, 1, "honest")
        m._check_invariants()  # reads the seal's event (sealed_at)
        assert m.sealed_at.get((a, 0), {}).get(seat + 1) == due, (m.sealed_at, due)
        assert _delta(before, "seal_late_in_last_block") == 1, _votes()
        m.teardown()  # no honest member lost stake
    finally:
        del fuzz_world.protocol._send


def test_fuzzer_a_late_batch_past_the_horizon_started_privately_falls_back_and_is_skipped(fuzz_world):
    """Seed 120002's long run: the cheater batched a "late" promise after its receipt's horizon and
    the harness started it privately; a private start cannot prove an expired receipt taken, so the
    contract refuses it (`ReceiptExpired`) and the dispatcher must start it publicly, which skips it
    (node/dispatcher/batches.py does the same). The harness raised instead."""
    m = _machine(fuzz_world, fresh=True)
    try:
        m.record_floor()
        m.new_audit(worker=1, dispatcher=CHEATER, mode="open", batching="late")
        (promise,) = m.promises
        assert promise.fate == "late" and promise.batch_id is None
        m._mine(promise.party.receipt.auditable_until_block + 1 - m.reads.head())  # past the horizon
        if m.nonce % 2 == 0:
            m.nonce += 1  # `_start_selected` starts privately when (nonce + index) is odd
        audits = len(m.audits)
        m.cheat_batches_late(pick=0)
        assert promise.batch_id is not None and len(m.audits) == audits, "the late batch's start was not skipped"
        assert m.stats["issue20"].get("horizon:late_start_skipped") == 1
    finally:
        del fuzz_world.protocol._send


def _honest_posted(m: ProtocolMachine, audit_id: int) -> bool:
    """Whether the audit's first round was drawn and every honest member of it posted its receipt."""
    drawn, posted = _drawn_and_posted(m, audit_id)
    return bool(drawn) and {x for x in drawn if m._index(x) != ADVERSARY} <= posted


def _drawn_and_posted(m: ProtocolMachine, audit_id: int) -> tuple[list, set]:
    """The first draw's members of the audit's round 0 (CommitteeDrawn, attempt 0) and who posted
    a receipt in that round (CommitteeReceiptPosted)."""
    topics = {name: "0x" + keccak256(sig).hex() for name, sig in (
        ("drawn", b"CommitteeDrawn(uint256,uint8,uint8,address[])"),
        ("posted", b"CommitteeReceiptPosted(uint256,uint8,uint8,address,bytes32,bytes32)"))}
    logs = m.rpc.call("eth_getLogs", [{"fromBlock": "0x0", "toBlock": "latest", "address": m.p.jobs.address,
                                        "topics": [list(topics.values()), "0x" + audit_id.to_bytes(32, "big").hex()]}])
    drawn, posted = [], set()
    for log in logs:
        data = bytes.fromhex(log["data"][2:])
        if log["topics"][0] == topics["drawn"]:
            round_index, attempt, members = abi_decode(["uint8", "uint8", "address[]"], data)
            if round_index == 0 and attempt == 0:
                drawn = [to_checksum_address(x) for x in members]
        elif abi_decode(["uint8"], data[:32])[0] == 0:
            posted.add(to_checksum_address("0x" + log["topics"][2][-40:]))
    return drawn, posted


def test_fuzzer_receipts_come_before_the_openings_of_a_pass(fuzz_world):
    """Regression (seed 120001 at 120 examples): with sealed votes an opening round sends its
    challenge, the worker's opening, every seal and every opening, a block each on anvil; a pass
    with three rounds opening took 22 blocks before a redrawn honest member's turn, past its
    commit window (20 blocks on MINIMAL): "members missing", the cheating worker unslashed
    ("cheater (open) escaped by an abandonment"). Honest receipts of every drawn round now go
    out before the pass's openings, and a round drawn during the pass has them at once. Here A's
    turn in the openings loop is followed by two commit windows of griefer top-ups (standing for
    other rounds' openings, with the loop's draws and A's own moves between) in the pass that
    draws B: B's honest members post in time."""
    m = _machine(fuzz_world, fresh=True)
    try:
        m.record_floor()
        m.new_audit(worker=0, dispatcher=1, mode="open")  # A (a private start: the reveal posts its honest receipts)
        _drawn(m)
        m.adversary_member(pick=0, agree=False)  # node 5's receipt, if it sits on A
        a = m.audits[0].run.audit_id
        assert m.audit(a).phase == OPENING, m.round_state(a)
        opening = m._honest_opening
        slow = {"done": False}

        def long_openings(t, state):
            opening(t, state)
            if t.run.audit_id == a and not slow["done"]:  # then other rounds' openings: two commit windows of blocks
                slow["done"] = True
                for k in range(2 * PRESET.COMMIT_WINDOW_BLOCKS):
                    if len(m.audits) > 1 and _honest_posted(m, m.audits[1].run.audit_id):
                        break  # B's honest members posted: the rest of the pass would only starve B's worker (its opening window)
                    m._try(m.p.top_up, m._node(ADVERSARY).account, 1)
                    if k % 4 == 3:  # as the openings loop does between audits' turns (A's own moves go on)
                        m._honest_draws()
                        opening(t, m.audit(a))

        m._honest_opening = long_openings
        m.new_audit(worker=1, dispatcher=0, mode="open")  # B: a public start, drawn in this step's pass
        del m._honest_opening
        b = m.audits[1].run.audit_id
        drawn, posted = _drawn_and_posted(m, b)
        assert slow["done"] and drawn, (drawn, posted)
        assert {x for x in drawn if m._index(x) != ADVERSARY} <= posted, "an honest member of B missed its commit window"
        m.teardown()
    finally:
        del fuzz_world.protocol._send
