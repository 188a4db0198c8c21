"""The dispatcher role's edge to the chain: the typed bindings run off the event loop.

The chain layer is synchronous (web3 over HTTP); every call here runs in a worker thread, so
the node keeps serving while a transaction waits for its block. Every transaction this node
sends is recorded with its gas (`chain_txs`). Also here: reading what a transaction carried
(an opening's leaves, a started audit's receipt) back from its calldata.
"""

import asyncio
import functools
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from eth_account import Account
from eth_account.signers.local import LocalAccount

from verillm.chain import connect
from verillm.chain.deploy import Deployment
from verillm.chain.errors import TransactionReverted
from verillm.chain.protocol import Protocol, Tx
from verillm.spec.audit import OnchainModel, RoundState, compute_vote_salt
from verillm.errors import ConfigError
from verillm.spec.hashing import keccak256

from verillm.node import faults
from verillm.node.dispatcher.deadlines import Due, DutyClock
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.keys import NodeKey

log = logging.getLogger(__name__)

# Each transaction holds a thread until its block is mined (a block time or more): with the event
# loop's default pool (cpu_count + 4 threads: 6 on 2 cores) a burst of audits queued every chain
# action, and aiohttp's host lookups behind them, until 20-block windows passed (issue 11). A pool
# of its own, sized for the transactions a busy dispatcher has in flight, keeps them concurrent.
CHAIN_THREADS = 48
# The reads a client's request makes (a promise's head and standing, /healthz's readiness, the
# explorer's pages) run on threads of their own: at the gateway's full admitted load they would
# otherwise hold every one of the duties' CHAIN_THREADS while a reveal waited for one (issue 35).
CLIENT_CHAIN_THREADS = 8
# How long a step that must not be done twice (a batch's post, a restart's first tick) waits for the
# transactions this account sent before it to be mined; past it, a post is not sent again (batches.py).
PENDING_WAIT_S = 60.0


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


