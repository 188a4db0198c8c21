"""A first-round minority "agree" on a cheat that the appeal convicts again is a provable liar
(docs/protocol.md §12 "Accountable votes", `Disputes.adjudicateAcrossRounds`).

Round 0: a cheating worker's colluder commits its fabricated data and votes AGREE, outvoted (its
partner hedges with a DISAGREE, the honest third disagrees): FAIL. The dispatcher appeals (it has
standing); the honest appeal round decides FAIL again: two rounds against the agree. Its data
agree with the worker's, so `adjudicate` (member against worker) finds no fault; each DISAGREE
voter of the appeal proves its own token cells, the colluder's (a contest answer publishes them)
fail against them, and once a majority of the appeal's seats (3 of 5 on MINIMAL) contradicted it
the colluder is slashed in full. Each adversary is replayed as it would move: a front-runner, a
coalition contesting its own member first, an honest dissenter, proofs before the appeal decided,
a second slash, a slashed reference, one colluding appeal member that fabricates a reference
against an honest agree. After an appeal that overturned round 0's PASS (issue 34, attack 1) the
rule slashes nobody: an appeal held by colluders no longer slashes an honest round-0 agree, and a
colluding majority agree of round 0 keeps the minority penalty of settlement."""

import pytest

from helpers.chain import reverts
from verillm.chain import RpcChain
from verillm.spec import settlement as spec
from verillm.spec.audit import compute_appeal_cells
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.commitment import compute_opening
from verillm.spec.encoding import encode
from verillm.verifier.chain_audit import ChainAuditor

from helpers.contracts import LAYERS, MODEL, OUTPUT_TOKENS, PRESET, PROMPT_LEN, World

BOND = PRESET.DISPUTE_BOND_WEI
QUORUM = PRESET.ESCALATION_COMMITTEE_SIZE // 2 + 1  # appeal seats whose data must contradict an agree
CELLS = sorted(compute_appeal_cells(PROMPT_LEN, OUTPUT_TOKENS, LAYERS))


@pytest.fixture(scope="module")
def world10_base(world_base):
    """Ten registered nodes: round 0 (3) and the appeal (5) are drawn apart from worker and dispatcher."""
    snapshot = world_base.chain.snapshot()
    yield World(RpcChain(world_base.chain.url), PRESET, extra_nodes=4)
    world_base.chain.revert(snapshot)


@pytest.fixture
def world10(world10_base):
    """`world10_base` as it was registered, whatever the test before did to it."""
    snapshot = world10_base.chain.snapshot()
    yield world10_base
    world10_base.chain.set_automine(True)
    world10_base.chain.revert(snapshot)


@pytest.fixture
def convicted(world10):
    """Round 0 failed the cheat over its colluder's agree; the dispatcher's appeal decided FAIL."""
    world = world10
    worker, run, round0 = world.start_vouched_outvoted()
    appeal = world.appeal(run, world.nodes[1])
    assert world.protocol.jobs.call("currentVerdict", run.audit_id) == spec.FAIL
    return world, run, worker, round0, appeal


def _round0_opening(world, run, party):
    seed = bytes(world.protocol.jobs.call("getRound", run.audit_id, 0)[4])
    challenge = compute_challenge(seed, PROMPT_LEN, OUTPUT_TOKENS, LAYERS, PRESET.CHALLENGE_POSITIONS)
    return compute_opening(party.trace, party.commitment, compute_opened_cells(challenge, party.trace.num_positions))


def _contest_answered(world, run, hunter, slot: int, party) -> int:
    contest_id = world.protocol.contest(hunter, run.audit_id, 0, slot, CELLS).value
    world.protocol.answer_contest(party.node.account, contest_id, CELLS, _round0_opening(world, run, party))
    return contest_id


def _cross(world, run, sender, slot: int, contest_id: int, appeal, appeal_slot: int = 1):
    """Adjudicate round-0 ``slot`` (its leaves as its contest answer published them) against appeal
    member ``appeal_slot``'s own opening."""
    member = world.protocol.get_answered_opening(contest_id, MODEL)
    return world.protocol.adjudicate_across_rounds(sender, run.audit_id, slot, appeal_slot, member,
                                                   world.opening(run, appeal[appeal_slot - 1]), CELLS)


