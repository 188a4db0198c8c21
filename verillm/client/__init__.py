"""The VeriLLM client SDK: completions with receipts, and offline receipt checks.

    from verillm.client import Client, verify_receipt
    client = Client("http://127.0.0.1:8000")
    completion = client.complete("The capital of France is", max_tokens=8, temperature=0)
    completion.text, completion.tokens, completion.receipt, completion.job_hash
    verify_receipt(completion.receipt, model_id=..., domain=SigningDomain(chain_id, jobs_address),
                   job=completion.job, output_tokens=completion.tokens)   # -> "0x…" worker address

Ids go in as bytes or 0x-hex strings (the `model_id` that `/v1/models` reports is hex) and
come out as printable 0x-hex: `verify_receipt` returns the worker's checksummed address,
`Completion.job_id` and `Completion.worker` are hex (the raw bytes stay in `job_hash` and
`receipt`).

`Client` is synchronous (stdlib urllib); `AsyncClient` has the same methods as coroutines
(aiohttp). Both speak the node's OpenAI-compatible API and read the ``verillm`` field of its
responses; any OpenAI client works against a node too, without the receipt checks.

A Completion is parsed strictly: its job must hash to the receipt's job hash and its tokens
to the receipt's token hashes, or parsing raises. Whether the receipt is signed by the
worker, for the model and deployment you expect, is `verify_receipt` (offline).

On-chain status comes from the node that dispatched the job (its dispatcher role runs with
``[dispatcher] enabled = true``): `get_audit_status` reads it once, `wait_verified` follows
it until it settles — verified, final, slashed, tie or abandoned. The body names the batch
and audit ids, so the claim can be checked against the contracts directly
(`verillm.chain.protocol.Protocol.get_audit`).

With every job the dispatcher also signs a batching promise (`Completion.promise`,
`verify_promise`): the receipt will be in one of its batches by a block. `check_inclusion`
(verillm/client/promise.py) fetches the dispatcher's inclusion proof and verifies it on-chain; only
when none holds after that block does the holder claim the omission, and then the dispatcher is
slashed (`verillm promise check` / `claim`, `Protocol.claim_omitted`; docs/protocol.md §12
"Batching promises").
"""

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from verillm.errors import ChainError, InvalidInput, InvalidProof, VerillmError
from verillm.jsonsafe import load_json
from verillm.spec.encoding import decode
from verillm.spec.job import compute_model_id
from verillm.spec.promise import SignedPromise, verify_promise_terms, verify_promise_signature
from verillm.spec.receipt import SigningDomain, compute_receipt_hash, verify_receipt_signature, verify_receipt_binding
from verillm.spec.types import Job, ModelManifest, Receipt

from verillm.wire import compute_error_from_body, from_hex, promise_from_json, receipt_from_json
from verillm.client.promise import InclusionCheck, check_inclusion  # noqa: F401  (re-exported: the SDK's promise check)


# Where an audit can end (node/dispatcher/status.py): passed, window closed, failed, split, never filled.
SETTLED_STATUSES = ("verified", "final", "slashed", "tie", "abandoned")


@dataclass(frozen=True)
class Completion:
    """One completion and the receipt that commits to it."""

    text: str
    tokens: tuple[int, ...]
    """Output token ids (the stop token included when one ended the completion)."""
    prompt_tokens: tuple[int, ...]
    finish_reason: str
    model: str
    job: Job
    receipt: Receipt
    job_hash: bytes
    status_url: str
    promise: SignedPromise | None = None
    """The dispatcher's signed promise to batch the receipt by a block (docs/protocol.md §12
    "Batching promises"); None from a node without a chain. Check it with `verify_promise`."""

    @property
    def job_id(self) -> str:
        """The job hash as 0x-hex (what the node's status routes and the explorer take)."""
        return "0x" + self.job_hash.hex()

    @property
    def worker(self) -> str:
        """The signing worker's checksummed 0x address."""
        return compute_address_hex(self.receipt.worker)


