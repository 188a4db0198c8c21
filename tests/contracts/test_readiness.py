"""Readiness counts the committee the contract will draw: `Jobs._drawMembers` excludes the job's
worker and its dispatcher, over the Registry's weights of the current epoch, and
`Registry.drawCommittee` every node that unbonded or was slashed before the round's seed. Four weighted
workers, the dispatcher among them, cannot audit a job another worker runs (the devnet of
issue 23: every job routed away from the gateway was abandoned while /healthz said ready)."""

from verillm.spec import vrf
from verillm.node.dispatcher.readiness import compute_serving_reasons, read_serving_state

from helpers.contracts import MODEL_ID


def _reasons(world, address: str) -> list[str]:
    return compute_serving_reasons(read_serving_state(world.protocol, address, MODEL_ID))


def test_four_weighted_workers_cannot_audit_for_a_dispatcher_among_them(world):
    dispatcher = world.nodes[0]
    assert _reasons(world, dispatcher.address) == []  # six weighted: 6 − worker − dispatcher = 4 ≥ 3
    for leaving in world.nodes[4:]:
        world.protocol.deregister(leaving.account)
    # A departure counts at once (issue 20): its weight stays this epoch, but no round seeded after
    # its unbond draws it (Registry.drawCommittee).
    for _ in range(2):
        reasons = _reasons(world, dispatcher.address)
        assert len(reasons) == 1 and reasons[0].startswith("4 workers weigh in this epoch's committee draws"), reasons
        assert "a job needs 5: its worker, this dispatcher, and a committee of 3" in reasons[0]
        world.protocol.advance_to_next_epoch()
    # A dispatcher that serves no weight itself is not excluded twice: 4 − worker = 3 is enough.
    assert _reasons(world, world.outsider.address) == [r for r in _reasons(world, world.outsider.address) if "not registered" in r]


def test_a_worker_that_registers_now_is_counted_from_the_next_epoch(world):
    for leaving in world.nodes[3:]:
        world.protocol.deregister(leaving.account)
    world.protocol.advance_to_next_epoch()
    newcomer = world.chain.dev_accounts[7]
    world.protocol.register(newcomer, vrf.derive_secret_key(b"\x77" * 32), "http://127.0.0.1:9999", [MODEL_ID], world.preset.MIN_STAKE_WEI)
    reasons = _reasons(world, world.nodes[0].address)
    assert len(reasons) == 1 and reasons[0].startswith("3 workers weigh in this epoch's committee draws"), reasons
    assert f"4 weigh from the next epoch (block {(world.chain.get_block_number() // world.preset.EPOCH_BLOCKS + 1) * world.preset.EPOCH_BLOCKS})" in reasons[0]


def test_a_worker_slashed_this_epoch_is_not_counted(world):
    """A slash leaves the node's weight in this epoch's table (nothing changes a readable epoch,
    so no draw seeded before it re-rolls), but no round seeded from it on draws the node
    (`Registry.outBlock`): readiness counts the committee those rounds can draw."""
    from helpers.contracts import PRESET

    dispatcher = world.nodes[0]
    world.protocol.deregister(world.nodes[5].account)  # five weighted: 5 − worker − dispatcher = 3, just enough
    assert _reasons(world, dispatcher.address) == []
    victim = world.nodes[4]
    batch = world.protocol.post_batch(victim.account, [b"\x01" * 32]).value
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS + 1)
    world.protocol.slash_missed_draw(world.outsider, batch.batch_id)
    epoch = world.protocol.registry.call("currentEpoch")
    nodes, weights = world.protocol.registry.call("getModelWeights", MODEL_ID, epoch)
    assert weights[nodes.index(victim.address)] > 0  # still in the table of this epoch
    state = read_serving_state(world.protocol, dispatcher.address, MODEL_ID)
    assert victim.address.lower() not in state.weighted_now and victim.address.lower() not in state.weighted_next
    reasons = compute_serving_reasons(state)
    assert len(reasons) == 1 and reasons[0].startswith("4 workers weigh in this epoch's committee draws"), reasons