def _cross_quorum(world, run, sender, slot: int, contest_id: int, appeal, last_sender=None):
    """QUORUM appeal members' contradictions of round-0 ``slot``: no slash before the last one."""
    for j in range(1, QUORUM + 1):
        assert not world.protocol.get_party(run.audit_id, 0, slot)["slashed"]
        tx = _cross(world, run, last_sender if j == QUORUM and last_sender else sender, slot, contest_id, appeal, appeal_slot=j)
    return tx


def _stake(world, node) -> int:
    return world.protocol.get_node(node.address)["stake_wei"]


def _slash(stake: int) -> tuple[int, int]:
    slashed = stake * PRESET.SLASH_FRACTION_BPS // 10_000
    return slashed, slashed * PRESET.SLASH_REWARD_BPS // 10_000


def test_a_colluding_agree_on_a_cheat_is_slashed_once_the_appeal_fails(convicted):
    world, run, worker, round0, appeal = convicted
    hunter = appeal[0].node.account  # a DISAGREE voter of the appeal's majority
    assert world.protocol.get_party(run.audit_id, 1, 1)["vote"] == spec.DISAGREE
    credit = world.protocol.get_credit(hunter.address)
    for slot, colluder in ((1, round0[0]),):
        contest_id = _contest_answered(world, run, hunter, slot, colluder)
        with reverts("NoFault"):  # what existed: against the worker its data agree, so no fault
            world.protocol.adjudicate(hunter, run.audit_id, 0, slot, _round0_opening(world, run, worker),
                                      world.protocol.get_answered_opening(contest_id, MODEL), only=set(CELLS))
        stake = _stake(world, colluder.node)
        counted = _cross(world, run, hunter, slot, contest_id, appeal, appeal_slot=1)
        assert _stake(world, colluder.node) == stake  # one appeal member's data are not enough
        with reverts("AlreadyCounted"):
            _cross(world, run, hunter, slot, contest_id, appeal, appeal_slot=1)
        for j in range(2, QUORUM + 1):
            tx = _cross(world, run, hunter, slot, contest_id, appeal, appeal_slot=j)
        print(f"\nadjudicateAcrossRounds ({len(CELLS)} token cells): {counted.gas_used} gas counted, {tx.gas_used} gas the slash")
        assert _stake(world, colluder.node) == stake - _slash(stake)[0]
        assert world.protocol.get_party(run.audit_id, 0, slot)["slashed"]
        credit += BOND + _slash(stake)[1]  # the hunter is made whole: its held bond back, and the reward
        assert world.protocol.get_credit(hunter.address) == credit
    contest_id = _contest_answered(world, run, hunter, 2, round0[1])
    with reverts("NoFault"):  # the hedging partner voted DISAGREE, which the appeal upheld: agrees only
        _cross(world, run, hunter, 2, contest_id, appeal)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    assert world.protocol.settle(world.outsider, run.audit_id).value == spec.FAIL
    # `verillm audit chain` re-derives the cross-round slashes from calldata and finds nothing inconsistent
    findings = ChainAuditor(world.chain, world.protocol.deployment).run()
    mine = [f for f in findings if f.severity != "ok" and f.subject.startswith(f"audit {run.audit_id}")]
    # the one note: the hedging partner's DISAGREE over data that pass (no lie anyone can prove)
    assert [f.severity for f in mine] == ["note"] and round0[1].node.address in mine[0].detail, mine
    assert sum(1 for f in findings if "adjudication" in f.subject and f.subject.startswith(f"audit {run.audit_id}")) == 1


