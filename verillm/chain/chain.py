"""`Chain`: the one interface the rest of VeriLLM uses to read from and write to an EVM.

Reads (`call`) never sign or spend; writes (`send`, `transact`, `deploy`) are signed locally
with eth-account and submitted raw, so the same code drives the in-process eth-tester chain,
anvil, and any production chain. Every failure is translated here, once, into a `ChainError`
subclass whose message names the contract, the function and the decoded revert reason.
Backends (`verillm.chain.backends`) add how to connect and the dev helpers (mine, time travel,
snapshots).
"""

import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import requests
from eth_account.signers.local import LocalAccount
from eth_tester import exceptions as tester_errors
from eth_utils.exceptions import ValidationError as EthValidationError
from web3 import Web3
from web3.contract import Contract
from web3.exceptions import TransactionNotFound, Web3Exception

from verillm.chain.artifacts import ArtifactStore
from verillm.chain.errors import ChainTimeout, ChainUnavailable, TransactionReverted, get_revert_data
from verillm.chain.nonces import NonceManager
from verillm.errors import ChainError

# eth-tester raises its own exceptions through web3's in-process provider.
TESTER_ERRORS = (tester_errors.TransactionFailed, tester_errors.ValidationError, tester_errors.BlockNotFound,
                 tester_errors.SnapshotNotFound)


@dataclass(frozen=True)
class ChainConfig:
    """How the chain layer waits, estimates and prices transactions."""

    receipt_timeout_s: float = 120.0
    """How long `transact` waits for a receipt before raising ChainTimeout."""
    poll_interval_s: float = 0.05
    """Pause between receipt polls."""
    gas_margin_pct: int = 20
    """Added to eth_estimateGas, for state that changes between estimate and inclusion."""
    priority_fee_wei: int = 10**9
    """EIP-1559 tip; maxFeePerGas is 2 × base fee + tip."""
    rpc_timeout_s: float = 30.0
    """HTTP timeout of one JSON-RPC request."""


@dataclass(frozen=True)
class ContractHandle:
    """A deployed contract: its artifact name, address and web3 binding."""

    chain: "Chain"
    name: str
    address: str
    web3: Contract

    def call(self, function: str, *args, **kwargs) -> Any:
        """Read: see `Chain.call`."""
        return self.chain.call(self, function, *args, **kwargs)

    def transact(self, function: str, *args, **kwargs) -> dict:
        """Write and wait for the receipt: see `Chain.transact`."""
        return self.chain.transact(self, function, *args, **kwargs)

    def send(self, function: str, *args, **kwargs) -> bytes:
        """Write without waiting: see `Chain.send`."""
        return self.chain.send(self, function, *args, **kwargs)


