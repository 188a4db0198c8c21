"""Manifests derived from the model's files: digests, stop tokens, committed layers, name.

`build_manifest` is the one place a `ModelManifest` is constructed; every model source
(the seeded tiny Llama, a Hugging Face directory, a GGUF file) goes through it, so a new
manifest field is added here once. Two operators holding the same files get the same
manifest, hence the same model id: nothing here reads a path, a clock or the host.
"""

import math

import blake3
import torch
from jinja2 import TemplateError

from verillm.errors import ConfigError
from verillm.spec.params import MAINNET, Preset
from verillm.spec.types import ModelManifest

# Token margin: how far (in logits) a token may score below the sampler's choice and still
# count as a numerical near-tie. fp32 honest noise is ~1e-6 relative (notes/noise-vs-attacks.md);
# bf16 top-1 gaps of honest disagreements reached 0.25 there.
TOKEN_MARGIN_MICROLOGITS = {"float32": 1_000, "bfloat16": 500_000}

# The committed-layer rule (docs/protocol.md §4): at most this many decoder layers between
# two committed hidden states, so a change in any layer shows within this many layers.
MAX_COMMITTED_LAYER_GAP = 16

# A marker no chat template produces on its own, to find what follows an assistant turn.
_TURN_MARKER = "\u2063verillm-turn-end\u2063"


def compute_committed_layers(num_layers: int, max_gap: int = MAX_COMMITTED_LAYER_GAP) -> tuple[int, ...]:
    """Return the committed hidden-state indices for a model of ``num_layers`` decoder layers.

    Layer 1 (the first decoder layer's output: the smallest honest noise, so the tightest band
    against weight tampering in bf16), then n = max(2, ⌈L / max_gap⌉) evenly spaced indices
    ⌈k·L/n⌉ for k = 1..n, the last being L (the final norm's output, which every upstream
    change reaches and on which the token check runs). 4 layers → (1, 2, 4); 30 → (1, 15, 30);
    32 → (1, 16, 32); 80 → (1, 16, 32, 48, 64, 80).
    """
    if num_layers < 1:
        raise ConfigError(f"a model needs at least one decoder layer, got {num_layers}")
    segments = max(2, math.ceil(num_layers / max_gap))
    return tuple(sorted({1} | {math.ceil(k * num_layers / segments) for k in range(1, segments + 1)}))


def compute_weights_digest(model: torch.nn.Module) -> bytes:
    """Return blake3 over the state dict: per tensor (sorted by name) its name, dtype, shape and raw bytes."""
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
    state = model.state_dict()
    for name in sorted(state):
        tensor = state[name].detach().contiguous().cpu()
        hasher.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        hasher.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return hasher.digest()


def compute_tokenizer_digest(tokenizer) -> bytes:
    """Return blake3 over the tokenizer's canonical JSON (vocab, merges, specials, normalizers)."""
    return blake3.blake3(tokenizer.backend_tokenizer.to_str().encode()).digest()


def compute_chat_template_digest(tokenizer) -> bytes:
    """Return blake3 over the chat template text (empty string when the tokenizer has none)."""
    return blake3.blake3((tokenizer.chat_template or "").encode()).digest()


def get_stop_tokens(tokenizer, extra: tuple[str, ...] = ()) -> tuple[int, ...]:
    """Return the sorted ids of EOS and the ``extra`` special tokens that end a completion."""
    vocab = tokenizer.get_vocab()
    missing = [t for t in extra if t not in vocab]
    if tokenizer.eos_token_id is None or missing:
        raise ConfigError(f"tokenizer lacks the stop tokens {missing or ['EOS']}")
    return tuple(sorted({tokenizer.eos_token_id} | {vocab[t] for t in extra}))


def _as_ids(value) -> set[int]:
    if value is None:
        return set()
    return {int(v) for v in value} if isinstance(value, list | tuple) else {int(value)}


