"""Batches and Jobs: receipt batches, the VRF audit draw, starting audits, the committee draw
after the start, and the deadlines around them."""

import dataclasses


from helpers.chain import reverts
from verillm.chain import RpcChain
from verillm.chain.protocol import compute_receipt_tuple
from verillm.spec import vrf
from verillm.spec.audit import (compute_batch_levels, compute_committee, compute_draw_seed, compute_excluded_weights,
                                compute_round_seed, is_audited)
from verillm.spec.audit import Phase
from verillm.spec.receipt import compute_receipt_hash

from helpers.contracts import PRESET, World


def test_post_batch_checks_node_count_and_fee(world):
    batches, node = world.protocol.batches, world.nodes[0].account
    with reverts("NotActiveNode"):
        world.protocol.post_batch(world.outsider, [b"\x01" * 32])
    with reverts("BadBatch"):
        world.chain.transact(batches, "postBatch", b"\x01" * 32, 0, sender=node)
    with reverts("BadBatch"):
        world.chain.transact(batches, "postBatch", b"\x01" * 32, PRESET.MAX_BATCH_RECEIPTS + 1, sender=node,
                             value=(PRESET.MAX_BATCH_RECEIPTS + 1) * PRESET.JOB_FEE_WEI)
    with reverts("WrongFee"):
        world.chain.transact(batches, "postBatch", b"\x01" * 32, 2, sender=node, value=PRESET.JOB_FEE_WEI)
    posted = world.protocol.post_batch(node, [b"\x01" * 32, b"\x02" * 32]).value
    assert posted.root == compute_batch_levels([b"\x01" * 32, b"\x02" * 32])[-1][0]
    assert world.protocol.jobs.call("feePoolWei") == 2 * PRESET.JOB_FEE_WEI  # the fees go to the pool in Jobs


def test_draw_is_the_dispatchers_vrf_over_a_later_blockhash(world):
    dispatcher = world.nodes[1]
    posted = world.protocol.post_batch(dispatcher.account, [b"\x03" * 32]).value
    with reverts("TooEarly"):
        world.chain.transact(world.protocol.batches, "drawAudit", posted.batch_id, [1, 2], sender=dispatcher.account)
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    seed = world.protocol.get_draw_seed(posted.batch_id)
    batch = world.protocol.batches.call("getBatch", posted.batch_id)
    assert seed == compute_draw_seed(posted.root, world.protocol.get_blockhash(batch[3] + PRESET.AUDIT_DRAW_DELAY_BLOCKS))
    # another node's proof over the same seed is not the dispatcher's draw
    other = vrf.compute_words(vrf.compute_vrf_proof(world.nodes[2].vrf_key, seed))
    with reverts("InvalidVrfProof"):
        world.chain.transact(world.protocol.batches, "drawAudit", posted.batch_id, other, sender=dispatcher.account)
    beta = world.protocol.draw_audit(world.outsider, posted.batch_id, dispatcher.vrf_key).value  # anyone may relay
    assert beta == vrf.compute_vrf_output(vrf.compute_vrf_proof(dispatcher.vrf_key, seed))
    assert world.protocol.is_audited(posted.batch_id, 0) == is_audited(beta, 0, PRESET.AUDIT_RATE_BPS)
    with reverts("AlreadyDrawn"):  # one draw per batch: no re-draw
        world.protocol.draw_audit(dispatcher.account, posted.batch_id, dispatcher.vrf_key)


def test_a_vrf_proof_cannot_be_replayed_on_another_batch(world):
    dispatcher = world.nodes[1]
    first = world.protocol.post_batch(dispatcher.account, [b"\x04" * 32]).value
    second = world.protocol.post_batch(dispatcher.account, [b"\x04" * 32]).value  # same root, later block
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    proof = vrf.compute_words(vrf.compute_vrf_proof(dispatcher.vrf_key, world.protocol.get_draw_seed(first.batch_id)))
    world.chain.transact(world.protocol.batches, "drawAudit", first.batch_id, proof, sender=dispatcher.account)
    with reverts("InvalidVrfProof"):
        world.chain.transact(world.protocol.batches, "drawAudit", second.batch_id, proof, sender=dispatcher.account)


def test_missed_draw_slashes_the_dispatcher_once_after_the_window(world):
    dispatcher = world.nodes[1]
    posted = world.protocol.post_batch(dispatcher.account, [b"\x05" * 32]).value
    with reverts("TooEarly"):
        world.protocol.slash_missed_draw(world.outsider, posted.batch_id)
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS + 1)
    with reverts("TooLate"):
        world.protocol.draw_audit(dispatcher.account, posted.batch_id, dispatcher.vrf_key)
    stake = world.protocol.get_node(dispatcher.address)["stake_wei"]
    world.protocol.slash_missed_draw(world.outsider, posted.batch_id)
    slashed = stake * PRESET.SLASH_FRACTION_BPS // 10_000
    assert world.protocol.get_node(dispatcher.address)["stake_wei"] == stake - slashed
    assert world.protocol.get_credit(world.outsider.address) == slashed * PRESET.SLASH_REWARD_BPS // 10_000
    with reverts("AlreadyHandled"):
        world.protocol.slash_missed_draw(world.outsider, posted.batch_id)


def _drawn_batch(world, receipts, dispatcher):
    batch, _, _ = world.post_and_draw(dispatcher, receipts)
    return batch


