"""The attack suite with the dishonest side on vLLM, for every attack vLLM can express.

Each attack reuses the reference suite's own code (`verillm.engine.attacks`): weight attacks
take the attacked model object the reference builder makes and put its weights into vLLM
(from a saved folder, or swapped into a running engine); job and token attacks reuse the
reference engines' `transform_job` on a `VllmEngine` subclass, or express the substitution as
a rule the capture applies inside vLLM's worker. `kv_fp8` is vLLM's own fp8 KV cache
(`kv_cache_dtype="fp8"`); `speculative` runs the draft model in a second vLLM engine and
emits its tokens from the target's. The manifest stays the honest one: that is the lie every
attack tells.

Not expressible on vLLM (reported, not faked): `kv_int8` and `kv_evict`, which need control
of the paged KV cache that vLLM does not expose (see `NOT_EXPRESSIBLE`).
"""

import copy
import inspect
from pathlib import Path

import torch

from verillm.engine.attacks import ATTACKS, PromptEditEngine, TruncateEngine, WrongSamplingEngine, build_other_model
from verillm.engine.base import Engine
from verillm.engine.vllm_engine import VllmEngine, prepare_model_dir
from verillm.errors import ConfigError
from verillm.spec.types import ModelManifest

WEIGHT_ATTACKS = ("int8", "int4", "fp8", "other_model", "lowrank", "one_layer")
ENGINE_ATTACKS = ("kv_fp8", "speculative")  # vLLM's own fp8 KV cache; a draft vLLM engine's tokens
NOT_EXPRESSIBLE = {
    "kv_int8": "vLLM exposes no hook into its paged KV cache; its int8 KV cache (kv_cache_dtype='int8_per_token_head') is a"
    " Triton (GPU) kernel: the CPU backend's KV dtypes are auto/fp8/fp8_e4m3/fp8_e5m2 (vLLM 0.32 starts with it on CPU anyway"
    " and moves hidden states ~75x more than an int8 KV cache does: not that attack)",
    "kv_evict": "vLLM has no KV eviction policy to turn on; would need a patched attention backend",
}


# --- weight attacks -----------------------------------------------------------------------


def compute_attacked_model(name: str, model, tokenizer, manifest: ModelManifest, **knobs) -> torch.nn.Module:
    """Return the attacked model object of weight attack ``name``, in a form vLLM can load.

    `other_model` on a non-tiny model drops decoder layers; vLLM cannot load a model with
    layers missing, so the same computation is expressed by zeroing those layers' output
    projections (o_proj, down_proj): the layer then adds exactly 0 to the residual stream.
    """
    if name not in WEIGHT_ATTACKS:
        raise ConfigError(f"{name!r} is not a weight attack; weight attacks: {list(WEIGHT_ATTACKS)}")
    if name == "other_model" and not manifest.name.startswith("tiny"):
        return compute_layers_skipped(model, knobs.get("skip", inspect.signature(build_other_model).parameters["skip"].default))
    return ATTACKS[name].build(model, tokenizer, manifest, capture=False, **knobs).model


def compute_layers_skipped(model, skip: tuple[int, ...]) -> torch.nn.Module:
    """Return a copy of ``model`` whose decoder layers ``skip`` add nothing to the residual stream."""
    other = copy.deepcopy(model)
    layers = other.get_decoder().layers
    with torch.no_grad():
        for index in skip:
            layers[index].self_attn.o_proj.weight.zero_()
            layers[index].mlp.down_proj.weight.zero_()
    return other


def build_weight_attack(name: str, model, tokenizer, manifest: ModelManifest, root: Path, **kw) -> VllmEngine:
    """Save the attacked weights under ``root`` and start a vLLM engine on them (honest manifest)."""
    attacked = compute_attacked_model(name, model, tokenizer, manifest)
    model_dir = prepare_model_dir(attacked, tokenizer, Path(root) / f"attack-{name}-{manifest.name}-{manifest.dtype}")
    return VllmEngine(model_dir, manifest, **kw)


# --- engine attacks: vLLM features -------------------------------------------------------


def get_kv_fp8_refusal() -> str | None:
    """Return why vLLM refuses an fp8 KV cache on this host, in its own words, or None.

    vLLM's CPU attention backend raises this at engine start on x86 without AVX-512 or AMX
    (`vllm.v1.attention.backends.cpu_attn._get_attn_isa`); GPUs take it.
    """
    if torch.cuda.is_available() or torch.cpu._is_avx512_supported() or torch.cpu._is_amx_tile_supported():
        return None
    return "FP8 KV cache on CPU requires x86 with AVX-512 or AMX."


