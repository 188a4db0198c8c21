"""What the client checks of a completion before it shows anything, and what it says it did not.

The node under test is never the authority on what it is tested against:

- **the job is the request**: input tokens (the ids sent, or the prompt / the chat template
  tokenized by the client's own tokenizer), sampling, seed and ``max_tokens`` are compared with
  the job the receipt signs (`verify_job_is_request`);
- **the model** is pinned by the caller (``model_id``) or the chain (registered there), never by
  what the node reports; the manifest the node serves is used only once it hashes to the
  receipt's model id (`verify_manifest`);
- **the signer** is, with a chain, a registered node, active and staked for that model
  (`verify_signer_on_chain`);
- **the text** is decoded from the receipt's output tokens with a tokenizer whose digest is
  the manifest's (`verify_tokenizer`); the node's own text is only compared with it, never shown.

Each check says what it verified (`Verification.checked`); each that could not run says so
(`Verification.not_checked`: "not checked: …"), so nothing unchecked reads as "ok".
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import blake3

from verillm.errors import InvalidProof
from verillm.wire import compute_stop_cut
from verillm.spec.job import compute_model_id
from verillm.spec.types import Job, ModelManifest, Receipt


@dataclass(frozen=True)
class Requested:
    """What the caller asked for: compared, field by field, with the job the receipt signs."""

    prompt: str | None = None
    tokens: tuple[int, ...] | None = None
    messages: tuple[dict, ...] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    """OpenAI stop strings: the node cuts its text before the first; the client cuts the decoded text the same way."""
    nonce: bytes | None = None
    """The job nonce the client sent (``verillm.nonce``): the signed job must carry it, so the receipt is this
    request's and not one a node kept from an identical earlier request."""


@dataclass(frozen=True)
class Verification:
    """What was verified of one completion, and what was not (and why)."""

    checked: tuple[str, ...] = ()
    not_checked: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        """Every check ran: nothing of the answer rests on the node's word."""
        return not self.not_checked

    def lines(self) -> list[str]:
        """One line per check: "checked: …" or "not checked: …"."""
        return [f"checked: {c}" for c in self.checked] + [f"not checked: {n}" for n in self.not_checked]


@dataclass
class Findings:
    """Checks collected while verifying (mutable; frozen into a Verification at the end)."""

    checked: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)

    def freeze(self) -> Verification:
        return Verification(tuple(self.checked), tuple(self.not_checked))


def compute_tokenizer_digest(tokenizer) -> bytes:
    """blake3 over the tokenizer's canonical JSON: the manifest's tokenizer_digest (the engine's rule)."""
    return blake3.blake3(tokenizer.backend_tokenizer.to_str().encode()).digest()


def compute_chat_template_digest(tokenizer) -> bytes:
    """blake3 over the chat template text: the manifest's chat_template_digest (the engine's rule)."""
    return blake3.blake3((tokenizer.chat_template or "").encode()).digest()


def verify_manifest(manifest: ModelManifest, receipt: Receipt) -> None:
    """Check the manifest the node serves is the model the receipt names; raise InvalidProof."""
    served = compute_model_id(manifest)
    if served != receipt.model_id:
        raise InvalidProof(f"the node's manifest is model 0x{served.hex()}, the receipt's model is 0x{receipt.model_id.hex()}")


def verify_tokenizer(tokenizer, manifest: ModelManifest, chat: bool) -> None:
    """Check ``tokenizer`` (and its chat template, for a chat) is the one the manifest binds."""
    if compute_tokenizer_digest(tokenizer) != manifest.tokenizer_digest:
        raise InvalidProof(f"the client's tokenizer is not model {manifest.name}'s (its digest differs from the manifest's)")
    if chat and compute_chat_template_digest(tokenizer) != manifest.chat_template_digest:
        raise InvalidProof(f"the client's chat template is not model {manifest.name}'s (its digest differs from the manifest's)")


def compute_text(tokenizer, tokens: Sequence[int]) -> str:
    """The text of output tokens, special tokens (the stop token) left out: what the node's edge computes."""
    return tokenizer.decode(list(tokens), skip_special_tokens=True)


def compute_finish_reason(tokens: Sequence[int], manifest: ModelManifest) -> str:
    """"stop" when the output ends with one of the manifest's stop tokens, else "length"."""
    return "stop" if tokens and tokens[-1] in manifest.stop_tokens else "length"


