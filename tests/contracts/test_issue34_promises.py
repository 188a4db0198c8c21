"""Issue 34 on anvil, replaying the attacker's moves: a promise stays keepable after a penalty or an
unbond (attack 3: `Batches.postBatch` is open to a registered node for AUDIT_HORIZON_BLOCKS after
it stopped being active), and a seat that never answers costs its holder (`Disputes.penalizeSilentSeat`).
The delivery claim bond (attack 4) is in test_delivery.py."""

import pytest

from helpers.chain import reverts
from helpers.contracts import PRESET, World, connect
from verillm.spec import promise as spec
from verillm.spec.audit import Phase
from verillm.spec.receipt import compute_receipt_hash

from test_coverage import _mine_to, _promise, _receipts

EMPTY_ROOT = bytes(32)
MAX_SYBIL_JOBS = 40  # P(no sybil seat in 40 jobs) is far below 1e-9 at these stakes


@pytest.fixture
def client(world):
    return world.chain.dev_accounts[8]


def _is_active(world, node) -> bool:
    return world.protocol.registry.call("isActive", node.address)


def _outvoted_minimum_stake_member(world):
    """An audit of node 0's job (dispatched by node 1) whose round is decided with one of its
    minimum-stake members outvoted; returns (run, that member) before anyone settles."""
    worker = world.make_worker(world.nodes[0])
    run = world.start(worker, dispatcher=world.nodes[1])
    committee = world.committee(run)
    slot = next(i for i, n in enumerate(committee) if world.protocol.get_node(n.address)["stake_wei"] == PRESET.MIN_STAKE_WEI)
    world.decide(run, [world.make_member(n) for n in committee], votes=lambda s: s != slot)
    return run, committee[slot]


def test_attack3a_a_minimum_stake_dispatcher_penalized_below_the_minimum_still_keeps_its_promise(world, client):
    """The victim, staked at the minimum, promised a receipt; an adversary orders `settle` (which
    takes its 1% minority penalty and leaves it below the minimum: inactive) before the victim's
    `postBatch`. The batch lands, the claim is answered, `slashOmission` takes nothing."""
    run, victim = _outvoted_minimum_stake_member(world)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    hashes = _receipts(world, world.nodes[0], 2, first_nonce=40)
    signed = _promise(world, victim, hashes[1])  # given while it is active
    assert _is_active(world, victim)
    world.protocol.settle(world.outsider, run.audit_id)  # the adversary's settle comes first
    stake = world.protocol.get_node(victim.address)["stake_wei"]
    assert stake == PRESET.MIN_STAKE_WEI - PRESET.MIN_STAKE_WEI * PRESET.MEMBER_PENALTY_BPS // 10_000
    assert not _is_active(world, victim)
    fell_out = world.protocol.registry.call("inactiveSince", victim.address)
    assert fell_out == world.chain.get_block_number()
    kept = world.protocol.post_batch(victim.account, hashes)  # still keepable
    posted = kept.value
    print(f"\npostBatch by a node inactive since block {fell_out}: {kept.gas_used} gas")
    _mine_to(world, signed.promise.batch_by_block + 1)
    claim = world.protocol.claim_omitted(client, signed).value
    world.protocol.prove_included(victim.account, claim, posted.batch_id, spec.compute_inclusion_proof(hashes, hashes[1]))
    world.chain.mine(PRESET.PROOF_WINDOW_BLOCKS + 1)
    with reverts("ClaimResolved"):
        world.protocol.slash_omission(world.outsider, claim)
    assert world.protocol.get_node(victim.address)["stake_wei"] == stake  # only the documented penalty
    # The grace is what a promise needs, no more: past it an inactive node posts nothing.
    _mine_to(world, fell_out + PRESET.AUDIT_HORIZON_BLOCKS)
    assert spec.is_batch_allowed(False, fell_out, world.chain.get_block_number() + 1, PRESET.AUDIT_HORIZON_BLOCKS) is False
    with reverts("NotActiveNode"):
        world.protocol.post_batch(victim.account, hashes[:1])
    world.protocol.top_up(victim.account, PRESET.MIN_STAKE_WEI)  # active again: batches as before
    assert world.protocol.registry.call("inactiveSince", victim.address) == 0
    world.protocol.post_batch(victim.account, hashes[:1])


