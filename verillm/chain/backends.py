"""The two backends: eth-tester in process, and JSON-RPC (anvil in tests, any EVM in production).

Both sign locally and speak to web3 the same way; they differ in how they connect and in the
dev helpers: mine blocks, move time, snapshot and revert, switch automining.
"""

import threading
import time
from collections.abc import Callable
from functools import lru_cache

import requests
import requests.adapters
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_tester import EthereumTester, PyEVMBackend
from web3 import EthereumTesterProvider, HTTPProvider, Web3

from verillm.chain.artifacts import ArtifactStore
from verillm.chain.chain import Chain, ChainConfig
from verillm.chain.errors import ChainUnavailable
from verillm.errors import ChainError, ConfigError

# anvil's (and hardhat's) default dev mnemonic; its accounts are public test keys.
ANVIL_MNEMONIC = "test test test test test test test test test test test junk"
ANVIL_CHAIN_ID = 31337
DEV_ACCOUNT_COUNT = 10


class _LockedTesterProvider(EthereumTesterProvider):
    """py-evm is not thread-safe: one request at a time."""

    def __init__(self, tester: EthereumTester, lock: threading.RLock):
        super().__init__(tester)
        self._lock = lock

    def make_request(self, method, params):
        with self._lock:
            return super().make_request(method, params)


class EthTesterChain(Chain):
    """An in-process chain (py-evm through eth-tester): ten accounts with 1,000,000 ether each."""

    def __init__(self, *, artifacts: ArtifactStore | None = None, config: ChainConfig | None = None):
        self.tester = EthereumTester(PyEVMBackend())
        self.lock = threading.RLock()
        super().__init__(Web3(_LockedTesterProvider(self.tester, self.lock)), artifacts=artifacts, config=config)
        # eth-tester's default keys are the integers 1..10.
        self.dev_accounts = [Account.from_key(i.to_bytes(32, "big")) for i in range(1, DEV_ACCOUNT_COUNT + 1)]

    def _default_caller(self) -> str:
        # eth-tester charges a call's gas to its sender, so an unfunded caller cannot even read.
        return self.dev_accounts[0].address

    def mine(self, blocks: int = 1) -> None:
        """Mine ``blocks`` empty blocks (pending transactions go into the first)."""
        with self.lock:
            self.tester.mine_blocks(blocks)

    def increase_time(self, seconds: int) -> None:
        """Mine one block whose timestamp is ``seconds`` after the latest one."""
        with self.lock:
            latest = self.tester.get_block_by_number("latest")["timestamp"]
            # time_travel(t) mines a block stamped t - 1 and leaves t for the pending one
            self.tester.time_travel(latest + seconds + 1)

    def snapshot(self) -> int:
        """Record the chain state; return an id for `revert`."""
        with self.lock:
            return self.tester.take_snapshot()

    def revert(self, snapshot_id: int) -> None:
        """Return to the state recorded by `snapshot` (local nonces are re-read)."""
        with self.lock:
            self.tester.revert_to_snapshot(snapshot_id)
        self.nonces.forget()

    def set_automine(self, enabled: bool) -> None:
        """Mine every transaction as it arrives (the default), or only on `mine`."""
        with self.lock:
            (self.tester.enable_auto_mine_transactions if enabled else self.tester.disable_auto_mine_transactions)()


MINE_CHUNK_BLOCKS = 500  # one `anvil_mine` call: well inside the RPC timeout on a loaded machine
MINE_SETTLE_S = 5.0  # how long a timed-out step may still land before the next one is sent
RPC_POOL_CONNECTIONS = 64  # a node's dispatcher runs up to 48 chain calls at once (node/dispatcher/chainio.py)


