"""The SDK's HTTP: every answer read with a body cap and within one total deadline.

A node is the party the client checks, so it is treated like any hostile peer: a body larger
than ``max_body_bytes`` is refused as soon as its header or its bytes say so (never buffered
whole), and ``timeout_s`` bounds the whole exchange — connect, send, wait, read — not each read,
so a node that trickles one byte every few seconds ends in `DeadlineExceeded` on time.

httpx2 (the HTTP client the ``openai`` package uses here; pinned in pyproject.toml) gives the
streamed body and per-phase timeouts; the total deadline is `asyncio.timeout` around the
exchange. httpx's synchronous client has only per-read timeouts, so the synchronous SDK runs
the same coroutine on a private event loop in a daemon thread (`LoopThread`): one code path,
one deadline, and the synchronous client works inside a caller's own running loop too.
"""

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Coroutine

import httpx2

from verillm.errors import BadResponse, DeadlineExceeded, InvalidInput, VerillmError
from verillm.jsonsafe import load_json
from verillm.wire import compute_error_from_body

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest answer the SDK reads (a completion of 4,096 tokens with its receipt is under 100 kB)."""

DEFAULT_MAX_RETRIES = 4
"""How often the SDK sends a request again after a refusal that says to come back (429/503 with
`Retry-After`: a full queue, the per-client quota, a node shedding client work for its own duty).
The node refused before it accepted anything, so the same body (same nonce, same job) is sent
again; each wait is the node's `Retry-After`, within the call's total deadline."""

MAX_RETRY_WAIT_S = 30.0
"""The longest `Retry-After` the SDK honours; a node asking for more is not waited for (the refusal is raised)."""


def compute_retry_wait(error: VerillmError, retry_after: str | None, attempt: int, max_retries: int, seconds_left: float) -> float | None:
    """Return the seconds to wait before sending a refused request again, or None to raise ``error``:
    only a refusal worth retrying (its class has ``retry_after_s``), ``attempt`` below ``max_retries``,
    and a wait (the node's `Retry-After`, else the class's) that ends before the call's deadline."""
    if error.retry_after_s is None or attempt >= max_retries:
        return None
    wait = float(retry_after) if retry_after is not None and retry_after.strip().isdigit() else float(error.retry_after_s)
    if wait > MAX_RETRY_WAIT_S or wait >= seconds_left:
        return None
    return wait


async def read_bounded(chunks: AsyncIterator[bytes], limit: int, what: str) -> bytes:
    """Return the concatenated ``chunks``; raise BadResponse as soon as they pass ``limit`` bytes."""
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise BadResponse(f"{what}: body exceeds {limit} bytes (the client's max_body_bytes); refused")
        parts.append(chunk)
    return b"".join(parts)


def verify_declared_size(headers, limit: int, what: str) -> None:
    """Refuse a body whose Content-Length already says it is too large (nothing is read)."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadResponse(f"{what}: body of {declared} bytes exceeds {limit} (the client's max_body_bytes); refused")


def parse_json_body(raw: bytes, what: str) -> object:
    """Return a 2xx body parsed as JSON; BadResponse if it is not."""
    try:
        return load_json(raw, what)
    except InvalidInput as exc:
        raise BadResponse(f"{what} is not JSON: {exc}") from None


def parse_error_json(raw: bytes) -> object:
    """An error answer's body as JSON, or None when it is not JSON."""
    try:
        return load_json(raw, "error body")
    except InvalidInput:
        return None


class AsyncHttp:
    """JSON requests to one node, each bounded in size and in total time."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout_s: float, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 max_retries: int = DEFAULT_MAX_RETRIES):
        if timeout_s <= 0 or max_body_bytes <= 0:
            raise InvalidInput("timeout_s and max_body_bytes must be positive")
        if max_retries < 0:
            raise InvalidInput(f"max_retries must be 0 or more, got {max_retries}")
        self.base_url, self.headers = base_url, headers
        self.timeout_s, self.max_body_bytes, self.max_retries = timeout_s, max_body_bytes, max_retries
        self._client: httpx2.AsyncClient | None = None

    async def request(self, method: str, path: str, body: dict | None = None, timeout_s: float | None = None) -> object:
        """Send ``body`` (JSON) and return the parsed answer; raise the node's error, BadResponse or DeadlineExceeded."""
        timeout_s = timeout_s or self.timeout_s
        url = self.base_url + path
        deadline, attempt = time.monotonic() + timeout_s, 0
        while True:
            try:
                async with asyncio.timeout(deadline - time.monotonic()):
                    status, retry_after, raw = await self._exchange(method, url, body)
            except TimeoutError:
                raise DeadlineExceeded(f"{method} {url}: no complete answer within {timeout_s:g} s (the client's total deadline)") from None
            except httpx2.HTTPError as exc:
                raise VerillmError(f"cannot reach {self.base_url}: {type(exc).__name__}: {exc}") from None
            if status < 400:
                return parse_json_body(raw, f"{method} {path}: the node's answer")
            error = compute_error_from_body(status, parse_error_json(raw))
            wait = compute_retry_wait(error, retry_after, attempt, self.max_retries, deadline - time.monotonic())
            if wait is None:
                raise error
            await asyncio.sleep(wait)  # the node's own Retry-After: it refused before accepting anything
            attempt += 1

    def get_client(self) -> httpx2.AsyncClient:
        """The connection pool, created on the loop that uses it."""
        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(self.timeout_s), follow_redirects=False)
        return self._client

    async def _exchange(self, method: str, url: str, body: dict | None) -> tuple[int, str | None, bytes]:
        async with self.get_client().stream(method, url, json=body, headers=self.headers) as response:
            verify_declared_size(response.headers, self.max_body_bytes, url)
            raw = await read_bounded(response.aiter_bytes(), self.max_body_bytes, url)
            return response.status_code, response.headers.get("retry-after"), raw

    async def close(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class LoopThread:
    """A private event loop in a daemon thread: the synchronous client's way to a total deadline."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="verillm-sdk", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine, timeout_s: float):
        """Run ``coroutine`` on the private loop; its own deadline ends it (``timeout_s`` is a backstop)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout_s + 5.0)
        except TimeoutError:
            future.cancel()
            raise DeadlineExceeded(f"no answer within {timeout_s:g} s") from None

    def close(self) -> None:
        """Stop the loop and its thread."""
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
        if not self.loop.is_running():
            self.loop.close()