def test_a_front_runner_gets_nothing_and_a_second_slash_is_refused(convicted):
    world, run, _, round0, appeal = convicted
    hunter, front_runner = appeal[0].node.account, world.outsider
    contest_id = _contest_answered(world, run, hunter, 1, round0[0])
    credit, before = world.protocol.get_credit(hunter.address), world.protocol.get_credit(front_runner.address)
    stake = _stake(world, round0[0].node)
    _cross_quorum(world, run, hunter, 1, contest_id, appeal, last_sender=front_runner)  # copies the proofs the answer made public
    assert world.protocol.get_credit(hunter.address) == credit + BOND + _slash(stake)[1]
    assert world.protocol.get_credit(front_runner.address) == before
    with reverts("AlreadySlashed"):  # a member is slashed once
        _cross(world, run, hunter, 1, contest_id, appeal, appeal_slot=QUORUM + 1)


def test_a_coalition_adjudicating_its_own_member_wins_back_only_the_reward(convicted):
    world, run, _, round0, appeal = convicted
    colluder, hunter = round0[1].node.account, appeal[0].node.account
    first = _contest_answered(world, run, colluder, 1, round0[0])  # the partner contests first, for the reward
    second = _contest_answered(world, run, hunter, 1, round0[0])
    stake, coalition = _stake(world, round0[0].node), world.protocol.get_credit(colluder.address)
    hunter_credit = world.protocol.get_credit(hunter.address)
    _cross_quorum(world, run, hunter, 1, second, appeal)
    slashed, reward = _slash(stake)
    assert world.protocol.get_credit(colluder.address) == coalition + BOND + reward  # 10% back: the coalition loses 90%
    assert slashed - reward == slashed * 9 // 10
    world.protocol.release_bond(world.outsider, second)
    assert world.protocol.get_credit(hunter.address) == hunter_credit + BOND  # the honest hunter's bond, back
    with reverts("NotHeld"):
        world.protocol.release_bond(world.outsider, first)


def test_an_honest_dissenter_of_round_zero_is_never_slashed_across_rounds(world10):
    # Even against a reference whose data differ from its own (an appeal held by colluders): a
    # disagree that the appeal upholds is no lie, and the rule judges agrees only.
    world = world10
    worker, run, round0 = world.start_vouched_outvoted()
    appeal = world.appeal(run, world.nodes[1], offset=0.9)  # every appeal member fabricates, disagrees
    assert world.protocol.jobs.call("currentVerdict", run.audit_id) == spec.FAIL
    contest_id = _contest_answered(world, run, worker.node.account, 3, round0[2])
    with reverts("NoFault"):
        _cross(world, run, worker.node.account, 3, contest_id, appeal)


def test_no_slash_before_the_appeal_decides_nor_after_it_passes_nor_against_an_agree(world10):
    world = world10
    worker, run, round0 = world.start_vouched_outvoted()
    hunter = world.nodes[1].account
    contest_id = _contest_answered(world, run, hunter, 1, round0[0])  # round 0 is still in its dispute window
    member = world.protocol.get_answered_opening(contest_id, MODEL)
    own = _round0_opening(world, run, round0[2])
    with reverts("NoFault"):  # no appeal at all: the honest member's proven data contradict nothing yet
        world.protocol.adjudicate_across_rounds(hunter, run.audit_id, 1, 3, member, own, CELLS)
    appeal = world.appeal(run, world.nodes[1], finalize=False)  # drawn, receipts in, nobody opened
    with reverts("NoFault"):
        world.protocol.adjudicate_across_rounds(hunter, run.audit_id, 1, 1, member, world.opening(run, appeal[0]), CELLS)
    world.open_worker(run)
    world.vote_members(run)  # every appeal member seals, then opens
    with reverts("NoFault"):  # opened and voted, not decided
        world.protocol.adjudicate_across_rounds(hunter, run.audit_id, 1, 1, member, world.opening(run, appeal[0]), CELLS)
    world.protocol.finalize(world.outsider, run.audit_id)
    with reverts("InvalidMerkleProof"):  # decided FAIL, but a round-0 partner's leaves cannot stand in for an appeal member's
        world.protocol.adjudicate_across_rounds(hunter, run.audit_id, 1, 2, member, _round0_opening(world, run, round0[1]), CELLS)
    world.protocol.adjudicate_across_rounds(hunter, run.audit_id, 1, 2, member, world.opening(run, appeal[1]), CELLS)  # counted


