"""Issue 20's strategies in the simulator (`verillm sim run --strategy shop-committees |
window-edge-escape | hostage`, docs/simulation.md): before the issue's rules (`before-issue-20`)
each costs honest parties stake or lets an audited cheat escape; under `main` none does."""

import pytest

from verillm.sim.engine import Scenario, run_scenario


def _run(strategy: str, rules: str, **kw) -> dict:
    return run_scenario(Scenario(rules=rules, strategy=strategy, workers=200, jobs_per_s=2, duration_s=3 * 3600, adversary_share=0.2, **kw))


@pytest.mark.parametrize("strategy", ["shop-committees", "hostage"])
def test_honest_parties_lose_stake_before_issue_20_and_nothing_after(strategy):
    before, after = _run(strategy, "before-issue-20"), _run(strategy, "main")
    assert before["honest_slashed_eth"] > 0 and before["honest_slashed"]["worker"] > 0
    assert after["honest_slashed_eth"] == 0 and after["honest_slashed"] == {"worker": 0, "member": 0, "dispatcher": 0}
    if strategy == "shop-committees":  # shopping pays before (the framed stake), costs after (blind fees, minority votes)
        assert before["adversary_profit_eth"] > 0 > after["adversary_profit_eth"]


def test_the_window_edge_escape_is_gone():
    before, after = _run("window-edge-escape", "before-issue-20"), _run("window-edge-escape", "main")
    # before: any colluding seat (1 − r³ at honest share r) makes the redraw unreadable and the
    # round abandoned; after: only the collusion escape remains (a captured committee)
    assert before["p_audited_cheat_escapes"] > 3 * after["p_audited_cheat_escapes"]
    assert before["abandoned"] > after["abandoned"]
    assert before["honest_slashed_eth"] == after["honest_slashed_eth"] == 0
