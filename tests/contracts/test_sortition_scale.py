"""Sortition at scale (issue 9): the Registry's stake tree draws in O(log n) gas, equals the spec's
draw over its slot table, keeps an epoch's weights fixed through slashes (a slashed node sits out
the draws seeded after its slash) and reuses the slots of departed nodes."""

import random

import pytest
from eth_account import Account

from verillm.spec import vrf
from verillm.spec.audit import compute_excluded_weights, compute_round_committee
from verillm.spec.hashing import keccak256
from verillm.spec.stake_tree import Versioned, compute_read, compute_write

from helpers.contracts import MODEL_ID, PRESET
from test_redteam import _flood_departed, _send_raw

SEEDS = [bytes([s]) * 32 for s in range(1, 7)]


def _register_crowd(world, count: int, first: int = 0, chunk: int = 1_000) -> list:
    """Register ``count`` minimum-stake nodes fast (the crowd of test_redteam, its keys from
    ``first`` on): automining off, raw transactions signed with one fee, blocks mined until
    every one is in; then advance to the next epoch (the crowd weighs from there)."""
    from helpers.contracts import Node

    secret = vrf.derive_secret_key(b"redteam crowd key" * 2)
    public_key = vrf.compute_public_key(secret)
    public = vrf.compute_words(public_key)
    chain, registry = world.chain, world.protocol.registry
    fee = 2 * chain.get_block()["baseFeePerGas"] + 10**9
    crowd = []
    for start in range(first, first + count, chunk):
        chain.set_automine(False)
        try:
            hashes = []
            for i in range(start, min(start + chunk, first + count)):
                account = Account.from_key(keccak256(b"redteam crowd" + i.to_bytes(2, "big")))
                chain.w3.provider.make_request("anvil_setBalance", [account.address, hex(10**18)])
                message = vrf.compute_possession_message(public_key, bytes.fromhex(account.address[2:]))
                x, y, _ = vrf.compute_hash_to_g1(message, vrf.DOMAIN_POP)
                possession = vrf.compute_words(vrf.compute_g1_multiple((vrf.bn.FQ(x), vrf.bn.FQ(y), vrf.bn.FQ.one()), secret))
                data = registry.web3.encode_abi("register", args=[public, possession, "http://127.0.0.1:1", [MODEL_ID]])
                tx = {"to": registry.address, "data": data, "value": PRESET.MIN_STAKE_WEI, "gas": 1_500_000, "nonce": 0,
                      "maxFeePerGas": fee, "maxPriorityFeePerGas": 10**9, "chainId": chain.chain_id}
                hashes.append(chain.w3.eth.send_raw_transaction(account.sign_transaction(tx).raw_transaction))
                crowd.append(Node(account, secret))
            while int(chain.w3.provider.make_request("txpool_status", [])["result"]["pending"], 16):
                chain.mine(1)
        finally:
            chain.set_automine(True)
        for tx_hash in hashes:
            assert chain.wait_for_receipt(tx_hash)["status"] == 1
    world.protocol.advance_to_next_epoch()
    return crowd


def _draw_gas(world, seed: bytes, size: int = PRESET.COMMITTEE_SIZE, excluded=()) -> int:
    registry = world.protocol.registry
    data = registry.web3.encode_abi("drawCommittee", args=[MODEL_ID, seed, 0, size, list(excluded), registry.call("currentEpoch"), 0])
    return world.chain.w3.eth.estimate_gas({"to": registry.address, "data": data})


def _mean_draw_gas(world) -> int:
    excluded = [world.nodes[0].address, world.nodes[1].address]  # the worker and the dispatcher, as startAudit excludes
    return sum(_draw_gas(world, seed, excluded=excluded) for seed in SEEDS) // len(SEEDS)


def _tree_size(world) -> tuple[int, int]:
    return tuple(world.protocol.registry.call("getTreeSize", MODEL_ID))


