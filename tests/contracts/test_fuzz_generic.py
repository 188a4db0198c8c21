"""The generic adversary and the loss ledger (`generic_fuzz.py`, issue 34): a short run in the
default suite so CI sees the actors, a long one under `make test-fuzz` (markers fuzz and slow;
FUZZ_EXAMPLES, FUZZ_STEPS_PER_RUN, FUZZ_SEED as the older fuzzer's; FUZZ_LEDGER=record writes
each violation to FUZZ_VIOLATIONS and goes on instead of failing), and the ledger's own checks."""

import json
import os
import random
import time

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from verillm.chain.anvil import AnvilConfig, AnvilProcess

from fuzz_generic import external_functions
from fuzz_ledger import LEDGER, Take, honest_bound
from fuzz_rpc import CachedReads, FastSender, RawRpc
from generic_fuzz import ADVERSARY_TOP_UP, GENERIC_EXTRA_NODES, MODE, GenericMachine, adversarial_stake_share, recording
from fuzz_honest import CHEATER
from helpers.contracts import PRESET, World, connect
from protocol_fuzz import STATS
from test_fuzz_protocol import GENESIS_TIMESTAMP_S

SHORT_STEPS = int(os.environ.get("FUZZ_SHORT_STEPS", "40"))


@pytest.fixture(scope="module")
def generic_world(anvil_installed):
    """Twelve nodes: the honest six, the cheater and five colluders holding with it 47% of the stake."""
    with AnvilProcess(AnvilConfig(genesis_timestamp_s=GENESIS_TIMESTAMP_S)) as process:
        chain = connect(process)
        chain.w3.provider.make_request("anvil_setBlockTimestampInterval", [1])
        world = World(chain, extra_nodes=GENERIC_EXTRA_NODES)
        for i, units in ADVERSARY_TOP_UP.items():
            world.protocol.top_up(world.nodes[i].account, units * PRESET.MIN_STAKE_WEI)
        world.protocol.advance_to_next_epoch()
        chain.w3.provider.make_request("anvil_autoImpersonateAccount", [True])
        world.fresh = [chain.snapshot()]
        yield world


def run_generic(world, examples: int, fuzz_seed: int, steps_per_run: int) -> dict:
    """Run the generic machine from the registered state; return what it saw."""
    world.chain.revert(world.fresh[0])
    world.fresh[0] = world.chain.snapshot()
    seed(fuzz_seed)(GenericMachine)
    GenericMachine.world = world
    GenericMachine.rpc = RawRpc(world.chain.url)
    GenericMachine.base[0] = world.chain.snapshot()
    GenericMachine.sender = FastSender(world.chain, GenericMachine.rpc)
    GenericMachine.reads = CachedReads(GenericMachine.rpc, GenericMachine.sender)
    world.protocol._send = GenericMachine.sender
    STATS["seed"] = fuzz_seed
    before = {k: STATS[k] for k in ("steps", "runs")}
    generic_before, violations_before = dict(STATS["generic"]), len(STATS["violations"])
    started = time.monotonic()
    phases = (Phase.generate,) if recording() else (Phase.generate, Phase.shrink)
    try:
        run_state_machine_as_test(GenericMachine, settings=settings(
            max_examples=examples, stateful_step_count=steps_per_run, deadline=None, database=None, phases=phases,
            suppress_health_check=list(HealthCheck)))
    finally:
        world.protocol.__dict__.pop("_send", None)
    wall_s = time.monotonic() - started
    steps, runs = STATS["steps"] - before["steps"], STATS["runs"] - before["runs"]
    generic = {k: v - generic_before.get(k, 0) for k, v in STATS["generic"].items() if v - generic_before.get(k, 0)}
    landed = {k: v for k, v in generic.items() if k.endswith(":landed")}
    violations = STATS["violations"][violations_before:]
    print(f"\ngeneric fuzz: {steps} steps in {runs} runs, seed {fuzz_seed}, {wall_s:.0f} s ({steps / wall_s:.2f} steps/s); "
          f"generic calls {sum(v for k, v in generic.items() if k.endswith(':sent'))}, landed {landed}; violations {len(violations)}")
    if os.environ.get("FUZZ_VERBOSE"):
        print(json.dumps(generic, indent=0, sort_keys=True))
    report = os.environ.get("FUZZ_REPORT")
    if report:
        with open(report, "a") as f:
            f.write(json.dumps({"seed": fuzz_seed, "steps": steps, "runs": runs, "wall_s": round(wall_s, 1), "generic": generic,
                                "violations": len(violations)}) + "\n")
    return {"steps": steps, "runs": runs, "generic": generic, "violations": violations}


def test_the_colluders_hold_just_under_half_the_stake(generic_world):
    assert 0.4 < adversarial_stake_share(generic_world) < 0.49