def get_turn_end_token(tokenizer) -> int | None:
    """Return the special token the chat template writes right after an assistant turn, if any."""
    if not tokenizer.chat_template:
        return None
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _TURN_MARKER}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
    except TemplateError as exc:
        raise ConfigError(f"the chat template cannot render a user/assistant exchange: {exc}") from exc
    after = text.split(_TURN_MARKER, 1)[-1] if _TURN_MARKER in text else ""
    specials = sorted(tokenizer.all_special_tokens + [t.content for t in tokenizer.added_tokens_decoder.values() if t.special], key=len, reverse=True)
    token = next((s for s in specials if after.startswith(s)), None)
    return None if token is None else tokenizer.convert_tokens_to_ids(token)


def compute_stop_tokens(model: torch.nn.Module, tokenizer) -> tuple[int, ...]:
    """Stop tokens from the files: generation_config and config EOS ids, the tokenizer's EOS,
    and the token the chat template ends an assistant turn with."""
    generation = getattr(model, "generation_config", None)
    ids = _as_ids(getattr(generation, "eos_token_id", None)) | _as_ids(model.config.eos_token_id) | _as_ids(tokenizer.eos_token_id)
    turn_end = get_turn_end_token(tokenizer)
    ids |= _as_ids(turn_end)
    vocab_size = model.config.vocab_size
    if not ids or any(not 0 <= i < vocab_size for i in ids):
        raise ConfigError(f"no usable stop tokens (found {sorted(ids)}, vocab {vocab_size}): set eos_token_id in generation_config.json")
    return tuple(sorted(ids))


def compute_model_name(config, weights_digest: bytes) -> str:
    """A name every holder of the same files derives alike: family, depth x width, weights digest prefix."""
    return f"{config.model_type}-{config.num_hidden_layers}x{config.hidden_size}-{weights_digest[:4].hex()}"


def build_manifest(
    name: str | None,
    model: torch.nn.Module,
    tokenizer,
    dtype: str,
    committed_layers: tuple[int, ...] | None = None,
    preset: Preset = MAINNET,
    stop_tokens: tuple[int, ...] | None = None,
    max_context_tokens: int | None = None,
    token_margin_micrologits: int | None = None,
    kernel_class: str = "",
) -> ModelManifest:
    """Return the manifest binding ``model``'s weights, tokenizer, template, dtype and commitment shape.

    Left as None, ``name``, ``committed_layers`` and ``stop_tokens`` are derived from the files
    (`compute_model_name`, `compute_committed_layers`, `compute_stop_tokens`).
    """
    config = model.config
    layers = tuple(committed_layers) if committed_layers is not None else compute_committed_layers(config.num_hidden_layers)
    if not layers or any(not 0 <= layer <= config.num_hidden_layers for layer in layers):
        raise ConfigError(f"committed layers {layers} outside 0..{config.num_hidden_layers}")
    if dtype not in TOKEN_MARGIN_MICROLOGITS:
        raise ConfigError(f"unknown dtype {dtype!r}; known: {sorted(TOKEN_MARGIN_MICROLOGITS)}")
    weights_digest = compute_weights_digest(model)
    return ModelManifest(
        name=name or compute_model_name(config, weights_digest),
        weights_digest=weights_digest,
        tokenizer_digest=compute_tokenizer_digest(tokenizer),
        chat_template_digest=compute_chat_template_digest(tokenizer),
        dtype=dtype,
        hidden_size=config.hidden_size,
        vocab_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        committed_layers=layers,
        fingerprint_dims=preset.FINGERPRINT_DIMS,
        stop_tokens=stop_tokens if stop_tokens is not None else compute_stop_tokens(model, tokenizer),
        max_context_tokens=max_context_tokens or config.max_position_embeddings,
        # Exact mode: both sides compute the same logits bit for bit, so the margin is 0.
        token_margin_micrologits=0 if kernel_class else token_margin_micrologits or TOKEN_MARGIN_MICROLOGITS[dtype],
        kernel_class=kernel_class,
    )