def compute_id_bytes(value: "bytes | str", name: str, size: int) -> bytes:
    """Return an id given as bytes or as a 0x-hex string; raise InvalidInput naming ``name`` otherwise."""
    if isinstance(value, (bytes, bytearray)):
        if len(value) != size:
            raise InvalidInput(f"{name}: expected {size} bytes, got {len(value)}")
        return bytes(value)
    if isinstance(value, str):
        return from_hex(value if value.startswith("0x") else "0x" + value, name, size)
    raise InvalidInput(f"{name}: expected bytes or a 0x-hex string, got {type(value).__name__}")


def compute_address_hex(address: bytes) -> str:
    """Return a 20-byte address as an EIP-55 checksummed 0x string."""
    from eth_utils import to_checksum_address

    return to_checksum_address(address)


def compute_completion_request(prompt: str | None, tokens: Sequence[int] | None, model: str, **options) -> dict:
    """Return the /v1/completions body for a text ``prompt`` or a list of token ids."""
    if (prompt is None) == (tokens is None):
        raise InvalidInput("give exactly one of prompt (text) or tokens (token ids)")
    return {"model": model, "prompt": prompt if prompt is not None else list(tokens), **compute_options(**options)}


def compute_chat_request(messages: Sequence[dict], model: str, **options) -> dict:
    """Return the /v1/chat/completions body."""
    return {"model": model, "messages": list(messages), **compute_options(**options)}


def compute_options(max_tokens=None, temperature=None, top_p=None, top_k=None, seed=None, audit=False) -> dict:
    """Return the sampling and VeriLLM options of a request, leaving unset ones to the node."""
    options = {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p, "top_k": top_k, "seed": seed}
    body = {name: value for name, value in options.items() if value is not None}
    if audit:
        body["verillm"] = {"audit": True}
    return body


def parse_completion(body: dict, chat: bool) -> Completion:
    """Return the Completion in a node's response; raise if receipt, job and tokens disagree."""
    if not isinstance(body, dict) or "verillm" not in body:
        raise InvalidInput("response has no verillm field: is this a VeriLLM node?")
    extra, choice = body["verillm"], body["choices"][0]
    job = decode(Job, from_hex(extra["job"]["encoded"], "verillm.job.encoded"))
    receipt = receipt_from_json(extra["receipt"])
    tokens = tuple(extra["output_tokens"])
    verify_receipt_binding(receipt, job, tokens)
    promise = promise_from_json(extra["batch_promise"]) if "batch_promise" in extra else None
    if promise is not None and promise.promise.receipt_hash != compute_receipt_hash(receipt):
        raise InvalidProof("the batching promise is about another receipt")
    return Completion(
        text=choice["message"]["content"] if chat else choice["text"],
        tokens=tokens,
        prompt_tokens=tuple(job.input_tokens),
        finish_reason=choice["finish_reason"],
        model=body["model"],
        job=job,
        receipt=receipt,
        job_hash=receipt.job_hash,
        status_url=extra["status_url"],
        promise=promise,
    )


def verify_receipt(
    receipt: Receipt,
    domain: SigningDomain,
    model_id: "bytes | str | None" = None,
    manifest: ModelManifest | None = None,
    worker: "bytes | str | None" = None,
    job: Job | None = None,
    output_tokens: Sequence[int] | None = None,
) -> str:
    """Check a receipt offline; return the checksummed 0x address of the worker that signed it.

    Checks the EIP-712 signature for ``domain`` (chain id + Jobs contract), the model (its
    id as bytes or 0x-hex, or the id of ``manifest``), and when given, the worker (bytes or
    0x-hex), the job and the output tokens. Raises InvalidSignature or InvalidProof saying
    what is wrong, InvalidInput for an id that is neither.
    """
    verify_receipt_signature(receipt, domain)
    if manifest is not None:
        expected_model = compute_model_id(manifest)
    elif model_id is not None:
        expected_model = compute_id_bytes(model_id, "model_id", 32)
    else:
        raise InvalidInput("verify_receipt needs the model: pass model_id or manifest")
    if receipt.model_id != expected_model:
        raise InvalidProof(f"receipt is for model 0x{receipt.model_id.hex()}, expected 0x{expected_model.hex()}")
    if worker is not None and receipt.worker != compute_id_bytes(worker, "worker", 20):
        raise InvalidProof(f"receipt is from worker {compute_address_hex(receipt.worker)}, expected {worker if isinstance(worker, str) else '0x' + worker.hex()}")
    if job is not None:
        verify_receipt_binding(receipt, job, output_tokens if output_tokens is not None else ())
    return compute_address_hex(receipt.worker)