def build_kv_fp8_attack(model_dir: Path, manifest: ModelManifest, **kw) -> VllmEngine:
    """`kv_fp8`: vLLM's own fp8 KV cache (e4m3, k/v scale 1.0) on the honest weights, honest manifest."""
    refusal = get_kv_fp8_refusal()
    if refusal:
        raise ConfigError(f"kv_fp8 cannot run on this host: {refusal}")
    return VllmEngine(model_dir, manifest, kv_cache_dtype="fp8", **kw)


def compute_draft_model(model, keep: int | None = None) -> torch.nn.Module:
    """Return `attacks.build_draft_model`'s draft (the first ``keep`` decoder layers, default half)
    in a form vLLM loads: the later layers' output projections zeroed, so they add nothing."""
    count = len(model.get_decoder().layers)
    return compute_layers_skipped(model, tuple(range(count // 2 if keep is None else keep, count)))


class VllmSpeculative(VllmEngine):
    """`attacks.SpeculativeEngine` on vLLM: ``draft`` (a VllmEngine over `compute_draft_model`'s
    weights) generates, and this engine (the target) emits the draft's tokens without the
    accept/reject step, committing its own hidden states over them: only the token check can
    catch it. vLLM's own speculative decoding is not this attack: it verifies every draft token
    against the target (and refuses the capture's logits processor)."""

    draft: Engine | None = None

    def run(self, jobs):
        self._drafted = {job: trace.output_tokens for job, trace in zip(jobs, self.draft.run(jobs), strict=True)}
        return super().run(jobs)

    def forced_tokens(self, job):
        return dict(enumerate(self._drafted.get(job, ())))


def build_speculative_attack(target: VllmEngine, draft: Engine) -> VllmEngine:
    """Return `speculative` on ``target``'s vLLM instance, emitting ``draft``'s tokens."""
    return VllmSpeculative.sharing(target, draft=draft, _drafted={})


# --- job and token attacks: VllmEngine subclasses over the same override points -----------


class VllmPromptEdit(VllmEngine):
    """`attacks.PromptEditEngine` on vLLM: one prompt token changed, the original reported."""

    position: int | None = None
    transform_job = PromptEditEngine.transform_job


class VllmTruncate(VllmEngine):
    """`attacks.TruncateEngine` on vLLM: stops after half of max_new_tokens, no stop token."""

    fraction: float = 0.5
    transform_job = TruncateEngine.transform_job


class VllmWrongSampling(VllmEngine):
    """`attacks.WrongSamplingEngine` on vLLM: another temperature or seed than the job's."""

    change: str = "temperature"
    transform_job = WrongSamplingEngine.transform_job


class VllmTokenSubstitute(VllmEngine):
    """`attacks.TokenSubstituteEngine` on vLLM: output ``at`` (default max_new_tokens // 2) forced."""

    at: int | None = None
    mode: str = "next_id"

    def forced_tokens(self, job):
        return {job.max_new_tokens // 2 if self.at is None else self.at: self.mode}


JOB_ATTACKS = {
    "prompt_edit": (VllmPromptEdit, {}),
    "token_substitute": (VllmTokenSubstitute, {}),
    "truncate": (VllmTruncate, {}),
    "wrong_temperature": (VllmWrongSampling, {"change": "temperature"}),
    "wrong_seed": (VllmWrongSampling, {"change": "seed"}),
}


def build_job_attack(name: str, honest: VllmEngine, **knobs) -> VllmEngine:
    """Return attack ``name`` running on ``honest``'s vLLM instance (no second engine start)."""
    if name not in JOB_ATTACKS:
        raise ConfigError(f"{name!r} is not a job attack on vLLM; job attacks: {sorted(JOB_ATTACKS)}")
    engine_class, fixed = JOB_ATTACKS[name]
    return engine_class.sharing(honest, **fixed, **knobs)


def get_vllm_attack_names() -> list[str]:
    """Return the attacks of the reference suite that run on vLLM here."""
    return [name for name in ATTACKS if name in WEIGHT_ATTACKS or name in JOB_ATTACKS or name in ENGINE_ATTACKS]
