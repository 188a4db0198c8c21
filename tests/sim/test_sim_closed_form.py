"""The simulator pinned to closed forms on small cases: committee capture, the paper's bounds,
the expected value of cheating, abandonment."""

import math

import pytest

from verillm.spec.params import MAINNET, MINIMAL
from verillm.sim.audit import Behaviour
from verillm.sim.bounds import e1_threshold, e2_size, exact_size, simulate_wrong_verdict, tail, wrong_vote_probability
from verillm.sim.engine import Scenario, run_scenario
from verillm.sim.montecarlo import run_cell
from verillm.sim.rules import FIRST_LANDING, ISSUE9, ISSUE9_FULL


def _within(rate, expected):
    """Within 4 standard errors of the closed form (a false alarm once in ~16,000 runs)."""
    sigma = math.sqrt(max(expected * (1 - expected), 1e-9) / rate.trials)
    return abs(rate.value - expected) <= 4 * sigma + 1 / rate.trials


@pytest.mark.parametrize("r,m", [(0.8, 3), (0.67, 3), (0.8, 7)])
def test_committee_capture_is_the_binomial_tail(r, m):
    sim = simulate_wrong_verdict(r, 0.0, m, 1500, nodes=600, seed=3)
    assert _within(sim, tail(m, 1 - r)), (sim.value, tail(m, 1 - r))


def test_noisy_honest_votes_follow_the_tail_of_the_wrong_vote_rate():
    sim = simulate_wrong_verdict(0.7, 0.1, 3, 1500, nodes=600, seed=4)
    assert _within(sim, tail(3, wrong_vote_probability(0.7, 0.1)))


def test_paper_bounds_closed_form():
    assert e1_threshold(0.0) == 0.5 and round(e1_threshold(0.03), 3) == 0.531
    assert e2_size(0.9, 0.0, 1e-6) == 45 and math.log(1e6) / (2 * 0.4**2) < 44  # "r = 0.9, ξ = 10⁻⁶ gives m' ≥ 44"
    assert [exact_size(r, 0.0, 1e-6) for r in (0.67, 0.8, 0.9, 0.95)] == [185, 51, 23, 15]  # economics-check §2a
    assert e2_size(0.5, 0.0, 1e-3) is None


def test_e2_size_meets_xi_when_simulated():
    m = e2_size(0.9, 0.03, 0.05)
    sim = simulate_wrong_verdict(0.9, 0.03, m, 800, nodes=600, seed=5)
    assert sim.value <= 0.05 + 4 * math.sqrt(0.05 * 0.95 / sim.trials) and tail(m, wrong_vote_probability(0.9, 0.03)) < 0.05


def test_abandonment_is_one_minus_all_seats_reachable():
    """economics-check §2e: members offline with probability o, R redraws: 1 − (1 − o^(R+1))^m."""
    res = run_cell(MINIMAL, FIRST_LANDING, 0.0, Behaviour(), 3000, nodes=300, cheated=False, worker_adversarial=False, offline=0.1, seed=6)
    expected = 1 - (1 - 0.1**2) ** 3
    assert _within(res.rate("abandoned"), expected)
    assert res.honest_dispatcher_slashed == res.abandoned  # the first landing slashes the (honest) dispatcher


def test_ev_of_a_cheated_job_is_gain_minus_audit_rate_times_detection_times_stake():
    r = run_scenario(Scenario(workers=60, adversary_share=0.1, jobs_per_s=1, duration_s=3 * 3600, seed=2))
    a = MAINNET.AUDIT_RATE_BPS / 10_000
    gain = 1.7e-6 * 0.4
    assert r["p_audited_cheat_escapes"] == 0.0  # int8 fp32: d = 1, no colluders
    assert r["ev_per_cheated_job_eth"] == pytest.approx(gain - a * 1.0 * 1.0)
    # every audited cheat slashes a whole MIN_STAKE identity, once
    assert r["adversary_slashed_eth"] == pytest.approx(r["detection_time_s"]["n"] * 1.0)
    assert r["honest_slashed_eth"] == 0


def test_audited_share_of_cheats_is_the_audit_rate():
    r = run_scenario(Scenario(workers=40, adversary_share=0.5, jobs_per_s=4, duration_s=3600, rules="issue-9", attack="one_layer",
                              dtype="bfloat16", seed=9))
    n, k = r["cheated_served"], r["cheated_audited"]
    assert abs(k / n - 0.05) < 4 * math.sqrt(0.05 * 0.95 / n)
    assert r["detection_d"] == 0.0 and r["p_audited_cheat_escapes"] == 1.0  # bf16 one_layer: never detected (0/8)


def test_rule_sets_change_the_outcome_of_the_same_cells():
    grind = {rules.name: run_cell(MAINNET, rules, 0.2, Behaviour(collude=True, starve=True), 600, nodes=400, dispatcher_adversarial=True, seed=1)
             for rules in (FIRST_LANDING, ISSUE9, ISSUE9_FULL)}
    # first landing: a seat survives 3 attempts unless honest each time -> capture 1-(1-q)^3 per seat
    p_seat = 1 - 0.8**3
    assert grind["first-landing"].escaped / 600 > 0.95  # captured, or abandoned (the adversary's dispatcher pays)
    assert abs((grind["first-landing"].escaped - grind["first-landing"].abandoned) / 600 - tail(3, p_seat)) < 0.05
    # issue 9 as committed: an abandoned round slashes nobody, so starving seats is free and every
    # audit of the adversary's dispatcher ends captured or abandoned, the cheat unjudged
    assert grind["issue-9"].escaped == 600 and grind["issue-9"].honest_dispatcher_slashed == 0
    # with provable non-delivery (issue-9-full) only the committee tail is left
    assert grind["issue-9-full"].escaped / 600 < 0.03