def test_a_passing_appeal_contradicts_no_agree(world10):
    world = world10
    worker = world.make_worker(world.nodes[0])  # honest worker, honest round 0 agrees
    run = world.start(worker, dispatcher=world.nodes[1])
    round0 = [world.make_member(n) for n in world.committee(run)]
    world.post_members(run, round0)
    world.open_worker(run)
    world.vote_members(run)
    world.protocol.finalize(world.outsider, run.audit_id)
    appeal = world.appeal(run, world.nodes[1])
    assert world.protocol.jobs.call("currentVerdict", run.audit_id) == spec.PASS
    contest_id = _contest_answered(world, run, world.nodes[1].account, 1, round0[0])
    with reverts("NoFault"):
        _cross(world, run, world.nodes[1].account, 1, contest_id, appeal)


def test_cells_must_be_proven_sorted_token_cells_and_in_the_window(convicted):
    world, run, _, round0, appeal = convicted
    hunter = appeal[0].node.account
    contest_id = _contest_answered(world, run, hunter, 1, round0[0])
    member = world.protocol.get_answered_opening(contest_id, MODEL)
    mine = world.opening(run, appeal[0])
    other = [c for c in {(i.leaf.position, i.leaf.layer) for i in mine.leaves} & {(i.leaf.position, i.leaf.layer) for i in member.leaves}
             if c not in CELLS]
    with reverts("InvalidMerkleProof"):  # the round-0 member's leaves against the appeal member's root
        world.protocol.adjudicate_across_rounds(hunter, run.audit_id, 1, 1, mine, member, CELLS)
    protocol = world.protocol
    if other:  # a challenged cell of an earlier layer is not a token cell every round checks
        with reverts("NotChallenged"):
            _send_cells(protocol, hunter, run, member, mine, [other[0]])
    with reverts("BadCells"):
        _send_cells(protocol, hunter, run, member, mine, [CELLS[1], CELLS[0]])
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    with reverts("WindowClosed"):
        _cross(world, run, hunter, 1, contest_id, appeal)


def _send_cells(protocol, sender, run, member, appeal_opening, cells):
    """adjudicateAcrossRounds with the cells in the order given (the binding sorts them)."""
    m = {(i.leaf.position, i.leaf.layer): i for i in member.leaves}
    a = {(i.leaf.position, i.leaf.layer): i for i in appeal_opening.leaves}
    pairs = [(encode(a[c].leaf), list(a[c].proof.siblings), encode(m[c].leaf), list(m[c].proof.siblings)) for c in cells]
    return protocol._send(protocol.disputes, "adjudicateAcrossRounds", run.audit_id, 1, 1, pairs, sender=sender)


def test_a_slashed_appeal_member_contradicts_nobody(convicted):
    world, run, worker, round0, appeal = convicted
    hunter = appeal[1].node.account
    lost = world.protocol.contest(worker.node.account, run.audit_id, 1, 1, CELLS).value  # appeal member 1 never answers
    contest_id = _contest_answered(world, run, hunter, 1, round0[0])
    for j in range(2, QUORUM + 1):  # the other disagrees of the majority count meanwhile
        _cross(world, run, hunter, 1, contest_id, appeal, appeal_slot=j)
    world.chain.mine(world.protocol.disputes.call("getContest", lost)[5] + 1 - world.chain.get_block_number())  # past its proof deadline
    world.protocol.resolve_contest(world.outsider, lost)
    with reverts("AlreadySlashed"):
        _cross(world, run, hunter, 1, contest_id, appeal, appeal_slot=1)
    assert not world.protocol.get_party(run.audit_id, 0, 1)["slashed"]
    _cross(world, run, hunter, 1, contest_id, appeal, appeal_slot=QUORUM + 1)
    assert world.protocol.get_party(run.audit_id, 0, 1)["slashed"]


