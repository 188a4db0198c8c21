"""Registry: registration, keys, models, stake, unbonding, access control, sortition."""


from helpers.chain import reverts
from verillm.spec import vrf
from verillm.spec.audit import compute_committee, compute_excluded_weights

from helpers.contracts import MODEL, MODEL_ID, NODE_STAKES_WEI, PRESET


def _fresh(world, index: int = 7):
    return world.chain.dev_accounts[index], vrf.derive_secret_key(b"fresh" * 6 + bytes([index, 0]))


def test_registered_nodes_are_active_and_listed_in_sortition_order(world):
    nodes, stakes = world.protocol.get_model_nodes(MODEL_ID)
    assert nodes == [n.address for n in world.nodes]
    assert stakes == [s * PRESET.MIN_STAKE_WEI for s in NODE_STAKES_WEI]
    info = world.protocol.get_node(world.nodes[0].address)
    assert info["active"] and info["registered"] and info["models"] == [MODEL_ID]
    key = world.protocol.registry.call("getVrfPublicKey", world.nodes[0].address)
    assert key == vrf.compute_words(vrf.compute_public_key(world.nodes[0].vrf_key))


def test_register_rejects_low_stake_bad_pop_unknown_model_and_duplicates(world):
    account, sk = _fresh(world)
    with reverts("StakeTooLow"):
        world.protocol.register(account, sk, "http://x", [MODEL_ID], PRESET.MIN_STAKE_WEI - 1)
    with reverts("UnknownModel"):
        world.protocol.register(account, sk, "http://x", [b"\x99" * 32], PRESET.MIN_STAKE_WEI)
    with reverts("BadModelList"):
        world.protocol.register(account, sk, "http://x", [MODEL_ID, MODEL_ID], PRESET.MIN_STAKE_WEI)
    # a possession proof made for another address does not register this one
    pk = vrf.compute_words(vrf.compute_public_key(sk))
    pop_for_other = vrf.compute_words(vrf.compute_possession_proof(sk, bytes.fromhex(world.nodes[0].address[2:])))
    with reverts("InvalidProofOfPossession"):
        world.chain.transact(world.protocol.registry, "register", pk, pop_for_other, "http://x", [MODEL_ID],
                             sender=account, value=PRESET.MIN_STAKE_WEI)
    with reverts("AlreadyRegistered"):
        world.protocol.register(world.nodes[0].account, world.nodes[0].vrf_key, "http://x", [MODEL_ID], PRESET.MIN_STAKE_WEI)


def test_update_endpoint_models_and_top_up(world):
    node = world.nodes[3]
    world.protocol.update_endpoint(node.account, "https://node.example")
    assert world.protocol.get_node(node.address)["endpoint"] == "https://node.example"
    world.protocol.top_up(node.account, 5)
    assert world.protocol.get_node(node.address)["stake_wei"] == NODE_STAKES_WEI[3] * PRESET.MIN_STAKE_WEI + 5
    with reverts("UnknownModel"):
        world.protocol.update_models(node.account, [b"\x98" * 32])
    with reverts("NotRegistered"):
        world.protocol.update_endpoint(world.outsider, "http://x")


def test_deregister_unbond_withdraw(world):
    node = world.nodes[5]
    world.protocol.deregister(node.account)
    assert not world.protocol.get_node(node.address)["active"]
    nodes, weights = world.protocol.get_model_nodes(MODEL_ID)  # from the next epoch on
    assert dict(zip(nodes, weights, strict=True))[node.address] == 0
    with reverts("Deregistering"):
        world.protocol.top_up(node.account, 1)
    with reverts("StillUnbonding"):
        world.protocol.withdraw(node.account)
    world.chain.mine(PRESET.UNBONDING_BLOCKS)
    before = world.chain.get_balance(node.address)
    tx = world.protocol.withdraw(node.account)
    assert tx.value == NODE_STAKES_WEI[5] * PRESET.MIN_STAKE_WEI
    assert world.chain.get_balance(node.address) > before + tx.value - 10**16  # minus gas
    assert not world.protocol.get_node(node.address)["registered"]
    with reverts("NotRegistered"):
        world.protocol.withdraw(node.account)


def test_withdraw_before_deregistering_fails(world):
    with reverts("NotDeregistering"):
        world.protocol.withdraw(world.nodes[0].account)


def test_only_jobs_and_disputes_slash_or_lock(world):
    registry = world.protocol.registry
    for function in ("slash", "lock", "unlock"):
        with reverts("NotProtocol"):
            world.chain.transact(registry, function, world.nodes[0].address, sender=world.nodes[1].account)


def test_only_deployer_binds_and_adds_models_and_configs_are_frozen(world):
    registry = world.protocol.registry
    with reverts("NotDeployer"):
        world.chain.transact(registry, "bindProtocol", *[world.outsider.address] * 4, sender=world.outsider)
    with reverts("AlreadyBound"):
        world.chain.transact(registry, "bindProtocol", *[world.outsider.address] * 4, sender=world.owner)
    with reverts("NotDeployer"):
        world.protocol.add_model(world.outsider, MODEL)
    with reverts("ModelExists"):
        world.protocol.add_model(world.owner, MODEL)
    with reverts("NotDeployer"):
        world.chain.transact(world.protocol.jobs, "bindProtocol", *[world.outsider.address] * 3, sender=world.owner)


