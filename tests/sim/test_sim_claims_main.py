"""docs/protocol.md §13 under the rules main enforces today (`MAIN`: issue 9, the graduated member
penalty, unheard escalations that abandon the audit, the stake tree, the job-delivery challenge
and receipt coverage), each claim recomputed from the simulator so the section cannot drift."""

import math

import numpy as np
import pytest

from verillm.spec.params import MAINNET
from verillm.spec.settlement import DISAGREE
from verillm.sim.audit import AuditContext, Behaviour, run_audit
from verillm.sim.bounds import tail
from verillm.sim.engine import Scenario, run_scenario
from verillm.sim.gas import GasModel
from verillm.sim.montecarlo import make_pool, run_cell
from verillm.sim.rules import BEFORE_COVERAGE, BEFORE_DECIDER, BEFORE_ISSUE20, ISSUE20, ISSUE34, LANDED, MAIN, MEMBER_PENALTY, RULES


def _close(value, expected, n):
    return abs(value - expected) <= 4 * math.sqrt(max(expected * (1 - expected), 1e-9) / n) + 1 / n


def test_landed_changes_are_one_change_each_and_main_is_all_of_them():
    for name, change in LANDED.items():
        assert MEMBER_PENALTY.with_changes(**change) != MEMBER_PENALTY and len(change) == 1, name
        assert all(getattr(MAIN, k) == v for k, v in change.items())
    assert "receipt-coverage" in LANDED and not MAIN.omission_possible
    # before-coverage is main less Coverage.sol, kept for the before/after columns
    assert BEFORE_COVERAGE.omission_possible and BEFORE_COVERAGE.with_changes(**LANDED["receipt-coverage"]) == BEFORE_ISSUE20.with_changes(
        name="before-coverage", worker_node_appeals=True)
    assert RULES["main"] is MAIN and "main+coverage" not in RULES
    # main is before-issue-20 plus issue 20's flags, issue 34's and the decider round, and nothing else
    assert MAIN == BEFORE_ISSUE20.with_changes(name="main", **ISSUE20, **ISSUE34, decider_round=True) and not BEFORE_ISSUE20.committee_after_payment


def test_collusion_escape_under_main_needs_both_rounds():
    """'Any party may escalate any verdict': an honest minority member escalates a PASS, so a
    cheat escapes only with three adversarial seats or a captured escalation committee."""
    q = 0.33
    res = run_cell(MAINNET, MAIN, q, Behaviour(collude=True), 2000, nodes=400, dispatcher_adversarial=True, seed=21)
    assert _close(res.escaped / res.audits, q**3 + 3 * q * q * (1 - q) * tail(7, q), res.audits)


def test_minority_members_lose_member_penalty_bps_not_their_stake():
    """§13 'Minority votes are penalised, not slashed': an honest dissenter outvoted (and not
    saved by escalation) loses 1% of its stake at settlement; expected loss per seat at r = 0.9
    stays below the m = 3 tail (0.028) × 1% and below the fee a seat earns. The one exception is
    the residual of the loss ledger (docs/protocol.md §13, issue 20's cross-round clause of
    `adjudicate`): when both rounds pass the cheat, the cheat hunts the honest round-0 dissenters
    for what settlement left them."""
    q = 0.33  # a captured escalation committee is what leaves an honest dissenter outvoted
    penalty = MAINNET.MIN_STAKE_WEI * MAINNET.MEMBER_PENALTY_BPS // 10_000
    # Measured under the rules before the decider round (a third round judges more seats; its
    # numbers under `main` are not re-measured yet: docs/simulation.md says so).
    res = run_cell(MAINNET, BEFORE_DECIDER, q, Behaviour(collude=True), 1500, nodes=400, dispatcher_adversarial=True, seed=22)
    settled = res.honest_members_slashed - res.honest_members_hunted
    assert settled > 0 and res.honest_slashed_wei - res.honest_hunted_wei == settled * penalty
    # first-round dissenters (1 per 2-of-3 capture) outvoted again by a captured escalation, plus
    # honest escalation-round minorities: at most 3 + 3 seats per such audit
    p_captured_twice = 3 * q * q * (1 - q) * tail(7, q)
    assert settled / res.audits <= 6 * p_captured_twice
    # the hunted: round-0 dissenters (one per twice-captured audit), each already penalised once
    assert res.honest_hunted_wei == res.honest_members_hunted * (MAINNET.MIN_STAKE_WEI - penalty)
    assert res.honest_members_hunted / res.audits <= 2 * p_captured_twice
    assert res.honest_worker_slashed == 0
    low = run_cell(MAINNET, MAIN, 0.1, Behaviour(collude=True), 1500, nodes=400, dispatcher_adversarial=True, seed=22)
    loss_per_seat = (low.honest_slashed_wei - low.honest_hunted_wei) / (low.audits * MAINNET.COMMITTEE_SIZE) / MAINNET.MIN_STAKE_WEI
    assert loss_per_seat <= tail(3, 0.1) * 0.01 < MAINNET.AUDIT_FEE_WEI / MAINNET.MIN_STAKE_WEI