def test_an_appeal_held_by_colluders_no_longer_slashes_an_honest_agree(world10):
    # What was the residual (issue 34, attack 1): colluders holding the appeal (P = tail(5, q) on
    # MINIMAL, tail(7, q) on MAINNET: 2.7e-3 at q = 10%) convicted an honest worker and, with
    # their fabricated leaves as the reference, slashed its honest round-0 agrees in full. One
    # round against another slashes nobody in full now: every quorum seat's count is refused.
    world = world10
    worker = world.make_worker(world.nodes[0])
    run = world.start(worker, dispatcher=world.nodes[1])
    round0 = [world.make_member(n) for n in world.committee(run)]
    assert world.decide(run, round0) == spec.PASS
    appeal = world.appeal(run, world.nodes[1], offset=0.9)  # the dispatcher (standing) escalates the honest PASS
    assert world.protocol.jobs.call("currentVerdict", run.audit_id) == spec.FAIL
    contest_id = _contest_answered(world, run, appeal[0].node.account, 1, round0[0])
    stake = _stake(world, round0[0].node)
    for j in range(1, QUORUM + 1):
        with reverts("NoFault"):
            _cross(world, run, appeal[0].node.account, 1, contest_id, appeal, appeal_slot=j)
    assert _stake(world, round0[0].node) == stake


def test_one_colluding_appeal_member_cannot_slash_an_honest_agree(world10):
    # Honest members can split on a job (a cheat on cells round 0's challenge missed, a stop-rule
    # call): round 0 agrees, the appeal fails it. One colluder in the appeal's FAIL majority
    # fabricates leaves and proves them as the reference against an honest round-0 agree: its
    # contradiction counts once; the honest appeal members' token cells match the agree's, so
    # the quorum is never reached. (A single-reference rule slashed the honest agree here.)
    world = world10
    worker = world.make_worker(world.nodes[0])
    run = world.start(worker, dispatcher=world.nodes[1])
    round0 = [world.make_member(n) for n in world.committee(run)]
    assert world.decide(run, round0) == spec.PASS
    world.protocol.escalate(world.nodes[1].account, run.audit_id)
    world.draw_round(run)
    committee = world.committee(run, 1)
    appeal = [world.make_member(committee[0], offset=0.9)] + [world.make_member(n) for n in committee[1:]]
    assert world.decide(run, appeal, 1, votes=lambda slot: False) == spec.FAIL  # the split: every appeal member disagrees
    contest_id = _contest_answered(world, run, appeal[0].node.account, 1, round0[0])
    stake = _stake(world, round0[0].node)
    for j in range(1, len(appeal) + 1):  # round 0 passed: no count at all (the colluder's reference included)
        with reverts("NoFault"):  # an honest reference: the agree's token cells match
            _cross(world, run, appeal[0].node.account, 1, contest_id, appeal, appeal_slot=j)
    assert _stake(world, round0[0].node) == stake and not world.protocol.get_party(run.audit_id, 0, 1)["slashed"]


def test_a_cheat_that_defaults_in_the_appeal_does_not_shield_its_agreeing_partners(world10):
    # A FAIL and a default slash the cheat alike, so a cheat whose partners agreed in round 0
    # would rather not open in the appeal: with no appeal vote, a FAIL-only rule had no
    # reference. After a default, the appeal seats' committed data (proven against their roots)
    # serve, with the same quorum.
    world = world10
    worker, run, round0 = world.start_vouched_outvoted()
    appeal = world.appeal(run, world.nodes[1], finalize=False)  # receipts posted; the cheat never opens
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    world.protocol.draw_challenge(world.outsider, run.audit_id)
    world.chain.mine(2 * PRESET.OPEN_WINDOW_BLOCKS + 1)
    assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.WORKER_DEFAULT
    hunter = appeal[0].node.account
    contest_id = _contest_answered(world, run, hunter, 1, round0[0])
    stake = _stake(world, round0[0].node)
    _cross_quorum(world, run, hunter, 1, contest_id, appeal)
    assert _stake(world, round0[0].node) == stake - _slash(stake)[0]
    contest_id = _contest_answered(world, run, hunter, 3, round0[2])
    with reverts("NoFault"):  # the honest dissenter
        _cross(world, run, hunter, 3, contest_id, appeal)
