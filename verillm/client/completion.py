"""A completion as the SDK returns it: parsed strictly, then verified against the request and the pins.

`parse_completion` turns a node's body into a `Completion` whose job, receipt and tokens agree
(or raises `BadResponse` / `InvalidProof` naming the field); `verify_completion` then checks it
against what was asked (`checks.Requested`) and what the caller pins (`Pins`), decodes the text
from the signed tokens, and records what it checked and what it could not
(`Completion.verification`).
"""

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from verillm.errors import BadResponse, InvalidInput, InvalidProof, InvalidSignature, VerillmError
from verillm.spec.encoding import decode
from verillm.spec.job import compute_model_id
from verillm.spec.promise import SignedPromise
from verillm.spec.receipt import SigningDomain, compute_receipt_hash, verify_receipt_binding, verify_receipt_signature
from verillm.spec.types import Job, ModelManifest, Receipt
from verillm.wire import compute_stop_cut, from_hex, promise_from_json, receipt_from_json

from verillm.client.checks import Findings, Requested, Verification, compute_finish_reason, verify_job_is_request, verify_manifest
from verillm.client.checks import compute_text, verify_signer_on_chain, verify_text


@dataclass(frozen=True)
class Completion:
    """One completion and the receipt that commits to it."""

    text: str | None
    """Decoded by the client from the signed output tokens with the manifest's tokenizer; None
    when the client holds no tokenizer (the node's own text is never returned)."""
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
    verification: Verification = Verification()
    """What the client verified of this completion, and what it could not ("not checked: …")."""

    @property
    def job_id(self) -> str:
        """The job hash as 0x-hex (what the node's status routes and the explorer take)."""
        return "0x" + self.job_hash.hex()

    @property
    def worker(self) -> str:
        """The signing worker's checksummed 0x address."""
        return compute_address_hex(self.receipt.worker)


@dataclass(frozen=True)
class Pins:
    """What the caller trusts, never taken from the node under test."""

    model_id: bytes | None = None
    """The model the receipt must be for."""
    domain: SigningDomain | None = None
    """The deployment the receipt must be signed for (chain id, Jobs contract)."""
    tokenizer: object = None
    """A Hugging Face tokenizer: tokenizes the prompt and decodes the text (checked against the manifest)."""
    protocol: object = None
    """A `verillm.chain.protocol.Protocol`: the signer must be registered, active and staked for the model."""


@dataclass(frozen=True)
class NamedChain:
    """The chain a networked node says it serves on (its /v1/verillm/info ``chain``): the node's word,
    which `verillm complete` uses to tie the signer to a network when the caller pins none."""

    rpc_url: str
    deployment: dict
    """The deployment's address book, as `verillm.chain.deploy.Deployment.save` writes it."""


@dataclass(frozen=True)
class NodeInfo:
    """A node's /v1/verillm/info, parsed: only trusted where it hashes to what a receipt signs."""

    worker: bytes
    manifest: ModelManifest
    domain: SigningDomain
    chain: NamedChain | None = None
    """The chain the node names (a node with the dispatcher role), None for a node without one."""


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


def get_field(data: object, path: str):
    """Return ``data[a][b]…`` for the dotted ``path`` ("choices.0.text"); BadResponse naming the missing part."""
    value = data
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise BadResponse(f"the node's answer has no {path}: not a VeriLLM completion")
    return value


def _decoded(what: str, parse):
    try:
        return parse()
    except (VerillmError, TypeError, ValueError) as exc:  # a wrong type or value in one named field
        raise BadResponse(f"the node's answer has a malformed {what}: {exc}") from None


def parse_completion_body(body: object, chat: bool) -> tuple[Completion, str | None]:
    """Return the Completion in a node's body (text not yet decoded) and the node's own text."""
    if not isinstance(body, dict) or "verillm" not in body:
        raise BadResponse("the node's answer has no verillm field: is this a VeriLLM node?")
    extra = body["verillm"]
    job = _decoded("verillm.job", lambda: decode(Job, from_hex(get_field(extra, "job.encoded"), "verillm.job.encoded")))
    receipt = _decoded("verillm.receipt", lambda: receipt_from_json(get_field(extra, "receipt")))
    tokens = _decoded("verillm.output_tokens", lambda: _token_list(get_field(extra, "output_tokens")))
    verify_receipt_binding(receipt, job, tokens)
    promise = _decoded("verillm.batch_promise", lambda: promise_from_json(extra["batch_promise"])) if "batch_promise" in extra else None
    if promise is not None and promise.promise.receipt_hash != compute_receipt_hash(receipt):
        raise InvalidProof("the batching promise is about another receipt")
    node_text = get_field(body, "choices.0.message.content" if chat else "choices.0.text")
    status_url, model = get_field(extra, "status_url"), get_field(body, "model")
    if not all(isinstance(v, str) for v in (status_url, model)) or not isinstance(node_text, str | None):
        raise BadResponse("the node's answer has a non-string model, status_url or text")
    completion = Completion(text=None, tokens=tokens, prompt_tokens=tuple(job.input_tokens), finish_reason="", model=model,
                            job=job, receipt=receipt, job_hash=receipt.job_hash, status_url=status_url, promise=promise)
    return completion, node_text


