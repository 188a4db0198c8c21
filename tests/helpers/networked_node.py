"""A real networked node for tests: anvil, the contracts deployed with a preset, the tiny model added,
five nodes registered for it at the minimum stake (what a committee of three needs beside the
worker and the dispatcher: node/dispatcher/readiness.py), and one of them — dev account 1 — running
as a real node with the dispatcher role on its own loop thread. The other four are registered at
ports that answer nothing: the gateway's router skips them (connection refused) and runs jobs itself.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilProcess
from verillm.chain.protocol import Protocol
from verillm.spec.audit import OnchainModel
from verillm.spec.params import MINIMAL, Preset

from verillm.node.dispatcher.chainio import compute_vrf_secret_key
from verillm.node.keys import compute_node_key, write_key_file
from helpers.nodes import ThreadedNode, make_local_config

NODES = 5


@contextmanager
def networked_node(directory: Path, served, preset: Preset = MINIMAL, configured_preset: str = "minimal",
                   dispatcher: dict | None = None) -> Iterator[tuple]:
    """Yield (anvil, protocol, node): ``node`` a `ThreadedNode` serving ``served`` as dev account 1
    (``dispatcher``: settings of its `[dispatcher]` section beside the ones this sets)."""
    with AnvilProcess() as anvil:
        chain = RpcChain(anvil.url)
        owner, accounts = chain.dev_accounts[0], chain.dev_accounts[1:1 + NODES]
        protocol = Protocol.deploy(chain, preset, owner)
        protocol.add_model(owner, OnchainModel(served.model_id, (1,), 1, (50_000,), (30_000,), 4))
        for i, account in enumerate(accounts):  # each with the VRF key its node would derive (it draws with it)
            protocol.register(account, compute_vrf_secret_key(compute_node_key(bytes(account.key))), f"http://127.0.0.1:{9 + i}",
                              [served.model_id], preset.MIN_STAKE_WEI)
        protocol.advance_to_next_epoch()  # registrations weigh from the next epoch
        deployment = Path(directory) / "deployment.json"
        protocol.deployment.save(deployment)
        (Path(directory) / "w").mkdir(parents=True, exist_ok=True)
        write_key_file(compute_node_key(bytes(accounts[0].key)), Path(directory) / "w" / "node-key.json")
        config = make_local_config(
            Path(directory) / "w", engine={"preset": configured_preset},
            chain={"rpc_url": anvil.url, "chain_id": chain.chain_id, "jobs_address": protocol.deployment.addresses["Jobs"],
                   "registry_address": protocol.deployment.addresses["Registry"]},
            dispatcher={"enabled": True, "deployment_file": str(deployment), "poll_interval_s": 0.2, **(dispatcher or {})})
        node = ThreadedNode(config, served)
        try:
            yield anvil, protocol, node
        finally:
            node.stop()