def test_a_false_disagree_costs_its_author_the_member_penalty():
    rng = np.random.default_rng(5)
    pool = make_pool(60, 0.2, MAINNET.MIN_STAKE_WEI, rng)
    ctx = AuditContext(MAINNET, MAIN, pool, Behaviour(grief=True), 1.0, 0.0)
    honest = np.flatnonzero(~pool.adversarial)
    seen = 0
    for i in range(300):
        worker = int(rng.choice(honest))
        out = run_audit(ctx, worker, worker, False, bytes([i % 256, i // 256]) * 16, rng, audit_id=i)
        liars = [s for r in out.trace for s, v in zip(r.get("seats", ()), r.get("votes", ())) if v == DISAGREE]
        if out.verdict == 1 and liars:  # the PASS stood: every DISAGREE was a grief vote
            seen += 1
            assert all(out.slashed_wei[s] == MAINNET.MIN_STAKE_WEI // 100 for s in liars)
            assert worker not in out.slashed_wei
    assert seen > 10


def test_abandonment_slashes_nobody_and_refusing_members_earn_nothing():
    r = run_scenario(Scenario(rules="main", strategy="grief-refuse", adversary_share=0.33, workers=100, jobs_per_s=2, duration_s=3600, seed=3))
    assert r["abandoned"] > 0 and r["honest_slashed_eth"] == 0 and r["adversary_fees_and_rewards_eth"] >= 0


def test_omitted_receipts_escaped_at_zero_cost_before_coverage():
    """§13 'receipt omission' before Coverage.sol: a self-dispatching node never batched the jobs
    it cheated on."""
    r = run_scenario(Scenario(rules="before-coverage", strategy="cheat-unwatched", adversary_share=0.1, workers=100, jobs_per_s=2, duration_s=1800))
    assert r["cheated_served"] > 100 and r["cheated_omitted_from_batches"] == r["cheated_served"] == r["cheated_unslashed"]
    assert r["adversary_slashed_eth"] == 0


def test_dispatcher_rerolls_passed_every_audit_until_the_job_delivery_challenge():
    """§13 'seat withholding': before the challenge a dispatcher starving honest seats passed every
    audit (captured, or abandoned unjudged); under main the starved seats claim, the worker
    publishes (then: collusion's escape) or is slashed as a default (withhold-jobs: the same escape,
    every claim a slash)."""
    beh = Behaviour(collude=True, starve=True)
    before = run_cell(MAINNET, MEMBER_PENALTY, 0.2, beh, 600, nodes=300, dispatcher_adversarial=True, seed=23)
    after = run_cell(MAINNET, MAIN, 0.2, beh, 600, nodes=300, dispatcher_adversarial=True, seed=23)
    unpublished = run_cell(MAINNET, MAIN, 0.2, Behaviour(collude=True, starve=True, withhold_transcript=True), 600, nodes=300,
                           dispatcher_adversarial=True, seed=23)
    assert before.escaped == before.audits
    collusion = 0.2**3 + 3 * 0.04 * 0.8 * tail(7, 0.2)
    assert _close(after.escaped / after.audits, collusion, after.audits)
    assert _close(unpublished.escaped / unpublished.audits, collusion, unpublished.audits)
    assert after.honest_worker_slashed == unpublished.honest_worker_slashed == 0


def test_identity_flood_stopped_audits_until_the_stake_tree():
    """§13 'Scale': with O(n) sortition, past the node count whose `startAudit` fills a block no
    audit started (nobody slashed, every cheat unaudited); under main (the stake tree) `startAudit`
    costs 775,370 gas at 10,000 nodes and fits a block at any N, so the flood is plain cheating."""
    gas = GasModel()
    limit = gas.largest_startable()
    assert gas.start_audit_gas(limit) <= 30_000_000 < gas.start_audit_gas(limit + 1)
    tree = GasModel.for_rules(MAIN)
    assert tree.start_audit_gas(10_000) == 775_370 and tree.largest_startable() is None and tree.largest_nodes() is None
    assert tree.start_audit_gas(10**6) < 1_000_000 and tree.draw_escalation_gas(10**6) < 2_000_000
    kw = dict(strategy="flood-identities", adversary_share=0.1, workers=200, jobs_per_s=1, duration_s=1800)
    flood = run_scenario(Scenario(rules="member-penalty", **kw))
    assert flood["flood_identities"] == limit + 1 - 200 and flood["audits"] == 0 and flood["honest_slashed_eth"] == 0
    assert flood["cheated_unslashed"] == flood["cheated_served"] > 0
    fixed = run_scenario(Scenario(rules="main", **kw))
    assert fixed["flood_identities"] == 0 and fixed["audits"] > 0 and fixed["adversary_slashed_eth"] > 0


@pytest.mark.parametrize("rules", ["before-coverage", "main"])
def test_honest_network_slashes_nobody(rules):
    r = run_scenario(Scenario(rules=rules, strategy="honest", adversary_share=0.0, workers=50, jobs_per_s=2, duration_s=3600))
    assert r["audits"] > 100 and r["honest_slashed_eth"] == 0


def test_collusion_factor_at_r09_is_the_all_adversarial_committee_not_the_both_column():
    """§13: 'at r = 0.9 and with escalation, c < 0.05 × (1 − 7.6·10⁻⁵)'. Under main a committee
    with no honest member has no honest witness to escalate: the factor is q³ + 3q²(1−q)·tail(7, q)."""
    q = 0.1
    both = tail(3, q) * tail(7, q)
    main = q**3 + 3 * q * q * (1 - q) * tail(7, q)
    assert both == pytest.approx(7.6e-5, rel=0.02) and main == pytest.approx(1.07e-3, rel=0.01)
    res = run_cell(MAINNET, MAIN, q, Behaviour(collude=True), 3000, nodes=400, dispatcher_adversarial=True, seed=24)
    assert res.escaped / res.audits <= main + 4 * math.sqrt(main / res.audits) + 1 / res.audits


def test_an_unheard_escalation_slashes_no_honest_worker():
    """§13 threat table: an escalation the colluders cannot let be heard abandons the audit, so
    an honest worker framed by a colluding FAIL keeps its stake unless both rounds are captured;
    before (member-penalty rules) the FAIL it disputed was enforced when the escalation lapsed."""
    beh = Behaviour(grief=True, withhold=True)
    kw = dict(audits=800, nodes=300, cheated=False, worker_adversarial=False, seed=25)
    before = run_cell(MAINNET, MEMBER_PENALTY, 0.33, beh, **kw)
    after = run_cell(MAINNET, MAIN, 0.33, beh, **kw)
    assert after.honest_worker_slashed < before.honest_worker_slashed


def test_a_caught_cheat_escalating_into_an_unheard_round_escapes_more_than_collusion():
    """§13 residual risk 'Escaping by an unheard escalation', simulated: colluders that withhold
    their seats while a minority, and escalate their own FAIL, escape far more often than
    collusion alone at q = 33% (each withheld seat re-rolls; a seat still withheld after the
    redraws makes the escalation unheard); `MAX_COMMITTEE_REDRAWS = 4` cuts it."""
    q, kw = 0.33, dict(nodes=300, dispatcher_adversarial=True, seed=26)
    rules = BEFORE_DECIDER  # measured before the decider round (under `main`: 260 vs 146 escapes, not re-measured in the docs yet)
    withhold = run_cell(MAINNET, rules, q, Behaviour(collude=True, withhold=True), 800, **kw)
    unheard = run_cell(MAINNET, rules, q, Behaviour(collude=True, withhold=True, escalate_own_fail=True), 800, **kw)
    redraws = run_cell(MAINNET.replace(MAX_COMMITTEE_REDRAWS=4), rules, q, Behaviour(collude=True, withhold=True, escalate_own_fail=True), 800, **kw)
    assert unheard.escaped > 1.8 * withhold.escaped
    assert redraws.escaped < 0.75 * unheard.escaped


def test_receipt_coverage_turns_the_unwatched_cheat_into_cheat_always():
    """§13 'receipt omission' and its fix, landed (Coverage.sol): before it every self-dispatched
    cheat stayed out of the batches and the strategy paid; under main the `batchBy` promise and
    the non-inclusion challenge get the same adversary audited and slashed, at a loss."""
    kw = dict(strategy="cheat-unwatched", adversary_share=0.1, workers=100, jobs_per_s=2, duration_s=1800, seed=4)
    fixed = run_scenario(Scenario(rules="main", **kw))
    assert fixed["cheated_omitted_from_batches"] == 0 and fixed["audits"] > 0 and fixed["adversary_slashed_eth"] > 0
    honest = {name: run_scenario(Scenario(rules=name, **{**kw, "strategy": "honest"})) for name in ("before-coverage", "main")}
    before = run_scenario(Scenario(rules="before-coverage", **kw))
    excess = {name: r["adversary_profit_per_identity_eth"] - honest[name]["adversary_profit_per_identity_eth"]
              for name, r in (("before-coverage", before), ("main", fixed))}
    assert excess["before-coverage"] > 0 > excess["main"]


def test_a_larger_escalation_committee_protects_honest_workers_from_grief_at_q33():
    """docs/simulation.md fixes: an honest worker framed by colluders voting DISAGREE is slashed
    only when both rounds are captured, ≈ tail(3, q)·tail(m′, q): ESCALATION_COMMITTEE_SIZE 7 → 15
    cuts it about 3× at q = 33%."""
    q, kw = 0.33, dict(audits=1000, nodes=400, cheated=False, worker_adversarial=False, seed=27)
    for size in (7, 15):
        res = run_cell(MAINNET.replace(ESCALATION_COMMITTEE_SIZE=size), MAIN, q, Behaviour(grief=True), **kw)
        assert _close(res.honest_worker_slashed / res.audits, tail(3, q) * tail(size, q), res.audits), size


def test_a_proof_window_longer_than_honest_outages_spares_contested_workers():
    """docs/simulation.md fixes, grief-contest: with 5% downtime in outages of mean 600 s, the
    600 s MAINNET proof window lets contests slash honest workers; 300 blocks (1 h) does not."""
    kw = dict(rules="main", strategy="grief-contest", adversary_share=0.1, workers=100, jobs_per_s=2, duration_s=3600,
              offline=0.05, outage_s=600.0, seed=6)
    short = run_scenario(Scenario(**kw))
    long = run_scenario(Scenario(preset_overrides=(("PROOF_WINDOW_BLOCKS", 300),), **kw))
    assert short["honest_slashed"]["worker"] > 0 and long["honest_slashed_eth"] == 0
