"""Disputes on anvil: contests of openings, on-chain adjudication, escalation, reentrancy."""

import dataclasses

import pytest

from helpers.chain import reverts
from verillm.spec import settlement as spec
from verillm.spec import vrf

from helpers.contracts import CHEAT_OFFSET, MODEL_ID, PRESET, AuditRun, World, connect, replace_leaf_fingerprint


def _opened(world, member_offsets=(0.0, 0.0, 0.0), worker_cheats: bool = False) -> AuditRun:
    """An audit whose worker has opened; members hold traces moved by ``member_offsets``."""
    run = world.start(world.make_worker(world.nodes[0], offset=CHEAT_OFFSET if worker_cheats else 0.0), dispatcher=world.nodes[1])
    world.post_members(run, [world.make_member(n, offset=o) for n, o in zip(world.committee(run), member_offsets)])
    world.open_worker(run)
    return run


def _seal_all(world, run: AuditRun, posted) -> None:
    """Every member seals as its data say, except member 1, which seals ``posted`` with an agree
    (so member 1 may open at once, before the others)."""
    for slot in range(len(run.members)):
        world.seal_member(run, slot, vote=True if slot == 1 else None, opening=posted if slot == 1 else None)


def _cells(opening, count: int = 2):
    return [(i.leaf.position, i.leaf.layer) for i in opening.leaves[:count]]


def test_contest_answered_by_an_honest_party_pays_it_the_bond(world):
    run = _opened(world)
    opening = world.opening(run, run.worker)
    with reverts("WrongBond"):
        world.chain.transact(world.protocol.disputes, "contest", run.audit_id, 0, 0, [1], [1], sender=world.outsider)
    with reverts("NotChallenged"):  # a prompt position is never challenged
        world.protocol.contest(world.outsider, run.audit_id, 0, 0, [(0, 1)])
    contest_id = world.protocol.contest(world.outsider, run.audit_id, 0, 0, _cells(opening)).value
    assert world.protocol.get_audit(run.audit_id).pending_contests == 1
    forged = dataclasses.replace(opening, leaves=tuple(
        dataclasses.replace(i, proof=dataclasses.replace(i.proof, siblings=(b"\x00" * 32,) + i.proof.siblings[1:])) for i in opening.leaves))
    with reverts("InvalidMerkleProof"):  # a forged proof
        world.protocol.answer_contest(world.outsider, contest_id, _cells(opening), forged)
    world.protocol.answer_contest(run.worker.node.account, contest_id, _cells(opening), opening)
    assert world.protocol.get_credit(run.worker.node.address) == PRESET.DISPUTE_BOND_WEI
    assert world.protocol.get_audit(run.audit_id).pending_contests == 0
    with reverts("ContestClosed"):
        world.protocol.resolve_contest(world.outsider, contest_id)


def test_member_whose_opening_is_inconsistent_with_its_root_is_slashed(world):
    run = _opened(world)
    member = run.members[1]
    honest = world.opening(run, member)
    posted = replace_leaf_fingerprint(honest, 3, 0.5)  # what it posts is not what it committed
    _seal_all(world, run, posted)
    world.open_member(run, 1)
    cell = _cells(posted)[3:4] or [(posted.leaves[3].leaf.position, posted.leaves[3].leaf.layer)]
    contest_id = world.protocol.contest(world.outsider, run.audit_id, 0, 2, cell).value
    with reverts("InvalidMerkleProof"):
        world.protocol.answer_contest(member.node.account, contest_id, cell, posted)
    with reverts("OpeningMismatch"):  # the committed leaves are not what it posted either
        world.protocol.answer_contest(member.node.account, contest_id, cell, honest)
    world.open_member(run, 0)
    world.open_member(run, 2)
    world.protocol.finalize(world.outsider, run.audit_id)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    with reverts("ContestsPending"):
        world.protocol.settle(world.outsider, run.audit_id)
    stake = world.protocol.get_node(member.node.address)["stake_wei"]
    world.protocol.resolve_contest(world.outsider, contest_id)
    slashed = stake * PRESET.SLASH_FRACTION_BPS // 10_000
    assert world.protocol.get_node(member.node.address)["stake_wei"] == stake - slashed
    assert world.protocol.get_credit(world.outsider.address) == PRESET.DISPUTE_BOND_WEI + slashed * PRESET.SLASH_REWARD_BPS // 10_000
    assert world.protocol.settle(world.outsider, run.audit_id).value == spec.PASS
    assert world.protocol.get_node(run.worker.node.address)["stake_wei"] == 3 * PRESET.MIN_STAKE_WEI  # honest: untouched


