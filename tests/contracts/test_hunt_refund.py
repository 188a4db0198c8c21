"""The hunter of a provable liar is made whole (docs/protocol.md §12 "Accountable votes"): whoever
contested a round-0 liar gets its bond back and the slash reward once the liar is adjudicated.
(Since issue 34 the liars here lie against their own committed data — an AGREE over fabricated
leaves, `adjudicate` within the round —: the cross-round clause needs two rounds agreeing, and
the appeal the dispatcher asks for only keeps round 0's dispute window open through its own.) A member's answered contest holds its bond (in Jobs' pool)
until the member is proven a liar (back to the challenger) or can no longer be (to the member).
Each attack on the refund is replayed as the attacker would: claiming it twice, for a contest
that proved another party, for an honest member, by front-running the hunter's adjudication, by
a colluder contesting first, or by a coalition contesting its own liar to win its stake back."""

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


@pytest.fixture(scope="module")
def framed_base(world_base):
    """Round 0: members 1 and 2 commit fabricated data and vote AGREE on an honest worker (a lie
    their own data prove), member 3 is honest; the dispatcher appeals (standing) and the appeal
    round passes the worker. Built once per module; each test starts from it (`framed`)."""
    snapshot = world_base.chain.snapshot()
    world = World(RpcChain(world_base.chain.url), PRESET, extra_nodes=4)
    worker, run, round0 = world._round0_with_two_fabricated_members(0.0, lambda slot: True, spec.PASS)
    world.appeal(run, world.nodes[1])
    assert world.protocol.jobs.call("currentVerdict", run.audit_id) == spec.PASS
    yield world, run, worker, round0
    world_base.chain.revert(snapshot)


@pytest.fixture
def framed(framed_base):
    """`framed_base` as it was built, whatever the test before did to it."""
    chain = framed_base[0].chain
    snapshot = chain.snapshot()
    yield framed_base
    chain.set_automine(True)
    chain.revert(snapshot)


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
    """Disputes holds exactly the bonds of its open contests (held bonds wait in Jobs' pool)."""
    disputes = world.protocol.disputes
    contests = [disputes.call("getContest", i) for i in range(disputes.call("contestCount"))]
    return world.chain.w3.eth.get_balance(disputes.address) == sum(c[6] for c in contests if c[3])


def _stake(world, address: str) -> int:
    return world.protocol.get_node(address)["stake_wei"]


def test_the_hunter_gets_its_bond_back_and_the_reward_even_when_front_run(framed):
    world, run, worker, round0 = framed
    hunter, liar = worker.node.account, round0[0]
    credit, liar_credit = world.protocol.get_credit(hunter.address), world.protocol.get_credit(liar.node.address)
    stake = _stake(world, liar.node.address)
    contest_id = _contest_answered(world, run, hunter, 1, round0[0])
    assert world.protocol.get_credit(liar.node.address) == liar_credit  # held: the liar never gets the hunter's bond
    # A front-runner copies the hunter's adjudication (the proofs are public once answered): the
    # liar is slashed, but the reward and the bond go to the hunter whose contest published them.
    front_runner = world.outsider
    before = world.protocol.get_credit(front_runner.address)
    _adjudicate(world, run, worker, front_runner, 1, contest_id)
    reward = stake * PRESET.SLASH_FRACTION_BPS // 10_000 * PRESET.SLASH_REWARD_BPS // 10_000
    assert world.protocol.get_credit(hunter.address) == credit + BOND + reward
    assert world.protocol.get_credit(front_runner.address) == before
    assert world.protocol.disputes.call("getContest", contest_id)[9] is True  # released
    assert _holds_only_open_bonds(world)


def test_a_bond_is_paid_once(framed):
    world, run, worker, round0 = framed
    hunter = worker.node.account
    contest_id = _contest_answered(world, run, hunter, 1, round0[0])
    _adjudicate(world, run, worker, hunter, 1, contest_id)
    paid = world.protocol.get_credit(hunter.address)
    with reverts("NotHeld"):
        world.protocol.release_bond(hunter, contest_id)
    with reverts("AlreadyHandled"):
        _adjudicate(world, run, worker, hunter, 1, contest_id)
    with reverts("AlreadySlashed"):  # no fresh contest against a slashed liar
        world.protocol.contest(hunter, run.audit_id, 0, 1, CELLS)
    assert world.protocol.get_credit(hunter.address) == paid


def test_an_honest_member_gets_the_bond_once_it_can_no_longer_be_proven_a_liar(framed):
    world, run, worker, round0 = framed
    hunter, honest = worker.node.account, round0[2]
    contest_id = _contest_answered(world, run, hunter, 3, honest)
    with reverts("NoFault"):  # its data pass the token cells: not a liar
        _adjudicate(world, run, worker, hunter, 3, contest_id)
    with reverts("TooEarly"):  # nobody takes the bond while the member may still be proven a liar
        world.protocol.release_bond(hunter, contest_id)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    credit, hunter_credit = world.protocol.get_credit(honest.node.address), world.protocol.get_credit(hunter.address)
    print(f"\nreleaseBond (to the member): {world.protocol.release_bond(world.outsider, contest_id).gas_used} gas")  # anyone may
    assert world.protocol.get_credit(honest.node.address) == credit + BOND
    assert world.protocol.get_credit(hunter.address) == hunter_credit
    assert world.protocol.settle(world.outsider, run.audit_id).value == spec.PASS


