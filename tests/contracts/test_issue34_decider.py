"""Issue 34: an appeal that decides the opposite of round 0's majority (PASS against FAIL) decides
nothing alone — `Jobs.settle` enters a decider round (2, drawn publicly like the appeal, fresh
members, ESCALATION_COMMITTEE_SIZE) and the verdict two rounds agree on is final (docs/protocol.md
§12 "Proportionality"). The replay of the forge violation and its mirror are
`test_issue34_rules.py::test_attack2_…` and `::test_attack1_…`; here: the bound when both later
rounds are captured (the cheat's escape; an honest worker round 0 passed: the penalty only), a
cheat round 0 and the decider fail (the full slash whatever the appeal said), the decider's TIE
and a decider nobody draws. The worker's full slash on a FAIL needs round 0's majority and the
final verdict both to fail it (`spec.settlement.is_worker_penalty_only`, `Jobs.settle`'s bareFail).
"""

import pytest

from helpers.chain import reverts
from verillm.chain import RpcChain
from verillm.spec import settlement as spec
from verillm.spec.audit import Phase, compute_appeal_cells

from helpers.contracts import LAYERS, MODEL, OUTPUT_TOKENS, PRESET, PROMPT_LEN, World

from test_issue34_rules import _opening, _settle_as_the_spec_says

BOND = PRESET.DISPUTE_BOND_WEI
QUORUM = PRESET.ESCALATION_COMMITTEE_SIZE // 2 + 1
CELLS = sorted(compute_appeal_cells(PROMPT_LEN, OUTPUT_TOKENS, LAYERS))
FABRICATED = 0.3


@pytest.fixture
def world15(world_base):
    """Fifteen registered nodes: round 0 (3), the appeal (5) and its decider (5), drawn apart."""
    snapshot = world_base.chain.snapshot()
    yield World(RpcChain(world_base.chain.url), PRESET, extra_nodes=9)
    world_base.chain.revert(snapshot)


def _penalty(stake: int) -> int:
    return stake * PRESET.MEMBER_PENALTY_BPS // 10_000


def _cheat_failed_then_passed_by_a_captured_appeal(world):
    cheat = world.make_worker(world.nodes[0], offset=FABRICATED)
    run = world.start(cheat, dispatcher=world.nodes[1])
    round0 = [world.make_member(n) for n in world.committee(run)]
    assert world.decide(run, round0) == spec.FAIL  # an honest round 0 catches the cheat
    world.protocol.escalate(cheat.node.account, run.audit_id)  # the worker has standing against its FAIL
    world.draw_round(run)
    seats = world.committee(run, 1)
    appeal = [world.make_member(n, offset=FABRICATED) for n in seats[:QUORUM]] + [world.make_member(n) for n in seats[QUORUM:]]
    assert world.decide(run, appeal, 1) == spec.PASS  # captured
    return cheat, run, round0, appeal


def test_a_cheat_keeps_its_stake_only_when_the_appeal_and_the_decider_are_both_captured(world15):
    world = world15
    cheat, run, round0, appeal = _cheat_failed_then_passed_by_a_captured_appeal(world)
    stakes = world.stakes()
    decider, verdict = world.decider(run, offset=FABRICATED, captured=QUORUM)
    assert verdict == spec.PASS  # the second captured round: two rounds agree on PASS
    assert set(world.protocol.get_committee(run.audit_id, 2)).isdisjoint(
        {cheat.node.address, world.nodes[1].address} | {m.node.address for m in round0 + appeal})  # fresh seats
    # Round 0's honest dissenters are no provable liars: rounds 1 and 2 agree, round 0 does not.
    for slot, member in enumerate(round0, start=1):
        contest_id = world.protocol.contest(cheat.node.account, run.audit_id, 0, slot, CELLS).value
        world.protocol.answer_contest(member.node.account, contest_id, CELLS, _opening(world, run, member, 0))
        published = world.protocol.get_answered_opening(contest_id, MODEL)
        with reverts("NoFault"):
            world.protocol.adjudicate(cheat.node.account, run.audit_id, 0, slot, _opening(world, run, cheat, 0), published, only=set(CELLS))
    expected = _settle_as_the_spec_says(world, run, [round0, appeal, decider], cheat.node.address)
    assert expected.verdict == spec.PASS
    after = world.stakes()
    assert after[cheat.node.address] == stakes[cheat.node.address]  # the documented bound: both later rounds captured
    for member in round0 + appeal[QUORUM:] + decider[QUORUM:]:  # every honest voter: the minority penalty, never more
        assert stakes[member.node.address] - after[member.node.address] == _penalty(stakes[member.node.address])


