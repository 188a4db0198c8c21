"""The embedded chain, reachable by other processes: eth-tester behind a loopback JSON-RPC endpoint.

`verillm devnet` runs its nodes as separate processes, so when anvil is not installed the
in-process eth-tester chain (py-evm) must be served over HTTP. Requests go through web3's own
eth-tester middleware (the one `EthTesterChain` uses in process: camelCase ↔ snake_case,
hex ↔ int), so the JSON-RPC clients here — web3 `HTTPProvider`, i.e. `RpcChain` — read the
same values as in process. Quantities go out as JSON numbers, which web3's formatters accept;
it is not a general-purpose node (no subscriptions, no filters, no debug_* methods).

A miner thread produces a block every ``block_time_s`` (as anvil's ``--block-time`` does), so
the protocol's windows measured in blocks pass in wall-clock time even when nobody transacts;
transactions are mined on arrival (automine).
"""

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from hexbytes import HexBytes

from verillm.chain.backends import EthTesterChain
from verillm.chain.anvil import find_free_port
from verillm.chain.errors import get_revert_data
from verillm.errors import ChainError

log = logging.getLogger(__name__)

ZERO_ADDRESS = "0x" + "00" * 20

ALLOWED_METHODS = {
    "eth_chainId", "net_version", "eth_blockNumber", "eth_getBlockByNumber", "eth_getBlockByHash", "eth_getBalance",
    "eth_getTransactionCount", "eth_estimateGas", "eth_gasPrice", "eth_maxPriorityFeePerGas", "eth_feeHistory",
    "eth_call", "eth_sendRawTransaction", "eth_getTransactionReceipt", "eth_getTransactionByHash", "eth_getLogs",
    "eth_getCode", "web3_clientVersion",
}


def compute_json_value(value):
    """Return a web3 value as JSON: bytes as 0x-hex, mappings and sequences recursively."""
    if isinstance(value, bytes | bytearray | HexBytes):
        return "0x" + bytes(value).hex()
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: compute_json_value(v) for k, v in dict(value).items()}
    if isinstance(value, list | tuple):
        return [compute_json_value(v) for v in value]
    return value


def compute_rpc_error(exc: Exception) -> dict:
    """Return the JSON-RPC error object for a failed request (reverts as anvil reports them)."""
    data = get_revert_data(exc)
    if data is not None:
        return {"code": 3, "message": "execution reverted", "data": "0x" + data.hex()}
    return {"code": -32000, "message": f"{type(exc).__name__}: {exc}"}


class EmbeddedChainServer:
    """eth-tester, a JSON-RPC endpoint on 127.0.0.1 and a block-time miner, in this process."""

    def __init__(self, block_time_s: float = 1.0, port: int = 0):
        self.chain = EthTesterChain()
        self.block_time_s = block_time_s
        self.port = port or find_free_port()
        self._request = self.chain.w3.provider.request_func(self.chain.w3, self.chain.w3.middleware_onion)
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def handle(self, body: dict) -> dict:
        """Answer one JSON-RPC request object."""
        method, params, request_id = body.get("method"), body.get("params") or [], body.get("id")
        if method not in ALLOWED_METHODS:
            return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"method {method} is not served by the embedded chain"}}
        if method in ("eth_call", "eth_estimateGas") and params and isinstance(params[0], dict):
            params = [self._funded_caller(params[0]), *params[1:]]
        try:
            with self.chain.lock:  # py-evm is not thread-safe
                response = compute_json_value(self._request(method, params))
        except Exception as exc:  # every failure goes back to the client as a JSON-RPC error
            return {"jsonrpc": "2.0", "id": request_id, "error": compute_rpc_error(exc)}
        response["id"] = request_id
        return response

    def _funded_caller(self, tx: dict) -> dict:
        # eth-tester charges a call's gas to its sender: a read "from" the zero address (what
        # RpcChain sends when no sender is given) is made from dev account 0 instead.
        if tx.get("from") in (None, ZERO_ADDRESS):
            return {**tx, "from": self.chain.dev_accounts[0].address}
        return tx

    def start(self) -> "EmbeddedChainServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = json.loads(raw)
                answer = [server.handle(r) for r in request] if isinstance(request, list) else server.handle(request)
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._threads = [threading.Thread(target=self._server.serve_forever, name="verillm-embedded-rpc", daemon=True),
                         threading.Thread(target=self._mine_forever, name="verillm-embedded-miner", daemon=True)]
        for thread in self._threads:
            thread.start()
        return self

    def _mine_forever(self) -> None:
        while not self._stop.wait(self.block_time_s):
            try:
                self.chain.mine(1)
            except ChainError as exc:  # keep the clock going; a failed empty block is retried next tick
                log.warning("embedded chain: mining failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
