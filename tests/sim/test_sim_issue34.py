"""Issue 34's strategies in the simulator (`verillm sim run --strategy appeal-griefer |
appeal-hunter | settle-front-run | silent-sybils`, docs/simulation.md): under the rules before the
issue (`before-issue-34`) each takes honest stake beyond the ledger's bound (docs/protocol.md §13
"Loss ledger") or costs the adversary nothing; under `main` no honest party loses more than the
member penalty, and silent seats pay."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from verillm.cli import cli
from verillm.spec.hashing import keccak256
from verillm.spec.params import MAINNET
from verillm.spec.settlement import FAIL
from verillm.sim.audit import AuditContext, Behaviour, run_audit
from verillm.sim.engine import Scenario, run_scenario
from verillm.sim.montecarlo import make_pool
from verillm.sim.rules import BEFORE_DECIDER, BEFORE_ISSUE20, BEFORE_ISSUE34, ISSUE20, ISSUE34, MAIN

PENALTY = MAINNET.MEMBER_PENALTY_BPS / 10_000


def _run(strategy: str, rules: str, **kw) -> dict:
    kw = {"workers": 200, "jobs_per_s": 2, "duration_s": 2 * 3600, "adversary_share": 0.2, **kw}
    return run_scenario(Scenario(rules=rules, strategy=strategy, **kw))


def test_main_is_before_issue_34_plus_its_four_rules_and_the_decider():
    assert MAIN == BEFORE_DECIDER.with_changes(name="main", decider_round=True)
    assert BEFORE_DECIDER == BEFORE_ISSUE34.with_changes(name="before-decider", **ISSUE34) and not BEFORE_DECIDER.decider_round
    assert BEFORE_ISSUE34 == BEFORE_ISSUE20.with_changes(name="before-issue-34", **ISSUE20)
    assert set(ISSUE34) == {"escalation_standing", "proportional_verdicts", "promises_keepable", "silent_seat_penalty"}
    assert not any(getattr(BEFORE_ISSUE34, flag) for flag in ISSUE34)


@pytest.mark.parametrize("strategy, stake", [("appeal-griefer", "equal"), ("appeal-hunter", "lognormal"), ("settle-front-run", "equal")])
def test_honest_stake_lost_beyond_the_penalty_before_issue_34_and_none_after(strategy, stake):
    # "after": issue 34's four rules, then `main` (with the decider round): two captured later
    # rounds (the appeal and its decider) agreeing against an honest round 0's PASS take the
    # penalty, not the stake (a worker's full slash needs round 0's majority to fail it), so
    # nothing beyond the penalty either way.
    before, after = _run(strategy, "before-issue-34", stake=stake), _run(strategy, "before-decider", stake=stake)
    assert _run(strategy, "main", stake=stake)["honest_beyond_penalty_eth"] == 0
    assert before["adversary_appeals"] > 0 and before["honest_beyond_penalty_eth"] > 0
    assert before["honest_slashed"]["worker"] > 0  # a captured appeal slashed an honest worker in full
    assert after["honest_beyond_penalty_eth"] == 0
    # what is left after: the member penalty of the honest parties a captured appeal outvoted
    # (the ledger's bound, docs/protocol.md §13), never a stake
    events = sum(after["honest_slashed"].values())
    assert after["honest_slashed_eth"] <= events * PENALTY * (30 if stake == "lognormal" else 1) + 1e-9
    assert after["honest_slashed_eth"] < before["honest_slashed_eth"] / 10
    # standing: with it, only a round-0 dissenter of its own (or its dispatcher) appeals
    assert after["adversary_appeals"] < before["adversary_appeals"]
    if strategy == "settle-front-run":
        assert before["unkeepable_omissions"] > 0 and before["honest_slashed"]["dispatcher"] > 0
        assert after["unkeepable_omissions"] == 0 and after["honest_slashed"]["dispatcher"] == 0


def test_the_hunter_burns_more_honest_stake_per_appeal_than_the_griefer():
    """Choosing the richest workers pays per bond (at 30%, where captures are common enough to
    count in a small run)."""
    grief = _run("appeal-griefer", "before-issue-34", stake="lognormal", adversary_share=0.3)
    hunt = _run("appeal-hunter", "before-issue-34", stake="lognormal", adversary_share=0.3)
    assert hunt["adversary_appeals"] < grief["adversary_appeals"]
    assert hunt["honest_slashed_eth"] / hunt["adversary_appeals"] > grief["honest_slashed_eth"] / grief["adversary_appeals"]


def test_silent_sybils_are_free_before_issue_34_and_pay_every_seat_after():
    before, after = _run("silent-sybils", "before-issue-34"), _run("silent-sybils", "main")
    assert before["abandoned"] > 0 and before["adversary_silent_penalties"] == 0 and before["adversary_slashed_eth"] == 0
    assert after["adversary_silent_penalties"] > 0
    # each silent seat of a MIN_STAKE identity (topped back up) costs MEMBER_PENALTY_BPS of it
    assert after["adversary_slashed_eth"] == pytest.approx(after["adversary_silent_penalties"] * PENALTY)
    assert after["adversary_profit_eth"] < 0 < before["adversary_profit_eth"] + 1e-9
    # silence never costs honest stake, before or after (its harm is the abandoned audits)
    for r in (before, after):
        assert r["honest_slashed_eth"] == 0 and r["honest_silent_penalty_eth"] == 0


def _captured_appeals(rules, audits=400):
    """Audits of honest workers by a griefer holding 45% of the stake: the appeals it captured."""
    rng = np.random.default_rng(5)
    pool = make_pool(300, 0.45, MAINNET.MIN_STAKE_WEI, rng)
    ctx = AuditContext(MAINNET, rules, pool, Behaviour(appeal_pass=True), 1.0, 0.0)
    honest = np.flatnonzero(~pool.adversarial)
    outs = []
    for i in range(audits):
        worker = int(rng.choice(honest))
        out = run_audit(ctx, worker, worker, False, keccak256(b"issue34" + i.to_bytes(4, "big")), rng, audit_id=i)
        if out.escalated and out.verdict == FAIL:
            outs.append((worker, out))
    return pool, outs


def test_a_captured_appeal_of_an_honest_pass_takes_stakes_before_and_the_penalty_after():
    stake = MAINNET.MIN_STAKE_WEI
    pool, before = _captured_appeals(BEFORE_ISSUE34)
    assert before
    for worker, out in before:  # the worker in full, and every honest round-0 agree hunted for what settle left it
        assert out.slashed_wei[worker] == stake
        assert set(out.hunted_wei) == {s for s in out.trace[0]["seats"] if not pool.adversarial[s]}
        assert all(w == stake - stake * MAINNET.MEMBER_PENALTY_BPS // 10_000 for w in out.hunted_wei.values())
    penalty = stake * MAINNET.MEMBER_PENALTY_BPS // 10_000
    _, after = _captured_appeals(BEFORE_DECIDER)  # issue 34's four rules: the captured appeal's FAIL is final, at the penalty
    assert after
    for worker, out in after:
        assert out.trace[0]["votes"].count(2) == 1  # its standing: one dissent of its own, round 0 still passed
        assert max(wei for _role, _node, wei in out.honest_slashed) == penalty
        assert not out.hunted_wei
    # main: the appeal's FAIL contradicts round 0's PASS and decides nothing alone; the worker is
    # convicted only when the decider is captured too — and then takes the penalty, not its stake:
    # round 0's majority passed it (a full slash needs round 0 and the final verdict failing it)
    _, decided = _captured_appeals(MAIN)
    assert len(decided) < len(after)
    for worker, out in decided:
        assert out.decided_by_decider and out.slashed_wei[worker] == penalty and not out.hunted_wei
        assert all(wei <= penalty for _role, node, wei in out.honest_slashed)


def test_sim_run_accepts_the_issue_34_strategies(tmp_path):
    for strategy in ("appeal-griefer", "appeal-hunter", "settle-front-run", "silent-sybils"):
        out = tmp_path / f"{strategy}.json"
        result = CliRunner().invoke(cli, ["sim", "run", "--workers", "40", "--hours", "0.5", "--jobs-per-s", "1", "--strategy", strategy,
                                          "--adversary-share", "0.3", "--rules", "before-issue-34", "--json", str(out)])
        assert result.exit_code == 0, result.output
        assert "honest_beyond_penalty_eth" in result.output and "adversary_appeals" in result.output
        report = json.loads(out.read_text())
        assert report["scenario"]["strategy"] == strategy and report["rules"]["name"] == "before-issue-34"
