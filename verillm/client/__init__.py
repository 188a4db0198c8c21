"""The VeriLLM client SDK: completions the client has verified, and offline receipt checks.

    from verillm.client import Client
    client = Client("http://127.0.0.1:8000", model_id=MODEL_ID, domain=SigningDomain(chain_id, jobs),
                    tokenizer=tokenizer)                      # pins: never taken from the node under test
    completion = client.complete("The capital of France is", max_tokens=8, temperature=0)
    completion.text                                           # decoded from the signed tokens by the client
    completion.verification.not_checked                       # what could not be checked, and why
    for item in client.stream("Once upon a time", max_tokens=32):  # text deltas, then the verified Completion
        ...

Every completion is verified before it is returned (`completion.verify_completion`): the job the
receipt signs is the request (input tokens, sampling, seed, max_tokens), the signature holds for
the pinned deployment, the receipt is for the pinned model (or, with ``protocol=``, a model
registered on-chain whose signer is registered, active and staked for it), and the text is
decoded from the signed output tokens with a tokenizer whose digest is the model manifest's. A
mismatch raises (`InvalidProof`, `InvalidSignature`, `BadResponse`: the CLI's exit 2); a check
without its pin is listed in ``completion.verification.not_checked``, never passed as "ok".

Ids go in as bytes or 0x-hex strings and come out as printable 0x-hex (`Completion.job_id`,
`Completion.worker`, `verify_receipt`'s return).

`AsyncClient` holds the logic (httpx2, each call bounded in bytes and in total time:
verillm/client/http.py); `Client` runs the same coroutines on a private event loop thread.

On-chain status comes from the node that dispatched the job (``[dispatcher] enabled = true``):
`get_audit_status` reads it once; `wait_verified` follows it until the audit has a verdict
(``verified``: the round passed the worker, its dispute window still open) or ends;
`wait_final` until nothing can change it any more (``final``, or settled / abandoned); `watch` yields
each phase as it happens (verillm/client/phases.py: served, batched, drawn, committee, voting,
verified, final, ...), and both waits take ``on_phase=`` to be told the same.

With every job the dispatcher also signs a batching promise (`Completion.promise`,
`verify_promise`; `check_inclusion` in verillm/client/promise.py; docs/protocol.md §12).
"""

import asyncio
import contextlib
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

from verillm.errors import BadResponse, DeadlineExceeded, InvalidInput, InvalidProof, StillPending
from verillm.spec.promise import SignedPromise, verify_promise_signature, verify_promise_terms
from verillm.spec.params import Preset
from verillm.spec.receipt import SigningDomain, compute_receipt_hash, verify_receipt_horizon
from verillm.spec.types import Receipt
from verillm.wire import from_hex, to_hex

from verillm.client.checks import Requested, Verification  # noqa: F401  (re-exported)
from verillm.client.completion import (  # noqa: F401  (re-exported: the SDK's surface)
    Completion, NodeInfo, Pins, compute_address_hex, compute_id_bytes, get_field, parse_completion, parse_completion_body,
    parse_node_info, verify_completion, verify_receipt,
)
from verillm.client.http import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_RETRIES, AsyncHttp, LoopThread
from verillm.client.phases import FINAL_AUDIT_STATES, JobPhase, compute_outcome, compute_phase, is_final  # noqa: F401  (re-exported)
from verillm.client.promise import InclusionCheck, check_inclusion  # noqa: F401  (re-exported: the SDK's promise check)
from verillm.client.signed_stream import SignedStreamCheck
from verillm.client.stream import compute_final_body, get_delta, iterate_events, iterate_on_loop

VERDICT_STATUSES = ("verified", "final", "slashed", "tie", "abandoned")
"""Where `wait_verified` stops: the audit has a verdict (node/dispatcher/status.py), final or not."""
SETTLED_STATUSES = VERDICT_STATUSES  # the name before `wait_final` existed


