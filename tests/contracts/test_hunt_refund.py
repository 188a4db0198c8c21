"""The hunter of a provable liar is made whole (docs/protocol.md §12 "Accountable votes"): after an
appeal passes a framed worker, whoever contested a round-0 liar gets its bond back and the slash
reward once the liar is adjudicated. Each attack on the refund is replayed as the attacker would:
claiming it twice, for a contest that proved another party, for an honest member, by
front-running the hunter's adjudication, or by a colluder contesting first."""

import pytest

from helpers.chain import reverts
from verillm.chain import RpcChain
from verillm.spec import settlement as spec
from verillm.spec.audit import compute_appeal_cells
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.commitment import compute_opening

from helpers.contracts import LAYERS, MODEL, OUTPUT_TOKENS, PRESET, PROMPT_LEN, World

BOND = PRESET.DISPUTE_BOND_WEI
CELLS = sorted(compute_appeal_cells(PROMPT_LEN, OUTPUT_TOKENS, LAYERS))


@pytest.fixture
def framed(world_base):
    """Round 0: members 1 and 2 commit fabricated data and vote DISAGREE on an honest worker,
    member 3 is honest; the worker appeals and the appeal round passes it."""
    snapshot = world_base.chain.snapshot()
    world = World(RpcChain(world_base.chain.url), PRESET, extra_nodes=4)
    worker = world.make_worker(world.nodes[0])
    run = world.start(worker, dispatcher=world.nodes[1])
    committee = world.committee(run)
    round0 = [world.make_member(n, offset=0.3) for n in committee[:2]] + [world.make_member(committee[2])]
    world.post_members(run, round0)
    world.open_worker(run)
    for slot in range(3):
        world.open_member(run, slot, vote=slot == 2)
    assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.FAIL
    world.protocol.escalate(worker.node.account, run.audit_id)
    world.draw_round(run)
    world.post_members(run, [world.make_member(n) for n in world.committee(run, 1)], 1)
    world.open_worker(run)
    for slot in range(len(run.members)):
        world.open_member(run, slot)
    assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.PASS
    yield world, run, worker, round0
    world_base.chain.revert(snapshot)


def _opening(world, run, party):
    seed = bytes(world.protocol.jobs.call("getRound", run.audit_id, 0)[4])
    challenge = compute_challenge(seed, PROMPT_LEN, OUTPUT_TOKENS, LAYERS, PRESET.CHALLENGE_POSITIONS)
    return compute_opening(party.trace, party.commitment, compute_opened_cells(challenge, party.trace.num_positions))


def _contest_answered(world, run, hunter, slot: int, party) -> int:
    contest_id = world.protocol.contest(hunter, run.audit_id, 0, slot, CELLS).value
    world.protocol.answer_contest(party.node.account, contest_id, CELLS, _opening(world, run, party))
    return contest_id


def _adjudicate(world, run, worker, sender, slot: int, contest_id: int):
    published = world.protocol.get_answered_opening(contest_id, MODEL)
    return world.protocol.adjudicate(sender, run.audit_id, 0, slot, _opening(world, run, worker), published, only=set(CELLS))


def _holds_only_open_bonds(world) -> bool:
    """Disputes holds exactly the bonds of its open contests: refunds come out of the pool."""
    disputes = world.protocol.disputes
    contests = [disputes.call("getContest", i) for i in range(disputes.call("contestCount"))]
    return world.chain.w3.eth.get_balance(disputes.address) == sum(c[6] for c in contests if c[3])


def _stake(world, address: str) -> int:
    return world.protocol.get_node(address)["stake_wei"]


def test_the_hunter_gets_its_bond_back_and_the_reward_even_when_front_run(framed):
    world, run, worker, round0 = framed
    hunter, liar = worker.node.account, round0[0]
    credit = world.protocol.get_credit(hunter.address)
    stake = _stake(world, liar.node.address)
    contest_id = _contest_answered(world, run, hunter, 1, liar)
    assert world.protocol.get_credit(hunter.address) == credit  # the bond went to the liar, which answered
    # A front-runner copies the hunter's adjudication (the proofs are public once answered): the
    # liar is slashed, but the reward and the refund go to the hunter whose contest published them.
    front_runner = world.outsider
    before = world.protocol.get_credit(front_runner.address)
    _adjudicate(world, run, worker, front_runner, 1, contest_id)
    reward = stake * PRESET.SLASH_FRACTION_BPS // 10_000 * PRESET.SLASH_REWARD_BPS // 10_000
    assert world.protocol.get_credit(hunter.address) == credit + BOND + reward
    assert world.protocol.get_credit(front_runner.address) == before
    assert world.protocol.disputes.call("getContest", contest_id)[9] is True  # refunded


