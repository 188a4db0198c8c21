"""verillm.spec.settlement: conservation and fairness properties, and the slash split against what
a real settlement on anvil books (Jobs has no computeSlashSplit view any more). Whole settlements
are compared with the contract in tests/contracts/test_audit_flow.py and test_disputes.py."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verillm.chain.anvil import AnvilProcess
from verillm.spec import settlement as s
from verillm.spec.params import MAINNET

from helpers.contracts import CHEAT_OFFSET, World, connect

PRESET = MAINNET
STAKE = 10**18

members = st.builds(s.MemberRecord, node=st.sampled_from([f"m{i}" for i in range(12)]), posted=st.booleans(), opened=st.booleans(),
                    vote=st.sampled_from([s.AGREE, s.DISAGREE]), slashed=st.booleans())


def _unique(round_members):
    seen, out = set(), []
    for m in round_members:
        if m.node not in seen:
            seen.add(m.node)
            out.append(m)
    return tuple(out)


def _audit(r0, worker_opened, escalated, r1, worker_slashed, r2, decider_opened):
    """Round 0; its appeal when ``escalated``; the appeal's decider whenever the appeal contradicts
    round 0 (`needs_decider`: such an audit never settles on two rounds)."""
    rounds = (s.RoundRecord(True if escalated else worker_opened, _unique(r0)),)
    if escalated:
        rounds += (s.RoundRecord(worker_opened, _unique(r1)),)
    audit = s.AuditRecord("w", rounds, worker_slashed=worker_slashed, escalator="e" if escalated else None,
                          escalation_bond_wei=PRESET.DISPUTE_BOND_WEI if escalated else 0)
    if s.needs_decider(audit):
        audit = s.AuditRecord("w", rounds + (s.RoundRecord(decider_opened, _unique(r2)),), worker_slashed=worker_slashed,
                              escalator="e", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
    return audit


audits = st.builds(_audit, st.lists(members, min_size=1, max_size=3), st.booleans(), st.booleans(), st.lists(members, min_size=1, max_size=5),
                   st.booleans(), st.lists(members, min_size=1, max_size=5), st.booleans())


@settings(max_examples=300, deadline=None)
@given(audit=audits, pool=st.integers(0, 10**17))
def test_settlement_conserves_wei(audit, pool):
    stakes = {f"m{i}": STAKE + i for i in range(12)} | {"w": 3 * STAKE}
    out = s.compute_settlement(audit, stakes, pool, PRESET)
    bond = audit.escalation_bond_wei
    assert sum(out.slashed_wei.values()) + pool + bond == out.fee_pool_wei + sum(out.credits_wei.values())
    assert out.fee_pool_wei >= 0 and all(v >= 0 for v in out.credits_wei.values())


@settings(max_examples=200, deadline=None)
@given(audit=audits)
def test_an_honest_majority_never_slashes_the_worker(audit):
    """If every counted vote agrees and the worker opened, nothing happens to the worker."""
    final = audit.rounds[-1]
    honest_round = s.RoundRecord(True, tuple(s.MemberRecord(m.node, posted=True, opened=True, vote=s.AGREE) for m in final.members))
    honest = s.AuditRecord(audit.worker, audit.rounds[:-1] + (honest_round,))
    if s.needs_decider(honest):  # a round 0 that failed it, an honest appeal: the decider is honest too
        honest = s.AuditRecord(audit.worker, honest.rounds + (honest_round,))
    out = s.compute_settlement(honest, {"w": STAKE}, 10**18, PRESET)
    assert out.verdict == s.PASS and "w" not in out.slashed_wei


def test_cheat_is_slashed_and_rewards_split_among_the_majority():
    members = tuple(s.MemberRecord(f"m{i}", vote=s.DISAGREE) for i in range(3))
    out = s.compute_settlement(s.AuditRecord("w", (s.RoundRecord(True, members),)), {"w": 3 * STAKE}, 10**18, PRESET)
    slashed = 3 * STAKE * PRESET.SLASH_FRACTION_BPS // 10_000
    reward = slashed * PRESET.SLASH_REWARD_BPS // 10_000
    assert out.verdict == s.FAIL and out.slashed_wei == {"w": slashed}
    assert out.credits_wei == {f"m{i}": PRESET.AUDIT_FEE_WEI + reward // 3 for i in range(3)}


def test_tie_slashes_nobody_for_votes_and_pays_the_voters():
    members = (s.MemberRecord("a", vote=s.AGREE), s.MemberRecord("b", vote=s.DISAGREE), s.MemberRecord("c", opened=False, vote=s.NO_VOTE))
    out = s.compute_settlement(s.AuditRecord("w", (s.RoundRecord(True, members),)), {"c": STAKE}, 10**18, PRESET)
    assert out.verdict == s.TIE and set(out.slashed_wei) == {"c"}  # c missed its opening
    assert set(out.credits_wei) == {"a", "b"}


def test_escalation_bond_refunded_only_when_the_verdict_is_overturned():
    first = s.RoundRecord(True, (s.MemberRecord("a", vote=s.DISAGREE), s.MemberRecord("b", vote=s.DISAGREE), s.MemberRecord("c")))
    for second_vote, refunded in ((s.AGREE, True), (s.DISAGREE, False)):
        second = s.RoundRecord(True, tuple(s.MemberRecord(f"x{i}", vote=second_vote) for i in range(5)))
        # An appeal that passes what round 0 failed decides nothing alone: its decider agrees with it here.
        decider = (s.RoundRecord(True, tuple(s.MemberRecord(f"y{i}", vote=second_vote) for i in range(5))),) if refunded else ()
        audit = s.AuditRecord("w", (first, second) + decider, escalator="c", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
        out = s.compute_settlement(audit, {"w": STAKE, "a": STAKE, "b": STAKE, "c": STAKE}, 10**18, PRESET)
        assert (out.credits_wei.get("c", 0) >= PRESET.DISPUTE_BOND_WEI) is refunded


def test_escalation_bond_refunded_only_when_the_escalators_side_wins():
    # (first majority, final verdict) → refunded; a default after a FAIL is a conviction again.
    cases = {(s.FAIL, s.PASS): True, (s.FAIL, s.WORKER_DEFAULT): False, (s.FAIL, s.TIE): False, (s.FAIL, s.FAIL): False,
             (s.PASS, s.FAIL): True, (s.PASS, s.WORKER_DEFAULT): True, (s.PASS, s.TIE): False, (s.PASS, s.PASS): False,
             (s.TIE, s.PASS): True, (s.TIE, s.WORKER_DEFAULT): True, (s.TIE, s.TIE): False}
    assert {case: s.is_overturned(*case) for case in cases} == cases
    first = s.RoundRecord(True, tuple(s.MemberRecord(m, vote=s.DISAGREE) for m in "abc"))
    defaulted = s.RoundRecord(False, tuple(s.MemberRecord(f"x{i}", opened=False, vote=s.NO_VOTE) for i in range(5)))
    audit = s.AuditRecord("w", (first, defaulted), escalator="w", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
    out = s.compute_settlement(audit, {"w": STAKE}, 10**18, PRESET)
    assert out.verdict == s.WORKER_DEFAULT and "w" not in out.credits_wei


def test_unheard_escalation_slashes_nobody_and_refunds_unless_the_dispatcher_withheld():
    first = s.RoundRecord(True, (s.MemberRecord("a"), s.MemberRecord("b", vote=s.DISAGREE), s.MemberRecord("c", vote=s.DISAGREE)))
    audit = s.AuditRecord("w", (first,), escalator="w", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
    for withheld in (False, True):
        out = s.compute_unheard_escalation(audit, "d", 5, withheld)
        assert out.slashed_wei == {} and out.credits_wei == {"w": PRESET.DISPUTE_BOND_WEI} and out.fee_pool_wei == 5
    by_dispatcher = s.AuditRecord("w", (first,), escalator="d", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
    assert s.compute_unheard_escalation(by_dispatcher, "d", 5, False).credits_wei == {"d": PRESET.DISPUTE_BOND_WEI}
    forfeited = s.compute_unheard_escalation(by_dispatcher, "d", 5, True)
    assert forfeited.credits_wei == {} and forfeited.fee_pool_wei == 5 + PRESET.DISPUTE_BOND_WEI


@settings(max_examples=300, deadline=None)
@given(audit=audits)
def test_the_bare_verdict_of_one_round_never_takes_more_than_the_penalty(audit):
    """Issue 34 (Proportionality): a worker convicted by votes loses more than MEMBER_PENALTY_BPS
    only when round 0's majority and the last round both failed it (round 0 unappealed, the appeal
    agreeing with it, or the decider agreeing with it after the appeal passed the worker), or it
    defaulted: a round 0 that did not fail the worker caps what later rounds take at the penalty,
    so an honest worker's full slash always needs a captured round 0. A member's settlement loss is
    always the penalty."""
    stakes = {f"m{i}": STAKE for i in range(12)} | {"w": STAKE}
    out = s.compute_settlement(audit, stakes, 10**18, PRESET)
    penalty = STAKE * PRESET.MEMBER_PENALTY_BPS // 10_000
    seats = [m.node for r in audit.rounds for m in r.members]  # the generator may seat a node in both rounds: a penalty per seat
    assert all(v <= penalty * seats.count(node) for node, v in out.slashed_wei.items() if node != "w")
    if out.slashed_wei.get("w", 0) > penalty:
        decided = [s.compute_majority(audit.rounds[0])] + [s.compute_round_verdict(audit, r) for r in audit.rounds[1:]]
        assert out.verdict == s.WORKER_DEFAULT or (out.verdict == s.FAIL and decided[0] == s.FAIL and decided[-1] == s.FAIL)
    elif out.verdict == s.FAIL and decided_by_votes(audit) == (s.FAIL, s.FAIL):
        raise AssertionError("round 0 and the last round failed the worker: the full slash, not the penalty")


def decided_by_votes(audit):
    """(round 0's majority, the last round's verdict)."""
    return s.compute_majority(audit.rounds[0]), s.compute_round_verdict(audit, audit.rounds[-1])


@settings(max_examples=300, deadline=None)
@given(audit=audits)
def test_the_final_verdict_is_one_two_rounds_agree_on_after_a_contradicted_round_zero(audit):
    """Issue 34: after an appeal that decided the opposite of round 0 (PASS against FAIL), the
    settled verdict is the decider's when decisive (it agrees with one of them), its default, or —
    on its TIE — round 0's, which then takes only the penalty from the worker."""
    if len(audit.rounds) < 3:
        return
    stakes = {f"m{i}": STAKE for i in range(12)} | {"w": STAKE}
    out = s.compute_settlement(audit, stakes, 10**18, PRESET)
    first, own = s.compute_majority(audit.rounds[0]), s.compute_round_verdict(audit, audit.rounds[2])
    assert out.verdict == (first if own == s.TIE else own)
    if own == s.TIE and first == s.FAIL:
        assert out.slashed_wei["w"] == STAKE * PRESET.MEMBER_PENALTY_BPS // 10_000


