"""The stateful fuzzer of `protocol_fuzz.py`: a short run in the default suite (seed 0), a
long one under `make test-fuzz` (markers fuzz and slow; FUZZ_EXAMPLES sets its length,
FUZZ_SEED its seed, random when unset). Each run prints steps, distinct paths and the seed; a
failure prints hypothesis's minimal call sequence."""

import os
import random

import pytest
from hypothesis import HealthCheck, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from protocol_fuzz import STATS, ProtocolMachine

STEPS_PER_RUN = 30


def _run(world, examples: int, fuzz_seed: int) -> None:
    seed(fuzz_seed)(ProtocolMachine)
    ProtocolMachine.world = world
    ProtocolMachine.base[0] = world.chain.snapshot()
    before = STATS["steps"], STATS["runs"], len(STATS["paths"])
    run_state_machine_as_test(ProtocolMachine, settings=settings(
        max_examples=examples, stateful_step_count=STEPS_PER_RUN, deadline=None, database=None,
        suppress_health_check=list(HealthCheck)))
    steps, runs, paths = STATS["steps"] - before[0], STATS["runs"] - before[1], len(STATS["paths"]) - before[2]
    print(f"\nprotocol fuzz: {steps} steps in {runs} runs, {paths} distinct paths, seed {fuzz_seed}")
    assert steps > 0


def test_protocol_fuzz_short(world):
    _run(world, int(os.environ.get("FUZZ_SHORT_EXAMPLES", "6")), 0)


@pytest.mark.fuzz
@pytest.mark.slow
def test_protocol_fuzz_long(world):
    _run(world, int(os.environ.get("FUZZ_EXAMPLES", "4000")), int(os.environ.get("FUZZ_SEED", random.randrange(2**32))))