def test_an_honest_worker_passed_by_round_zero_loses_only_the_penalty_when_the_appeal_and_the_decider_are_captured(world15):
    # Two later rounds agree against the worker, but round 0's honest majority passed it: a full
    # slash would make its risk tail(3,q)·tail(7,q)·(2 − tail(7,q)) + (1 − tail(3,q))·tail(7,q)²
    # instead of a final appeal's tail(3,q)·tail(7,q). The penalty, and the worker's full slash
    # always needs a captured round 0.
    world = world15
    worker = world.make_worker(world.nodes[0])  # honest
    run = world.start(worker, dispatcher=world.nodes[1])
    committee = world.committee(run)
    round0 = [world.make_member(committee[0], offset=FABRICATED)] + [world.make_member(n) for n in committee[1:]]
    assert world.decide(run, round0) == spec.PASS  # two honest agrees, the colluder's fabricated data dissent
    attacker = round0[0].node.account
    world.protocol.escalate(attacker, run.audit_id)  # a round-0 dissenter has standing
    world.draw_round(run)
    seats = world.committee(run, 1)
    appeal = [world.make_member(n, offset=FABRICATED) for n in seats[:QUORUM]] + [world.make_member(n) for n in seats[QUORUM:]]
    assert world.decide(run, appeal, 1) == spec.FAIL  # captured
    stakes = world.stakes()
    decider, verdict = world.decider(run, offset=FABRICATED, captured=QUORUM)
    assert verdict == spec.FAIL  # captured too: two rounds agree on FAIL
    expected = _settle_as_the_spec_says(world, run, [round0, appeal, decider], attacker.address)
    assert expected.verdict == spec.FAIL
    after = world.stakes()
    lost = stakes[worker.node.address] - after[worker.node.address]
    assert lost == _penalty(stakes[worker.node.address]) < stakes[worker.node.address] * PRESET.SLASH_FRACTION_BPS // 10_000
    for member in round0[1:] + appeal[QUORUM:] + decider[QUORUM:]:  # every honest voter: the minority penalty, never more
        assert stakes[member.node.address] - after[member.node.address] == _penalty(stakes[member.node.address])


def test_a_cheat_failed_by_round_zero_and_an_honest_decider_is_slashed_in_full_after_a_captured_appeal(world15):
    # Round 0's majority and the final verdict both fail the cheat: the slash, not the penalty (a
    # captured appeal between two honest rounds buys nothing).
    world = world15
    cheat, run, round0, appeal = _cheat_failed_then_passed_by_a_captured_appeal(world)
    stakes = world.stakes()
    decider, verdict = world.decider(run)
    assert verdict == spec.FAIL  # honest
    expected = _settle_as_the_spec_says(world, run, [round0, appeal, decider], cheat.node.address)
    assert expected.verdict == spec.FAIL
    lost = stakes[cheat.node.address] - world.stakes()[cheat.node.address]
    assert lost == stakes[cheat.node.address] * PRESET.SLASH_FRACTION_BPS // 10_000 > _penalty(stakes[cheat.node.address])


def test_a_decider_tie_leaves_round_zero_s_fail_standing_at_the_penalty(world15):
    # No two rounds agree: round 0's majority stands, and a FAIL of one round takes only the penalty.
    world = world15
    cheat, run, round0, appeal = _cheat_failed_then_passed_by_a_captured_appeal(world)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    world.protocol.jobs.transact("settle", run.audit_id, sender=world.outsider)
    world.draw_round(run)
    decider = [world.make_member(n) for n in world.committee(run, 2)]
    world.post_members(run, decider, 2)
    world.open_worker(run)
    world.vote_members(run, slots=range(4), votes=lambda slot: slot < 2)  # 2 agree, 2 disagree, the fifth never seals
    open_by = world.protocol.get_round_state(run.audit_id).deadlines.members_open_by
    world.chain.mine(open_by - world.chain.get_block_number() + 1)
    assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.TIE
    stakes = world.stakes()
    expected = _settle_as_the_spec_says(world, run, [round0, appeal, decider], cheat.node.address)
    assert expected.verdict == spec.FAIL  # round 0's
    assert stakes[cheat.node.address] - world.stakes()[cheat.node.address] == _penalty(stakes[cheat.node.address])


def test_a_decider_nobody_draws_abandons_the_audit_and_slashes_nobody(world15):
    world = world15
    cheat, run, round0, appeal = _cheat_failed_then_passed_by_a_captured_appeal(world)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    world.protocol.jobs.transact("settle", run.audit_id, sender=world.outsider)
    assert world.protocol.get_audit(run.audit_id).round == 2
    stakes, credit = world.stakes(), world.protocol.get_credit(cheat.node.address)
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS + 1)
    world.protocol.jobs.transact("lapse", run.audit_id, sender=world.outsider)
    assert world.protocol.get_round_state(run.audit_id).phase == Phase.ABANDONED
    assert world.stakes() == stakes  # neither contradicting round decides alone
    assert world.protocol.get_credit(cheat.node.address) == credit + BOND  # the escalator's bond back, as for an unheard appeal
    with reverts("UnexpectedPhase"):
        world.protocol.settle(world.outsider, run.audit_id)