def test_start_audit_checks_proof_signature_and_replay(world):
    worker, dispatcher = world.make_worker(world.nodes[0]), world.nodes[1]
    other = world.make_worker(world.nodes[2], nonce=1)
    batch = _drawn_batch(world, [worker.receipt, other.receipt], dispatcher)
    start = world.protocol.start_audit
    with reverts("InvalidMerkleProof"):  # a proof for index 1 presented at index 0
        world.chain.transact(world.protocol.batches, "startAudit", batch.batch_id, 0, compute_receipt_tuple(worker.receipt), worker.receipt.signature,
                             [compute_batch_levels([compute_receipt_hash(worker.receipt), compute_receipt_hash(other.receipt)])[0][0]],
                             sender=dispatcher.account)
    forged = dataclasses.replace(worker.receipt, signature=other.receipt.signature)  # someone else's signature
    with reverts("InvalidSignature"):
        start(dispatcher.account, batch.batch_id, 0, forged, batch.levels)
    audit_id = start(dispatcher.account, batch.batch_id, 0, worker.receipt, batch.levels).value
    assert world.protocol.get_audit(audit_id).worker == worker.node.address
    with reverts("AlreadyHandled"):
        start(dispatcher.account, batch.batch_id, 0, worker.receipt, batch.levels)
    # the same receipt batched again, by anyone, opens no second audit: the selected start is
    # skipped (its dispatcher did its duty, AuditSkipped), and it cannot be started twice
    for again_by in (dispatcher, world.nodes[3]):
        again = _drawn_batch(world, [worker.receipt], again_by)
        skipped = start(again_by.account, again.batch_id, 0, worker.receipt, again.levels)
        assert skipped.value == 0 and world.protocol.jobs.call("auditCount") == audit_id
        with reverts("AlreadyHandled"):
            start(again_by.account, again.batch_id, 0, worker.receipt, again.levels)
    world.chain.mine(PRESET.START_WINDOW_BLOCKS + 1)
    with reverts("AlreadyHandled"):  # a skipped start is a start done: nobody slashes the dispatcher for it
        world.protocol.slash_missed_start(world.outsider, again.batch_id, 0)


def test_the_committee_is_drawn_from_a_blockhash_after_the_start_and_never_holds_the_worker(world):
    for worker_index in range(3):  # the worker is its own dispatcher: the most it could control
        node = world.nodes[worker_index]
        worker = world.make_worker(node, nonce=worker_index)
        run = world.start(worker, draw=False)
        state = world.protocol.get_round_state(run.audit_id)
        assert state.phase == Phase.DRAWING and world.protocol.get_committee(run.audit_id, 0) == []  # DRAWING: nobody knows the committee yet
        with reverts("TooEarly"):  # the seed block (entered + delay) is not mined
            world.protocol.draw_round(world.outsider, run.audit_id)
        world.draw_round(run)
        committee = world.protocol.get_committee(run.audit_id, 0)
        assert node.address not in committee and len(set(committee)) == PRESET.COMMITTEE_SIZE
        seed_block = state.deadlines.draw_after
        assert seed_block == state.deadlines.entered_block + PRESET.AUDIT_DRAW_DELAY_BLOCKS
        seed = compute_round_seed(run.audit_id, 0, world.protocol.get_blockhash(seed_block))
        epoch = world.protocol.registry.call("epochOf", state.deadlines.entered_block)
        nodes, stakes = world.protocol.registry.call("getModelWeights", worker.receipt.model_id, epoch)
        want = compute_committee(seed, 0, PRESET.COMMITTEE_SIZE, nodes, compute_excluded_weights(nodes, stakes, [node.address]))
        assert committee == list(want)


def test_start_window_and_missed_start(world):
    worker, dispatcher = world.make_worker(world.nodes[0]), world.nodes[1]
    batch = _drawn_batch(world, [worker.receipt], dispatcher)
    assert world.protocol.is_audited(batch.batch_id, 0)  # MINIMAL audits every job
    with reverts("TooEarly"):
        world.protocol.slash_missed_start(world.outsider, batch.batch_id, 0)
    world.chain.mine(PRESET.START_WINDOW_BLOCKS + 1)
    with reverts("TooLate"):
        world.protocol.start_audit(dispatcher.account, batch.batch_id, 0, worker.receipt, batch.levels)
    with reverts("IndexOutOfBatch"):
        world.protocol.slash_missed_start(world.outsider, batch.batch_id, 1)
    stake = world.protocol.get_node(dispatcher.address)["stake_wei"]
    world.protocol.slash_missed_start(world.outsider, batch.batch_id, 0)
    assert world.protocol.get_node(dispatcher.address)["stake_wei"] < stake
    with reverts("AlreadyHandled"):
        world.protocol.slash_missed_start(world.outsider, batch.batch_id, 0)


def test_requested_audit_needs_the_committee_fee(world_base):
    """With a 0% audit rate nothing is drawn for audit; a client pays to audit its job."""
    world = World(RpcChain(world_base.chain.url), PRESET.replace(AUDIT_RATE_BPS=0))
    worker, dispatcher = world.make_worker(world.nodes[0]), world.nodes[1]
    batch = _drawn_batch(world, [worker.receipt], dispatcher)
    assert not world.protocol.is_audited(batch.batch_id, 0)
    with reverts("WrongFee"):
        world.protocol.start_audit(world.outsider, batch.batch_id, 0, worker.receipt, batch.levels)
    fee = PRESET.COMMITTEE_SIZE * PRESET.AUDIT_FEE_WEI
    audit_id = world.protocol.start_audit(world.outsider, batch.batch_id, 0, worker.receipt, batch.levels, fee).value
    assert world.protocol.get_audit(audit_id).requested
    with reverts("NotAudited"):
        world.protocol.slash_missed_start(world.outsider, batch.batch_id, 0)