def compute_completion_request(prompt: str | None, tokens: Sequence[int] | None, model: str, **options) -> dict:
    """Return the /v1/completions body for a text ``prompt`` or a list of token ids."""
    if (prompt is None) == (tokens is None):
        raise InvalidInput("give exactly one of prompt (text) or tokens (token ids)")
    return {"model": model, "prompt": prompt if prompt is not None else list(tokens), **compute_options(**options)}


def compute_chat_request(messages: Sequence[dict], model: str, **options) -> dict:
    """Return the /v1/chat/completions body."""
    return {"model": model, "messages": list(messages), **compute_options(**options)}


def compute_options(max_tokens=None, temperature=None, top_p=None, top_k=None, seed=None, audit=False, stop=None, nonce=None) -> dict:
    """Return the sampling and VeriLLM options of a request, leaving unset ones to the node."""
    options = {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p, "top_k": top_k, "seed": seed,
               "stop": None if stop is None else ([stop] if isinstance(stop, str) else list(stop))}
    body = {name: value for name, value in options.items() if value is not None}
    extension = {"audit": True} if audit else {}
    if nonce is not None:
        extension["nonce"] = to_hex(compute_nonce(nonce))
    if extension:
        body["verillm"] = extension
    return body


def compute_nonce(nonce: "bytes | str") -> bytes:
    """Return a job nonce given as 32 bytes or 0x-hex; raise InvalidInput otherwise."""
    if isinstance(nonce, bytes):
        if len(nonce) != 32:
            raise InvalidInput(f"nonce: expected 32 bytes, got {len(nonce)}")
        return nonce
    return from_hex(nonce, "nonce", 32)


def with_fresh_nonce(options: dict) -> dict:
    """The call's options with a fresh random job nonce, unless the caller chose one (to retry a job as itself).

    The node signs the nonce into the job, so the receipt cannot be one a node kept from an identical
    earlier request (`checks.verify_job_is_request` compares it)."""
    return options if options.get("nonce") is not None else {**options, "nonce": secrets.token_bytes(32)}


def compute_requested(prompt=None, tokens=None, messages=None, max_tokens=None, temperature=None, top_p=None, top_k=None,
                      seed=None, audit=False, stop=None, nonce=None) -> Requested:
    """Return what a call asks for, as the checks compare it with the signed job."""
    stops = () if stop is None else ((stop,) if isinstance(stop, str) else tuple(stop))
    return Requested(prompt=prompt, tokens=None if tokens is None else tuple(tokens),
                     messages=None if messages is None else tuple(messages), max_tokens=max_tokens,
                     temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, stop=stops,
                     nonce=None if nonce is None else compute_nonce(nonce))


def compute_pins(model_id=None, domain: SigningDomain | None = None, tokenizer=None, protocol=None) -> Pins:
    """Return the caller's pins; with a chain (``protocol``) and no domain, the deployment's own."""
    if domain is None and protocol is not None:
        domain = SigningDomain(protocol.chain.chain_id, from_hex(protocol.jobs.address, "Jobs address", 20))
    return Pins(model_id=None if model_id is None else compute_id_bytes(model_id, "model_id", 32), domain=domain,
                tokenizer=tokenizer, protocol=protocol)


