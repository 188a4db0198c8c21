"""A node's client for another node's native API: signed job submission, status, openings.

The dispatcher role uses it to send jobs (inference and verification alike) to workers and
to collect openings; tests and the bench use it as a dispatcher would. `stream_job` asks the
worker for its tokens as they are sampled (NDJSON, node/api/streaming.py) and hands on a chunk only
once the worker's signature over the prefix so far holds and extends what it handed on before
(verillm/spec/stream.py); a stream that gives no token within `StreamLimits.first_token_s`, or
falls silent for `idle_s`, is `StreamStalled`.

The node at the other end may be hostile: every answer is read with a size cap (checked on the
declared length and while reading, never buffered past it) and parsed strictly, so a malformed
or oversized answer is a `BadResponse` naming the field, and a refusal the error class its code
names (with the peer's message: the caller decides what to show; the router shows clients only
the code, node/dispatcher/router.py) — never a `KeyError`.
"""

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp

from verillm.errors import BadResponse, VerillmError
from verillm.jsonsafe import load_json
from verillm.ndjson import NDJSON, LineSplitter
from verillm.spec.encoding import encode
from verillm.spec.job import compute_job_hash
from verillm.spec.receipt import SigningDomain
from verillm.spec.stream import StreamState, process_stream_chunk
from verillm.spec.types import Challenge, Job, Opening, Receipt

from verillm.node.envelope import compute_read_headers, encode_envelope_json, sign_envelope
from verillm.node.keys import NodeKey
from verillm.node.worker.stream_signer import OnChunk
from verillm.wire import challenge_to_json, compute_error_from_body, from_hex, opening_from_json, receipt_from_json, stream_chunk_from_json, to_hex

JOBS_PATH = "/v1/verillm/jobs"
MAX_REPLY_BYTES = 4 * 1024 * 1024
"""Largest job, status or info answer read from a peer (a 4,096-token reply with its receipt is ~40 kB)."""
MAX_OPENING_BYTES = 64 * 1024 * 1024
"""Largest opening answer read (a full challenge of the largest committed shape is a few MB)."""


class BadStream(BadResponse):
    """A worker streamed a chunk its signature or running hash does not cover: never relayed."""

    code = "bad_stream"


class StreamStalled(BadResponse):
    """A worker streamed no token within the first-token limit, or fell silent past the idle limit."""

    code = "worker_stalled"
    http_status = 504


@dataclass(frozen=True)
class StreamLimits:
    """How long a relayed stream may wait (DispatcherConfig.stream_first_token_s / stream_idle_s)."""

    first_token_s: float = 30.0
    idle_s: float = 20.0


@dataclass(frozen=True)
class WorkerReply:
    """A worker's answer to a job: its hash, output tokens and signed receipt."""

    job_hash: bytes
    output_tokens: tuple[int, ...]
    receipt: Receipt
    status_url: str
    stream: StreamState | None = None
    """What a streamed answer's signed chunks covered (the receipt must extend its last prefix)."""