def _round(prefix, votes, worker_opened=True):
    return s.RoundRecord(worker_opened, tuple(s.MemberRecord(f"{prefix}{i}", vote=v) for i, v in enumerate(votes)))


def test_an_appeal_that_contradicts_round_zero_enters_a_decider_and_does_not_settle():
    failed, passed = _round("m", (s.DISAGREE,) * 3), _round("m", (s.AGREE,) * 3)
    tied = s.RoundRecord(True, (s.MemberRecord("a"), s.MemberRecord("b", vote=s.DISAGREE)))
    cases = {(failed, _round("x", (s.AGREE,) * 5)): True, (passed, _round("x", (s.DISAGREE,) * 5)): True,
             (failed, _round("x", (s.DISAGREE,) * 5)): False, (passed, _round("x", (s.AGREE,) * 5)): False,
             (tied, _round("x", (s.DISAGREE,) * 5)): False, (passed, _round("x", (s.DISAGREE,) * 5, worker_opened=False)): False}
    for (first, appeal), decider in cases.items():
        audit = s.AuditRecord("w", (first, appeal), escalator="w", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
        assert s.needs_decider(audit) is decider
        if decider:
            with pytest.raises(s.InvalidInput, match="decider"):
                s.compute_settlement(audit, {"w": STAKE}, 10**18, PRESET)


def test_a_cheat_failed_by_round_zero_and_passed_by_a_captured_appeal_is_slashed_when_the_decider_fails_it():
    # The forge violation of issue 34: the cheat appeals its FAIL, the colluders' appeal passes it.
    stakes = {"w": STAKE} | {f"x{i}": STAKE for i in range(5)}
    audit = s.AuditRecord("w", (_round("m", (s.DISAGREE,) * 3), _round("x", (s.AGREE,) * 5), _round("y", (s.DISAGREE,) * 5)),
                          escalator="w", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
    out = s.compute_settlement(audit, stakes, 10**18, PRESET)
    assert out.verdict == s.FAIL and out.slashed_wei["w"] == STAKE * PRESET.SLASH_FRACTION_BPS // 10_000  # two rounds agree
    assert all(out.slashed_wei[f"x{i}"] == STAKE * PRESET.MEMBER_PENALTY_BPS // 10_000 for i in range(5))  # the appeal's colluders
    assert "w" not in out.credits_wei  # its bond to the pool


def test_an_honest_worker_passed_by_round_zero_and_failed_by_a_captured_appeal_loses_nothing_when_the_decider_passes_it():
    audit = s.AuditRecord("w", (_round("m", (s.AGREE, s.AGREE, s.DISAGREE)), _round("x", (s.DISAGREE,) * 5), _round("y", (s.AGREE,) * 5)),
                          escalator="m2", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
    out = s.compute_settlement(audit, {"w": STAKE}, 10**18, PRESET)
    assert out.verdict == s.PASS and "w" not in out.slashed_wei and out.credits_wei["w"] == PRESET.AUDIT_FEE_WEI
    assert {f"x{i}" for i in range(5)} | {"m2"} == set(out.slashed_wei)  # the appeal's colluders and round 0's false dissenter
    assert "m2" not in out.credits_wei  # the escalator's bond to the pool


def test_a_decider_that_cannot_be_heard_abandons_the_audit_like_an_unheard_appeal():
    # Never drawn, the pool exhausted, receipts missing: neither contradicting round decides alone.
    audit = s.AuditRecord("w", (_round("m", (s.DISAGREE,) * 3), _round("x", (s.AGREE,) * 5)), escalator="w",
                          escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
    assert s.needs_decider(audit)
    out = s.compute_unheard_escalation(audit, "d", 5, withheld=False)
    assert out.slashed_wei == {} and out.credits_wei == {"w": PRESET.DISPUTE_BOND_WEI} and out.fee_pool_wei == 5


def test_two_captured_rounds_are_the_bound_and_a_decider_tie_leaves_round_zero_at_the_penalty():
    failed, passing, failing = _round("m", (s.DISAGREE,) * 3), _round("x", (s.AGREE,) * 5), _round("y", (s.DISAGREE,) * 5)
    captured = s.AuditRecord("w", (failed, passing, _round("y", (s.AGREE,) * 5)), escalator="w", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
    out = s.compute_settlement(captured, {"w": STAKE}, 10**18, PRESET)
    assert out.verdict == s.PASS and "w" not in out.slashed_wei  # both later rounds captured: the cheat keeps its stake
    assert {f"m{i}" for i in range(3)} <= set(out.slashed_wei)  # round 0's honest majority: the penalty each, never more
    tie = _round("y", (s.AGREE, s.DISAGREE))
    out = s.compute_settlement(s.AuditRecord("w", (failed, passing, tie), escalator="w", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI),
                               {"w": STAKE}, 10**18, PRESET)
    assert out.verdict == s.FAIL and out.slashed_wei["w"] == STAKE * PRESET.MEMBER_PENALTY_BPS // 10_000
    out = s.compute_settlement(s.AuditRecord("w", (_round("m", (s.AGREE,) * 3), failing, tie), escalator="m0",
                                             escalation_bond_wei=PRESET.DISPUTE_BOND_WEI), {"w": STAKE}, 10**18, PRESET)
    assert out.verdict == s.PASS and "w" not in out.slashed_wei and out.credits_wei["w"] == PRESET.AUDIT_FEE_WEI


def test_a_worker_passed_by_round_zero_loses_only_the_penalty_when_the_appeal_and_the_decider_fail_it():
    """Round 0 (honest) passes the worker; a dissenter with standing appeals; the appeal and the
    decider, both captured, fail it. Two rounds agree, but round 0's majority does not: the
    worker takes MEMBER_PENALTY_BPS (`is_worker_penalty_only`), so its full slash needs a captured
    round 0 — the risk of a final appeal, tail(3, q) x tail(7, q), not more."""
    audit = s.AuditRecord("w", (_round("m", (s.AGREE, s.AGREE, s.DISAGREE)), _round("x", (s.DISAGREE,) * 5), _round("y", (s.DISAGREE,) * 5)),
                          escalator="m2", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
    out = s.compute_settlement(audit, {"w": STAKE}, 10**18, PRESET)
    assert out.verdict == s.FAIL and s.is_worker_penalty_only(audit, out.verdict)
    assert out.slashed_wei["w"] == STAKE * PRESET.MEMBER_PENALTY_BPS // 10_000
    assert {"m0", "m1"} <= set(out.slashed_wei) and out.credits_wei["m2"] > PRESET.DISPUTE_BOND_WEI  # the escalator's side won


def test_a_cheat_failed_by_round_zero_and_the_decider_is_slashed_in_full_whatever_the_appeal_said():
    """Round 0 fails the worker, the appeal passes it, the decider fails it: round 0's majority and
    the final verdict agree — the full slash (else a cheat failed by two honest rounds would buy the
    penalty with one captured appeal between them)."""
    audit = s.AuditRecord("w", (_round("m", (s.DISAGREE, s.DISAGREE, s.AGREE)), _round("x", (s.AGREE,) * 5), _round("y", (s.DISAGREE,) * 5)),
                          escalator="w", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
    out = s.compute_settlement(audit, {"w": STAKE}, 10**18, PRESET)
    assert out.verdict == s.FAIL and not s.is_worker_penalty_only(audit, out.verdict)
    assert out.slashed_wei["w"] == STAKE * PRESET.SLASH_FRACTION_BPS // 10_000


def test_an_appeal_that_fails_what_round_zero_did_not_costs_the_worker_the_penalty():
    # Issue 34, attack 1: round 0 passes (or ties) an honest worker; a captured appeal fails it.
    appeal = s.RoundRecord(True, tuple(s.MemberRecord(f"x{i}", vote=s.DISAGREE) for i in range(5)))
    stakes = {"w": STAKE}
    # (Round 0's PASS failed by the appeal now goes to a decider: the tests above.)
    for first_votes, bps in (((s.AGREE, s.DISAGREE), PRESET.MEMBER_PENALTY_BPS), ((s.DISAGREE, s.DISAGREE, s.AGREE), PRESET.SLASH_FRACTION_BPS)):
        first = s.RoundRecord(True, tuple(s.MemberRecord(f"m{i}", vote=v) for i, v in enumerate(first_votes)))
        audit = s.AuditRecord("w", (first, appeal), escalator="m0", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
        out = s.compute_settlement(audit, stakes, 10**18, PRESET)
        assert out.verdict == s.FAIL and out.slashed_wei["w"] == STAKE * bps // 10_000
        assert s.is_worker_penalty_only(audit, out.verdict) is (bps == PRESET.MEMBER_PENALTY_BPS)
    defaulted = s.RoundRecord(False, appeal.members)
    first = s.RoundRecord(True, tuple(s.MemberRecord(f"m{i}") for i in range(3)))
    out = s.compute_settlement(s.AuditRecord("w", (first, defaulted)), stakes, 10**18, PRESET)
    assert out.verdict == s.WORKER_DEFAULT and out.slashed_wei["w"] == STAKE * PRESET.SLASH_FRACTION_BPS // 10_000  # its own default


def test_a_tie_appealed_to_a_decision_penalises_the_vote_it_contradicts_and_refunds_the_worker():
    # Honest work gets verified (issue 34): a lazy agree voided (slashed), a false disagree ties
    # with the honest agree; the worker appeals, the appeal passes.
    first = s.RoundRecord(True, (s.MemberRecord("lazy", slashed=True), s.MemberRecord("int8", vote=s.DISAGREE), s.MemberRecord("h")))
    assert s.compute_majority(first) == s.TIE
    appeal = s.RoundRecord(True, tuple(s.MemberRecord(f"x{i}") for i in range(5)))
    audit = s.AuditRecord("w", (first, appeal), escalator="w", escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
    out = s.compute_settlement(audit, {"int8": STAKE, "w": STAKE}, 10**18, PRESET)
    assert out.verdict == s.PASS and out.slashed_wei == {"int8": STAKE * PRESET.MEMBER_PENALTY_BPS // 10_000}
    assert out.credits_wei["w"] == PRESET.AUDIT_FEE_WEI + PRESET.DISPUTE_BOND_WEI


def test_standing_to_appeal():
    # Issue 34 (Standing): the dispatcher; the worker against a FAIL or a TIE; a round-0 member that
    # opened, is not slashed and voted against the majority (in a TIE: any that voted).
    passed = s.AuditRecord("w", (s.RoundRecord(True, (s.MemberRecord("a"), s.MemberRecord("b"), s.MemberRecord("c", vote=s.DISAGREE),
                                                      s.MemberRecord("d", opened=False, vote=s.NO_VOTE))),))
    assert {n for n in "wabcdxz" if s.has_escalation_standing(passed, n, "z")} == {"c", "z"}
    failed = s.AuditRecord("w", (s.RoundRecord(True, (s.MemberRecord("a"), s.MemberRecord("b", vote=s.DISAGREE),
                                                      s.MemberRecord("c", vote=s.DISAGREE, slashed=True), s.MemberRecord("e", vote=s.DISAGREE))),))
    assert {n for n in "wabcexz" if s.has_escalation_standing(failed, n, "z")} == {"w", "a", "z"}
    tied = s.AuditRecord("w", (s.RoundRecord(True, (s.MemberRecord("a"), s.MemberRecord("b", vote=s.DISAGREE),
                                                    s.MemberRecord("c", slashed=True))),))
    assert {n for n in "wabcxz" if s.has_escalation_standing(tied, n, "z")} == {"w", "a", "b", "z"}


def test_pool_payments_are_capped_by_the_pool():
    members = tuple(s.MemberRecord(f"m{i}") for i in range(3))
    out = s.compute_settlement(s.AuditRecord("w", (s.RoundRecord(True, members),)), {}, PRESET.AUDIT_FEE_WEI + 1, PRESET)
    assert sum(out.credits_wei.values()) == PRESET.AUDIT_FEE_WEI + 1 and out.fee_pool_wei == 0


@pytest.fixture(scope="module")
def world(anvil_installed):
    """A MINIMAL deployment with six registered nodes on its own anvil process."""
    with AnvilProcess() as anvil:
        yield World(connect(anvil))


def test_slash_split_matches_what_a_settlement_books(world):
    """A cheating worker (FAIL) and a member that vouched for it (minority vote) are slashed in one
    settlement: each slash's reward goes to the pot the two winners share, the rest to the pool,
    exactly as compute_slash_split splits the two (different) amounts."""
    run = world.start(world.make_worker(world.nodes[0], offset=CHEAT_OFFSET), dispatcher=world.nodes[1])
    world.post_members(run, [world.make_member(n) for n in world.committee(run)])
    world.open_worker(run)
    world.vote_members(run, votes=lambda slot: True if slot == 2 else None)  # slots 0, 1 disagree as their data say
    world.protocol.finalize(world.outsider, run.audit_id)
    world.chain.mine(world.preset.DISPUTE_WINDOW_BLOCKS + 1)
    worker, (winner0, winner1, vouched) = run.worker.node.address, [m.node.address for m in run.members]
    stakes, pool = world.stakes(), world.protocol.jobs.call("feePoolWei")
    credits = {a: world.protocol.get_credit(a) for a in (worker, winner0, winner1, vouched)}
    fee = world.preset.AUDIT_FEE_WEI
    assert pool >= 2 * fee  # the winners' fees are paid in full, so only the split moves the sums below
    assert world.protocol.settle(world.outsider, run.audit_id).value == s.FAIL
    after = world.stakes()
    slashed = [stakes[worker] - after[worker], stakes[vouched] - after[vouched]]
    assert slashed[0] > slashed[1] > 0  # two different amounts: a worker's slash and a member's penalty
    splits = [s.compute_slash_split(amount, world.preset) for amount in slashed]
    pot = sum(reward for reward, _ in splits)
    share, remainder = s.compute_shares(pot, 2)
    booked = {a: world.protocol.get_credit(a) - before for a, before in credits.items()}
    assert booked == {worker: 0, vouched: 0, winner0: fee + share, winner1: fee + share}
    assert world.protocol.jobs.call("feePoolWei") == pool + sum(rest for _, rest in splits) + remainder - 2 * fee
