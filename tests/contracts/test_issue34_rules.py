"""Issue 34's confirmed attacks 1 and 2, replayed in the attacker's call order on the real
contracts, and the rule that a tied first round leads to a new round (docs/protocol.md §12
"Standing", "Proportionality", "Honest work gets verified"; §13 "Loss ledger").

    1  an outsider appeals an honest PASS; a captured appeal (a majority of its seats commit
       fabricated data and vote DISAGREE) convicts the worker and, through
       `adjudicateAcrossRounds`, every honest round-0 AGREE voter
    2  a cheat caught in round 0 by three honest DISAGREEs appeals; the captured appeal votes
       AGREE; `adjudicate` then slashes each honest dissenter, whose data fail against the cheat's
       posted leaves (which is why it dissented)

Now: an appeal needs standing (`NoStanding`); the bare verdict of one round takes at most
`MEMBER_PENALTY_BPS` from a party the other round's majority supports, and a cross-round full
slash needs two rounds agreeing against the member.
"""

import pytest

from helpers.chain import reverts
from verillm.chain import RpcChain
from verillm.spec import settlement as spec
from verillm.spec.audit import compute_appeal_cells
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.commitment import compute_opening

from helpers.contracts import LAYERS, MODEL, OUTPUT_TOKENS, PRESET, PROMPT_LEN, World

BOND = PRESET.DISPUTE_BOND_WEI
QUORUM = PRESET.ESCALATION_COMMITTEE_SIZE // 2 + 1  # the appeal seats a coalition must hold to capture it
CELLS = sorted(compute_appeal_cells(PROMPT_LEN, OUTPUT_TOKENS, LAYERS))
FABRICATED = 0.3  # the offset of a fabricated trace (as `World.start_vouched`'s colluders commit)


@pytest.fixture
def world15(world_base):
    """Fifteen registered nodes: round 0 (3), the appeal (5) and its decider (5), drawn apart."""
    snapshot = world_base.chain.snapshot()
    yield World(RpcChain(world_base.chain.url), PRESET, extra_nodes=9)
    world_base.chain.revert(snapshot)


@pytest.fixture
def world10(world_base):
    """Ten registered nodes: round 0 (3) and the appeal (5) drawn apart from worker and dispatcher."""
    snapshot = world_base.chain.snapshot()
    yield World(RpcChain(world_base.chain.url), PRESET, extra_nodes=4)
    world_base.chain.revert(snapshot)


def _opening(world, run, party, round_index: int):
    """``party``'s opening for round ``round_index``'s challenge."""
    seed = bytes(world.protocol.jobs.call("getRound", run.audit_id, round_index)[4])
    challenge = compute_challenge(seed, PROMPT_LEN, OUTPUT_TOKENS, LAYERS, PRESET.CHALLENGE_POSITIONS)
    return compute_opening(party.trace, party.commitment, compute_opened_cells(challenge, party.trace.num_positions))


def _penalty(stake: int) -> int:
    return stake * PRESET.MEMBER_PENALTY_BPS // 10_000


def _published(world, run, hunter, slot: int, member) -> tuple[int, object]:
    """The attacker contests round-0 member ``slot`` on the token cells; the honest member answers
    (its node does): its leaves and proofs are public from then on."""
    contest_id = world.protocol.contest(hunter, run.audit_id, 0, slot, CELLS).value
    world.protocol.answer_contest(member.node.account, contest_id, CELLS, _opening(world, run, member, 0))
    return contest_id, world.protocol.get_answered_opening(contest_id, MODEL)


def _record(world, run, rounds, escalator) -> spec.AuditRecord:
    """The audit as `settle` finds it, for the spec's twin (`compute_settlement`)."""
    records = []
    for index, members in enumerate(rounds):
        seats = []
        for slot in range(1, len(members) + 1):
            party = world.protocol.get_party(run.audit_id, index, slot)
            seats.append(spec.MemberRecord(party["node"], opened=party["opened"], vote=party["vote"], slashed=party["slashed"]))
        records.append(spec.RoundRecord(True, tuple(seats)))
    return spec.AuditRecord(run.worker.node.address, tuple(records), escalator=escalator, escalation_bond_wei=BOND)