def compute_expected_tokens(requested: Requested, tokenizer) -> tuple[int, ...] | None:
    """The input tokens the request stands for; None when only a tokenizer could say (and none is held)."""
    if requested.tokens is not None:
        return tuple(requested.tokens)
    if tokenizer is None:
        return None
    if requested.messages is not None:
        encoded = tokenizer.apply_chat_template(list(requested.messages), add_generation_prompt=True, tokenize=True)
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        return tuple(int(t) for t in ids)
    return tuple(tokenizer.encode(requested.prompt))


def verify_job_is_request(job: Job, requested: Requested, tokenizer, findings: Findings) -> None:
    """Check the signed job is what was asked: input, sampling, seed, max_tokens; raise InvalidProof naming each mismatch."""
    s = job.sampling
    wanted = {
        "temperature": (s.temperature_milli, round((1.0 if requested.temperature is None else requested.temperature) * 1000)),
        "top_p": (s.top_p_ppm, round((1.0 if requested.top_p is None else requested.top_p) * 1_000_000)),
        "top_k": (s.top_k, max(requested.top_k or 0, 0)),
    }
    if requested.seed is not None:
        wanted["seed"] = (s.seed, requested.seed)
    if requested.max_tokens is not None:
        wanted["max_tokens"] = (job.max_new_tokens, requested.max_tokens)
    if requested.nonce is not None:
        wanted["nonce"] = ("0x" + job.nonce.hex(), "0x" + requested.nonce.hex())
    expected = compute_expected_tokens(requested, tokenizer)
    if expected is not None:
        wanted["input tokens"] = (tuple(job.input_tokens), expected)
    wrong = [f"{name} (signed {_show(got)}, asked {_show(asked)})" for name, (got, asked) in wanted.items() if got != asked]
    if wrong:
        raise InvalidProof("the receipt is for another request: " + "; ".join(wrong))
    findings.checked.append("the job is the request: " + ", ".join(wanted))
    if expected is None:
        findings.not_checked.append("input tokens (no tokenizer to tokenize the prompt: pass tokenizer= / --tokenizer)")
    if requested.seed is None and s.temperature_milli > 0:
        findings.not_checked.append(f"seed {s.seed} (chosen by the node: pass seed= to fix it)")
    if requested.max_tokens is None:
        findings.not_checked.append(f"max_tokens {job.max_new_tokens} (left to the node)")
    if requested.nonce is None:
        findings.not_checked.append("freshness (the node chose the job's nonce: a receipt kept from an identical earlier request "
                                    "would pass; send verillm.nonce)")


def _show(value) -> str:
    if isinstance(value, tuple) and len(value) > 8:
        return f"{len(value)} tokens {list(value[:4])}…"
    return str(list(value) if isinstance(value, tuple) else value)


def verify_text(tokenizer, manifest: ModelManifest, tokens: Sequence[int], node_text: str | None, chat: bool, findings: Findings,
                stop: tuple[str, ...] = ()) -> str | None:
    """Return the text decoded from the signed tokens, cut before the first of ``stop`` as the node's edge
    cuts it (None without a tokenizer); refuse a node whose text differs."""
    if tokenizer is None:
        findings.not_checked.append("text (no tokenizer: the signed tokens are shown, the node's text never is)")
        return None
    verify_tokenizer(tokenizer, manifest, chat)
    text = compute_text(tokenizer, tokens)
    cut = compute_stop_cut(text, stop)
    text = text if cut is None else text[:cut]
    if node_text is not None and node_text != text:
        raise InvalidProof(f"the node's text is not what the receipt's output tokens decode to ({node_text[:40]!r}… vs {text[:40]!r}…)")
    findings.checked.append("text decoded from the signed output tokens with the manifest's tokenizer")
    return text


def verify_signer_on_chain(protocol, worker: bytes, model_id: bytes) -> None:
    """Check on-chain that ``model_id`` is registered and ``worker`` is registered, active and staked for it."""
    from eth_utils import to_checksum_address

    from verillm.chain.errors import TransactionReverted

    try:
        known = protocol.registry.call("getModelConfig", model_id)[0]
    except TransactionReverted as exc:
        if exc.error != "UnknownModel":
            raise
        known = False
    if not known:
        raise InvalidProof(f"model 0x{model_id.hex()} is not registered on-chain")
    node = protocol.get_node(to_checksum_address(worker))
    address = to_checksum_address(worker)
    if not node["registered"]:
        raise InvalidProof(f"the receipt's signer {address} is not a registered node")
    if not node["active"] or node["stake_wei"] <= 0:
        raise InvalidProof(f"the receipt's signer {address} is not active and staked (stake {node['stake_wei']} wei)")
    if model_id not in node["models"]:
        raise InvalidProof(f"the receipt's signer {address} is not registered for model 0x{model_id.hex()}")