def _make_session() -> requests.Session:
    """A requests session whose pool keeps a connection for every concurrent call (the default keeps 10)."""
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=RPC_POOL_CONNECTIONS)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class RpcChain(Chain):
    """A chain behind a JSON-RPC URL. The dev helpers use anvil/hardhat `evm_*` methods."""

    def __init__(self, url: str, *, artifacts: ArtifactStore | None = None, config: ChainConfig | None = None):
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"RPC URL must be http(s)://..., got {url!r}")
        config = config or ChainConfig()
        self.url = url
        super().__init__(Web3(HTTPProvider(url, request_kwargs={"timeout": config.rpc_timeout_s}, session=_make_session())), artifacts=artifacts, config=config)
        self.dev_accounts = compute_anvil_accounts() if self.chain_id == ANVIL_CHAIN_ID else []

    def _request(self, method: str, params: list):
        return self.rpc(method, lambda: self.w3.manager.request_blocking(method, params))

    def mine(self, blocks: int = 1) -> None:
        """Mine ``blocks`` blocks (`anvil_mine` calls of at most MINE_CHUNK_BLOCKS on anvil)."""
        self.mine_to(self.get_block_number() + blocks)

    def mine_to(self, goal: int, progress: Callable[[int, int], None] | None = None) -> int:
        """Mine until the head is block ``goal``; returns the head. Each step re-reads the head and
        mines at most what is left, so a call that timed out on the client after anvil mined its
        blocks is never mined again (a 3,000-block `anvil_mine` on a busy devnet did, then fell
        back to one block at a time and mined them twice). ``progress(head, goal)`` after each step."""
        head = self.get_block_number()
        while head < goal:
            self._mine_step(head, min(goal - head, MINE_CHUNK_BLOCKS))
            head = self.get_block_number()
            if progress is not None:
                progress(head, goal)
        return head

    def _mine_step(self, head: int, blocks: int) -> None:
        if self.chain_id != ANVIL_CHAIN_ID or blocks == 1:
            self._request("evm_mine", [])  # one block; the caller's loop re-reads the head
            return
        try:
            self._request("anvil_mine", [hex(blocks)])
        except ChainUnavailable:
            self._await_head(head + blocks)  # timed out here: anvil may still be mining the step
        except ChainError as exc:
            if not _is_missing_method(exc):
                raise
            self._request("evm_mine", [])  # an embedded dev chain on anvil's chain id: one at a time

    def _await_head(self, target: int) -> None:
        """After a timed-out step: give anvil MINE_SETTLE_S to land it before the next step is sent."""
        deadline = time.monotonic() + MINE_SETTLE_S
        while time.monotonic() < deadline and self.get_block_number() < target:
            time.sleep(0.1)

    def increase_time(self, seconds: int) -> None:
        """Mine one block whose timestamp is ``seconds`` after the latest one."""
        latest = self.get_block()["timestamp"]
        self._request("evm_mine", [latest + seconds])

    def snapshot(self) -> int:
        """Record the chain state; return an id for `revert`."""
        return int(self._request("evm_snapshot", []), 16)

    def revert(self, snapshot_id: int) -> None:
        """Return to the state recorded by `snapshot` (local nonces are re-read)."""
        if not self._request("evm_revert", [hex(snapshot_id)]):
            raise ChainError(f"evm_revert: snapshot {snapshot_id} not found (each snapshot reverts once)")
        self.nonces.forget()

    def set_automine(self, enabled: bool) -> None:
        """Mine every transaction as it arrives (the default), or only on `mine`."""
        self._request("evm_setAutomine", [enabled])


def compute_anvil_accounts(count: int = DEV_ACCOUNT_COUNT) -> list[LocalAccount]:
    """Return anvil's default dev accounts (BIP-44 m/44'/60'/0'/0/i of its public test mnemonic)."""
    return [Account.from_key(key) for key in _derive_anvil_keys(count)]


@lru_cache(maxsize=4)
def _derive_anvil_keys(count: int) -> tuple[bytes, ...]:
    Account.enable_unaudited_hdwallet_features()
    paths = (f"m/44'/60'/0'/0/{i}" for i in range(count))
    return tuple(bytes(Account.from_mnemonic(ANVIL_MNEMONIC, account_path=p).key) for p in paths)


def connect(url: str | None = None, *, artifacts: ArtifactStore | None = None, config: ChainConfig | None = None) -> Chain:
    """Return an in-process chain for ``None`` or ``"eth-tester"``, else a JSON-RPC chain at ``url``."""
    if url in (None, "", "eth-tester"):
        return EthTesterChain(artifacts=artifacts, config=config)
    return RpcChain(url, artifacts=artifacts, config=config)


def _is_missing_method(exc: ChainError) -> bool:
    text = str(exc).lower()
    return "-32601" in text or "not found" in text or "not supported" in text or "does not exist" in text
