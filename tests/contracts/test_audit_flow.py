"""An audit on anvil from committee receipts to settlement: honest, cheating, lazy and late
parties, each settled exactly as `verillm.spec.settlement` computes it."""

import dataclasses


from helpers.chain import reverts
from verillm.spec import settlement as spec
from verillm.spec.audit import Phase
from verillm.spec.receipt import sign_receipt

from helpers.contracts import CHEAT_OFFSET, PRESET, AuditRun


def _started(world, cheat: bool = False) -> AuditRun:
    run = world.start(world.make_worker(world.nodes[0], offset=CHEAT_OFFSET if cheat else 0.0), dispatcher=world.nodes[1])
    world.post_members(run, [world.make_member(n) for n in world.committee(run)])
    return run


def _mine_past(world, block: int) -> None:
    """Mine until the chain's head is past ``block``."""
    head = world.chain.get_block_number()
    if head <= block:
        world.chain.mine(block - head + 1)


def _expected(world, run, votes, stakes, pool, opened=None, worker_opened=True):
    opened = opened or [True] * len(votes)
    members = tuple(spec.MemberRecord(m.node.address, True, o, v if o else spec.NO_VOTE) for m, v, o in zip(run.members, votes, opened))
    record = spec.AuditRecord(run.worker.node.address, (spec.RoundRecord(worker_opened, members),))
    return spec.compute_settlement(record, stakes, pool, world.preset)


def _check_settlement(world, run, expected, stakes_before, credits_before):
    stakes = world.stakes()
    for address, before in stakes_before.items():
        assert stakes[address] == before - expected.slashed_wei.get(address, 0), address
    for address, before in credits_before.items():
        assert world.protocol.get_credit(address) == before + expected.credits_wei.get(address, 0), address
    assert world.protocol.jobs.call("feePoolWei") == expected.fee_pool_wei


def _settle_and_check(world, run, votes, opened=None, worker_opened=True):
    stakes, pool = world.stakes(), None
    credits = {n.address: world.protocol.get_credit(n.address) for n in world.nodes}
    world.protocol.finalize(world.outsider, run.audit_id)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    pool = world.protocol.jobs.call("feePoolWei")
    expected = _expected(world, run, votes, stakes, pool, opened, worker_opened)
    verdict = world.protocol.settle(world.outsider, run.audit_id).value
    assert verdict == expected.verdict
    _check_settlement(world, run, expected, stakes, credits)
    return expected


def test_honest_worker_and_committee_pass_and_are_paid(world):
    run = _started(world)
    world.open_worker(run)
    votes = [world.honest_vote(run, member) for member in run.members]
    assert votes == [True] * 3
    world.vote_members(run)
    expected = _settle_and_check(world, run, [spec.AGREE] * 3)
    assert expected.verdict == spec.PASS and not expected.slashed_wei
    assert world.protocol.get_credit(run.worker.node.address) == PRESET.AUDIT_FEE_WEI
    claimed = world.protocol.claim(run.members[0].node.account).value
    assert claimed == PRESET.AUDIT_FEE_WEI and world.protocol.get_credit(run.members[0].node.address) == 0
    with reverts("NothingToClaim"):
        world.protocol.claim(run.members[0].node.account)
    assert all(world.protocol.get_node(n.address)["locks"] == 0 for n in world.nodes)


def test_cheating_worker_outside_the_band_is_slashed(world):
    run = _started(world, cheat=True)
    world.open_worker(run)
    assert [world.honest_vote(run, m) for m in run.members] == [False] * 3
    world.vote_members(run)
    expected = _settle_and_check(world, run, [spec.DISAGREE] * 3)
    assert expected.verdict == spec.FAIL and run.worker.node.address in expected.slashed_wei


def test_member_missing_its_opening_is_slashed_and_the_honest_worker_is_not(world):
    run = _started(world)
    world.open_worker(run)
    for slot in range(3):  # member 2 seals too, so the others may open at once
        world.seal_member(run, slot)
    world.open_member(run, 0)
    world.open_member(run, 1)
    with reverts("TooEarly"):  # member 2 still has time to open
        world.protocol.finalize(world.outsider, run.audit_id)
    _mine_past(world, world.protocol.get_round_state(run.audit_id).deadlines.members_open_by)
    with reverts("TooLate"):
        world.open_member(run, 2)
    expected = _settle_and_check(world, run, [spec.AGREE, spec.AGREE, spec.NO_VOTE], opened=[True, True, False])
    assert expected.verdict == spec.PASS
    assert set(expected.slashed_wei) == {run.members[2].node.address}


def test_minority_voter_is_slashed(world):
    run = _started(world)
    world.open_worker(run)
    world.vote_members(run, votes=lambda slot: False if slot == 2 else None)  # member 2 disagrees with an honest worker
    expected = _settle_and_check(world, run, [spec.AGREE, spec.AGREE, spec.DISAGREE])
    assert set(expected.slashed_wei) == {run.members[2].node.address}


