"""Every claim of docs/protocol.md §13 (and its simulated subsection) restated as a number the
simulator checks, so the section cannot drift from the code. A claim that does not hold under
the first landing's rules is pinned as not holding there, and as holding under issue 9's."""

import json
import math
from pathlib import Path

import pytest

from verillm.spec.params import MAINNET
from verillm.sim.audit import Behaviour
from verillm.sim.bounds import e2_size, tail
from verillm.sim.engine import Scenario, run_scenario
from verillm.sim.inputs import PAPER_GPU_VERIFY_OVER_GENERATE, RESULTS, load_cost, load_detection
from verillm.sim.latency import audit_latency_blocks
from verillm.sim.montecarlo import run_cell
from verillm.sim.rules import FIRST_LANDING, ISSUE9

A = MAINNET.AUDIT_RATE_BPS / 10_000


def _close(value, expected, n):
    return abs(value - expected) <= 4 * math.sqrt(max(expected * (1 - expected), 1e-9) / n) + 1 / n


def test_section13_probability_table():
    table = {0.67: (0.255, 0.168, 0.043), 0.80: (0.104, 0.033, 0.0035), 0.90: (0.028, 0.0027, 7.6e-5), 0.95: (0.0073, 1.9e-4, 1.4e-6)}
    for r, (m3, m7, both) in table.items():
        assert tail(3, 1 - r) == pytest.approx(m3, rel=0.02)
        assert tail(7, 1 - r) == pytest.approx(m7, rel=0.03)
        assert tail(3, 1 - r) * tail(7, 1 - r) == pytest.approx(both, rel=0.03)


def test_measured_detection_is_complete_in_fp32_and_false_rejection_bounded():
    for name in ("detect-smollm2-fp32.json", "detect-tiny-fp32.json"):
        det = load_detection(RESULTS / name)
        assert all(rate.value == 1.0 for rate in det.detection.values()), name
        assert det.mu() == 0.0 and det.mu("pessimistic") == pytest.approx(3 / det.false_rejection.trials)


def test_paper_bounds_as_stated():
    assert e2_size(0.9, 0.0, 1e-6) >= 44 and math.log(1e6) / (2 * 0.4**2) > 43


def test_single_job_ev_changes_sign_at_five_hundredths_of_an_eth():
    # c − a·d·stake with a = 0.05, d = 1, stake = MIN_STAKE = 1 ETH
    assert 0.049 - A * 1 * MAINNET.MIN_STAKE_WEI / 1e18 < 0 < 0.051 - A * 1 * MAINNET.MIN_STAKE_WEI / 1e18


def test_cheating_until_caught_gains_more_than_c_over_ad_because_of_settlement_latency():
    """§13 said 'at most c/(a·d)'; a cheater keeps serving until its slash settles, so it cheats on
    ≈ 1/(a·d) + R·T jobs (R its job rate, T the receipt-to-settle time)."""
    r = run_scenario(Scenario(workers=20, adversary_share=0.05, jobs_per_s=1.0, duration_s=8 * 3600, seed=4))
    per_slash = r["cheated_served"] / max(1, r["detection_time_s"]["n"])
    t_s = audit_latency_blocks(MAINNET, FIRST_LANDING, 12.0, True, 0, 1, False) * 12.0
    assert per_slash > 2 / A  # far above c/(a·d) = 20 jobs
    assert per_slash == pytest.approx(1 / A + 0.05 * t_s, rel=0.6)  # the cheater serves 1/20 of 1 job/s


def test_collusion_escape_first_landing_is_the_first_round_tail_only():
    """No PASS is escalated by the first landing: the 'both' column does not apply (0.028 at r = 0.9)."""
    res = run_cell(MAINNET, FIRST_LANDING, 0.1, Behaviour(collude=True), 2500, nodes=500, dispatcher_adversarial=True, seed=11)
    assert _close(res.escaped / res.audits, tail(3, 0.1), res.audits)


def test_collusion_escape_issue9_needs_both_rounds_or_no_honest_witness():
    """Issue 9: an honest minority member escalates a PASS; the cheat escapes only when all three
    seats are the adversary's, or the escalation committee is captured too."""
    q = 0.33
    res = run_cell(MAINNET, ISSUE9, q, Behaviour(collude=True), 2500, nodes=500, dispatcher_adversarial=True, seed=12)
    expected = q**3 + 3 * q * q * (1 - q) * tail(7, q)
    assert _close(res.escaped / res.audits, expected, res.audits)


def test_nobody_picks_a_committee_fails_under_the_first_landing_and_holds_under_issue9():
    beh = Behaviour(collude=True, stake_grind=True, grind_max_trials=3000)
    before = run_cell(MAINNET, FIRST_LANDING, 0.2, beh, 60, nodes=300, dispatcher_adversarial=True, seed=13)
    after = run_cell(MAINNET, ISSUE9, 0.2, beh, 300, nodes=300, dispatcher_adversarial=True, seed=13)
    assert before.escaped == before.audits  # every committee ground to the adversary's (economics-check §2d)
    assert _close(after.escaped / after.audits, 0.2**3 + 3 * 0.04 * 0.8 * tail(7, 0.2), after.audits)


@pytest.mark.parametrize("rules", ["first-landing", "issue-9"])
def test_honest_parties_are_never_slashed_in_an_honest_network(rules):
    r = run_scenario(Scenario(rules=rules, strategy="honest", adversary_share=0.0, workers=50, jobs_per_s=2, duration_s=2 * 3600))
    assert r["audits"] > 200 and r["honest_slashed_eth"] == 0 and r["cheated_served"] == 0


def test_refusing_members_slash_honest_dispatchers_only_under_the_first_landing():
    kw = dict(strategy="grief-refuse", adversary_share=0.33, workers=100, jobs_per_s=2, duration_s=1.5 * 3600, seed=3)
    before = run_scenario(Scenario(rules="first-landing", **kw))
    after = run_scenario(Scenario(rules="issue-9", **kw))
    assert before["honest_slashed"]["dispatcher"] > 0
    assert after["honest_slashed_eth"] == 0


def test_network_verification_share_meets_the_target_with_the_paper_gpu_ratio():
    r = run_scenario(Scenario(strategy="honest", adversary_share=0.0, workers=50, jobs_per_s=1, duration_s=3600))
    assert r["verification_share_gpu"] == pytest.approx(A * 3 * PAPER_GPU_VERIFY_OVER_GENERATE) and r["verification_share_gpu"] <= 0.002
    assert r["verification_share_cpu"] == pytest.approx(A * 3 * load_cost().verify_over_generate)


def test_simulated_section_numbers_match_the_committed_results():
    """docs/protocol.md §13.x quotes docs/results/sim-cells.json: the closed forms it rests on."""
    path = RESULTS / "sim-cells.json"
    if not path.exists():
        pytest.skip("docs/results/sim-cells.json not generated (verillm sim cells --json ...)")
    cells = json.loads(Path(path).read_text())
    for row in cells["cheat"]:
        if row["strategy"] == "vote" and row["rules"] == "first-landing":
            assert _close(row["not_slashed"], tail(3, row["q"]), row["audits"]), row
        if row["strategy"] == "grind" and row["rules"] == "issue-9":
            assert row["not_slashed"] == 1.0, row  # §13.x: re-rolls pass every audit under issue 9 as committed
    for row in cells["grief"]:
        if row["dispatcher"] == "adversarial" and row["rules"] == "issue-9" and row["q"] >= 0.2:
            assert row["honest_worker_slashed"] > 0.4, row  # §13.x: honest workers still slashed