def test_a_second_contest_against_a_slashed_party_is_moot_and_cannot_block_settlement(world):
    run = _opened(world)
    member = run.members[1]
    posted = replace_leaf_fingerprint(world.opening(run, member), 3, 0.5)
    _seal_all(world, run, posted)
    world.open_member(run, 1)
    cell = [(posted.leaves[3].leaf.position, posted.leaves[3].leaf.layer)]
    first = world.protocol.contest(world.outsider, run.audit_id, 0, 2, cell).value
    second = world.protocol.contest(run.worker.node.account, run.audit_id, 0, 2, cell).value
    world.open_member(run, 0)
    world.open_member(run, 2)
    world.protocol.finalize(world.outsider, run.audit_id)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    world.protocol.resolve_contest(world.outsider, first)
    stake_after_first = world.protocol.get_node(member.node.address)["stake_wei"]
    credit_before = world.protocol.get_credit(run.worker.node.address)
    world.protocol.resolve_contest(world.outsider, second)  # reverted AlreadyHandled before the fix: settle blocked forever
    assert world.protocol.get_node(member.node.address)["stake_wei"] == stake_after_first  # never slashed twice
    assert world.protocol.get_credit(run.worker.node.address) == credit_before + PRESET.DISPUTE_BOND_WEI  # bond back
    assert world.protocol.get_audit(run.audit_id).pending_contests == 0
    with reverts("AlreadySlashed"):
        world.protocol.contest(world.outsider, run.audit_id, 0, 2, cell)
    assert world.protocol.settle(world.outsider, run.audit_id).value == spec.PASS


def test_lazy_member_that_voted_agree_on_garbage_is_slashed_by_adjudication(world):
    run = _opened(world, member_offsets=(0.0, 0.3, 0.0))  # member 1 committed leaves it never computed
    lazy = run.members[1]
    world.vote_members(run, slots=[1, 0], votes=lambda slot: True)  # member 2 stays silent: the seal window is waited out
    worker_opening = world.opening(run, run.worker)
    with reverts("NoFault"):  # an honest member's vote stands
        world.protocol.adjudicate(world.outsider, run.audit_id, 0, 1, worker_opening, world.opening(run, run.members[0]))
    stake = world.protocol.get_node(lazy.node.address)["stake_wei"]
    world.protocol.adjudicate(world.outsider, run.audit_id, 0, 2, worker_opening, world.opening(run, lazy))
    assert world.protocol.get_node(lazy.node.address)["stake_wei"] < stake
    assert world.protocol.get_party(run.audit_id, 0, 2)["slashed"]
    with reverts("AlreadyHandled"):
        world.protocol.adjudicate(world.outsider, run.audit_id, 0, 2, worker_opening, world.opening(run, lazy))


def test_attack6_member_that_catches_truncation_is_not_slashed_by_adjudication(world):
    # The member's fingerprints agree with the worker's, but its DISAGREE may rest on the stop
    # rule (a truncated output), which the contract cannot check: adjudication never slashes a
    # DISAGREE (a false one is a minority vote, settled by the vote).
    run = _opened(world)
    world.vote_members(run, slots=[0], votes=lambda slot: False)
    worker_opening = world.opening(run, run.worker)
    with reverts("NoFault"):
        world.protocol.adjudicate(world.outsider, run.audit_id, 0, 1, worker_opening, world.opening(run, run.members[0]))
    assert not world.protocol.get_party(run.audit_id, 0, 1)["slashed"]