def _settle_as_the_spec_says(world, run, rounds, escalator) -> spec.Settlement:
    """Settle after the dispute window; every stake moves exactly as `verillm.spec.settlement` says."""
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    stakes, pool = world.stakes(), world.protocol.jobs.call("feePoolWei")
    expected = spec.compute_settlement(_record(world, run, rounds, escalator), stakes, pool, PRESET)
    assert world.protocol.settle(world.outsider, run.audit_id).value == expected.verdict
    after = world.stakes()
    assert {a: stakes[a] - after[a] for a in stakes if stakes[a] != after[a]} == expected.slashed_wei
    return expected


# --- attack 1 -------------------------------------------------------------------------------------

def test_attack1_an_outsider_cannot_appeal_an_honest_pass(world10):
    world = world10
    worker = world.make_worker(world.nodes[0])
    run = world.start(worker, dispatcher=world.nodes[1])
    members = [world.make_member(n) for n in world.committee(run)]
    assert world.decide(run, members) == spec.PASS
    record = _record(world, run, [members], None)
    # a stranger, the worker of a PASS, a voter of the majority: none has standing
    for caller in (world.outsider, worker.node.account, members[0].node.account, world.nodes[5].account):
        assert not spec.has_escalation_standing(record, caller.address, world.nodes[1].address)
        with reverts("NoStanding"):
            world.protocol.escalate(caller, run.audit_id)
    assert world.protocol.get_audit(run.audit_id).round == 0
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    stakes = world.stakes()
    assert world.protocol.settle(world.outsider, run.audit_id).value == spec.PASS
    assert world.stakes() == stakes  # the honest PASS stands: nobody loses anything


def test_attack1_a_captured_appeal_costs_the_honest_worker_and_agrees_nothing_once_the_decider_passes_it(world15):
    # (Before the decider: the worker and each honest agree lost the penalty, the appeal's FAIL being final.)
    world = world15
    worker = world.make_worker(world.nodes[0])  # honest
    run = world.start(worker, dispatcher=world.nodes[1])
    committee = world.committee(run)
    round0 = [world.make_member(committee[0], offset=FABRICATED)] + [world.make_member(n) for n in committee[1:]]
    assert world.decide(run, round0) == spec.PASS  # the colluder's fabricated data make it dissent; two honest agrees
    attacker = round0[0].node.account
    stakes = world.stakes()
    assert spec.has_escalation_standing(_record(world, run, [round0], None), attacker.address, world.nodes[1].address)
    world.protocol.escalate(attacker, run.audit_id)  # a round-0 dissenter has standing: the appeal runs
    world.draw_round(run)
    seats = world.committee(run, 1)
    appeal = [world.make_member(n, offset=FABRICATED) for n in seats[:QUORUM]] + [world.make_member(n) for n in seats[QUORUM:]]
    assert world.decide(run, appeal, 1) == spec.FAIL  # captured: a majority of its seats vote DISAGREE over fabricated data
    held = []
    for slot in (2, 3):  # the honest round-0 agrees: their proofs published, every captured seat's "contradiction" refused
        contest_id, published = _published(world, run, attacker, slot, round0[slot - 1])
        held.append((contest_id, round0[slot - 1].node.address))
        for appeal_slot in range(1, QUORUM + 1):
            with reverts("NoFault"):
                world.protocol.adjudicate_across_rounds(attacker, run.audit_id, slot, appeal_slot, published,
                                                        _opening(world, run, appeal[appeal_slot - 1], 1), CELLS)
        assert not world.protocol.get_party(run.audit_id, 0, slot)["slashed"]
    # The appeal's FAIL contradicts round 0's PASS: it decides nothing alone. The decider (honest) passes the worker.
    decider, verdict = world.decider(run)
    assert verdict == spec.PASS
    expected = _settle_as_the_spec_says(world, run, [round0, appeal, decider], attacker.address)
    assert expected.verdict == spec.PASS
    after = world.stakes()
    honest = [worker.node.address] + [m.node.address for m in round0[1:]] + [m.node.address for m in appeal[QUORUM:]] + [m.node.address for m in decider]
    for address in honest:  # the honest worker and every honest voter lose nothing
        assert stakes[address] == after[address], address
    for member in [round0[0]] + appeal[:QUORUM]:  # the colluders: the minority penalty each
        address = member.node.address
        assert stakes[address] - after[address] == _penalty(stakes[address]), address
    assert world.protocol.get_credit(worker.node.address) >= PRESET.AUDIT_FEE_WEI  # verified: its fee
    for contest_id, member in held:  # the attacker's contests cost it their bonds: each honest member collects one
        credit = world.protocol.get_credit(member)
        world.protocol.release_bond(world.outsider, contest_id)
        assert world.protocol.get_credit(member) == credit + BOND


