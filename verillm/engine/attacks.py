"""The attack suite: dishonest engines that compute something cheaper or different but
commit and answer as if they had run the honest job on the honest model.

Each attack is an `Engine` built from the honest model, tokenizer and manifest (the manifest
and model id stay the honest ones: that is the lie). `ATTACKS[name].build(model, tokenizer,
manifest, **kw)` returns it; `kw` takes the TorchEngine options (max_batch_size, num_threads)
and the attack's own knobs (documented per builder). `category` says which check must catch
it: "fingerprint" (hidden states move), "token" (emitted tokens are not the sampler's),
"truncation" (output ends early without a stop token).

Weight attacks are just another model object; the rest are small TorchEngine subclasses over
its override points (`transform_job`, `transform_kv`, `force_token`).
"""

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from verillm.engine.base import Engine
from verillm.engine.families import get_expert_weights
from verillm.engine.models import build_tiny_llama
from verillm.engine.torch_engine import TorchEngine
from verillm.errors import ConfigError
from verillm.spec.types import Job, ModelManifest

ENGINE_OPTIONS = ("max_batch_size", "num_threads", "capture")


@dataclass(frozen=True)
class AttackSpec:
    """One attack of the suite."""

    name: str
    description: str
    category: str  # "fingerprint" | "token" | "truncation"
    build: Callable[..., Engine]


def _split_options(kw: dict) -> tuple[dict, dict]:
    engine = {k: kw.pop(k) for k in ENGINE_OPTIONS if k in kw}
    return engine, kw


# --- weight attacks: another model object under the honest manifest ---------------------


def compute_int8_weights(weight: torch.Tensor) -> torch.Tensor:
    """Symmetric per-output-channel int8 quantization, dequantized back."""
    w = weight.float()
    scale = w.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / 127
    return ((w / scale).round().clamp(-127, 127) * scale).to(weight.dtype)


