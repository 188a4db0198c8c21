"""One registered node on a real anvil (MINIMAL): the chain the batching-promise and inclusion
tests run the dispatcher's tables and routes against."""

from collections.abc import Iterator
from contextlib import contextmanager

from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilProcess
from verillm.chain.protocol import Protocol
from verillm.spec.audit import OnchainModel
from verillm.spec import vrf
from verillm.spec.params import MINIMAL


@contextmanager
def one_node_deployment(model_id: bytes) -> Iterator[tuple]:
    """Yield (anvil, protocol, node, client): the contracts deployed, ``model_id`` added and dev
    account 1 registered for it at the minimum stake, its endpoint a port that answers nothing
    (a dispatcher gone offline); dev account 8 is the client."""
    with AnvilProcess() as anvil:
        chain = RpcChain(anvil.url)
        owner, node, client = chain.dev_accounts[0], chain.dev_accounts[1], chain.dev_accounts[8]
        protocol = Protocol.deploy(chain, MINIMAL, owner)
        protocol.add_model(owner, OnchainModel(model_id, (1,), 1, (50_000,), (30_000,), 4))
        protocol.register(node, vrf.derive_secret_key(b"\x01" * 32), "http://127.0.0.1:9", [model_id], MINIMAL.MIN_STAKE_WEI)
        yield anvil, protocol, node, client