def test_draw_gas_grows_with_the_log_of_the_registered_nodes(world):
    """128 → 256 registered nodes: one more tree level, a few thousand gas (the walk over every
    node cost ~5.5k gas per node: +700k)."""
    _register_crowd(world, 122)
    assert _tree_size(world) == (128, 128)
    at_128 = _mean_draw_gas(world)
    _register_crowd(world, 128, first=122)
    assert _tree_size(world) == (256, 256)
    at_256 = _mean_draw_gas(world)
    print(f"\ndrawCommittee (3 of N, 2 excluded), mean of {len(SEEDS)} seeds: N = 128: {at_128} gas, N = 256: {at_256} gas")
    assert 0 < at_256 - at_128 < 15_000, (at_128, at_256)  # one more level: ~3 cold tree reads per seat
    assert at_256 < 150_000


def test_departed_slots_are_reused_by_the_next_registrations(world):
    _flood_departed(world, 10)
    assert _tree_size(world) == (16, 16)
    world.protocol.advance_to_next_epoch()
    newcomers = _register_crowd(world, 10, first=500)
    assert _tree_size(world) == (16, 16)  # the departed slots, no new ones
    nodes, weights = world.protocol.registry.call("getModelWeights", MODEL_ID, world.protocol.registry.call("currentEpoch"))
    assert {n.address for n in newcomers} <= set(nodes)
    assert sum(1 for w in weights if w) == 16


def _assert_draws_equal_the_spec(world, rng: random.Random) -> None:
    registry = world.protocol.registry
    now = registry.call("currentEpoch")
    for epoch in (now - 1, now):
        nodes, weights = registry.call("getModelWeights", MODEL_ID, epoch)
        live = [n for n, w in zip(nodes, weights, strict=True) if w]
        for attempt in range(3):
            seed = rng.randbytes(32)
            excluded = rng.sample(live, 3)
            excluded.append(excluded[0])  # a repeat, as when the worker dispatches itself
            size = rng.choice([s for s in (1, 3, 7) if s <= len(live) - 3])
            seed_block = rng.choice([0, world.chain.get_block_number()])  # 0: before any leave or slash
            out = [registry.call("outBlock", n, epoch) for n in nodes]
            want = compute_round_committee(seed, attempt, size, nodes, compute_excluded_weights(nodes, weights, excluded), out, seed_block)
            assert list(registry.call("drawCommittee", MODEL_ID, seed, attempt, size, excluded, epoch, seed_block)) == list(want)


def test_contract_draws_equal_the_spec_over_the_slot_table_through_changes(world):
    """Joins, top-ups, departures and a slash in two consecutive epochs: every draw of both
    readable epochs is the spec's compute_committee over getModelWeights, and the weights are the
    spec's three-version values."""
    rng = random.Random(9)
    crowd = _register_crowd(world, 24)
    _assert_draws_equal_the_spec(world, rng)
    chain = world.chain
    for node in crowd[:8]:  # leave
        chain.wait_for_receipt(_send_raw(world, node.account, "deregister", nonce=1))
    for i, node in enumerate(crowd[8:16]):  # grow, from the next epoch
        chain.wait_for_receipt(_send_raw(world, node.account, "topUp", nonce=1, value=(i + 1) * PRESET.MIN_STAKE_WEI))
    _assert_draws_equal_the_spec(world, rng)
    world.protocol.advance_to_next_epoch()
    _register_crowd(world, 8, first=24)  # joins (advances one more epoch)
    victim = world.nodes[5]
    epoch = world.protocol.registry.call("currentEpoch")
    weight = world.protocol.registry.call("weightAt", MODEL_ID, victim.address, epoch)
    batch = world.protocol.post_batch(victim.account, [b"\x01" * 32]).value
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS + 1)
    world.protocol.slash_missed_draw(world.outsider, batch.batch_id)
    now = world.protocol.registry.call("currentEpoch")
    slashed_in = world.chain.get_block_number()
    spec = compute_write(Versioned(epoch, weight, weight, weight), now, 0)
    assert world.protocol.registry.call("weightAt", MODEL_ID, victim.address, now) == compute_read(spec, now) == weight > 0
    assert world.protocol.registry.call("weightAt", MODEL_ID, victim.address, now + 1) == compute_read(spec, now + 1) == 0
    assert world.protocol.registry.call("outBlock", victim.address, now) == slashed_in  # out of draws seeded from it on
    assert world.protocol.registry.call("outBlock", victim.address, now + 1) == 0  # its weight there is 0 already
    _assert_draws_equal_the_spec(world, rng)