def verify_promise(
    promise: "Completion | SignedPromise",
    domain: SigningDomain,
    dispatcher: "bytes | str | None" = None,
    head_block: int | None = None,
    batch_by_blocks: int | None = None,
    preset: Preset | None = None,
) -> str:
    """Check a batching promise offline; return the checksummed 0x address of the dispatcher
    that signed it. ``domain`` is (chain id, the Coverage contract). With ``head_block`` and
    ``batch_by_blocks`` (the deployment's BATCH_BY_BLOCKS), also refuse a promise due later
    than the deployment allows: it could be claimed only after its dispatcher could leave.
    With ``preset`` (the deployment's: `Protocol.preset`; its BATCH_BY_BLOCKS is then the
    default) and a completion, also refuse a receipt whose audit horizon ends before the
    promised batch's last audit start (`verify_receipt_horizon`: its worker could never be
    audited for this job). Raises InvalidSignature or InvalidProof saying what is wrong."""
    signed = promise.promise if isinstance(promise, Completion) else promise
    if signed is None:
        raise InvalidProof("the completion carries no batching promise (a node without a chain)")
    verify_promise_signature(signed, domain)
    if isinstance(promise, Completion) and signed.promise.receipt_hash != compute_receipt_hash(promise.receipt):
        raise InvalidProof("the batching promise is about another receipt")
    if dispatcher is not None and signed.promise.dispatcher != compute_id_bytes(dispatcher, "dispatcher", 20):
        raise InvalidProof(f"the promise is from {compute_address_hex(signed.promise.dispatcher)}, expected {dispatcher}")
    if preset is not None and batch_by_blocks is None:
        batch_by_blocks = preset.BATCH_BY_BLOCKS
    if head_block is not None and batch_by_blocks is not None:
        verify_promise_terms(signed.promise, signed.promise.receipt_hash, head_block, batch_by_blocks)
    if preset is not None:
        if not isinstance(promise, Completion):
            raise InvalidInput("the receipt's audit horizon is checked on a completion (its receipt), not a bare promise")
        verify_receipt_horizon(promise.receipt, signed.promise.batch_by_block, preset)
    return compute_address_hex(signed.promise.dispatcher)


def get_job_hash(job: "Completion | Receipt | bytes | str") -> bytes:
    """Return the job hash of a completion, a receipt, or a job hash as bytes or 0x-hex."""
    if isinstance(job, (bytes, bytearray, str)):
        return compute_id_bytes(job, "job hash", 32)
    return job.job_hash


def get_status_path(job: "Completion | bytes | str") -> str:
    """Return the path (and read token, node/api/access.py) of a job's status on the node that answered it.

    A completion's status_url carries the token (it may name the dispatcher's audits route; the
    token is the same for the job route)."""
    if isinstance(job, bytes | bytearray | str):
        return f"/v1/verillm/jobs/0x{get_job_hash(job).hex()}"
    _, sep, query = job.status_url.partition("?")
    return f"/v1/verillm/jobs/0x{job.job_hash.hex()}" + (f"?{query}" if sep else "")