def verify_promise(
    promise: "Completion | SignedPromise",
    domain: SigningDomain,
    dispatcher: "bytes | str | None" = None,
    head_block: int | None = None,
    batch_by_blocks: int | None = None,
) -> str:
    """Check a batching promise offline; return the checksummed 0x address of the dispatcher
    that signed it. ``domain`` is (chain id, the Coverage contract). With ``head_block`` and
    ``batch_by_blocks`` (the deployment's BATCH_BY_BLOCKS), also refuse a promise due later
    than the deployment allows: it could be claimed only after its dispatcher could leave.
    Raises InvalidSignature or InvalidProof saying what is wrong."""
    signed = promise.promise if isinstance(promise, Completion) else promise
    if signed is None:
        raise InvalidProof("the completion carries no batching promise (a node without a chain)")
    verify_promise_signature(signed, domain)
    if isinstance(promise, Completion) and signed.promise.receipt_hash != compute_receipt_hash(promise.receipt):
        raise InvalidProof("the batching promise is about another receipt")
    if dispatcher is not None and signed.promise.dispatcher != compute_id_bytes(dispatcher, "dispatcher", 20):
        raise InvalidProof(f"the promise is from {compute_address_hex(signed.promise.dispatcher)}, expected {dispatcher}")
    if head_block is not None and batch_by_blocks is not None:
        verify_promise_terms(signed.promise, signed.promise.receipt_hash, head_block, batch_by_blocks)
    return compute_address_hex(signed.promise.dispatcher)


def get_job_hash(job: "Completion | Receipt | bytes | str") -> bytes:
    """Return the job hash of a completion, a receipt, or a job hash as bytes or 0x-hex."""
    if isinstance(job, (bytes, bytearray, str)):
        return compute_id_bytes(job, "job hash", 32)
    return job.job_hash