def test_worker_missing_its_opening_defaults(world):
    run = _started(world)
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    with reverts("TooEarly"):
        world.protocol.finalize(world.outsider, run.audit_id)
    with reverts("WorkerNotOpened"):
        world.open_member(run, 0, vote=True)
    world.chain.mine(PRESET.OPEN_WINDOW_BLOCKS)
    with reverts("TooLate"):
        world.protocol.open_worker(run.worker.node.account, run.audit_id, run.worker.commitment and world.opening(run, run.worker))
    expected = _settle_and_check(world, run, [spec.NO_VOTE] * 3, opened=[False] * 3, worker_opened=False)
    assert expected.verdict == spec.WORKER_DEFAULT and set(expected.slashed_wei) == {run.worker.node.address}


def test_committee_receipts_must_be_the_verification_job(world):
    run = world.start(world.make_worker(world.nodes[0]), dispatcher=world.nodes[1])
    committee = world.committee(run)
    member = world.make_member(committee[0])
    post = world.protocol.post_committee_receipt

    def resigned(**changes):
        return sign_receipt(dataclasses.replace(member.receipt, **changes), member.node.account.key, world.domain)

    with reverts("ReceiptMismatch"):
        post(world.outsider, run.audit_id, 0, resigned(num_positions=member.receipt.num_positions - 1))
    with reverts("ReceiptMismatch"):
        post(world.outsider, run.audit_id, 0, resigned(max_new_tokens=2))
    with reverts("ReceiptMismatch"):
        post(world.outsider, run.audit_id, 0, resigned(model_id=b"\x01" * 32))
    with reverts("NotParty"):  # a member's receipt in another member's seat
        post(world.outsider, run.audit_id, 1, member.receipt)
    with reverts("InvalidSignature"):
        post(world.outsider, run.audit_id, 0, dataclasses.replace(member.receipt, signature=run.worker.receipt.signature))
    post(world.outsider, run.audit_id, 0, member.receipt)
    with reverts("AlreadyOpened"):
        post(world.outsider, run.audit_id, 0, member.receipt)


def test_missing_members_are_replaced_then_the_audit_is_abandoned(world):
    run = world.start(world.make_worker(world.nodes[0]))  # its own dispatcher: 5 candidates
    first = world.committee(run)
    world.protocol.post_committee_receipt(world.outsider, run.audit_id, 0, world.make_member(first[0]).receipt)
    with reverts("TooEarly"):
        world.protocol.replace_missing(world.outsider, run.audit_id)
    world.chain.mine(PRESET.COMMIT_WINDOW_BLOCKS + 1)
    world.protocol.replace_missing(world.outsider, run.audit_id)
    second = [n.address for n in world.committee(run)]
    assert second[0] == first[0].address and not set(second[1:]) & {n.address for n in first}
    assert run.worker.node.address not in second
    world.chain.mine(PRESET.COMMIT_WINDOW_BLOCKS + 1)
    stakes = world.stakes()
    world.protocol.replace_missing(world.outsider, run.audit_id)  # MINIMAL redraws once, then abandons
    assert world.protocol.get_audit(run.audit_id).phase == Phase.ABANDONED
    assert world.stakes() == stakes  # abandonment slashes nobody (docs/protocol.md §12)
    assert all(world.protocol.get_node(n.address)["locks"] == 0 for n in world.nodes)


def test_opening_rules(world):
    run = _started(world)
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    world.protocol.draw_challenge(world.outsider, run.audit_id)
    opening = world.opening(run, run.worker)
    worker, member = run.worker.node.account, run.members[0].node.account
    with reverts("NotParty"):
        world.protocol.open_worker(member, run.audit_id, opening)
    with reverts("BadOpening"):
        world.protocol.open_worker(worker, run.audit_id, dataclasses.replace(opening, leaves=opening.leaves[:-1]))
    world.protocol.open_worker(worker, run.audit_id, opening)
    with reverts("AlreadyOpened"):
        world.protocol.open_worker(worker, run.audit_id, opening)
    member_opening = world.opening(run, run.members[0])
    salt = bytes(32)
    with reverts("NotParty"):  # another member's seat
        world.protocol.seal_vote(member, run.audit_id, 0, 1, member_opening, True, salt)
    for slot in range(3):
        world.seal_member(run, slot, vote=True, opening=member_opening if slot == 0 else None)
    _, _, salt = run.sealed[(0, 0)]
    with reverts("NotParty"):  # another member's seat
        world.protocol.open_and_vote(member, run.audit_id, 1, member_opening, True, salt)
    with reverts("BadOpening"):  # the worker's cells are one short of a member's
        world.protocol.open_and_vote(member, run.audit_id, 0, opening, True, salt)
    world.protocol.open_and_vote(member, run.audit_id, 0, member_opening, True, salt)
    with reverts("AlreadyOpened"):
        world.protocol.open_and_vote(member, run.audit_id, 0, member_opening, True, salt)