def test_attack3b_a_node_that_unbonds_with_a_promise_outstanding_still_batches_it(world, client):
    """`deregister` with a promise outstanding: postBatch is still open until the promise falls due
    (unbond block + AUDIT_HORIZON_BLOCKS ≥ BATCH_BY_BLOCKS); the claim is answered and the
    leaver withdraws its whole stake."""
    leaver = world.nodes[3]
    hashes = _receipts(world, world.nodes[0], 3, first_nonce=60)
    signed = _promise(world, leaver, hashes[0])
    stake = world.protocol.get_node(leaver.address)["stake_wei"]
    left = world.protocol.deregister(leaver.account).receipt["blockNumber"]
    assert world.protocol.registry.call("inactiveSince", leaver.address) == left
    _mine_to(world, signed.promise.batch_by_block - 1)
    posted = world.protocol.post_batch(leaver.account, hashes).value  # in the promise's last block
    assert world.protocol.batches.call("getBatch", posted.batch_id)[3] == signed.promise.batch_by_block
    _mine_to(world, signed.promise.batch_by_block + 1)
    claim = world.protocol.claim_omitted(client, signed).value
    world.protocol.prove_included(world.outsider, claim, posted.batch_id, spec.compute_inclusion_proof(hashes, hashes[0]))
    _mine_to(world, left + PRESET.AUDIT_HORIZON_BLOCKS)
    with reverts("NotActiveNode"):  # a leaver's batching ends with its promises
        world.protocol.post_batch(leaver.account, hashes[1:])
    _mine_to(world, world.protocol.get_node(leaver.address)["unbonding_end_block"])
    assert world.protocol.withdraw(leaver.account).value == stake  # whole


def test_a_node_never_registered_or_withdrawn_cannot_post(world):
    stranger = world.chain.dev_accounts[7]
    assert world.protocol.registry.call("inactiveSince", stranger.address) == 0
    with reverts("NotActiveNode"):
        world.protocol.post_batch(stranger, [b"\x01" * 32])


# --- silent seats ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sybil_world(contracts_anvil):
    """A deployment with six more minimum-stake nodes: a redraw has candidates to draw."""
    return World(connect(contracts_anvil), extra_nodes=6)


def _step_committing_round(world, run, sybils: set, armed: list) -> bool:
    """Post every honest member's receipt; arm every sybil's empty seat. True while the round still commits."""
    p = world.protocol
    state = p.get_round_state(run.audit_id, 0)
    if state.phase != Phase.COMMITTING:
        return False
    for slot, address in enumerate(p.get_committee(run.audit_id, 0)):
        if p.get_party(run.audit_id, 0, slot + 1)["root"] != EMPTY_ROOT:
            continue
        if address in sybils:
            armed_tx = p.penalize_silent_seat(world.outsider, run.audit_id, 0, state.attempt, slot)
            assert armed_tx.value == 0  # armed
            print(f"\npenalizeSilentSeat (arm): {armed_tx.gas_used} gas")
            armed.append((run.audit_id, state.attempt, slot, address))
        else:
            p.post_committee_receipt(world.outsider, run.audit_id, slot, world.make_member(world.node(address)).receipt)
    return p.get_round_state(run.audit_id, 0).phase == Phase.COMMITTING