# --- attack 2 -------------------------------------------------------------------------------------

def test_attack2_a_captured_appeal_makes_no_honest_dissenter_a_liar_and_the_decider_takes_the_cheat_s_stake(world15):
    # The forge campaign's violation of issue 34 (docs/results/fuzz-forge-issue34-merged.json, seed
    # 5): the cheat appeals its FAIL, the captured appeal passes it. Before the decider the appeal's
    # PASS was final: the cheat kept its stake and round 0's honest majority paid the penalty.
    world = world15
    cheat = world.make_worker(world.nodes[0], offset=FABRICATED)
    run = world.start(cheat, dispatcher=world.nodes[1])
    round0 = [world.make_member(n) for n in world.committee(run)]
    assert world.decide(run, round0) == spec.FAIL  # three honest DISAGREEs catch the cheat
    stakes = world.stakes()
    world.protocol.escalate(cheat.node.account, run.audit_id)  # the worker has standing against a FAIL
    world.draw_round(run)
    seats = world.committee(run, 1)
    appeal = [world.make_member(n, offset=FABRICATED) for n in seats[:QUORUM]] + [world.make_member(n) for n in seats[QUORUM:]]
    assert world.decide(run, appeal, 1) == spec.PASS  # captured: a majority of its seats copy the cheat's data and agree
    cheat_posted = _opening(world, run, cheat, 0)
    held = []
    for slot, member in enumerate(round0, start=1):  # the cheat hunts the honest dissenters as "provable liars"
        contest_id, published = _published(world, run, cheat.node.account, slot, member)
        held.append((contest_id, member.node.address))
        with reverts("NoFault"):  # one captured round against round 0's majority convicts nobody in full
            world.protocol.adjudicate(cheat.node.account, run.audit_id, 0, slot, cheat_posted, published, only=set(CELLS))
        assert not world.protocol.get_party(run.audit_id, 0, slot)["slashed"]
    decider, verdict = world.decider(run)  # the appeal's PASS contradicts round 0's FAIL: an honest decider fails the cheat
    assert verdict == spec.FAIL
    expected = _settle_as_the_spec_says(world, run, [round0, appeal, decider], cheat.node.address)
    assert expected.verdict == spec.FAIL
    after = world.stakes()
    assert stakes[cheat.node.address] - after[cheat.node.address] == stakes[cheat.node.address] * PRESET.SLASH_FRACTION_BPS // 10_000
    for member in round0 + decider + appeal[QUORUM:]:  # every honest voter: nothing
        assert stakes[member.node.address] == after[member.node.address]
    for member in appeal[:QUORUM]:  # the appeal's colluders: the minority penalty
        assert stakes[member.node.address] - after[member.node.address] == _penalty(stakes[member.node.address])
    for contest_id, member in held:  # and the cheat's hunt cost it a bond per dissenter
        credit = world.protocol.get_credit(member)
        world.protocol.release_bond(world.outsider, contest_id)
        assert world.protocol.get_credit(member) == credit + BOND