async def read_capped(response: aiohttp.ClientResponse, limit: int, peer: str) -> bytes:
    """Return ``response``'s body; BadResponse once it passes ``limit`` bytes (declared or read)."""
    if response.content_length is not None and response.content_length > limit:
        raise BadResponse(f"{peer} answered a body of {response.content_length} bytes (limit {limit})")
    parts, size = [], 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise BadResponse(f"{peer} answered a body over {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


def parse_reply(status: int, raw: bytes, peer: str) -> dict:
    """Return a 2xx answer as a JSON object; raise the error an error status names, BadResponse for junk."""
    try:
        data = load_json(raw, "worker response")
    except VerillmError:
        data = None
    if status >= 400:
        raise compute_error_from_body(status, data)
    if not isinstance(data, dict):
        raise BadResponse(f"{peer} answered HTTP {status} with a body that is not a JSON object")
    return data


def get_reply_field(data: dict, key: str, peer: str, parse=lambda value: value):
    """Return ``parse(data[key])``; BadResponse naming the field when it is missing or malformed."""
    if key not in data:
        raise BadResponse(f"{peer} answered without {key}")
    try:
        return parse(data[key])
    except (VerillmError, TypeError, ValueError, KeyError) as exc:  # one named field of a peer's answer
        raise BadResponse(f"{peer} answered a malformed {key}: {type(exc).__name__}") from None


async def read_events(response: aiohttp.ClientResponse, limit: int, peer: str) -> AsyncIterator[dict]:
    """Yield each NDJSON line of ``response`` as a JSON object; BadResponse once the lines pass
    ``limit`` bytes together, for a line that is not a JSON object, or a last line cut short."""
    splitter, size = LineSplitter(), 0  # linear in the bytes, however the peer chunks them (verillm/ndjson.py)
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise BadResponse(f"{peer} streamed over {limit} bytes")
        for line in splitter.feed(chunk):
            if line.strip():
                yield _parse_event(line, peer)
    if splitter.pending.strip():
        raise BadResponse(f"{peer} ended its stream inside a line")


def _parse_event(line: bytes, peer: str) -> dict:
    try:
        event = load_json(line, "stream line")
    except VerillmError:
        event = None
    if not isinstance(event, dict):
        raise BadResponse(f"{peer} streamed a line that is not a JSON object")
    return event


def _require_dict(value) -> dict:
    if not isinstance(value, dict):
        raise ValueError("expected an object")
    return value


def parse_tokens(value) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**32 for t in value):
        raise ValueError("expected a list of token ids")
    return tuple(value)


