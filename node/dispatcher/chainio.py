"""The dispatcher role's edge to the chain: the typed bindings run off the event loop.

The chain layer is synchronous (web3 over HTTP); every call here runs in a worker thread, so
the node keeps serving while a transaction waits for its block. Every transaction this node
sends is recorded with its gas (`chain_txs`). Also here: reading what a transaction carried
(an opening's leaves, a started audit's receipt) back from its calldata.
"""

import asyncio
import logging
from dataclasses import dataclass

from eth_account import Account
from eth_account.signers.local import LocalAccount

from verillm.chain import connect
from verillm.chain.deploy import Deployment
from verillm.chain.errors import TransactionReverted
from verillm.chain.protocol import OnchainModel, Protocol, Tx
from verillm.errors import ConfigError
from verillm.spec.encoding import decode
from verillm.spec.hashing import keccak256
from verillm.spec.types import Leaf

from verillm.node.dispatcher.tables import DispatcherTables
from verillm.node.keys import NodeKey

log = logging.getLogger(__name__)

LEAF_FIXED_BYTES = 11  # encode(Leaf): u32 position, u16 layer, u32 count, u8 flags; + 4 bytes per dim


def compute_vrf_secret_key(node_key: NodeKey) -> int:
    """Return the node's BN254 VRF key, derived from its secp256k1 key (one secret to keep)."""
    from verillm.spec import vrf

    return vrf.derive_secret_key(keccak256(b"verillm/node-vrf-key/v1" + node_key.private_key))


@dataclass(frozen=True)
class RoundInfo:
    """`Jobs.getRound`."""

    phase: int
    commit_deadline: int
    ready_block: int
    verdict_block: int
    challenge_seed: bytes
    worker_opened: bool
    members: tuple[bytes, ...]


def decode_leaves(data: bytes, dims: int) -> list[Leaf]:
    """Split posted opening bytes (encoded leaves back to back) into leaves."""
    size = LEAF_FIXED_BYTES + 4 * dims
    if len(data) % size:
        raise ConfigError(f"opening of {len(data)} bytes is not a whole number of {size}-byte leaves")
    return [decode(Leaf, data[i : i + size]) for i in range(0, len(data), size)]


class ChainIO:
    """One deployment, one signing account, calls in threads, transactions recorded."""

    def __init__(self, rpc_url: str, deployment: Deployment, key: NodeKey, tables: DispatcherTables):
        if not rpc_url:
            raise ConfigError("dispatcher.enabled needs chain.rpc_url")
        self.chain = connect(rpc_url)
        self.protocol = Protocol(self.chain, deployment)
        self.deployment = deployment
        self.account: LocalAccount = Account.from_key(key.private_key)
        self.address = key.address
        self.tables = tables
        self.params = self.protocol.params
        self._models: dict[bytes, OnchainModel] = {}

    async def read(self, function, *args):
        """Run a blocking read (any callable) in a thread."""
        return await asyncio.to_thread(function, *args)

    async def send(self, name: str, *args, audit_id: int | None = None, batch_id: int | None = None, **kwargs) -> Tx:
        """Run ``Protocol.<name>(self.account, *args)`` in a thread and record its gas."""
        method = getattr(self.protocol, name)
        tx = await asyncio.to_thread(method, self.account, *args, **kwargs)
        receipt = tx.receipt
        function = f"{name}"
        self.tables.record_tx(bytes(receipt["transactionHash"]), function, tx.gas_used, receipt["blockNumber"], audit_id, batch_id)
        log.info("%s sent %s (audit %s, batch %s): %d gas", self.account.address, name, audit_id, batch_id, tx.gas_used)
        return tx

    async def draw_challenge(self, audit_id: int) -> None:
        """`Jobs.drawChallenge`: draws the seed, or returns the one already drawn (no event then).

        Too early, or the round has moved on: nothing to do (worker and dispatcher both try).
        """
        try:
            receipt = await asyncio.to_thread(self.chain.transact, self.protocol.jobs, "drawChallenge", audit_id, sender=self.account)
        except Exception as exc:
            if not is_revert(exc, "WrongPhase", "TooEarly"):
                raise
            return
        self.tables.record_tx(bytes(receipt["transactionHash"]), "draw_challenge", receipt["gasUsed"], receipt["blockNumber"], audit_id)

    async def block_number(self) -> int:
        return await asyncio.to_thread(self.chain.get_block_number)

    async def get_round(self, audit_id: int, round_index: int) -> RoundInfo:
        raw = await asyncio.to_thread(self.protocol.jobs.call, "getRound", audit_id, round_index)
        phase, deadline, ready, verdict_block, seed, opened, members = raw
        return RoundInfo(phase, deadline, ready, verdict_block, bytes(seed), opened, tuple(bytes.fromhex(m[2:]) for m in members))

    async def get_model(self, model_id: bytes) -> OnchainModel:
        """Return a model's on-chain adjudication config (cached: it never changes)."""
        if model_id not in self._models:
            known, dims, min_cells, layers, max_cell, rms = await asyncio.to_thread(self.protocol.registry.call, "getModelConfig", model_id)
            self._models[model_id] = OnchainModel(model_id, tuple(layers), dims, tuple(max_cell), tuple(rms), min_cells)
        return self._models[model_id]

    async def get_calldata(self, tx_hash: bytes) -> dict:
        """Return the decoded arguments of a Jobs transaction."""
        def fetch():
            tx = self.chain.rpc("eth_getTransaction", lambda: self.chain.w3.eth.get_transaction(tx_hash))
            _, args = self.protocol.jobs.web3.decode_function_input(tx["input"])
            return dict(args)

        return await asyncio.to_thread(fetch)


def is_revert(exc: Exception, *names: str) -> bool:
    """Return whether ``exc`` is a revert with one of the custom errors ``names``."""
    return isinstance(exc, TransactionReverted) and exc.error in names