class _Api:
    """What both clients share: URLs, request bodies, model discovery."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float):
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
        self.timeout_s = timeout_s
        self._model: str | None = None

    def pick_model(self, models: list[dict]) -> str:
        if len(models) != 1:
            raise InvalidInput(f"the node serves {len(models)} models; pass model=")
        return models[0]["id"]


class Client(_Api):
    """Synchronous client for one node (standard library HTTP)."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 600.0):
        super().__init__(base_url, api_key, timeout_s)

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return load_json(response.read(), "node response")
        except urllib.error.HTTPError as exc:
            raise compute_error_from_body(exc.code, _json_or_none(exc.read())) from None
        except urllib.error.URLError as exc:
            raise VerillmError(f"cannot reach {self.base_url}: {exc.reason}") from None

    def models(self) -> list[dict]:
        """Return the node's /v1/models entries."""
        return self._request("GET", "/v1/models")["data"]

    def _model_name(self, model: str | None) -> str:
        if model is None and self._model is None:
            self._model = self.pick_model(self.models())
        return model or self._model

    def complete(self, prompt: str | None = None, *, tokens: Sequence[int] | None = None, model: str | None = None, **options) -> Completion:
        """Complete a text prompt or token ids. Options: max_tokens, temperature, top_p, top_k, seed, audit."""
        body = compute_completion_request(prompt, tokens, self._model_name(model), **options)
        return parse_completion(self._request("POST", "/v1/completions", body), chat=False)

    def chat(self, messages: Sequence[dict], *, model: str | None = None, **options) -> Completion:
        """Chat completion with the model's own chat template. Options as for `complete`."""
        body = compute_chat_request(messages, self._model_name(model), **options)
        return parse_completion(self._request("POST", "/v1/chat/completions", body), chat=True)

    def get_status(self, job: "Completion | bytes | str") -> dict:
        """Return the node's status body for a job (status, receipt once done); a Completion carries the read token it needs."""
        return self._request("GET", get_status_path(job))

    def get_audit_status(self, job: "Completion | Receipt | bytes | str") -> dict:
        """Return the dispatcher's on-chain status of a job it dispatched (batch, audit, verdict)."""
        return self._request("GET", f"/v1/verillm/audits/0x{get_job_hash(job).hex()}")

    def wait_verified(self, job: "Completion | Receipt | bytes | str", timeout_s: float = 600.0, poll_s: float = 1.0) -> dict:
        """Follow a job's on-chain status until it settles; return the status body (check its ``status``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            body = self.get_audit_status(job)
            if body["status"] in SETTLED_STATUSES:
                return body
            if time.monotonic() > deadline:
                raise ChainError(f"job 0x{get_job_hash(job).hex()} is still {body['status']} after {timeout_s:g} s")
            time.sleep(poll_s)


class AsyncClient(_Api):
    """Asynchronous client for one node (aiohttp); use as ``async with AsyncClient(url) as client``."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 600.0, session=None):
        super().__init__(base_url, api_key, timeout_s)
        self._session = session
        self._owns_session = session is None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session if this client created it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        try:
            async with self._session.request(method, self.base_url + path, json=body, headers=self.headers) as response:
                data = _json_or_none(await response.read())
                if response.status >= 400:
                    raise compute_error_from_body(response.status, data)
                return data
        except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
            raise VerillmError(f"cannot reach {self.base_url}: {exc!r}") from None

    async def models(self) -> list[dict]:
        """Return the node's /v1/models entries."""
        return (await self._request("GET", "/v1/models"))["data"]

    async def _model_name(self, model: str | None) -> str:
        if model is None and self._model is None:
            self._model = self.pick_model(await self.models())
        return model or self._model

    async def complete(self, prompt: str | None = None, *, tokens: Sequence[int] | None = None, model: str | None = None, **options) -> Completion:
        """Complete a text prompt or token ids. Options: max_tokens, temperature, top_p, top_k, seed, audit."""
        body = compute_completion_request(prompt, tokens, await self._model_name(model), **options)
        return parse_completion(await self._request("POST", "/v1/completions", body), chat=False)

    async def chat(self, messages: Sequence[dict], *, model: str | None = None, **options) -> Completion:
        """Chat completion with the model's own chat template. Options as for `complete`."""
        body = compute_chat_request(messages, await self._model_name(model), **options)
        return parse_completion(await self._request("POST", "/v1/chat/completions", body), chat=True)

    async def get_status(self, job: "Completion | bytes | str") -> dict:
        """Return the node's status body for a job (status, receipt once done); a Completion carries the read token it needs."""
        return await self._request("GET", get_status_path(job))

    async def get_audit_status(self, job: "Completion | Receipt | bytes | str") -> dict:
        """Return the dispatcher's on-chain status of a job it dispatched (batch, audit, verdict)."""
        return await self._request("GET", f"/v1/verillm/audits/0x{get_job_hash(job).hex()}")

    async def wait_verified(self, job: "Completion | Receipt | bytes | str", timeout_s: float = 600.0, poll_s: float = 1.0) -> dict:
        """Follow a job's on-chain status until it settles; return the status body (check its ``status``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            body = await self.get_audit_status(job)
            if body["status"] in SETTLED_STATUSES:
                return body
            if time.monotonic() > deadline:
                raise ChainError(f"job 0x{get_job_hash(job).hex()} is still {body['status']} after {timeout_s:g} s")
            await asyncio.sleep(poll_s)


def get_status_path(job: "Completion | bytes | str") -> str:
    """Return the path (and read token, node/api/access.py) of a job's status on the node that answered it.

    A completion's status_url carries the token (it may name the dispatcher's audits route; the
    token is the same for the job route)."""
    if isinstance(job, bytes | bytearray | str):
        return f"/v1/verillm/jobs/0x{get_job_hash(job).hex()}"
    _, sep, query = job.status_url.partition("?")
    return f"/v1/verillm/jobs/0x{job.job_hash.hex()}" + (f"?{query}" if sep else "")


def _json_or_none(raw: bytes):
    try:
        return load_json(raw, "error body")
    except InvalidInput:
        return None