class PeerClient:
    """Signed requests from ``key``'s owner to the node at ``base_url``."""

    def __init__(self, base_url: str, key: NodeKey, session: aiohttp.ClientSession, recipient: bytes | None = None):
        self.base_url = base_url.rstrip("/")
        self.key = key
        self.session = session
        self.recipient = recipient
        """The node's address, which every envelope names; None: asked of the node (/v1/verillm/info) once."""

    @property
    def peer(self) -> str:
        return f"worker at {self.base_url}"

    async def get_recipient(self) -> bytes:
        """Return the address envelopes to this node are addressed to."""
        if self.recipient is None:
            self.recipient = get_reply_field(await self.get_info(), "worker", self.peer, lambda v: from_hex(v, "info.worker", 20))
        return self.recipient

    async def _read(self, response: aiohttp.ClientResponse, limit: int) -> tuple[int, dict]:
        return response.status, parse_reply(response.status, await read_capped(response, limit, self.peer), self.peer)

    async def post_signed(self, path: str, payload: bytes, query: str = "", limit: int = MAX_REPLY_BYTES) -> tuple[int, dict]:
        """POST an envelope carrying ``payload`` to ``path``; return (status, JSON body) of a 2xx."""
        body = encode_envelope_json(sign_envelope(path, payload, self.key.private_key, await self.get_recipient()))
        url = f"{self.base_url}{path}{query}"
        async with self.session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
            return await self._read(response, limit)

    async def submit_job(self, job: Job) -> WorkerReply:
        """Run ``job`` on the worker and return its reply (waits for the job to finish)."""
        _, data = await self.post_signed(JOBS_PATH, encode(job))
        return self._job_reply(data)

    def _job_reply(self, data: dict, stream: StreamState | None = None) -> WorkerReply:
        field = lambda key, parse=lambda v: v: get_reply_field(data, key, self.peer, parse)  # noqa: E731
        return WorkerReply(field("job_hash", lambda v: from_hex(v, "job_hash", 32)), field("output_tokens", parse_tokens),
                           field("receipt", receipt_from_json), field("status_url", _require_str), stream)

    async def stream_job(self, job: Job, on_chunk: OnChunk, domain: SigningDomain, limits: StreamLimits = StreamLimits()) -> WorkerReply:
        """Run ``job`` on the worker, calling ``on_chunk(tokens, signed)`` for each chunk it streams once
        the chunk's signed prefix holds for this worker and ``domain`` and extends the last one
        (`BadStream` otherwise, before anything of it is handed on); return its reply, whose ``stream``
        the caller checks the receipt against (`verify_receipt_extends_prefix`).

        The first event (a token line, the result, an error) must come within ``limits.first_token_s``
        of the request, each later one within ``limits.idle_s`` of the one before (`StreamStalled`). The
        stream is read under the same cap as a whole answer (MAX_REPLY_BYTES, all lines together); a
        peer answering plain JSON (a node before streaming) is read as `submit_job` reads it, within
        the first-token limit: nothing of it could be shown before it ends."""
        body = encode_envelope_json(sign_envelope(JOBS_PATH, encode(job), self.key.private_key, await self.get_recipient()))
        state = StreamState(compute_job_hash(job), worker=await self.get_recipient())
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(limits.first_token_s) as timer:
                async with self.session.post(f"{self.base_url}{JOBS_PATH}?stream=1", data=body, headers={"Content-Type": "application/json"}) as response:
                    if response.status >= 400 or response.content_type != NDJSON:
                        return self._job_reply((await self._read(response, MAX_REPLY_BYTES))[1])
                    async for event in read_events(response, MAX_REPLY_BYTES, self.peer):
                        timer.reschedule(loop.time() + limits.idle_s)
                        if "done" in event:
                            return self._job_reply(get_reply_field(event, "done", self.peer, _require_dict), state)
                        if "tokens" not in event:
                            raise compute_error_from_body(502, event)  # {"error": ...}, or junk: a VerillmError either way
                        state, tokens, signed = self._checked(state, event, domain)
                        on_chunk(tokens, signed)
        except TimeoutError:
            if timer.expired():
                if state.last is None:
                    raise StreamStalled(f"{self.peer} streamed no token within {limits.first_token_s:g} s (the first-token limit)") from None
                raise StreamStalled(f"{self.peer} streamed nothing for {limits.idle_s:g} s after {state.token_count} tokens (the idle limit)") from None
            raise
        raise BadResponse(f"{self.peer} ended its stream without the job's result")

    def _checked(self, state: StreamState, event: dict, domain: SigningDomain) -> tuple[StreamState, tuple[int, ...], object]:
        """Return (the new state, the chunk's tokens, its signed prefix); BadStream for a chunk unsigned,
        malformed, or not covered by its signed prefix (InvalidProof / InvalidSignature, named)."""
        try:
            tokens, signed = stream_chunk_from_json(event)
            return process_stream_chunk(state, tokens, signed, domain), tokens, signed
        except VerillmError as exc:
            raise BadStream(f"{self.peer} streamed a chunk its signed prefix does not cover: {type(exc).__name__}: {str(exc)[:200]}") from None

    async def enqueue_job(self, job: Job) -> bytes:
        """Hand ``job`` to the worker without waiting; return its job hash once it is durable there."""
        _, data = await self.post_signed(JOBS_PATH, encode(job), "?wait=0")
        return get_reply_field(data, "job_hash", self.peer, lambda v: from_hex(v, "job_hash", 32))

    async def get_job(self, job_hash: bytes) -> dict:
        """Return the worker's status body for ``job_hash``."""
        path = f"{JOBS_PATH}/{to_hex(job_hash)}"
        headers = compute_read_headers(path, self.key, await self.get_recipient())
        async with self.session.get(f"{self.base_url}{path}", headers=headers) as response:
            return (await self._read(response, MAX_REPLY_BYTES))[1]

    async def request_opening(self, job_hash: bytes, cells: list[tuple[int, int]] | None = None, challenge: Challenge | None = None) -> Opening:
        """Ask the worker to open ``cells`` (or ``challenge``'s cells) of a job this key submitted."""
        request = {"challenge": challenge_to_json(challenge)} if challenge is not None else {"cells": [list(c) for c in cells or []]}
        _, data = await self.post_signed(f"{JOBS_PATH}/{to_hex(job_hash)}/openings", json.dumps(request).encode(), limit=MAX_OPENING_BYTES)
        return get_reply_field(data, "opening", self.peer, opening_from_json)

    async def get_info(self) -> dict:
        """Return the worker's /v1/verillm/info body (address, model, signing domain)."""
        async with self.session.get(f"{self.base_url}/v1/verillm/info") as response:
            return (await self._read(response, MAX_REPLY_BYTES))[1]


def _require_str(value) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value