def test_a_refund_is_paid_once(framed):
    world, run, worker, round0 = framed
    hunter = worker.node.account
    contest_id = _contest_answered(world, run, hunter, 1, round0[0])
    _adjudicate(world, run, worker, hunter, 1, contest_id)
    paid = world.protocol.get_credit(hunter.address)
    with reverts("NotRefundable"):
        world.protocol.refund_contest(hunter, contest_id)
    with reverts("AlreadyHandled"):
        _adjudicate(world, run, worker, hunter, 1, contest_id)
    with reverts("AlreadySlashed"):  # no fresh contest against a slashed liar to refund again
        world.protocol.contest(hunter, run.audit_id, 0, 1, CELLS)
    assert world.protocol.get_credit(hunter.address) == paid


def test_no_refund_for_an_honest_member_or_for_a_contest_that_proved_another_party(framed):
    world, run, worker, round0 = framed
    hunter = worker.node.account
    honest = _contest_answered(world, run, hunter, 3, round0[2])
    other = _contest_answered(world, run, hunter, 2, round0[1])
    with reverts("NoFault"):  # the honest member's data pass the token cells: no liar, no refund
        _adjudicate(world, run, worker, hunter, 3, honest)
    with reverts("NotRefundable"):
        world.protocol.refund_contest(hunter, honest)
    # Liar 1 is adjudicated with proofs from outside any contest (its own opening): no contest
    # against it was answered, so nobody's bond comes back — the contest on liar 2 included.
    world.protocol.adjudicate(hunter, run.audit_id, 0, 1, _opening(world, run, worker), _opening(world, run, round0[0]), only=set(CELLS))
    with reverts("NotRefundable"):
        world.protocol.refund_contest(hunter, other)
    credit = world.protocol.get_credit(hunter.address)
    _adjudicate(world, run, worker, world.outsider, 2, other)  # liar 2 proven: now its contest is refunded
    assert world.protocol.get_credit(hunter.address) > credit + BOND


def test_a_colluder_that_contests_first_takes_the_reward_but_the_honest_hunter_is_refunded(framed):
    # The second liar contests its partner first (its bond goes to its partner: nothing lost to
    # the coalition) to take the reward of the slash; the honest hunter's later contest is still
    # refunded, out of the liar's stake.
    world, run, worker, round0 = framed
    colluder, hunter = round0[1].node.account, worker.node.account
    first = _contest_answered(world, run, colluder, 1, round0[0])
    credit = world.protocol.get_credit(hunter.address)
    second = _contest_answered(world, run, hunter, 1, round0[0])
    _adjudicate(world, run, worker, hunter, 1, second)
    world.protocol.refund_contest(world.outsider, second)  # anyone may: the challenger is paid
    assert world.protocol.get_credit(hunter.address) == credit + BOND  # the bond it paid, back
    with reverts("NotRefundable"):
        world.protocol.refund_contest(world.outsider, first)
    assert _holds_only_open_bonds(world)


def test_a_contest_answered_after_its_party_was_proven_a_liar_returns_the_bond(framed):
    world, run, worker, round0 = framed
    hunter, late = worker.node.account, world.nodes[1].account
    contest_id = _contest_answered(world, run, hunter, 1, round0[0])
    pending = world.protocol.contest(late, run.audit_id, 0, 1, CELLS).value
    _adjudicate(world, run, worker, hunter, 1, contest_id)
    credit = world.protocol.get_credit(late.address)
    world.protocol.answer_contest(round0[0].node.account, pending, CELLS, _opening(world, run, round0[0]))
    assert world.protocol.get_credit(late.address) == credit + BOND  # moot: nothing to a slashed liar


def test_an_answered_contest_is_refunded_when_its_liar_loses_another_contest(framed):
    # The liar answers the hunter's contest (taking its bond), then lets a second contest lapse:
    # slashed by the lost contest, not by an adjudication. The hunter's answered contest is still
    # refunded out of its stake.
    world, run, worker, round0 = framed
    hunter, other = worker.node.account, world.nodes[1].account
    answered = _contest_answered(world, run, hunter, 1, round0[0])
    lapsed = world.protocol.contest(other, run.audit_id, 0, 1, CELLS).value
    world.chain.mine(PRESET.PROOF_WINDOW_BLOCKS + 1)
    world.protocol.resolve_contest(world.outsider, lapsed)
    credit = world.protocol.get_credit(hunter.address)
    world.protocol.refund_contest(world.outsider, answered)
    assert world.protocol.get_credit(hunter.address) == credit + BOND
    assert _holds_only_open_bonds(world)