class ChainIO:
    """One deployment, one signing account, calls in threads, transactions recorded."""

    def __init__(self, rpc_url: str, deployment: Deployment, key: NodeKey, tables: DispatcherTables):
        if not rpc_url:
            raise ConfigError("dispatcher.enabled needs chain.rpc_url")
        self.chain = connect(rpc_url)
        self.chain.after_send = reach_sent
        self.protocol = Protocol(self.chain, deployment)
        self.deployment = deployment
        self.account: LocalAccount = Account.from_key(key.private_key)
        self._draw_key = keccak256(b"verillm/node-draw-secret/v1" + key.private_key)  # never leaves the node
        self.address = key.address
        self.tables = tables
        self.preset = self.protocol.preset
        self._models: dict[bytes, OnchainModel] = {}
        self._executor = ThreadPoolExecutor(max_workers=CHAIN_THREADS, thread_name_prefix="verillm-chain")
        self._client_executor = ThreadPoolExecutor(max_workers=CLIENT_CHAIN_THREADS, thread_name_prefix="verillm-chain-clients")
        self.duties = DutyClock()
        """The deadline of every slashable transaction this node has pending, and the slack each landed with."""

    async def _run(self, function, *args, **kwargs):
        """Run a blocking chain call in the duties' threads (this node's own steps: the watcher's, its duties')."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(function, *args, **kwargs))

    async def read(self, function, *args):
        """Run a blocking read (any callable) in a thread of the node's own steps (never a client's request's)."""
        return await self._run(function, *args)

    async def read_for_clients(self, function, *args):
        """Run a blocking read made on behalf of a client's or visitor's request, in threads of their own
        (CLIENT_CHAIN_THREADS): however many such requests wait, the duties' threads stay free."""
        return await asyncio.get_running_loop().run_in_executor(self._client_executor, functools.partial(function, *args))

    async def send(self, name: str, *args, audit_id: int | None = None, batch_id: int | None = None, due: Due | None = None, **kwargs) -> Tx:
        """Run ``Protocol.<name>(self.account, *args)`` in a thread and record its gas. With ``due`` (a
        slashable duty's deadline), the duty is pending in `duties` until it lands, then its slack is kept."""
        method = getattr(self.protocol, name)
        if due is not None:
            self.duties.expect(due)
        try:
            tx = await self._run(method, self.account, *args, **kwargs)
        except Exception as exc:
            if due is not None:
                self.duties.on_refused(due, getattr(exc, "error", None) if isinstance(exc, TransactionReverted) else None)
            raise
        receipt = tx.receipt
        if due is not None:
            self.duties.on_landed(due, receipt["blockNumber"])
        function = f"{name}"
        faults.reach(f"tx_mined_{name}")
        self.tables.record_tx(bytes(receipt["transactionHash"]), function, tx.gas_used, receipt["blockNumber"], audit_id, batch_id)
        faults.reach(f"tx_recorded_{name}")
        log.info("%s sent %s (audit %s, batch %s): %d gas", self.account.address, name, audit_id, batch_id, tx.gas_used)
        return tx

    def compute_draw_secret(self, batch_id: int, index: int) -> bytes:
        """Return the secret this dispatcher draws the audit of leaf ``index`` of ``batch_id`` with
        (docs/protocol.md §12 "Private draws"): derived from its key, so a restarted node commits
        and reveals the same one, and nobody else can compute it."""
        jobs = bytes.fromhex(self.protocol.jobs.address[2:])
        return keccak256(self._draw_key + jobs + batch_id.to_bytes(8, "big") + index.to_bytes(4, "big"))

    def compute_vote_salt(self, audit_id: int, round_index: int, member_slot: int) -> bytes:
        """Return the salt this node seals its vote in seat ``member_slot`` (from 0) with
        (`Jobs.sealVote`): derived from its key and the deployment, so a restart opens the seal."""
        jobs = bytes.fromhex(self.protocol.jobs.address[2:])
        return compute_vote_salt(keccak256(self._draw_key + jobs), audit_id, round_index, member_slot)

    async def draw_challenge(self, audit_id: int) -> None:
        """`Jobs.drawChallenge`: draws the seed.

        Too early, drawn already, or the round has moved on: nothing to do (worker and dispatcher both try).
        """
        try:
            receipt = await self._run(self.chain.transact, self.protocol.jobs, "drawChallenge", audit_id, sender=self.account)
        except Exception as exc:
            if not is_revert(exc, "UnexpectedPhase", "TooEarly", "AlreadyDrawn"):
                raise
            return
        faults.reach("tx_mined_draw_challenge")
        self.tables.record_tx(bytes(receipt["transactionHash"]), "draw_challenge", receipt["gasUsed"], receipt["blockNumber"], audit_id)
        faults.reach("tx_recorded_draw_challenge")

    async def wait_own_pending_mined(self, timeout_s: float | None = None) -> bool:
        """Wait until every transaction this account had sent by now is mined (a run killed right after
        sending; an attempt whose receipt never came back).

        A restart, or a retry, redoes a step whose effect it does not find on chain (a batch still
        'posting' looks for its own post): with the earlier transaction still in the pool, its effect
        is not there yet and the step would be done twice (the same root posted as two batches).
        The target is the pending nonce now, not "nothing pending": transactions other steps send
        meanwhile (the node keeps working) would otherwise hold this wait to its timeout. Returns
        False when some are still pending at the timeout (a fee cap the base fee outgrew): a step that
        must not be done twice waits for them rather than go on.
        """
        address, timeout_s = self.account.address, PENDING_WAIT_S if timeout_s is None else timeout_s
        count = lambda tag: self.chain.w3.eth.get_transaction_count(address, tag)  # noqa: E731
        deadline = asyncio.get_running_loop().time() + timeout_s
        target = await self._run(count, "pending")
        while True:
            mined = await self._run(count, "latest")
            if mined >= target:
                return True
            if asyncio.get_running_loop().time() > deadline:
                log.error("%d transaction(s) of %s still pending after %.0f s", target - mined, address, timeout_s)
                return False
            log.info("waiting for %d transaction(s) sent earlier to be mined", target - mined)
            await asyncio.sleep(0.5)

    async def block_number(self) -> int:
        return await self._run(self.chain.get_block_number)

    async def block_number_for_clients(self) -> int:
        """The chain's head, read for a client's request (`read_for_clients`)."""
        return await self.read_for_clients(self.chain.get_block_number)

    async def get_round_state(self, audit_id: int, round_index: int | None = None) -> RoundState:
        """`Jobs.getRoundState`: phase, counts, delivery state and deadlines (spec.audit.RoundState)."""
        return await self._run(self.protocol.get_round_state, audit_id, round_index)

    async def get_round(self, audit_id: int, round_index: int) -> RoundInfo:
        raw = await self._run(self.protocol.jobs.call, "getRound", audit_id, round_index)
        phase, deadline, ready, verdict_block, seed, opened, members = raw
        return RoundInfo(phase, deadline, ready, verdict_block, bytes(seed), opened, tuple(bytes.fromhex(m[2:]) for m in members))

    async def get_model(self, model_id: bytes) -> OnchainModel:
        """Return a model's on-chain adjudication config (cached: it never changes)."""
        if model_id not in self._models:
            known, dims, min_cells, layers, max_cell, rms = await self._run(self.protocol.registry.call, "getModelConfig", model_id)
            self._models[model_id] = OnchainModel(model_id, tuple(layers), dims, tuple(max_cell), tuple(rms), min_cells)
        return self._models[model_id]

    async def get_calldata(self, tx_hash: bytes) -> dict:
        """Return the decoded arguments of a protocol transaction (Jobs, Batches, Disputes or Delivery)."""
        def fetch():
            tx = self.chain.rpc("eth_getTransaction", lambda: self.chain.w3.eth.get_transaction(tx_hash))
            handles = (self.protocol.jobs, self.protocol.batches, self.protocol.disputes, self.protocol.delivery)
            handle = next((h for h in handles if h.address.lower() == tx["to"].lower()), self.protocol.jobs)
            _, args = handle.web3.decode_function_input(tx["input"])
            return dict(args)

        return await self._run(fetch)

    async def get_worker_receipt(self, audit_id: int) -> dict:
        """The worker's signed receipt as the chain shows it (decoded `ReceiptData`): in a public
        start's calldata; a private start sends only its hash, and the receipt comes with the reveal
        (`revealRound`'s workerReceipt) or, after a missed one, `supplyReceipt`. Read from the
        recorded events: call once the round is drawn."""
        shown = self.tables.get_events("WorkerReceiptShown", audit_id)
        event = shown[0] if shown else self.tables.get_events("AuditStarted", audit_id)[0]
        call = await self.get_calldata(bytes.fromhex(event["tx_hash"]))
        return call.get("workerReceipt") or call["receipt"]


def reach_sent(label: str) -> None:
    """The crash matrix's `tx_sent_<function>` point: "Jobs.postBatch" submitted, not yet mined."""
    faults.reach("tx_sent_" + re.sub(r"(?<!^)(?=[A-Z])", "_", label.rpartition(".")[2]).lower())


def is_revert(exc: Exception, *names: str) -> bool:
    """Return whether ``exc`` is a revert with one of the custom errors ``names``."""
    return isinstance(exc, TransactionReverted) and exc.error in names
