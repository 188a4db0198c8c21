"""The simulator pinned to the contracts: simulated audits and omission claims (rules `main`) replayed on anvil
agree with the contracts committee by committee and wei by wei (`verillm sim replay` runs
hundreds; this runs one audit of every kind)."""

import dataclasses

import pytest

from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilProcess
from verillm.sim.replay import CASE_KINDS, Replayer, agreement_table, run_replay, sample_cases
from verillm.sim.replay_omission import OMISSION_KINDS, replay_omission, sample_omission_cases
from verillm.sim.rules import BEFORE_COVERAGE, ISSUE9, MAIN


@pytest.fixture(scope="module")
def replayer(anvil_installed):
    with AnvilProcess() as anvil:
        yield Replayer(RpcChain(anvil.url), seed=0)


def _first_showing(replayer, cases, kinds, shows, tries=8):
    """Replay cases of ``kinds`` until one ``shows`` a path (anvil's block hashes, so committees,
    differ from run to run: no fixed case reaches a given path every time)."""
    results = []
    for case in [c for c in cases if c.kind in kinds][:tries]:
        results.append(replayer.replay(case))
        if shows(results[-1]):
            break
    return results


def test_one_audit_of_every_kind_agrees_with_the_contracts(replayer):
    sampled = sample_cases(6 * len(CASE_KINDS), replayer.adversarial, seed=0)
    results = [replayer.replay(case) for case in sampled[:len(CASE_KINDS)]]
    rest = sampled[len(CASE_KINDS):]
    # the landed paths: claims answered by a publication, a claim left unpublished (the worker slashed by `slashUndelivered`), an
    # escalation unheard (the audit abandoned, nobody slashed)
    unpublished = _first_showing(replayer, rest, {"withheld-unpublished"}, lambda r: r.undelivered)
    # Which case lapses depends on anvil's block hashes (timestamps): `rest` holds only 10 cases of these
    # kinds, and under load none of them lapsed once. More candidates (their receipt nonces apart from
    # the others'), first that shows the path wins.
    more = [dataclasses.replace(c, index=50_000 + c.index) for c in sample_cases(20 * len(CASE_KINDS), replayer.adversarial, seed=1)]
    unheard = _first_showing(replayer, rest + more, {"escalate-unheard", "collude-withhold"}, lambda r: r.lapsed, tries=50)
    published = [] if any(r.claims and r.published for r in results) else _first_showing(
        replayer, rest, {"withheld-published", "honest-worker-withheld"}, lambda r: r.claims and r.published)
    results += unpublished + unheard + published
    assert [r.mismatches for r in results] == [[]] * len(results)
    rows = agreement_table(results)
    assert {row["kind"] for row in rows} == {k[0] for k in CASE_KINDS}
    assert sum(r.committees for r in results) > len(results)  # redraws and escalation committees compared too
    assert any(r.escalated and not r.lapsed for r in results)
    assert {r.verdict for r in results if not r.abandoned} >= {1, 2, 4}  # pass, fail, worker default
    assert any(r.claims and r.published for r in results)  # claims answered by a publication
    assert unpublished[-1].undelivered and unpublished[-1].claims and not unpublished[-1].published
    assert unheard[-1].escalated and unheard[-1].lapsed
    # contests: answered (the worker takes the bond), unanswered (slashed, settled as its default)
    assert {r.verdict for r in results if r.contested and r.case.kind == "contest-unanswered"} == {4}
    assert any(r.contested for r in results if r.case.kind == "contest-answered")


def test_a_simulator_with_other_rules_is_caught_by_the_replay(replayer):
    """The issue-9 commit's rules slash a minority voter in full; the contracts take
    MEMBER_PENALTY_BPS: the replay must report the difference in wei."""
    cases = [c for c in sample_cases(len(CASE_KINDS), replayer.adversarial, seed=0) if c.kind == "grief-disagree"]
    try:
        replayer.rules = ISSUE9
        result = replayer.replay(cases[0])
    finally:
        replayer.rules = MAIN
    assert any("slashed" in m for m in result.mismatches), result.mismatches


def test_omission_claims_agree_with_the_coverage_contract(replayer):
    """Receipt coverage (landed, `Coverage.sol`): a self-dispatched cheat that never batches its
    promised receipt is slashed by `slashOmission` as the simulator's arithmetic says (stake,
    claimant credit, fee pool, to the wei); a claim on a batched receipt is answered by
    `proveIncluded` and its bond credited to the dispatcher. The rules before coverage predict
    no slash: the replay reports it."""
    cases = sample_omission_cases(2, replayer.adversarial, first_index=1000, seed=0)
    assert [c.kind for c in cases] == list(OMISSION_KINDS) and replayer.adversarial[cases[0].dispatcher]
    slashed, answered = (replay_omission(replayer, c) for c in cases)
    assert slashed.mismatches == [] and answered.mismatches == []
    assert slashed.omission_slashed and not answered.omission_slashed
    try:
        replayer.rules = BEFORE_COVERAGE
        before = replay_omission(replayer, cases[0])
    finally:
        replayer.rules = MAIN
    assert any(f"node {cases[0].dispatcher} slashed" in m for m in before.mismatches), before.mismatches


@pytest.mark.slow
def test_three_hundred_simulated_audits_agree_with_the_contracts(replayer):
    """`verillm sim replay --audits 300` as a test (make test-slow)."""
    results, rows = run_replay(replayer.chain, 300, seed=1)
    assert [r.case.index for r in results if r.mismatches] == []
    assert sum(row["escalated"] for row in rows) > 20 and sum(row["lapsed"] for row in rows) > 0
    assert sum(row["undelivered"] for row in rows) > 0 and sum(row["published"] for row in rows) > 0