class Chain:
    """Reads, signed writes, receipts and events over one web3 connection."""

    dev_accounts: list[LocalAccount]

    def __init__(self, w3: Web3, *, artifacts: ArtifactStore | None = None, config: ChainConfig | None = None):
        self.w3 = w3
        self.config = config or ChainConfig()
        self.artifacts = artifacts or ArtifactStore()
        self.error_decoder = self.artifacts.error_decoder()
        self.nonces = NonceManager(self._get_pending_nonce)
        # Called with "Contract.function" ("Name.constructor", "transfer") once a transaction is
        # submitted, before waiting for its block: the node's crash matrix kills itself there
        # (node/faults.py), the CLI says it is waiting (verillm/cli/chain.py); None elsewhere.
        self.after_send: Callable[[str], None] | None = None
        self.chain_id: int = self.rpc("eth_chainId", lambda: w3.eth.chain_id)
        self.dev_accounts = []

    # --- contracts -------------------------------------------------------------------------
    def at(self, name: str, address: str) -> ContractHandle:
        """Return a handle on the ``name`` contract deployed at ``address``."""
        checksum = Web3.to_checksum_address(address)
        return ContractHandle(self, name, checksum, self.w3.eth.contract(address=checksum, abi=self.artifacts.get(name).abi))

    def deploy(self, name: str, *args, sender: LocalAccount, value: int = 0, gas: int | None = None) -> ContractHandle:
        """Deploy contract ``name`` with constructor ``args``; return its handle once mined."""
        artifact = self.artifacts.get(name)
        if artifact.bytecode in ("", "0x"):
            raise ChainError(f"{name} has no bytecode (an interface or abstract contract?)")
        factory = self.w3.eth.contract(abi=artifact.abi, bytecode=artifact.bytecode)
        data = factory.constructor(*args).data_in_transaction
        tx_hash = self._send_raw({"data": data, "value": value}, sender, gas, f"{name}.constructor")
        if self.after_send is not None:
            self.after_send(f"{name}.constructor")
        receipt = self.wait_for_receipt(tx_hash, label=f"{name}.constructor")
        return self.at(name, receipt["contractAddress"])

    # --- reads -----------------------------------------------------------------------------
    def call(self, contract: ContractHandle, function: str, *args, sender: str | None = None,
             value: int = 0, block: int | str = "latest") -> Any:
        """Return ``function(*args)`` evaluated at ``block`` without a transaction."""
        label = f"{contract.name}.{function}"
        bound = contract.web3.functions[function](*args)
        tx = {"from": sender or self._default_caller(), "value": value}
        return self.rpc(label, lambda: bound.call(tx, block_identifier=block))

    def get_block_number(self) -> int:
        """Return the latest block number."""
        return self.rpc("eth_blockNumber", lambda: self.w3.eth.block_number)

    def get_block(self, block: int | str = "latest") -> dict:
        """Return a block header (number, timestamp, hash, baseFeePerGas, ...)."""
        return dict(self.rpc("eth_getBlockByNumber", lambda: self.w3.eth.get_block(block)))

    def get_balance(self, address: str) -> int:
        """Return ``address``'s balance in wei."""
        return self.rpc("eth_getBalance", lambda: self.w3.eth.get_balance(Web3.to_checksum_address(address)))

    # --- writes ----------------------------------------------------------------------------
    def send(self, contract: ContractHandle, function: str, *args, sender: LocalAccount,
             value: int = 0, gas: int | None = None) -> bytes:
        """Sign and submit ``function(*args)``; return the tx hash without waiting.

        Gas is estimated first (so a call that would revert raises TransactionReverted and spends
        no nonce) unless ``gas`` is given.
        """
        data = contract.web3.encode_abi(function, args=list(args))
        tx = {"to": contract.address, "data": data, "value": value}
        return self._send_raw(tx, sender, gas, f"{contract.name}.{function}")

    def transact(self, contract: ContractHandle, function: str, *args, sender: LocalAccount, value: int = 0,
                 gas: int | None = None, timeout_s: float | None = None) -> dict:
        """Send ``function(*args)`` and return its receipt; raise TransactionReverted if it failed."""
        tx_hash = self.send(contract, function, *args, sender=sender, value=value, gas=gas)
        if self.after_send is not None:
            self.after_send(f"{contract.name}.{function}")
        return self.wait_for_receipt(tx_hash, timeout_s=timeout_s, label=f"{contract.name}.{function}")

    def transfer(self, sender: LocalAccount, to: str, value_wei: int) -> dict:
        """Send plain ether; return the receipt."""
        tx_hash = self._send_raw({"to": Web3.to_checksum_address(to), "value": value_wei}, sender, 21_000, "transfer")
        if self.after_send is not None:
            self.after_send("transfer")
        return self.wait_for_receipt(tx_hash, label="transfer")

    def wait_for_receipt(self, tx_hash: bytes, timeout_s: float | None = None, label: str = "transaction") -> dict:
        """Poll until ``tx_hash`` is mined; raise ChainTimeout, or TransactionReverted if status is 0."""
        limit_s = self.config.receipt_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit_s
        while True:
            receipt = self._get_receipt(tx_hash, label)
            if receipt is not None:
                break
            if time.monotonic() >= deadline:
                raise ChainTimeout(f"{label}: no receipt for 0x{bytes(tx_hash).hex()} after {limit_s} s")
            time.sleep(self.config.poll_interval_s)
        if receipt["status"] != 1:
            raise self._explain_failed_receipt(receipt, label)
        return receipt

    # --- internals -------------------------------------------------------------------------
    def _send_raw(self, tx: dict, sender: LocalAccount, gas: int | None, label: str) -> bytes:
        tx = {**tx, "from": sender.address, "chainId": self.chain_id}
        tx["gas"] = gas if gas is not None else self._estimate_gas(tx, label)
        tx.update(self._get_fee_fields(label))
        with self.nonces.reserve(sender.address) as nonce:
            signed = sender.sign_transaction({k: v for k, v in tx.items() if k != "from"} | {"nonce": nonce})
            return self.rpc(label, lambda: bytes(self.w3.eth.send_raw_transaction(signed.raw_transaction)))

    def _estimate_gas(self, tx: dict, label: str) -> int:
        estimate = self.rpc(label, lambda: self.w3.eth.estimate_gas(tx))
        limit = self.get_block()["gasLimit"]
        return min(estimate * (100 + self.config.gas_margin_pct) // 100, limit)

    def _get_fee_fields(self, label: str) -> dict:
        base_fee = self.get_block().get("baseFeePerGas")
        if base_fee is None:  # a pre-London chain
            return {"gasPrice": self.rpc(label, lambda: self.w3.eth.gas_price)}
        tip = self.config.priority_fee_wei
        return {"maxFeePerGas": 2 * base_fee + tip, "maxPriorityFeePerGas": tip}

    def _get_pending_nonce(self, address: str) -> int:
        return self.rpc("eth_getTransactionCount", lambda: self.w3.eth.get_transaction_count(address, "pending"))

    def _get_receipt(self, tx_hash: bytes, label: str) -> dict | None:
        def fetch():
            try:
                return self.w3.eth.get_transaction_receipt(tx_hash)
            except TransactionNotFound:
                return None

        receipt = self.rpc(label, fetch)
        return None if receipt is None else dict(receipt)

    def _explain_failed_receipt(self, receipt: dict, label: str) -> ChainError:
        """Replay a failed transaction as a call on its parent block to recover the revert reason."""
        tx = self.rpc(label, lambda: self.w3.eth.get_transaction(receipt["transactionHash"]))
        replay = {"from": tx["from"], "to": tx.get("to"), "data": tx["input"], "value": tx["value"], "gas": tx["gas"]}
        where = f"in block {receipt['blockNumber']} (tx 0x{bytes(receipt['transactionHash']).hex()}, gas used {receipt['gasUsed']} of {tx['gas']})"
        try:
            self.rpc(label, lambda: self.w3.eth.call(replay, block_identifier=receipt["blockNumber"] - 1))
        except TransactionReverted as exc:
            return TransactionReverted(f"{exc} {where}", error=exc.error, args=exc.error_args, data=exc.data)
        if receipt["gasUsed"] >= tx["gas"]:
            hint = "out of gas"
        else:  # the revert depends on the block it landed in
            hint = "its replay on the parent block succeeded: a window that closed, or a transaction before it in its block"
        return TransactionReverted(f"{label} reverted {where}: reason unavailable ({hint})")

    def _default_caller(self) -> str:
        return "0x" + "00" * 20

    def rpc(self, label: str, action: Callable[[], Any]) -> Any:
        """Run ``action`` (web3 calls), translating its failures into ChainError subclasses naming ``label``."""
        with translate_errors(label, self.error_decoder):
            return action()


@contextmanager
def translate_errors(label: str, decoder):
    """Turn web3, eth-tester and transport exceptions into ChainError subclasses naming ``label``."""
    try:
        yield
    except ChainError:
        raise
    except (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError) as exc:
        raise ChainUnavailable(f"{label}: chain unreachable: {exc}") from exc
    except (Web3Exception, EthValidationError, *TESTER_ERRORS, ValueError) as exc:
        _raise_translated(label, decoder, exc)


def _raise_translated(label: str, decoder, exc: BaseException):
    data = get_revert_data(exc)
    if data is None:
        raise ChainError(f"{label} failed: {exc}") from exc
    name, args, text = decoder.compute_reason(data)
    raise TransactionReverted(f"{label} reverted: {text}", error=name, args=args, data=data) from exc