def test_draw_committee_matches_the_spec_and_excludes(world):
    epoch = world.protocol.registry.call("currentEpoch")
    nodes, stakes = world.protocol.registry.call("getModelWeights", MODEL_ID, epoch)
    seed = b"\x42" * 32
    for attempt in (0, 1):
        excluded = [nodes[0], nodes[2]]
        got = world.protocol.registry.call("drawCommittee", MODEL_ID, seed, attempt, 3, excluded, epoch, 0)
        want = compute_committee(seed, attempt, 3, nodes, compute_excluded_weights(nodes, stakes, excluded))
        assert list(got) == list(want)
        assert not set(got) & set(excluded) and len(set(got)) == 3
    with reverts("NotEnoughCandidates"):
        world.protocol.registry.call("drawCommittee", MODEL_ID, seed, 0, 5, [nodes[0], nodes[1]], epoch, 0)
    with reverts("EpochNotReadable"):  # only the current and the previous epoch's weights are read
        world.protocol.registry.call("drawCommittee", MODEL_ID, seed, 0, 3, [], epoch + 1, 0)


def _draws_seeded_around(world, epoch: int, nodes, stakes, node: str, out: int) -> int:
    """24 draws each seeded before, at and after block ``out``, from which ``node`` is out: each
    equals the spec's (`compute_round_committee`), none seeded at or after ``out`` seats the node;
    return how many seeded before seat it."""
    from verillm.spec.audit import compute_round_committee

    outs = [out if n == node else 0 for n in nodes]
    drawn_before = 0
    for i in range(24):
        seed = bytes([i]) * 32
        for seed_block in (out - 1, out, out + 5):
            got = list(world.protocol.registry.call("drawCommittee", MODEL_ID, seed, 0, 3, [], epoch, seed_block))
            assert got == list(compute_round_committee(seed, 0, 3, nodes, stakes, outs, seed_block))
            if seed_block < out:
                drawn_before += node in got
            else:
                assert node not in got, f"a node out at {out} was drawn for seed block {seed_block}"
    return drawn_before


def test_a_node_that_unbonds_sits_on_no_round_seeded_at_or_after_its_unbond(world):
    """Issue 20 (the unbond duty): after `deregister` (unbond) at block U, a draw whose seed block is
    ≥ U skips the node (it is excluded and the draw repeated, `compute_round_committee`); a draw
    whose seed block is < U still weighs it (leaving after the seed was known re-rolls nothing).
    Before the fix the node was drawn into 3 of the next 4 committees of its epoch."""
    registry = world.protocol.registry
    epoch = registry.call("currentEpoch")
    nodes, stakes = registry.call("getModelWeights", MODEL_ID, epoch)
    heavy = world.node(nodes[stakes.index(max(stakes))])  # the heaviest node: most often drawn
    left = world.protocol.deregister(heavy.account).receipt["blockNumber"]
    assert registry.call("leaveOf", heavy.address) == [True, left]
    assert registry.call("currentEpoch") == epoch  # its snapshot weight still stands this epoch
    assert _draws_seeded_around(world, epoch, nodes, stakes, heavy.address, left) > 0


def test_a_slashed_node_sits_out_rounds_seeded_from_its_slash_and_keeps_earlier_seats(world):
    """Issue 20 (no re-roll by a slash): a node whose stake is taken at block S is skipped by every
    draw of its epoch seeded at or after S (`Registry.outBlock`), and still weighs in a draw seeded
    before S: the weights a draw reads are fixed when its epoch begins, so a slash fired between
    a seed block and the draw (a griefer's, or a dispatcher's of its own sybil) changes nothing."""
    registry = world.protocol.registry
    victim = world.nodes[0]  # the heaviest node (3 × minimum): most often drawn
    batch = world.protocol.post_batch(victim.account, [b"\x01" * 32]).value
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS + 1)
    epoch = registry.call("currentEpoch")
    nodes, stakes = registry.call("getModelWeights", MODEL_ID, epoch)
    slashed = world.protocol.slash_missed_draw(world.outsider, batch.batch_id).receipt["blockNumber"]
    assert registry.call("getModelWeights", MODEL_ID, epoch) == [nodes, stakes], "a slash changed a readable epoch"
    assert registry.call("currentEpoch") == epoch and registry.call("outBlock", victim.address, epoch) == slashed
    assert _draws_seeded_around(world, epoch, nodes, stakes, victim.address, slashed) > 0


def test_weights_change_at_the_next_epoch_as_the_spec_computes(world):
    from verillm.spec.audit import compute_epoch, compute_weight_at

    node = world.nodes[3]
    epoch_blocks = world.protocol.registry.call("epochBlocks")
    weight = lambda e: world.protocol.registry.call("weightAt", MODEL_ID, node.address, e)  # noqa: E731
    start = world.protocol.registry.call("currentEpoch")
    checkpoints = [(start, weight(start))]  # registered before this epoch
    stake = world.protocol.get_node(node.address)["stake_wei"]
    world.protocol.top_up(node.account, 5)
    now = compute_epoch(world.chain.get_block()["number"], epoch_blocks)
    checkpoints.append((now + 1, stake + 5))
    world.protocol.top_up(node.account, 7)  # same epoch: one checkpoint, overwritten
    checkpoints[-1] = (now + 1, stake + 12)
    for e in (start, now, now + 1, now + 2):
        assert weight(e) == compute_weight_at(checkpoints, e)
    assert weight(now) == stake and weight(now + 1) == stake + 12
    world.protocol.advance_to_next_epoch()
    world.protocol.deregister(node.account)
    now = compute_epoch(world.chain.get_block()["number"], epoch_blocks)
    checkpoints.append((now + 1, 0))
    assert weight(now) == stake + 12 and weight(now + 1) == 0 == compute_weight_at(checkpoints, now + 1)

