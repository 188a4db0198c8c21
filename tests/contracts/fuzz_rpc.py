"""Fast JSON-RPC for the stateful fuzzer (`protocol_fuzz.py`): it makes tens of calls a step, so
web3's per-request cost (middleware, a chain-id request before every eth_call, ABI matching)
was most of its time. Here: one keep-alive HTTP connection with TCP_NODELAY, selectors and ABI
types computed once, reads batched, and transactions sent from anvil's unlocked dev accounts
(an eth_call on the pending block first, so a call that would revert raises TransactionReverted
and mines no block, as `Chain.transact` behaves; nonces still go through the chain's NonceManager so
the ordinary helpers can send after the fuzzer).
"""

import http.client
import json
import socket
import time
from urllib.parse import urlparse

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_utils import event_abi_to_log_topic, function_abi_to_4byte_selector

from verillm.chain import TransactionReverted
from verillm.chain.protocol import Tx
from verillm.errors import ChainError


GAS_LIMIT = 29_000_000  # under anvil's 30 M block gas limit; only gas used is paid


class RawRpc:
    """JSON-RPC over one persistent loopback connection (reopened if the server closes it)."""

    def __init__(self, url: str):
        parsed = urlparse(url)
        self.host, self.port, self.conn = parsed.hostname, parsed.port or 80, None
        self.requests = 0

    def _connection(self) -> http.client.HTTPConnection:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            self.conn.connect()
            self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.conn

    def post(self, payload):
        body = json.dumps(payload).encode()
        for attempt in (0, 1):
            try:
                conn = self._connection()
                conn.request("POST", "/", body, {"Content-Type": "application/json"})
                self.requests += 1
                return json.loads(conn.getresponse().read())
            except (http.client.HTTPException, ConnectionError) as exc:
                self.conn = None  # the server dropped the keep-alive connection: reconnect once
                if attempt:
                    raise ChainError(f"raw RPC failed: {exc}") from exc
        raise AssertionError("unreachable")

    def call(self, method: str, params: list):
        answer = self.post({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        if "error" in answer:
            raise ChainError(f"{method}: {answer['error']}")
        return answer["result"]


def _abi_type(item: dict) -> str:
    if item["type"].startswith("tuple"):
        return "(" + ",".join(_abi_type(c) for c in item["components"]) + ")" + item["type"][5:]
    return item["type"]


class FastReader:
    """Raw eth_call of a contract's view functions."""

    def __init__(self, rpc: RawRpc, handle):
        self.rpc, self.address, self.functions = rpc, handle.address, {}
        for item in handle.web3.abi:
            if item.get("type") == "function" and item["stateMutability"] in ("view", "pure"):
                self.functions.setdefault(item["name"], (function_abi_to_4byte_selector(item),
                                                         [_abi_type(i) for i in item["inputs"]], [_abi_type(o) for o in item["outputs"]]))

    def __call__(self, name: str, *args):
        return self.decode(name, bytes.fromhex(self.rpc.call("eth_call", [self.request(name, *args), "latest"])[2:]))

    def request(self, name: str, *args) -> dict:
        selector, inputs, _ = self.functions[name]
        return {"to": self.address, "data": "0x" + (selector + abi_encode(inputs, list(args))).hex()}

    def decode(self, name: str, raw: bytes):
        values = abi_decode(self.functions[name][2], raw)
        return values[0] if len(values) == 1 else values


def read_batch(rpc: RawRpc, calls: list) -> list:
    """Many reads in one JSON-RPC batch: (reader, name, args) → eth_call, an address string
    → eth_getBalance, "head" → eth_blockNumber."""
    payload = []
    for i, call in enumerate(calls):
        if call == "head":
            payload.append({"jsonrpc": "2.0", "id": i, "method": "eth_blockNumber", "params": []})
        elif isinstance(call, str):
            payload.append({"jsonrpc": "2.0", "id": i, "method": "eth_getBalance", "params": [call, "latest"]})
        else:
            payload.append({"jsonrpc": "2.0", "id": i, "method": "eth_call", "params": [call[0].request(call[1], *call[2]), "latest"]})
    answers = {a["id"]: a["result"] for a in rpc.post(payload)}
    return [int(answers[i], 16) if isinstance(c, str) else c[0].decode(c[1], bytes.fromhex(answers[i][2:])) for i, c in enumerate(calls)]


class FastSender:
    """A drop-in for `Protocol._send` on anvil: same arguments, same Tx (value decoded from the
    named event), same TransactionReverted on a call that would revert."""

    def __init__(self, chain, rpc: RawRpc):
        self.chain, self.rpc = chain, rpc
        self.functions: dict = {}
        self.events: dict = {}
        self.sent = 0

    def _function(self, handle, name: str):
        key = (handle.address, name)
        if key not in self.functions:
            items = [i for i in handle.web3.abi if i.get("type") == "function" and i["name"] == name]
            if len(items) != 1:
                raise ChainError(f"{name}: {len(items)} ABI entries (overloads are not supported here)")
            self.functions[key] = (function_abi_to_4byte_selector(items[0]), [_abi_type(i) for i in items[0]["inputs"]])
        return self.functions[key]

    def __call__(self, handle, function: str, *args, sender, value: int = 0, event: str | None = None, field: str | None = None,
                 emitter=None, optional: bool = False) -> Tx:
        selector, types = self._function(handle, function)
        tx = {"from": sender.address, "to": handle.address, "data": "0x" + (selector + abi_encode(types, list(args))).hex(), "value": hex(value)}
        # One eth_call on the pending block (where the transaction will land) instead of
        # eth_estimateGas's binary search: a BLS check runs once, not a dozen times.
        trial = self.rpc.post({"jsonrpc": "2.0", "id": 1, "method": "eth_call", "params": [{**tx, "gas": hex(GAS_LIMIT)}, "pending"]})
        if "error" in trial:
            error = trial["error"]
            data = error.get("data") if isinstance(error.get("data"), str) else ""
            raise TransactionReverted(f"{handle.name}.{function} reverted: {error.get('message')}", data=bytes.fromhex(data[2:]) if data else b"")
        with self.chain.nonces.reserve(sender.address) as nonce:
            tx_hash = self.rpc.call("eth_sendTransaction", [{**tx, "gas": hex(GAS_LIMIT), "nonce": hex(nonce)}])
        self.sent += 1
        receipt = self._receipt(tx_hash)
        if int(receipt["status"], 16) != 1:
            raise TransactionReverted(f"{handle.name}.{function} reverted when mined")
        decoded = self._event(emitter or handle, event, field, receipt, optional) if event else None
        return Tx(gas_used=int(receipt["gasUsed"], 16), value=decoded, receipt=receipt)

    def _receipt(self, tx_hash: str) -> dict:
        deadline = time.monotonic() + 60  # anvil automines at once, but a loaded machine can take seconds
        while time.monotonic() < deadline:
            receipt = self.rpc.call("eth_getTransactionReceipt", [tx_hash])
            if receipt is not None:
                return receipt
            time.sleep(0.005)
        raise ChainError(f"no receipt for {tx_hash}")

    def _event(self, handle, name: str, field: str | None, receipt: dict, optional: bool = False):
        key = (handle.address, name)
        if key not in self.events:
            item = next(i for i in handle.web3.abi if i.get("type") == "event" and i["name"] == name)
            self.events[key] = ("0x" + event_abi_to_log_topic(item).hex(), item["inputs"])
        topic, inputs = self.events[key]
        for log in receipt["logs"]:
            if log["address"].lower() != handle.address.lower() or log["topics"][0] != topic:
                continue
            plain = abi_decode([_abi_type(i) for i in inputs if not i["indexed"]], bytes.fromhex(log["data"][2:]))
            indexed = [abi_decode([_abi_type(i)], bytes.fromhex(t[2:]))[0] for i, t in zip([i for i in inputs if i["indexed"]], log["topics"][1:])]
            values, plain_it, indexed_it = {}, iter(plain), iter(indexed)
            for i in inputs:
                values[i["name"]] = next(indexed_it) if i["indexed"] else next(plain_it)
            return values[field] if field else values
        if optional:
            return None
        raise ChainError(f"{handle.name}: no {name} event in the receipt")


class CachedReads:
    """Reads memoized until the next transaction that mined (`FastSender.sent` moves) or an
    explicit `clear` (a snapshot revert): the honest parties read the same audit, round and
    seats many times a step, and the state only changes when a transaction lands. `prefetch`
    fills the cache with one batch."""

    def __init__(self, rpc: RawRpc, sender: FastSender):
        self.rpc, self.sender, self.cache, self.version = rpc, sender, {}, None
        self.misses = 0

    def clear(self) -> None:
        self.cache.clear()

    def _fresh(self) -> None:
        if self.sender.sent != self.version:
            self.cache.clear()
            self.version = self.sender.sent

    def get(self, reader: FastReader, name: str, *args):
        self._fresh()
        key = (reader.address, name, args)
        if key not in self.cache:
            self.misses += 1
            self.cache[key] = reader(name, *args)
        return self.cache[key]

    def prefetch(self, calls: list) -> None:
        """``calls``: (reader, name, args) triples, read in one batch if not cached."""
        self._fresh()
        missing = list({self._key(c): c for c in calls if self._key(c) not in self.cache}.values())
        if missing:
            for call, value in zip(missing, read_batch(self.rpc, missing), strict=True):
                self.cache[self._key(call)] = value

    def head(self) -> int:
        """The latest block (as of the last prefetch that asked for "head", or now), plus one
        per transaction mined since (anvil automines one block per transaction)."""
        self._fresh()
        if "head" not in self.cache:
            self.cache["head"] = int(self.rpc.call("eth_blockNumber", []), 16)
        return self.cache["head"]

    @staticmethod
    def _key(call):
        return call if call == "head" else (call[0].address, call[1], call[2])


class CachedReader:
    """A FastReader whose calls go through a CachedReads."""

    def __init__(self, reader: FastReader, reads: CachedReads):
        self.raw, self.reads = reader, reads

    def __call__(self, name: str, *args):
        return self.reads.get(self.raw, name, *args)