@pytest.mark.slow  # 10,000 registrations, each a BLS proof of possession computed in Python: long
def test_draw_and_start_gas_with_10000_registered_nodes(world):
    """The issue's scale figure: drawCommittee and the start's draw (drawRound, since issue 20)
    with 10,000 nodes serving the model."""
    rows = [(len(world.nodes), _mean_draw_gas(world), None)]
    registered = 0
    for target in (1_000, 10_000):
        _register_crowd(world, target - len(world.nodes) - registered, first=registered)
        registered = target - len(world.nodes)
        rows.append((target, _mean_draw_gas(world), None))
    worker, dispatcher = world.make_worker(world.nodes[0]), world.nodes[1]
    run = world.start(worker, dispatcher=dispatcher, draw=False)
    start = world.draw_round(run)
    rows[-1] = (rows[-1][0], rows[-1][1], start.gas_used)
    print("\nnodes  drawCommittee(3, 2 excluded)  drawRound")
    for nodes, draw, start_gas in rows:
        print(f"{nodes:>6}  {draw:>28}  {start_gas or '':>10}")
    assert _tree_size(world) == (10_000, 16_384)
    assert rows[-1][1] < 200_000 and start.gas_used < 1_500_000


@pytest.mark.slow  # ~100 transactions of 20 M gas: a few minutes on a loaded 2-core machine
def test_draw_gas_with_10000_slots_in_the_stake_tree(world):
    """The Registry's StakeTree library alone (StakeTreeHarness: the same code, no BLS proof per
    node), filled to 10,000 weighted slots: drawCommittee's tree walk at the issue's scale."""
    chain = world.chain
    harness = chain.deploy("StakeTreeHarness", sender=world.owner)
    excluded = ["0x" + (1).to_bytes(20, "big").hex(), "0x" + (2).to_bytes(20, "big").hex()]
    rows, filled = [], 0
    for target in (16, 128, 1_024, 10_000):
        while filled < target:
            count = min(100, target - filled)
            chain.transact(harness, "setMany", 1 + filled, count, PRESET.MIN_STAKE_WEI, 0, sender=world.owner, gas=29_000_000)
            filled += count
        gas = [chain.w3.eth.estimate_gas({"to": harness.address, "data": harness.web3.encode_abi(
            "draw", args=[seed, 0, PRESET.COMMITTEE_SIZE, excluded, 1])}) for seed in SEEDS]
        rows.append((target, sum(gas) // len(gas), max(gas)))
        if target == 1_024:  # the whole table is too large for one eth_call at 10,000
            nodes, weights = harness.call("table", 1)
            want = compute_committee(SEEDS[0], 0, 3, nodes, compute_excluded_weights(nodes, weights, excluded))
            assert [a.lower() for a in harness.call("draw", SEEDS[0], 0, 3, excluded, 1)] == [a.lower() for a in want]
    print("\nslots  draw(3 of N, 2 excluded) mean  max")
    for slots, mean, top in rows:
        print(f"{slots:>6}  {mean:>30}  {top:>6}")
    assert tuple(harness.call("size")) == (10_000, 16_384)
    assert rows[-1][1] < 200_000 and all(b[1] - a[1] < 4 * 12_000 for a, b in zip(rows, rows[1:]))  # ≤ 12k per doubling