def compute_int4_weights(weight: torch.Tensor, group: int = 32) -> torch.Tensor:
    """Symmetric int4 quantization in groups of ``group`` input columns, dequantized back."""
    w = weight.float()
    rows, cols = w.shape
    if cols % group:
        raise ConfigError(f"int4 groups of {group} do not divide {cols} columns")
    grouped = w.reshape(rows, cols // group, group)
    scale = grouped.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / 7
    return ((grouped / scale).round().clamp(-8, 7) * scale).reshape(rows, cols).to(weight.dtype)


def compute_fp8_weights(weight: torch.Tensor) -> torch.Tensor:
    """float8_e4m3fn with one per-tensor scale (absmax → 448, as fp8 inference stacks do), back."""
    w = weight.float()
    scale = w.abs().max().clamp_min(1e-12) / 448
    return ((w / scale).to(torch.float8_e4m3fn).float() * scale).to(weight.dtype)


def compute_lowrank_update(weight: torch.Tensor, relative: float, rank: int, generator: torch.Generator) -> torch.Tensor:
    """Return W + U Vᵀ with ‖U Vᵀ‖_F = relative · ‖W‖_F (a LoRA-style fine-tune)."""
    w = weight.float()
    u = torch.randn(w.shape[0], rank, generator=generator)
    v = torch.randn(w.shape[1], rank, generator=generator)
    delta = u @ v.T
    return (w + delta * (relative * w.norm() / delta.norm())).to(weight.dtype)


def _map_linear_weights(model: nn.Module, transform: Callable[[torch.Tensor], torch.Tensor]) -> nn.Module:
    """Deep-copy ``model`` and replace every nn.Linear weight and every MoE expert matrix
    (in place, so tied weights stay tied)."""
    attacked = copy.deepcopy(model)
    with torch.no_grad():
        for module in attacked.modules():
            if isinstance(module, nn.Linear):
                module.weight.copy_(transform(module.weight))
        for stack in get_expert_weights(attacked):  # [experts, out, in]: one linear weight per expert
            for expert in stack:
                expert.copy_(transform(expert))
    return attacked


def _weights_builder(transform_factory: Callable[..., Callable[[torch.Tensor], torch.Tensor]]):
    def build(model, tokenizer, manifest: ModelManifest, **kw) -> Engine:
        options, knobs = _split_options(kw)
        return TorchEngine(_map_linear_weights(model, transform_factory(**knobs)), tokenizer, manifest, **options)

    return build


def _lowrank_transform(relative: float = 1e-3, rank: int = 4, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return lambda weight: compute_lowrank_update(weight, relative, rank, generator)


def build_one_layer(model, tokenizer, manifest: ModelManifest, layer: int | None = None, relative: float = 1e-2, seed: int = 0, **kw) -> Engine:
    """Perturb every matrix of one decoder layer (default: the middle one) by ``relative`` ‖W‖_F noise."""
    options, _ = _split_options(kw)
    attacked = copy.deepcopy(model)
    layers = attacked.get_decoder().layers
    index = len(layers) // 2 if layer is None else layer
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in layers[index].parameters():
            if parameter.dim() == 2:
                noise = torch.randn(parameter.shape, generator=generator)
                parameter.add_((noise * (relative * parameter.float().norm() / noise.norm())).to(parameter.dtype))
    return TorchEngine(attacked, tokenizer, manifest, **options)


class _SkippedLayer(nn.Module):
    """A decoder layer removed from the computation: the residual stream passes through."""

    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


def build_other_model(model, tokenizer, manifest: ModelManifest, seed: int = 1, skip: tuple[int, ...] = (4, 9, 14, 19, 24), **kw) -> Engine:
    """Tiny: the tiny Llama of another seed. Others: the same model with decoder layers ``skip`` dropped."""
    options, _ = _split_options(kw)
    if manifest.name.startswith("tiny"):
        other, _ = build_tiny_llama(seed=seed, dtype=manifest.dtype, num_layers=manifest.num_layers)
        return TorchEngine(other, tokenizer, manifest, **options)
    other = copy.deepcopy(model)
    layers = other.get_decoder().layers
    for index in skip:
        layers[index] = _SkippedLayer()
    return TorchEngine(other, tokenizer, manifest, **options)


# --- KV-cache attacks ---------------------------------------------------------------------


def compute_int8_rows(states: torch.Tensor) -> torch.Tensor:
    """Symmetric int8 per (batch, head, token) vector over head_dim, dequantized back."""
    x = states.float()
    scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / 127
    return ((x / scale).round().clamp(-127, 127) * scale).to(states.dtype)


class KVInt8Engine(TorchEngine):
    """Stores the KV cache as int8: every entry is quantized right after the pass that wrote it."""

    def transform_kv(self, cache, attention_mask, num_new):
        for layer in cache.layers:
            if layer.get_seq_length() == 0:
                continue  # a layer that never ran (skipped) has no cache
            layer.keys[..., -num_new:, :] = compute_int8_rows(layer.keys[..., -num_new:, :])
            layer.values[..., -num_new:, :] = compute_int8_rows(layer.values[..., -num_new:, :])
        return attention_mask


def compute_fp8_kv(states: torch.Tensor, scale: float) -> torch.Tensor:
    """vLLM's ``--kv-cache-dtype fp8``: x / scale stored as float8_e4m3fn, read back as fp8 · scale."""
    stored = (states.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    return (stored.float() * scale).to(states.dtype)


class KVFp8Engine(TorchEngine):
    """Stores the KV cache as float8_e4m3fn with one scale per tensor, as vLLM's fp8 KV cache does.

    ``scale`` defaults to 1.0, vLLM's k_scale/v_scale when the checkpoint ships no calibrated
    scales; every entry is quantized right after the pass that wrote it, so later steps read
    dequantized fp8 values.
    """

    def __init__(self, *args, scale: float = 1.0, **kw):
        super().__init__(*args, **kw)
        self.scale = scale

    def transform_kv(self, cache, attention_mask, num_new):
        for layer in cache.layers:
            if layer.get_seq_length() == 0:
                continue
            layer.keys[..., -num_new:, :] = compute_fp8_kv(layer.keys[..., -num_new:, :], self.scale)
            layer.values[..., -num_new:, :] = compute_fp8_kv(layer.values[..., -num_new:, :], self.scale)
        return attention_mask


class KVEvictEngine(TorchEngine):
    """StreamingLLM-style eviction: later steps see only ``sinks`` first tokens + the last ``window``.

    Evicted entries are masked out rather than deleted: the attention result is the same as an
    engine that dropped them, and the cache keeps the shape the loop expects.
    """

    def __init__(self, *args, window: int = 16, sinks: int = 4, **kw):
        super().__init__(*args, **kw)
        self.window, self.sinks = window, sinks

    def transform_kv(self, cache, attention_mask, num_new):
        width = attention_mask.shape[1]
        rank = attention_mask.cumsum(dim=-1)  # 1-based rank among the entries still kept
        columns = torch.arange(width, device=attention_mask.device)
        keep = (rank <= self.sinks) | (columns >= width - self.window)
        return attention_mask * keep


# --- job and token attacks ---------------------------------------------------------------


class PromptEditEngine(TorchEngine):
    """Runs the job with one prompt token changed (default: the middle one), reports the original."""

    def __init__(self, *args, position: int | None = None, **kw):
        super().__init__(*args, **kw)
        self.position = position

    def transform_job(self, job: Job) -> Job:
        tokens = list(job.input_tokens)
        where = len(tokens) // 2 if self.position is None else self.position
        tokens[where] = (tokens[where] + 1) % self.manifest.vocab_size
        return dataclasses.replace(job, input_tokens=tuple(tokens))


class TokenSubstituteEngine(TorchEngine):
    """Forces output ``at`` (default: max_new_tokens // 2) to another token and continues from it.

    ``mode="next_id"`` emits token id + 1 (an injected token); ``mode="runner_up"`` emits the
    second-best logit (the most plausible substitute). Flags are committed honestly.
    """

    def __init__(self, *args, at: int | None = None, mode: str = "next_id", **kw):
        super().__init__(*args, **kw)
        if mode not in ("next_id", "runner_up"):
            raise ConfigError(f"unknown substitution mode {mode!r}")
        self.at, self.mode = at, mode

    def force_token(self, job, output_index, token, logits):
        if output_index != (job.max_new_tokens // 2 if self.at is None else self.at):
            return token
        if self.mode == "runner_up":
            top_two = logits.topk(2).indices.tolist()
            return top_two[1] if top_two[0] == token else top_two[0]
        return (token + 1) % self.manifest.vocab_size


class TruncateEngine(TorchEngine):
    """Stops after ``fraction`` of max_new_tokens (default half) without emitting a stop token."""

    def __init__(self, *args, fraction: float = 0.5, **kw):
        super().__init__(*args, **kw)
        self.fraction = fraction

    def transform_job(self, job: Job) -> Job:
        return dataclasses.replace(job, max_new_tokens=max(1, int(job.max_new_tokens * self.fraction)))


class WrongSamplingEngine(TorchEngine):
    """Samples with other params than the job's: another temperature, or another seed."""

    def __init__(self, *args, change: str = "temperature", **kw):
        super().__init__(*args, **kw)
        self.change = change

    def transform_job(self, job: Job) -> Job:
        sampling = job.sampling
        if self.change == "temperature":
            # Greedy jobs get sampled at T = 1; sampled jobs get the cheaper greedy decode.
            sampling = dataclasses.replace(sampling, temperature_milli=1000 if sampling.temperature_milli == 0 else 0)
        else:
            sampling = dataclasses.replace(sampling, seed=(sampling.seed + 1) % 2**64)
        return dataclasses.replace(job, sampling=sampling)


def build_draft_model(model: nn.Module, keep: int | None = None) -> nn.Module:
    """Return a draft model: ``model`` cut to its first ``keep`` decoder layers (default half), same head.

    Early-exit self-speculation (LayerSkip style); for the tiny model it is a 2-layer member
    of the same family. The config keeps the layer count (the skipped layers pass through),
    so the draft runs in the same engine under the same manifest shape.
    """
    draft = copy.deepcopy(model)
    layers = draft.get_decoder().layers
    keep = len(layers) // 2 if keep is None else keep
    for index in range(keep, len(layers)):
        layers[index] = _SkippedLayer()
    return draft


class SpeculativeEngine(TorchEngine):
    """Unverified speculative decoding: the draft model's tokens are emitted as the output.

    A real speculative decoder runs the target over the draft tokens and keeps only those the
    target's sampler accepts; this one skips the accept/reject step. The target still runs
    over the emitted sequence, so the committed hidden states are the target's own over
    prompt ‖ output: only the token check can catch it.
    """

    def __init__(self, model, tokenizer, manifest, keep: int | None = None, **kw):
        super().__init__(model, tokenizer, manifest, **kw)
        self.draft = TorchEngine(build_draft_model(model, keep), tokenizer, manifest, max_batch_size=self.max_batch_size, num_threads=self.num_threads, capture=False)
        self._drafted: dict[Job, tuple[int, ...]] = {}

    def run(self, jobs):
        self._drafted = {job: trace.output_tokens for job, trace in zip(jobs, self.draft.run(jobs), strict=True)}
        return super().run(jobs)

    def force_token(self, job, output_index, token, logits):
        drafted = self._drafted.get(job, ())
        return drafted[output_index] if output_index < len(drafted) else token


def _subclass_builder(engine_class, **fixed):
    def build(model, tokenizer, manifest: ModelManifest, **kw) -> Engine:
        return engine_class(model, tokenizer, manifest, **fixed, **kw)

    return build


def _attack(name, category, description, build) -> tuple[str, AttackSpec]:
    return name, AttackSpec(name=name, description=description, category=category, build=build)


ATTACKS: dict[str, AttackSpec] = dict(
    [
        _attack("int8", "fingerprint", "every Linear weight quantized to int8, per output channel", _weights_builder(lambda: compute_int8_weights)),
        _attack("int4", "fingerprint", "every Linear weight quantized to int4, groups of 32", _weights_builder(lambda group=32: lambda w: compute_int4_weights(w, group))),
        _attack("fp8", "fingerprint", "every Linear weight cast to float8_e4m3fn (per-tensor scale) and back", _weights_builder(lambda: compute_fp8_weights)),
        _attack("other_model", "fingerprint", "another model of the same vocabulary (tiny: other seed; else 5 layers skipped)", build_other_model),
        _attack("lowrank", "fingerprint", "every Linear W += rank-4 update with ‖ΔW‖ = 1e-3‖W‖", _weights_builder(_lowrank_transform)),
        _attack("one_layer", "fingerprint", "the middle decoder layer's matrices perturbed by 1e-2 relative noise", build_one_layer),
        _attack("kv_int8", "fingerprint", "KV cache stored as int8 (per token and head)", _subclass_builder(KVInt8Engine)),
        _attack("kv_fp8", "fingerprint", "KV cache stored as float8_e4m3fn with scale 1.0 (vLLM --kv-cache-dtype fp8)", _subclass_builder(KVFp8Engine)),
        _attack("speculative", "token", "a draft model's tokens (first half of the layers) emitted without target verification", _subclass_builder(SpeculativeEngine)),
        _attack("kv_evict", "fingerprint", "KV eviction: 4 sink tokens + a sliding window of 16", _subclass_builder(KVEvictEngine)),
        _attack("prompt_edit", "fingerprint", "runs with one prompt token changed, reports the original job", _subclass_builder(PromptEditEngine)),
        _attack("token_substitute", "token", "forces one mid-generation output token to another and continues from it", _subclass_builder(TokenSubstituteEngine)),
        _attack("truncate", "truncation", "stops after half of max_new_tokens without a stop token", _subclass_builder(TruncateEngine)),
        _attack("wrong_temperature", "token", "samples at another temperature (greedy ↔ T=1)", _subclass_builder(WrongSamplingEngine, change="temperature")),
        _attack("wrong_seed", "token", "samples with seed + 1 (no effect on greedy jobs)", _subclass_builder(WrongSamplingEngine, change="seed")),
    ]
)


def get_attack(name: str) -> AttackSpec:
    """Return the attack called ``name``."""
    if name not in ATTACKS:
        raise ConfigError(f"unknown attack {name!r}; known: {sorted(ATTACKS)}")
    return ATTACKS[name]