class AsyncClient:
    """Asynchronous client for one node; use as ``async with AsyncClient(url, ...) as client``.

    ``timeout_s`` bounds each call (all its requests, bodies included); ``max_body_bytes`` each
    answer. The pins (``model_id``, ``domain``, ``tokenizer``, ``protocol``) are what every
    completion is checked against (`Pins`)."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 600.0, *, model_id=None,
                 domain: SigningDomain | None = None, tokenizer=None, protocol=None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 max_retries: int = DEFAULT_MAX_RETRIES):
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
        self.http = AsyncHttp(self.base_url, headers, timeout_s, max_body_bytes, max_retries)
        self.timeout_s = timeout_s
        self.pins = compute_pins(model_id, domain, tokenizer, protocol)
        self._model: str | None = None
        self._info: NodeInfo | None = None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection pool."""
        await self.http.close()

    async def _request(self, method: str, path: str, body: dict | None = None) -> object:
        return await self.http.request(method, path, body)

    async def models(self) -> list[dict]:
        """Return the node's /v1/models entries."""
        data = get_field(await self._request("GET", "/v1/models"), "data")
        if not isinstance(data, list):
            raise InvalidInput("the node's /v1/models has no list of models")
        return data

    async def info(self) -> NodeInfo:
        """Return the node's /v1/verillm/info (its manifest is trusted only where it hashes to a receipt's model)."""
        if self._info is None:
            self._info = parse_node_info(await self._request("GET", "/v1/verillm/info"))
        return self._info

    async def _model_name(self, model: str | None) -> str:
        if model is None and self._model is None:
            models = await self.models()
            if len(models) != 1 or not isinstance(models[0], dict) or not isinstance(models[0].get("id"), str):
                raise InvalidInput(f"the node serves {len(models)} models; pass model=")
            self._model = models[0]["id"]
        return model or self._model

    async def complete(self, prompt: str | None = None, *, tokens: Sequence[int] | None = None, model: str | None = None, **options) -> Completion:
        """Complete a text prompt or token ids, verified. Options: max_tokens, temperature, top_p, top_k, seed, stop, audit,
        nonce (32 bytes or 0x-hex; default a fresh random one, which the receipt must sign)."""
        options = with_fresh_nonce(options)
        async with self._deadline():
            body = compute_completion_request(prompt, tokens, await self._model_name(model), **options)
            requested = compute_requested(prompt=prompt, tokens=tokens, **options)
            return await self._verified(await self._request("POST", "/v1/completions", body), requested, chat=False)

    async def chat(self, messages: Sequence[dict], *, model: str | None = None, **options) -> Completion:
        """Chat completion with the model's own chat template, verified. Options as for `complete`."""
        options = with_fresh_nonce(options)
        async with self._deadline():
            body = compute_chat_request(messages, await self._model_name(model), **options)
            requested = compute_requested(messages=messages, **options)
            return await self._verified(await self._request("POST", "/v1/chat/completions", body), requested, chat=True)

    async def stream(self, prompt: str | None = None, *, tokens: Sequence[int] | None = None, messages: Sequence[dict] | None = None,
                     model: str | None = None, **options) -> AsyncIterator["str | Completion"]:
        """Stream a completion (``messages``: a chat completion): yield each text delta once the worker's
        signature over the tokens it streamed holds and extends the previous one (verillm/client/signed_stream.py),
        then the verified `Completion`, whose text the deltas must concatenate to and whose receipt must
        extend the last signed prefix (verillm/client/stream.py). Options as for `complete`."""
        chat = messages is not None
        if chat and (prompt is not None or tokens is not None):
            raise InvalidInput("give a prompt (or tokens) or messages, not both")
        deadline, name = time.monotonic() + self.timeout_s, await self._model_name(model)
        options = with_fresh_nonce(options)
        if chat:
            body, path = compute_chat_request(messages, name, **options), "/v1/chat/completions"
            requested = compute_requested(messages=messages, **options)
        else:
            body, path = compute_completion_request(prompt, tokens, name, **options), "/v1/completions"
            requested = compute_requested(prompt=prompt, tokens=tokens, **options)
        pieces, final = [], None
        check = SignedStreamCheck(requested, self.pins, self.pins.domain or (await self.info()).domain)
        async with contextlib.aclosing(iterate_events(self.http, path, body | {"stream": True}, deadline)) as events:
            async for event in events:
                delta = get_delta(event, chat)
                if delta and final is not None:
                    raise BadResponse("the node streamed text after the chunk that carries the receipt")
                if delta:
                    pieces.append(delta)
                    shown = await check.admit(event, delta)
                    if shown:
                        yield shown
                if "receipt" in (event.get("verillm") or {}):
                    final = event
        if final is None:
            raise BadResponse("the stream ended without the chunk that carries the receipt")
        completion = await self._verified(compute_final_body(final, "".join(pieces), chat), requested, chat)
        held = check.verify_final(completion)
        if held:
            yield held
        yield completion

    async def _verified(self, body: object, requested: Requested, chat: bool) -> Completion:
        completion, node_text = parse_completion_body(body, chat)
        info = await self.info()
        if self.pins.protocol is None:
            return verify_completion(completion, node_text, requested, self.pins, info, chat)
        return await asyncio.to_thread(verify_completion, completion, node_text, requested, self.pins, info, chat)  # chain reads block

    def _deadline(self):
        return _CallDeadline(self.timeout_s)

    async def network(self) -> dict:
        """Return the node's GET /v1/verillm/network: the chain, contracts and parameters it sees, the model's
        pool, nodes and recent verdicts. The node's word: check what matters on the chain (`Protocol`)."""
        body = await self._request("GET", "/v1/verillm/network")
        get_field(body, "preset.params")
        return body

    async def get_status(self, job: "Completion | bytes | str") -> dict:
        """Return the node's status body for a job (status, receipt once done); a Completion carries the read token it needs."""
        return await self._request("GET", get_status_path(job))

    async def get_audit_status(self, job: "Completion | Receipt | bytes | str") -> dict:
        """Return the dispatcher's on-chain status of a job it dispatched (batch, audit, verdict)."""
        body = await self._request("GET", f"/v1/verillm/audits/0x{get_job_hash(job).hex()}")
        get_field(body, "status")
        return body

    async def wait_verified(self, job: "Completion | Receipt | bytes | str", timeout_s: float = 600.0, poll_s: float = 1.0,
                            on_phase: Callable[[JobPhase], None] | None = None) -> dict:
        """Follow a job's on-chain status until its audit has a verdict (``verified``, which its dispute
        window may still overturn) or ends (final, slashed, tie, abandoned); return the status body.
        `wait_final` waits until nothing can change it. ``on_phase`` is called with each new phase."""
        return await self._wait(job, lambda body: body["status"] in VERDICT_STATUSES, timeout_s, poll_s, on_phase)

    async def wait_final(self, job: "Completion | Receipt | bytes | str", timeout_s: float = 600.0, poll_s: float = 1.0,
                         on_phase: Callable[[JobPhase], None] | None = None) -> dict:
        """Follow a job's on-chain status until it is final (settled, abandoned, or never selected
        for audit once the start window closed); return the status body. ``on_phase``: as `wait_verified`."""
        return await self._wait(job, is_final, timeout_s, poll_s, on_phase)

    async def watch(self, job: "Completion | Receipt | bytes | str", timeout_s: float = 600.0, poll_s: float = 1.0) -> AsyncIterator[JobPhase]:
        """Yield each phase of the job's verification as the dispatcher's status shows it (a new name or
        detail is a new phase), the last one final; `StillPending` if it is not final within ``timeout_s``."""
        async for phase in self._follow(job, is_final, timeout_s, poll_s):
            yield phase

    async def _wait(self, job, done, timeout_s: float, poll_s: float, on_phase=None) -> dict:
        async with contextlib.aclosing(self._follow(job, done, timeout_s, poll_s)) as phases:
            async for phase in phases:
                if on_phase is not None:
                    on_phase(phase)
        return phase.status

    async def _follow(self, job, done, timeout_s: float, poll_s: float) -> AsyncIterator[JobPhase]:
        """Poll the status until ``done(body)``; yield each new phase (the last one's body is the answer)."""
        deadline, last = time.monotonic() + timeout_s, None
        while True:
            body = await self.get_audit_status(job)
            phase = compute_phase(body)
            finished = done(body)
            if phase != last or finished:
                yield phase
            last = phase
            if finished:
                return
            if time.monotonic() > deadline:
                raise StillPending(f"job 0x{get_job_hash(job).hex()} is still {body['status']} ({phase.name}) after {timeout_s:g} s")
            await asyncio.sleep(poll_s)