def test_a_contest_that_proved_another_member_is_not_refunded_by_this_ones_slash(framed):
    world, run, worker, round0 = framed
    hunter = worker.node.account
    other = _contest_answered(world, run, hunter, 2, round0[1])
    # Liar 1 is adjudicated with proofs from outside any contest (its own opening): the contest
    # on liar 2 stays held — liar 2 is not proven yet.
    world.protocol.adjudicate(hunter, run.audit_id, 0, 1, _opening(world, run, worker), _opening(world, run, round0[0]), only=set(CELLS))
    with reverts("TooEarly"):
        world.protocol.release_bond(hunter, other)
    credit = world.protocol.get_credit(hunter.address)
    _adjudicate(world, run, worker, world.outsider, 2, other)  # liar 2 proven: its contest's bond comes back with the reward
    assert world.protocol.get_credit(hunter.address) > credit + BOND


def test_a_colluder_that_contests_first_takes_the_reward_but_the_honest_hunter_gets_its_bond(framed):
    # The second liar contests its partner first, to take the reward of the slash; the honest
    # hunter's later contest gets its own held bond back.
    world, run, worker, round0 = framed
    colluder, hunter = round0[1].node.account, worker.node.account
    first = _contest_answered(world, run, colluder, 1, round0[0])
    credit = world.protocol.get_credit(hunter.address)
    second = _contest_answered(world, run, hunter, 1, round0[0])
    _adjudicate(world, run, worker, hunter, 1, second)
    print(f"\nreleaseBond (to the challenger): {world.protocol.release_bond(world.outsider, second).gas_used} gas")  # anyone may
    assert world.protocol.get_credit(hunter.address) == credit + BOND  # the bond it paid, back
    with reverts("NotHeld"):
        world.protocol.release_bond(world.outsider, first)
    assert _holds_only_open_bonds(world)


def test_a_coalition_contesting_its_own_liar_wins_back_nothing_but_the_reward(framed):
    # Three answered contests of the coalition against its own liar, then its adjudication: had
    # refunds come out of the liar's stake, each would win back a bond of it. The coalition gets
    # its own bonds back and the reward, as a self-adjudication always could: nothing more.
    world, run, worker, round0 = framed
    colluder, liar = round0[1], round0[0]
    stake = _stake(world, liar.node.address)
    before = {a: world.protocol.get_credit(a) for a in (colluder.node.address, liar.node.address)}
    own = [_contest_answered(world, run, colluder.node.account, 1, liar) for _ in range(3)]
    _adjudicate(world, run, worker, colluder.node.account, 1, own[0])
    for contest_id in own[1:]:
        world.protocol.release_bond(world.outsider, contest_id)
    reward = stake * PRESET.SLASH_FRACTION_BPS // 10_000 * PRESET.SLASH_REWARD_BPS // 10_000
    gained = sum(world.protocol.get_credit(a) - c for a, c in before.items())
    assert gained == 3 * BOND + reward  # 3 bonds paid in, 3 back: the coalition is up the reward only
    assert _stake(world, liar.node.address) == stake * (10_000 - PRESET.SLASH_FRACTION_BPS) // 10_000


def test_a_contest_answered_after_its_party_was_proven_a_liar_returns_the_bond(framed):
    world, run, worker, round0 = framed
    hunter, late = worker.node.account, world.nodes[1].account
    contest_id = _contest_answered(world, run, hunter, 1, round0[0])
    pending = world.protocol.contest(late, run.audit_id, 0, 1, CELLS).value
    _adjudicate(world, run, worker, hunter, 1, contest_id)
    credit = world.protocol.get_credit(late.address)
    world.protocol.answer_contest(round0[0].node.account, pending, CELLS, _opening(world, run, round0[0]))
    assert world.protocol.get_credit(late.address) == credit + BOND  # moot: nothing to a slashed liar


def test_an_answered_contest_goes_back_when_its_liar_loses_another_contest(framed):
    # The liar answers the hunter's contest, then lets a second contest lapse: slashed by the
    # lost contest, not by an adjudication. The hunter's held bond still comes back.
    world, run, worker, round0 = framed
    hunter, other = worker.node.account, world.nodes[1].account
    answered = _contest_answered(world, run, hunter, 1, round0[0])
    lapsed = world.protocol.contest(other, run.audit_id, 0, 1, CELLS).value
    world.chain.mine(PRESET.PROOF_WINDOW_BLOCKS + 1)
    world.protocol.resolve_contest(world.outsider, lapsed)
    credit = world.protocol.get_credit(hunter.address)
    world.protocol.release_bond(world.outsider, answered)
    assert world.protocol.get_credit(hunter.address) == credit + BOND
    assert _holds_only_open_bonds(world)