def _token_list(value) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**32 for t in value):
        raise BadResponse("expected a list of token ids")
    return tuple(value)


def parse_completion(body: object, chat: bool) -> Completion:
    """Return the Completion in a node's response; raise if it is malformed or receipt, job and tokens disagree.

    Its ``text`` is None: only `verify_completion` (which the clients run) decodes it, from the
    signed tokens."""
    return parse_completion_body(body, chat)[0]


def parse_node_info(body: object) -> NodeInfo:
    """Return a node's /v1/verillm/info; BadResponse naming a malformed field."""
    return _decoded("/v1/verillm/info", lambda: NodeInfo(
        worker=from_hex(get_field(body, "worker"), "worker", 20),
        manifest=decode(ModelManifest, from_hex(get_field(body, "model.manifest"), "model.manifest")),
        domain=SigningDomain(_chain_id(get_field(body, "signing_domain.chain_id")),
                             from_hex(get_field(body, "signing_domain.verifying_contract"), "verifying_contract", 20)),
        chain=_named_chain(body.get("chain")) if isinstance(body, dict) else None,
    ))


def _named_chain(value) -> NamedChain | None:
    if value is None:
        return None
    rpc_url, deployment = get_field(value, "rpc_url"), get_field(value, "deployment")
    if not isinstance(rpc_url, str) or not rpc_url.startswith(("http://", "https://")) or not isinstance(deployment, dict):
        raise BadResponse("chain: expected an http(s) rpc_url and a deployment object")
    return NamedChain(rpc_url, deployment)


def _chain_id(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadResponse("signing_domain.chain_id: expected a non-negative integer")
    return value


def verify_signed_for(receipt: Receipt, domain: SigningDomain) -> None:
    """Check the receipt's signature holds for ``domain``; raise InvalidSignature naming the deployment."""
    try:
        verify_receipt_signature(receipt, domain)
    except InvalidSignature as exc:
        raise InvalidSignature(f"{exc}: the receipt is not signed for chain {domain.chain_id}, "
                               f"Jobs 0x{domain.verifying_contract.hex()} (another deployment's, or forged)") from None


def verify_completion(completion: Completion, node_text: str | None, requested: Requested, pins: Pins, info: NodeInfo, chat: bool) -> Completion:
    """Check ``completion`` against the request and the pins; return it with its text, finish reason and verification."""
    findings, receipt = Findings(), completion.receipt
    _verify_deployment(receipt, pins, info, findings)
    verify_manifest(info.manifest, receipt)
    _verify_model_and_signer(receipt, pins, findings)
    verify_job_is_request(completion.job, requested, pins.tokenizer, findings)
    text = verify_text(pins.tokenizer, info.manifest, completion.tokens, node_text, chat, findings, requested.stop)
    finish = compute_finish_reason(completion.tokens, info.manifest)
    if requested.stop and text is not None and compute_stop_cut(compute_text(pins.tokenizer, completion.tokens), requested.stop) is not None:
        finish = "stop"  # cut at a stop string, as the node's edge reports it
    return dataclasses.replace(completion, text=text, finish_reason=finish, verification=findings.freeze())


def _verify_deployment(receipt: Receipt, pins: Pins, info: NodeInfo, findings: Findings) -> None:
    domain = pins.domain or info.domain
    verify_signed_for(receipt, domain)
    where = f"chain {domain.chain_id}, Jobs 0x{domain.verifying_contract.hex()}"
    if pins.domain is not None:
        findings.checked.append(f"signature by {compute_address_hex(receipt.worker)} for {where}")
    else:
        findings.not_checked.append(f"deployment: the signature holds for {where}, the node's own claim "
                                    "(pin domain= / --chain-id and --jobs-address, or use the chain)")


def _verify_model_and_signer(receipt: Receipt, pins: Pins, findings: Findings) -> None:
    model = receipt.model_id
    if pins.model_id is not None:
        if model != pins.model_id:
            raise InvalidProof(f"receipt is for model 0x{model.hex()}, expected 0x{pins.model_id.hex()} (pinned)")
        findings.checked.append(f"model 0x{model.hex()} (pinned by the caller)")
    if pins.protocol is not None:
        verify_signer_on_chain(pins.protocol, receipt.worker, model)
        findings.checked.append(f"signer registered, active and staked on-chain for model 0x{model.hex()}")
        return
    if pins.model_id is None:
        findings.not_checked.append(f"model 0x{model.hex()}: the node's claim (pin model_id= / --model-id, or use the chain)")
    findings.not_checked.append("signer's registration and stake (no chain: use --rpc-url / protocol=)")


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