class _CallDeadline:
    """``async with``: one call's total deadline, as DeadlineExceeded."""

    def __init__(self, timeout_s: float):
        self.timeout = asyncio.timeout(timeout_s)
        self.timeout_s = timeout_s

    async def __aenter__(self):
        await self.timeout.__aenter__()

    async def __aexit__(self, kind, exc, tb):
        try:
            return await self.timeout.__aexit__(kind, exc, tb)
        except TimeoutError:
            raise DeadlineExceeded(f"the call did not finish within {self.timeout_s:g} s (the client's total deadline)") from None


class Client:
    """Synchronous client for one node: `AsyncClient`'s calls, run on a private event loop thread."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 600.0, **pins):
        self._async = AsyncClient(base_url, api_key, timeout_s, **pins)
        self._loop: LoopThread | None = None
        self._loop_lock = threading.Lock()  # one client may be shared by threads (the devnet's senders are)
        self.timeout_s = timeout_s

    @property
    def pins(self) -> Pins:
        return self._async.pins

    @property
    def base_url(self) -> str:
        return self._async.base_url

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _run(self, coroutine, timeout_s: float | None = None):
        with self._loop_lock:
            if self._loop is None:
                self._loop = LoopThread()
            loop = self._loop
        return loop.run(coroutine, timeout_s or self.timeout_s)

    def close(self) -> None:
        """Close the connections and stop the client's loop thread."""
        with self._loop_lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.run(self._async.close(), 10)
            loop.close()

    def models(self) -> list[dict]:
        """Return the node's /v1/models entries."""
        return self._run(self._async.models())

    def info(self) -> NodeInfo:
        """Return the node's /v1/verillm/info."""
        return self._run(self._async.info())

    def complete(self, prompt: str | None = None, *, tokens: Sequence[int] | None = None, model: str | None = None, **options) -> Completion:
        """Complete a text prompt or token ids, verified. Options: max_tokens, temperature, top_p, top_k, seed, audit."""
        return self._run(self._async.complete(prompt, tokens=tokens, model=model, **options))

    def chat(self, messages: Sequence[dict], *, model: str | None = None, **options) -> Completion:
        """Chat completion with the model's own chat template, verified. Options as for `complete`."""
        return self._run(self._async.chat(messages, model=model, **options))

    def stream(self, prompt: str | None = None, *, tokens: Sequence[int] | None = None, messages: Sequence[dict] | None = None,
               model: str | None = None, **options) -> Iterator["str | Completion"]:
        """`AsyncClient.stream`: text deltas as they arrive, then the verified `Completion`.
        Leaving the loop early ends the stream (the job still runs to its end on the worker)."""
        with self._loop_lock:
            if self._loop is None:
                self._loop = LoopThread()
            loop = self._loop
        return iterate_on_loop(loop, lambda: self._async.stream(prompt, tokens=tokens, messages=messages, model=model, **options),
                               self.timeout_s)

    def network(self) -> dict:
        """`AsyncClient.network`: the network the node sees (GET /v1/verillm/network)."""
        return self._run(self._async.network())

    def get_status(self, job: "Completion | bytes | str") -> dict:
        """Return the node's status body for a job; a Completion carries the read token it needs."""
        return self._run(self._async.get_status(job))

    def get_audit_status(self, job: "Completion | Receipt | bytes | str") -> dict:
        """Return the dispatcher's on-chain status of a job it dispatched (batch, audit, verdict)."""
        return self._run(self._async.get_audit_status(job))

    def wait_verified(self, job: "Completion | Receipt | bytes | str", timeout_s: float = 600.0, poll_s: float = 1.0,
                      on_phase: Callable[[JobPhase], None] | None = None) -> dict:
        """`AsyncClient.wait_verified`: until the audit has a verdict (``verified`` may still be overturned).
        ``on_phase`` is called (on the client's loop thread) with each new phase."""
        return self._run(self._async.wait_verified(job, timeout_s, poll_s, on_phase), timeout_s + self.timeout_s)

    def wait_final(self, job: "Completion | Receipt | bytes | str", timeout_s: float = 600.0, poll_s: float = 1.0,
                   on_phase: Callable[[JobPhase], None] | None = None) -> dict:
        """`AsyncClient.wait_final`: until nothing can change the job's status."""
        return self._run(self._async.wait_final(job, timeout_s, poll_s, on_phase), timeout_s + self.timeout_s)

    def watch(self, job: "Completion | Receipt | bytes | str", timeout_s: float = 600.0, poll_s: float = 1.0) -> Iterator[JobPhase]:
        """`AsyncClient.watch`: each phase of the job's verification as it happens, the last one final."""
        with self._loop_lock:
            if self._loop is None:
                self._loop = LoopThread()
            loop = self._loop
        return iterate_on_loop(loop, lambda: self._async.watch(job, timeout_s, poll_s), timeout_s + self.timeout_s)