def test_silent_minimum_stake_sybils_pay_for_every_seat_they_held(sybil_world):
    """Three minimum-stake identities never answer: each seat they held, redrawn or left empty
    in an abandoned round, costs MEMBER_PENALTY_BPS of their stake, once; no honest member pays."""
    world = sybil_world
    chain = world.chain
    snapshot = chain.snapshot()
    try:
        sybils = {n.address for n in world.nodes[6:9]}
        before = world.stakes()
        armed: list = []
        # The draw's seed is a block hash, which on anvil changes with the wall clock: start jobs
        # until a sybil held a seat (three at least; minimum stake makes a seat rarer per job).
        for nonce in range(MAX_SYBIL_JOBS):
            run = world.start(world.make_worker(world.nodes[0], nonce=200 + nonce), dispatcher=world.nodes[1])
            while _step_committing_round(world, run, sybils, armed):
                chain.mine(world.protocol.get_round_state(run.audit_id, 0).deadlines.commit_by - chain.get_block_number() + 1)
                world.protocol.replace_missing(world.outsider, run.audit_id)
            if armed and nonce >= 2:
                break
        assert armed, f"no sybil was drawn in {MAX_SYBIL_JOBS} jobs"
        stakes = {a: before[a] for a in sybils}
        for audit_id, attempt, slot, address in armed:
            with reverts("NotSilent"):  # an attempt the round is not at cannot be armed
                world.protocol.penalize_silent_seat(world.outsider, audit_id, 0, attempt + 5, slot)
            took = world.protocol.penalize_silent_seat(world.outsider, audit_id, 0, attempt, slot)
            taken = took.value
            print(f"penalizeSilentSeat (take, {world.protocol.get_round_state(audit_id, 0).phase.name}): {took.gas_used} gas")
            assert taken == stakes[address] * PRESET.MEMBER_PENALTY_BPS // 10_000 > 0
            stakes[address] -= taken
            with reverts("NotSilent"):  # once per seat
                world.protocol.penalize_silent_seat(world.outsider, audit_id, 0, attempt, slot)
        after = world.stakes()
        assert {a: after[a] for a in sybils} == stakes
        assert all(after[a] == before[a] for a in before if a not in sybils)  # honest members kept everything
        print(f"\nsilent seats penalized: {len(armed)} over {len(sybils)} sybils")
    finally:
        chain.set_automine(True)
        chain.revert(snapshot)


def test_a_member_that_posts_after_being_armed_pays_nothing(world):
    run = world.start(world.make_worker(world.nodes[0], nonce=300), dispatcher=world.nodes[1])
    committee = world.committee(run)
    p = world.protocol
    assert p.penalize_silent_seat(world.outsider, run.audit_id, 0, 0, 0).value == 0
    before = world.stakes()
    for slot, node in enumerate(committee):
        p.post_committee_receipt(world.outsider, run.audit_id, slot, world.make_member(node).receipt)
    with reverts("NotSilent"):
        p.penalize_silent_seat(world.outsider, run.audit_id, 0, 0, 0)
    with reverts("NotSilent"):  # a posted seat cannot be armed either
        p.penalize_silent_seat(world.outsider, run.audit_id, 0, 0, 1)
    assert world.stakes() == before


def test_silent_seats_of_a_round_abandoned_for_them_pay_too(world):
    """Every member silent, the pool too small to redraw: the round is abandoned with the seats
    still empty, and each holder pays for its seat (the abandoned branch), once."""
    p = world.protocol
    run = world.start(world.make_worker(world.nodes[0], nonce=400), dispatcher=world.nodes[1])
    committee = p.get_committee(run.audit_id, 0)
    for slot in range(len(committee)):
        assert p.penalize_silent_seat(world.outsider, run.audit_id, 0, 0, slot).value == 0
    with reverts("NotSilent"):  # armed, not yet replaced or abandoned
        p.penalize_silent_seat(world.outsider, run.audit_id, 0, 0, 0)
    world.chain.mine(p.get_round_state(run.audit_id, 0).deadlines.commit_by - world.chain.get_block_number() + 1)
    p.replace_missing(world.outsider, run.audit_id)
    assert p.get_round_state(run.audit_id, 0).phase == Phase.ABANDONED
    assert p.get_committee(run.audit_id, 0) == committee  # nobody replaced: the pool is exhausted
    before = world.stakes()
    for slot, address in enumerate(committee):
        taken = p.penalize_silent_seat(world.outsider, run.audit_id, 0, 0, slot).value
        assert taken == before[address] * PRESET.MEMBER_PENALTY_BPS // 10_000 > 0
    after = world.stakes()
    assert all(after[a] == before[a] - before[a] * PRESET.MEMBER_PENALTY_BPS // 10_000 for a in committee)
    assert all(after[a] == before[a] for a in before if a not in committee)