def test_adjudication_shows_a_cheating_worker_and_rejects_forged_proofs(world):
    run = _opened(world, worker_cheats=True)
    world.vote_members(run, slots=[0], votes=lambda slot: True)  # a colluding member vouches for the cheat
    worker_opening, member_opening = world.opening(run, run.worker), world.opening(run, run.members[0])
    forged = replace_leaf_fingerprint(worker_opening, 0, -CHEAT_OFFSET)  # the "honest-looking" leaf, same proof
    with reverts("OpeningMismatch"):  # not the leaves it posted
        world.protocol.adjudicate(world.outsider, run.audit_id, 0, 1, forged, member_opening)
    world.protocol.adjudicate(world.outsider, run.audit_id, 0, 1, worker_opening, member_opening)
    assert world.protocol.get_party(run.audit_id, 0, 1)["slashed"]


@pytest.fixture(scope="module")
def big_world(contracts_anvil):
    """Fifteen nodes: enough for a first committee of 3, a fresh appeal of 5 and its decider of 5."""
    return World(connect(contracts_anvil), extra_nodes=9)  # room for round 0, the appeal and its decider


def test_escalation_overturns_a_colluding_majority(big_world):
    world = big_world
    snapshot = world.chain.snapshot()
    try:
        run = _opened(world)
        votes = [True, False, False]  # two colluders call an honest worker a cheat
        world.vote_members(run, votes=lambda slot: votes[slot])
        assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.FAIL
        escalator = run.members[0].node.account
        world.protocol.escalate(escalator, run.audit_id)
        with reverts("UnexpectedPhase"):  # the worker has standing against a FAIL, but one appeal per audit
            world.protocol.escalate(run.worker.node.account, run.audit_id)
        world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
        world.protocol.draw_escalation(world.outsider, run.audit_id)
        second = world.committee(run, 1)
        first = {m.node.address for m in run.members}
        assert len(second) == PRESET.ESCALATION_COMMITTEE_SIZE and not {n.address for n in second} & (first | {run.worker.node.address})
        round0 = run.members
        world.post_members(run, [world.make_member(n) for n in second])
        world.open_worker(run)
        world.vote_members(run)
        world.protocol.finalize(world.outsider, run.audit_id)
        appeal = run.members
        # The appeal's PASS contradicts round 0's FAIL: a decider round settles it (issue 34; honest here).
        decider, verdict = world.decider(run)
        assert verdict == spec.PASS
        stakes = world.stakes()
        world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
        pool = world.protocol.jobs.call("feePoolWei")
        record = spec.AuditRecord(run.worker.node.address, (
            spec.RoundRecord(True, tuple(spec.MemberRecord(m.node.address, vote=spec.AGREE if v else spec.DISAGREE) for m, v in zip(round0, votes))),
            spec.RoundRecord(True, tuple(spec.MemberRecord(m.node.address) for m in appeal)),
            spec.RoundRecord(True, tuple(spec.MemberRecord(m.node.address) for m in decider)),
        ), escalator=escalator.address, escalation_bond_wei=PRESET.DISPUTE_BOND_WEI)
        expected = spec.compute_settlement(record, stakes, pool, PRESET)
        credit_before = world.protocol.get_credit(escalator.address)
        assert world.protocol.settle(world.outsider, run.audit_id).value == spec.PASS == expected.verdict
        assert set(expected.slashed_wei) == {round0[1].node.address, round0[2].node.address}
        for address, before in stakes.items():
            assert world.protocol.get_node(address)["stake_wei"] == before - expected.slashed_wei.get(address, 0)
        assert world.protocol.get_credit(escalator.address) - credit_before == expected.credits_wei[escalator.address]
        assert expected.credits_wei[escalator.address] > PRESET.DISPUTE_BOND_WEI  # bond back, plus fee and reward share
    finally:
        world.chain.revert(snapshot)