def test_every_external_function_of_the_six_contracts_is_in_the_search(generic_world):
    """Enumerated from the ABIs: a function added to a contract is fuzzed without editing the harness."""
    names = {(c, f) for c, f, _, _ in external_functions(generic_world.protocol)}
    for expected in [("disputes", "escalate"), ("disputes", "adjudicateAcrossRounds"), ("delivery", "claimUndelivered"),
                     ("coverage", "claimOmitted"), ("registry", "deregister"), ("batches", "postBatch"), ("jobs", "settle")]:
        assert expected in names
    assert not any(f in ("getAudit", "getRound", "credits") for _, f in names), "a view function in the search"


def test_the_ledger_bounds_an_honest_take():
    take = Take("0x", 1, "0x" + "11" * 20, 10**14, 10**16, "Jobs", "Jobs.missed opening or minority vote", 1, 0)
    assert honest_bound(take, captured=True, preset=PRESET) == 10**16 * PRESET.MEMBER_PENALTY_BPS // 10_000
    assert honest_bound(take, captured=False, preset=PRESET) == 0
    full = Take("0x", 1, "0x" + "11" * 20, 10**16, 10**16, "Jobs", "Jobs.failed audit", 1, 0)
    assert honest_bound(full, captured=True, preset=PRESET) == 0  # one captured round: the worker appeals
    assert honest_bound(full, captured=True, preset=PRESET, framed=True) == 10**16  # round 0 and a later round: §13's residual
    assert honest_bound(Take("0x", 1, "0x", 1, 1, "X", "unattributed:X"), captured=True, preset=PRESET, framed=True) == 0
    late = Take("0x", 1, "0x" + "11" * 20, 10**14, 10**16, "Jobs", "Jobs.late private draw", 1, 0)  # captured or not
    assert honest_bound(late, captured=False, preset=PRESET) == 10**16 * PRESET.MEMBER_PENALTY_BPS // 10_000
    assert {rule.honest_bound for rule in LEDGER.values()} == {"0", "MEMBER_PENALTY_BPS if captured",
                                                                 "the stake if round 0 and a later round captured",
                                                                 "MEMBER_PENALTY_BPS"}


@pytest.fixture(scope="module")
def short_run(generic_world):
    """The default suite's share, driven by hand (hypothesis's first examples are its simplest, a
    few rules long): two jobs served, SHORT_STEPS generic steps (seeds 0, 1, …; every fourth
    toward a window edge) with the invariants after each, then the teardown; every violation
    listed, none raised."""
    world = generic_world
    world.chain.revert(world.fresh[0])
    world.fresh[0] = world.chain.snapshot()
    GenericMachine.world = world
    GenericMachine.rpc = RawRpc(world.chain.url)
    GenericMachine.base[0] = world.chain.snapshot()
    GenericMachine.sender = FastSender(world.chain, GenericMachine.rpc)
    GenericMachine.reads = CachedReads(GenericMachine.rpc, GenericMachine.sender)
    world.protocol._send = GenericMachine.sender
    MODE["record"] = True
    generic_before, violations_before = dict(STATS["generic"]), len(STATS["violations"])
    try:
        m = GenericMachine()
        m.record_floor()
        m.new_audit(worker=0, dispatcher=1, mode="open")
        m.new_audit(worker=CHEATER, dispatcher=0, mode="open")
        for k in range(SHORT_STEPS):
            m.generic_0(seed=k, edge=k % 4)
            m.invariants_hold()
        m.teardown()
    finally:
        MODE["record"] = False
        world.protocol.__dict__.pop("_send", None)
    generic = {k: v - generic_before.get(k, 0) for k, v in STATS["generic"].items() if v - generic_before.get(k, 0)}
    return {"generic": generic, "violations": STATS["violations"][violations_before:]}


def test_generic_adversary_short_acts(short_run):
    """CI sees the actors: calls of several contracts sent, the colluders' seat moves landed."""
    sent = {k.split(".")[0] for k in short_run["generic"] if k.endswith(":sent")}
    landed = [k for k in short_run["generic"] if k.endswith(":landed")]
    assert len(sent) >= 3 and landed, short_run["generic"]


def test_generic_adversary_short_ledger_holds(short_run):
    """Every honest loss of the short run within the ledger, every convicted cheat slashed."""
    assert not short_run["violations"], json.dumps(short_run["violations"], indent=1, default=str)


@pytest.mark.fuzz
@pytest.mark.slow
def test_generic_adversary_long(generic_world):
    out = run_generic(generic_world, int(os.environ.get("FUZZ_EXAMPLES", "1200")), int(os.environ.get("FUZZ_SEED", random.randrange(2**32))),
                      int(os.environ.get("FUZZ_STEPS_PER_RUN", "100")))
    assert not out["violations"], json.dumps(out["violations"][:5], indent=1, default=str)
