"""Admission by stake (issue 35, finding 4): a staked peer's share of a node's queue is proportional to
its stake, so splitting a stake into identities buys nothing.

Replayed on a real node on loopback (the tiny engine, held at a gate so jobs stay queued), with its
dispatcher role on a real anvil (MINIMAL): three identities at the minimum stake send jobs until
refused, then one identity holding three times the minimum does; the three together get no more
than the one. A top-up weighs from the next epoch, as the Registry fixes it.
"""

import asyncio
import threading

import pytest

from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilProcess
from verillm.chain.protocol import Protocol
from verillm.errors import TooManyRequests
from verillm.spec import vrf
from verillm.spec.audit import OnchainModel
from verillm.spec.params import MINIMAL
from verillm.spec.types import Job, SamplingParams

from verillm.node.api.admission import compute_stake_share
from verillm.node.appkeys import APP_SERVICE
from verillm.node.dispatcher.peer import PeerClient
from verillm.node.keys import compute_node_key, write_key_file
from verillm.node.worker.engines import ServedModel
from helpers.nodes import make_local_config

QUEUE_SLOTS = 32
SYBILS = 3


class GatedEngine:
    """The tiny engine, holding every batch until ``gate`` is set: jobs stay queued while senders fill their shares."""

    def __init__(self, inner):
        self.inner, self.manifest, self.model_id, self.max_batch_size = inner, inner.manifest, inner.model_id, inner.max_batch_size
        self.gate = threading.Event()

    def run(self, jobs, on_token=None):
        self.gate.wait(timeout=300)
        return self.inner.run(jobs, on_token=on_token)


@pytest.fixture
async def staked_node(anvil_installed, tiny_engine, tmp_path, start):
    """Node W (dev account 1) on anvil with the dispatcher role; dev accounts 2–4 at the minimum stake (the
    sybils), 5 at three times it (the whale), all serving the tiny model, in the epoch after their registration."""
    engine = GatedEngine(tiny_engine)
    served = ServedModel(alias="tiny", engine=engine, tokenizer=tiny_engine.tokenizer)
    with AnvilProcess() as anvil:
        chain = RpcChain(anvil.url)
        owner, accounts = chain.dev_accounts[0], chain.dev_accounts[1:6]
        protocol = Protocol.deploy(chain, MINIMAL, owner)
        protocol.add_model(owner, OnchainModel(served.model_id, (1,), 1, (50_000,), (30_000,), 4))
        stakes = [1, 1, 1, 1, SYBILS]  # W, the sybils, the whale (× MIN_STAKE_WEI)
        for i, (account, stake) in enumerate(zip(accounts, stakes)):
            protocol.register(account, vrf.derive_secret_key(bytes([i + 1]) * 32), f"http://127.0.0.1:{9 + i}", [served.model_id],
                              stake * MINIMAL.MIN_STAKE_WEI)
        protocol.advance_to_next_epoch()
        deployment = tmp_path / "deployment.json"
        protocol.deployment.save(deployment)
        keys = [compute_node_key(bytes(a.key)) for a in accounts]
        (tmp_path / "w").mkdir()
        write_key_file(keys[0], tmp_path / "w" / "node-key.json")  # make_local_config keeps a key it finds
        config = make_local_config(
            tmp_path / "w", engine={"preset": "minimal"}, queue={"max_queued_jobs": QUEUE_SLOTS, "reserved_for_peers": 4, "max_batch_size": 1, "batch_wait_ms": 0},
            chain={"rpc_url": anvil.url, "chain_id": chain.chain_id, "jobs_address": protocol.deployment.addresses["Jobs"],
                   "registry_address": protocol.deployment.addresses["Registry"]},
            dispatcher={"enabled": True, "deployment_file": str(deployment), "poll_interval_s": 0.2},
            auth={"allowed_senders": []})
        node = await start(config, served)
        try:
            yield node, protocol, accounts, keys
        finally:
            engine.gate.set()