def test_reentrancy_is_refused_on_withdraw(world):
    attacker = world.chain.deploy("ReentrantNode", world.protocol.registry.address, world.protocol.jobs.address,
                                  world.protocol.disputes.address, sender=world.outsider)
    sk = vrf.derive_secret_key(b"attacker" * 4)
    pk = vrf.compute_words(vrf.compute_public_key(sk))
    pop = vrf.compute_words(vrf.compute_possession_proof(sk, bytes.fromhex(attacker.address[2:])))
    attacker.transact("register", pk, pop, MODEL_ID, sender=world.outsider, value=PRESET.MIN_STAKE_WEI)
    attacker.transact("deregister", sender=world.outsider)
    world.chain.mine(PRESET.UNBONDING_BLOCKS)
    registry_before = world.chain.get_balance(world.protocol.registry.address)
    attacker.transact("withdraw", sender=world.outsider)
    assert attacker.call("reentered") is False
    assert attacker.call("received") == PRESET.MIN_STAKE_WEI
    assert world.chain.get_balance(world.protocol.registry.address) == registry_before - PRESET.MIN_STAKE_WEI


def test_reentrancy_is_refused_on_claim(world):
    attacker = world.chain.deploy("ReentrantNode", world.protocol.registry.address, world.protocol.jobs.address,
                                  world.protocol.disputes.address, sender=world.outsider)
    run = _opened(world)
    cell = _cells(world.opening(run, run.worker), 1)
    attacker.transact("contest", run.audit_id, 0, 0, [cell[0][0]], [cell[0][1]], sender=world.outsider, value=PRESET.DISPUTE_BOND_WEI)
    world.chain.mine(PRESET.PROOF_WINDOW_BLOCKS + 1)  # the worker does not answer: it loses
    world.protocol.resolve_contest(world.outsider, 0)
    owed = world.protocol.get_credit(attacker.address)
    assert owed > PRESET.DISPUTE_BOND_WEI
    jobs_before = world.chain.get_balance(world.protocol.jobs.address)
    attacker.transact("claim", sender=world.outsider)
    assert attacker.call("reentered") is False and attacker.call("received") == owed
    assert world.chain.get_balance(world.protocol.jobs.address) == jobs_before - owed


def test_only_disputes_and_delivery_drive_the_jobs_hooks_and_only_the_registry_pays_in(world):
    jobs, disputes, caller = world.protocol.jobs, world.protocol.disputes, world.nodes[0].account
    for function, args in (("recordFault", (1, 0, 0)), ("addPendingContest", (1, 1)), ("depositCredit", (caller.address, 0)),
                           ("startEscalation", (1, caller.address)), ("onClaim", (1, 0, caller.address)), ("onPublish", (1,)),
                           ("onUndelivered", (1,))):
        with reverts("NotProtocol"):
            world.chain.transact(jobs, function, *args, sender=caller)
    for function, args in (("slash", (caller.address,)), ("penalize", (caller.address, 1)), ("lock", (caller.address,))):
        with reverts("NotProtocol"):  # Delivery may slash (Registry.delivery), nobody else outside the protocol
            world.chain.transact(world.protocol.registry, function, *args, sender=caller)
    for target, error in ((jobs, "NotProtocol"), (disputes, "NotRegistry"), (world.protocol.delivery, "NotRegistry"),
                          (world.protocol.batches, "NotRegistry")):  # plain ether is refused
        with reverts(error):
            world.chain.rpc("send ether", lambda: world.chain.w3.eth.estimate_gas({"from": caller.address, "to": target.address, "value": 1}))
    with reverts("UnknownContest"):
        world.protocol.resolve_contest(caller, 99)
    with reverts("UnknownAudit"):
        world.protocol.finalize(caller, 99)