def test_two_rounds_agreeing_still_slash_a_first_round_agree_that_vouched_for_a_cheat(world10):
    # The cross-round rule keeps its teeth where two rounds agree: round 0 fails the cheat with
    # one colluding AGREE in its minority, the cheat appeals, the honest appeal fails it again.
    world = world10
    cheat = world.make_worker(world.nodes[0], offset=FABRICATED)
    run = world.start(cheat, dispatcher=world.nodes[1])
    committee = world.committee(run)
    round0 = [world.make_member(committee[0], offset=FABRICATED)] + [world.make_member(n) for n in committee[1:]]
    assert world.decide(run, round0) == spec.FAIL  # the colluder copies the cheat's data and agrees; two honest DISAGREEs
    world.protocol.escalate(cheat.node.account, run.audit_id)
    world.draw_round(run)
    appeal = [world.make_member(n) for n in world.committee(run, 1)]
    assert world.decide(run, appeal, 1) == spec.FAIL
    hunter = appeal[0].node.account
    contest_id, published = _published(world, run, hunter, 1, round0[0])
    stake = world.stakes()[round0[0].node.address]
    for appeal_slot in range(1, QUORUM + 1):
        world.protocol.adjudicate_across_rounds(hunter, run.audit_id, 1, appeal_slot, published, _opening(world, run, appeal[appeal_slot - 1], 1), CELLS)
    assert world.protocol.get_party(run.audit_id, 0, 1)["slashed"]
    assert world.stakes()[round0[0].node.address] == stake - stake * PRESET.SLASH_FRACTION_BPS // 10_000
    stakes = world.stakes()
    expected = _settle_as_the_spec_says(world, run, [round0, appeal], cheat.node.address)
    assert expected.slashed_wei[cheat.node.address] == stakes[cheat.node.address] * PRESET.SLASH_FRACTION_BPS // 10_000  # two rounds: the slash


# --- honest work gets verified ---------------------------------------------------------------------

def test_a_tie_from_a_voided_lazy_agree_goes_to_a_new_round_and_the_false_disagree_pays(world10):
    # The devnet's two cheaters in one committee: a lazy member agrees over data it never computed
    # (a proven lie, voided), an int8 member's false DISAGREE then ties with the honest AGREE.
    world = world10
    worker = world.make_worker(world.nodes[0])
    run = world.start(worker, dispatcher=world.nodes[1])
    committee = world.committee(run)
    round0 = [world.make_member(committee[0], offset=FABRICATED), world.make_member(committee[1], offset=FABRICATED),
              world.make_member(committee[2])]
    assert world.decide(run, round0, votes=lambda slot: slot != 1) == spec.PASS  # lazy agree, false disagree, honest agree
    world.protocol.adjudicate(world.outsider, run.audit_id, 0, 1, _opening(world, run, worker, 0), _opening(world, run, round0[0], 0))
    assert world.protocol.jobs.call("currentVerdict", run.audit_id) == spec.TIE  # the lazy agree voided
    record = _record(world, run, [round0], None)
    assert spec.has_escalation_standing(record, worker.node.address, world.nodes[1].address)
    world.protocol.escalate(worker.node.account, run.audit_id)  # what the worker's node does on a TIE
    world.draw_round(run)
    appeal = [world.make_member(n) for n in world.committee(run, 1)]
    assert world.decide(run, appeal, 1) == spec.PASS
    stakes, credit = world.stakes(), world.protocol.get_credit(worker.node.address)
    expected = _settle_as_the_spec_says(world, run, [round0, appeal], worker.node.address)
    assert expected.verdict == spec.PASS
    assert set(expected.slashed_wei) == {round0[1].node.address}  # the false DISAGREE: the minority penalty
    assert expected.slashed_wei[round0[1].node.address] == _penalty(stakes[round0[1].node.address])
    # the worker: its bond back (a TIE became decisive) and its fee
    assert world.protocol.get_credit(worker.node.address) - credit == expected.credits_wei[worker.node.address] >= BOND