def make_job(served_model_id: bytes, sender: int, n: int) -> Job:
    return Job(served_model_id, (5, 6, 7), SamplingParams(), 2, bytes([sender]) * 16 + n.to_bytes(16, "big"))


async def fill_share(url: str, key, http, model_id: bytes, sender: int) -> int:
    """Enqueue jobs from ``key`` until the node refuses one with 429; return how many it took."""
    client, taken = PeerClient(url, key, http), 0
    while taken <= QUEUE_SLOTS:
        try:
            await client.enqueue_job(make_job(model_id, sender, taken))
        except TooManyRequests:
            return taken
        taken += 1
    raise AssertionError(f"sender {sender} was never refused: {taken} jobs taken")


async def test_sybil_identities_at_minimum_stake_get_together_no_more_than_one_identity_with_their_total(staked_node, http):
    node, protocol, accounts, keys = staked_node
    model_id = node.app[APP_SERVICE].router.view.model_id
    sybils = [await fill_share(node.url, keys[1 + i], http, model_id, 1 + i) for i in range(SYBILS)]
    whale = await fill_share(node.url, keys[1 + SYBILS], http, model_id, 9)
    others = 2 * SYBILS  # the peers' weight in minimum stakes: the sybils' and the whale's (W's own is not a peer's)
    assert sybils == [QUEUE_SLOTS * 1 // others] * SYBILS  # ⌊32 / 6⌋ = 5 each
    assert whale == QUEUE_SLOTS * SYBILS // others == 16
    assert sum(sybils) <= whale  # splitting the stake bought nothing (here 15 < 16: each share is rounded down)


async def test_a_networked_node_names_its_chain_on_its_info_route(staked_node, http):
    """What `verillm complete` ties a receipt's signer to when the caller pins no chain (verillm/cli/complete.py)."""
    node, protocol, accounts, keys = staked_node
    async with http.get(f"{node.url}/v1/verillm/info") as response:
        chain = (await response.json())["chain"]
    assert chain["rpc_url"] == node.config.chain.rpc_url
    assert chain["deployment"]["addresses"] == protocol.deployment.addresses and chain["deployment"]["chain_id"] == protocol.chain.chain_id


async def test_a_top_up_weighs_from_the_next_epoch_as_on_chain(staked_node, http):
    node, protocol, accounts, keys = staked_node
    model_id = node.app[APP_SERVICE].router.view.model_id
    protocol.top_up(accounts[1], SYBILS * MINIMAL.MIN_STAKE_WEI)  # the first sybil now stakes what the whale does
    assert await fill_share(node.url, keys[1], http, model_id, 1) == 5  # this epoch's weights: unchanged
    service = node.app[APP_SERVICE]
    epoch = protocol.advance_to_next_epoch()
    while service.watcher.head // MINIMAL.EPOCH_BLOCKS < epoch:  # the watcher's next poll reads the new head
        await asyncio.sleep(0.05)
    # Weights now: 4 + 1 + 1 + 3 minimum stakes among W's peers; the sybil's 5 jobs still count.
    assert 5 + await fill_share(node.url, keys[1], http, model_id, 21) == QUEUE_SLOTS * 4 // 9


def test_the_share_is_rounded_down_so_any_split_gets_no_more_than_the_whole():
    capacity, total = 256, 10**6
    for stake in (1, 7, 99_999, 250_000, total):
        for parts in (2, 3, 14):
            split = [stake // parts] * (parts - 1) + [stake - (stake // parts) * (parts - 1)]
            assert sum(compute_stake_share(capacity, part, total) for part in split) <= compute_stake_share(capacity, stake, total)
    # The flood: 14 identities at the minimum stake beside 5 honest nodes at 10 minimum stakes
    # each now hold 14/64 of a node's queue (56 of 256 slots), not 14 × 16 = 224.
    assert 14 * compute_stake_share(256, 1, 14 + 50) == 56
    assert compute_stake_share(256, 0, 10) == compute_stake_share(256, 5, 0) == 0
