"""`Params.timeline` and `Params.validate` (contracts/src/Params.sol, through the test-only
ParamsHarness) against their Python twins `compute_timeline` and `compute_timeline_problems`
(verillm/spec/params.py), over random window sets: the same spans, and the contracts refuse a
preset exactly when the spec names a problem, with the spec's first reason."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from verillm.chain.protocol import compute_protocol_params
from verillm.spec.params import MINIMAL, compute_timeline, compute_timeline_problems

from helpers.chain import reverts


@settings(max_examples=150, deadline=None)
@given(delay=st.integers(0, 8), draw=st.integers(0, 300), start=st.integers(0, 100), commit=st.integers(0, 60), opening=st.integers(0, 300),
       dispute=st.integers(0, 60), redraws=st.integers(0, 4), horizon=st.integers(0, 60), epoch=st.integers(1, 400),
       unbonding=st.integers(1, 900), tokens=st.integers(0, 9_000), grace=st.integers(0, 300))
def test_the_contracts_timeline_and_validation_are_the_specs(world_base, delay, draw, start, commit, opening, dispute, redraws, horizon,
                                                            epoch, unbonding, tokens, grace):
    chain = world_base.chain
    if not hasattr(world_base, "params_harness"):
        world_base.params_harness = chain.deploy("ParamsHarness", sender=world_base.owner)
    harness = world_base.params_harness
    p = MINIMAL.replace(AUDIT_DRAW_DELAY_BLOCKS=delay, DRAW_WINDOW_BLOCKS=draw, START_WINDOW_BLOCKS=start, COMMIT_WINDOW_BLOCKS=commit,
                        OPEN_WINDOW_BLOCKS=opening, DISPUTE_WINDOW_BLOCKS=dispute, MAX_COMMITTEE_REDRAWS=redraws, AUDIT_HORIZON_BLOCKS=horizon,
                        EPOCH_BLOCKS=epoch, UNBONDING_BLOCKS=unbonding, MAX_TRANSCRIPT_TOKENS=tokens, PRIVATE_REVEAL_GRACE_BLOCKS=grace)
    params = compute_protocol_params(p, chain.artifacts)
    coverage = compute_protocol_params(p, chain.artifacts, "Coverage", "CoverageParams")
    assert tuple(harness.call("timeline", params)) == tuple(vars(compute_timeline(p)).values())
    problems = compute_timeline_problems(p)
    if problems:  # the contracts stop at their first reason: the spec's first
        with reverts(f"InvalidParams.*{re.escape(problems[0])}"):
            harness.call("validate", params, coverage)
    else:
        harness.call("validate", params, coverage)
