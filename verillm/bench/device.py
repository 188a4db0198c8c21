"""`verillm bench device`: the reference engine on an accelerator (CUDA), measured in one run.

What a GPU session measures first (docs/vllm.md, "Issue 21 on GPUs"), for the seeded tiny Llama
and a seeded model of SmolLM2-135M's shapes (hidden 576, 30 layers, 9/3 heads; the tiny
tokenizer's 1,024-token vocabulary, because SmolLM2's weights are too large to carry to a
lent GPU machine):

- **kernel class**: the known-answer battery (`engine/kernel_class.py`) run on the device. It
  either names a `cuda-kat…` class or refuses exact mode, saying which invariant failed there
  (cuBLAS picks its GEMM per shape; row invariance is what the battery checks).
- **exact audits**: fresh honest bf16 audits, worker and member both on the device, in batches
  of random composition (`bench.audits.run_honest_audits`): false rejections and differing
  committed positions, both must be 0. Skipped where the class is refused.
- **cross-device tolerance**: fp32 jobs run on the device and verified on the CPU, and the
  reverse, with the shipped tiny-float32 profile: rejections, and the largest fingerprint error
  over every committed cell as a share of the profile's per-cell threshold (a mixed network of
  GPU and CPU workers in tolerance mode works only if this stays well below 1).
- **wall time**: generation (batch 1 and 8) and the verification prefill on the device, exact
  kernels against stock ones, synchronised; the ratios are what count (`verify_over_generate`,
  `exact_over_stock`). Wall-clock on purpose: on a GPU the process CPU time `bench cost` uses is
  not the work done.
"""

import copy
import random
import statistics
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from verillm.bench.audits import draw_job, run_honest_audits
from verillm.engine.manifests import build_manifest
from verillm.engine.models import TINY_COMMITTED_LAYERS, build_tiny_llama, build_tiny_tokenizer, get_kernel_class, get_torch_dtype
from verillm.engine.profiles import select_profile
from verillm.engine.torch_engine import TorchEngine
from verillm.errors import ConfigError
from verillm.spec.job import compute_model_id
from verillm.spec.params import MAINNET
from verillm.spec.types import Job, SamplingParams
from verillm.verifier.local import Party, check_pair, commit_runs, compute_member_jobs

SHAPES = ("tiny", "smollm2-shape")


def build_seeded_model(shape: str, dtype: str, seed: int = 0):
    """Return (model, tokenizer, name, committed layers) of a seeded model of ``shape``, on the CPU."""
    if shape == "tiny":
        model, tokenizer = build_tiny_llama(seed=seed, dtype=dtype)
        return model, tokenizer, f"tiny-llama-seed{seed}", TINY_COMMITTED_LAYERS
    if shape != "smollm2-shape":
        raise ConfigError(f"unknown model shape {shape!r}; known: {', '.join(SHAPES)}")
    tokenizer = build_tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048, rms_norm_eps=1e-5,
        rope_theta=100000.0, tie_word_embeddings=False, bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(10.0)  # logit spreads of a real LM, as the tiny model does
    return model.to(get_torch_dtype(dtype)).eval(), tokenizer, f"smollm2-shape-seed{seed}", None


def _on_device(shape: str, dtype: str, device: str, mode: str | None):
    """The seeded model on ``device`` and its manifest (exact: the class measured there)."""
    model, tokenizer, name, layers = build_seeded_model(shape, dtype)
    model = model.to(device)
    kernel_class = get_kernel_class(model, dtype, mode)
    return model, tokenizer, build_manifest(name, model, tokenizer, dtype, layers, MAINNET, kernel_class=kernel_class)


def measure_exact(shape: str, device: str, audits: int, seed: str) -> dict:
    """The kernel class on ``device`` and fresh honest exact audits there (none when refused)."""
    try:
        model, tokenizer, manifest = _on_device(shape, "bfloat16", device, "exact")
    except ConfigError as refused:
        return {"kernel_class": None, "refused": str(refused)}
    report = run_honest_audits(model, tokenizer, manifest, shape, audits, seed=seed, long_prompt_tokens=700, threads=(1,))
    return {"kernel_class": manifest.kernel_class, **{k: report[k] for k in ("audits", "positions", "false_rejections", "differing_positions", "long_prompts", "rejected")}}


def _largest_error_share(worker_trace, member_trace, manifest, profile) -> float:
    """The largest |worker − member| over every committed cell, over its layer's per-cell threshold."""
    count = worker_trace.num_positions
    diff = np.abs(worker_trace.fingerprints.astype(np.float64) - member_trace.fingerprints[:count].astype(np.float64))
    limits = np.array([profile.for_layer(layer).max_cell_error for layer in manifest.committed_layers])
    return float((diff.max(axis=(0, 2)) / limits).max())


def measure_cross_device(device: str, jobs: int, seed: str) -> dict:
    """fp32 tiny jobs on ``device`` verified on the CPU and the reverse, against the shipped profile."""
    cpu_model, tokenizer, name, layers = build_seeded_model("tiny", "float32")
    manifest = build_manifest(name, cpu_model, tokenizer, "float32", layers, MAINNET)
    profile = select_profile(manifest, "tiny")
    engines = {"cpu": TorchEngine(cpu_model, tokenizer, manifest, max_batch_size=8, num_threads=1),
               device: TorchEngine(copy.deepcopy(cpu_model).to(device), tokenizer, manifest, max_batch_size=8, num_threads=1)}
    rng = random.Random(f"{seed}:cross")
    model_id = compute_model_id(manifest)
    work = [draw_job(rng, manifest, model_id, i, 24, 700) for i in range(jobs)]
    out = {}
    for worker, member in ((device, "cpu"), ("cpu", device)):
        worker_runs = commit_runs(work, engines[worker].run(work), manifest, Party(b"\x57" * 32))
        member_jobs = compute_member_jobs(worker_runs)
        member_traces = engines[member].run(member_jobs)
        member_runs = commit_runs(member_jobs, member_traces, manifest, Party(b"\x4d" * 32))
        results = [check_pair(w, m, manifest, profile, MAINNET.CHALLENGE_POSITIONS) for w, m in zip(worker_runs, member_runs)]
        shares = [_largest_error_share(w.trace, t, manifest, profile) for w, t in zip(worker_runs, member_traces)]
        out[f"{worker}_worker_{member}_member"] = {
            "jobs": jobs, "rejected": sum(not r.accepted for r in results),
            "reasons": sorted({kind for r in results for kind in r.reason_kinds}),
            "largest_error_share_max": max(shares), "largest_error_share_median": statistics.median(shares),
        }
    return {"profile": f"{profile.model}/{profile.dtype}", **out}


def _wall(device: str, fn) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _jobs(manifest, batch: int, prompt_tokens: int, output_tokens: int):
    rng = random.Random(f"device-timing:{batch}")
    model_id = compute_model_id(manifest)
    return [Job(model_id, tuple(rng.randrange(3, manifest.vocab_size) for _ in range(prompt_tokens)), SamplingParams(), output_tokens, i.to_bytes(32, "big")) for i in range(batch)]


def measure_wall_times(shape: str, device: str, prompt_tokens: int, output_tokens: int, repeats: int, batches: tuple[int, ...]) -> dict:
    """Median wall seconds of generation and of the verification prefill, exact and stock kernels."""
    out = {}
    for mode in ("tolerance", "exact"):
        try:
            model, tokenizer, manifest = _on_device(shape, "bfloat16", device, mode)
        except ConfigError as refused:
            out[mode] = {"refused": str(refused)}
            continue
        engine = TorchEngine(model, tokenizer, manifest, max_batch_size=max(batches), num_threads=1)
        rows = {}
        for batch in batches:
            jobs = _jobs(manifest, batch, prompt_tokens, output_tokens)
            runs = commit_runs(jobs, engine.run(jobs), manifest, Party(b"\x57" * 32))  # warm-up, and the outputs to verify
            member_jobs = compute_member_jobs(runs)
            generate = statistics.median(_wall(device, lambda: engine.run(jobs)) for _ in range(repeats))
            verify = statistics.median(_wall(device, lambda: engine.run(member_jobs)) for _ in range(repeats))
            rows[f"batch{batch}"] = {"generate_s": generate, "verify_s": verify, "verify_over_generate": verify / generate}
        out[mode] = rows
    for batch in batches:
        key = f"batch{batch}"
        if key in out.get("exact", {}) and key in out.get("tolerance", {}):
            exact, stock = out["exact"][key], out["tolerance"][key]
            out.setdefault("exact_over_stock", {})[key] = {"generate": exact["generate_s"] / stock["generate_s"], "verify": exact["verify_s"] / stock["verify_s"]}
    return out


def run_device_check(device: str, shapes: tuple[str, ...] = SHAPES, audits: int = 200, cross_jobs: int = 64, seed: str = "device", prompt_tokens: int = 256, output_tokens: int = 256, repeats: int = 3, batches: tuple[int, ...] = (1, 8), progress=None, on_partial=None) -> dict:
    """Every measurement of the module on ``device``; the report as written to JSON.

    ``on_partial(report)`` gets the report after each step (a run cut by a lease keeps what it measured).
    """
    say = progress or (lambda line: None)
    keep = on_partial or (lambda report: None)
    report = {"device": device, "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu", "torch": torch.__version__, "seed": seed, "models": {}}
    for shape in shapes:
        say(f"{shape}: kernel class and {audits} exact audits on {device}")
        started = time.perf_counter()
        entry = report["models"][shape] = {"exact": measure_exact(shape, device, audits, seed)}
        keep(report)
        say(f"{shape}: wall times ({prompt_tokens}+{output_tokens} tokens, batches {batches})")
        entry["wall"] = measure_wall_times(shape, device, prompt_tokens, output_tokens, repeats, batches)
        entry["wall_s"] = time.perf_counter() - started
        keep(report)
    if "tiny" in shapes and cross_jobs:
        say(f"tiny fp32: {cross_jobs} jobs across {device} and cpu")
        report["cross_device_fp32"] = measure_cross_device(device, cross_jobs, seed)
        keep(report)
    return report


def summarize_device_check(report: dict) -> str:
    """The report as a table for humans."""
    lines = [f"device {report['device']} ({report['device_name']}), torch {report['torch']}", "model          kernel class / refusal                        audits  false rej  diff pos"]
    for shape, entry in report["models"].items():
        exact = entry["exact"]
        if exact.get("kernel_class"):
            lines.append(f"{shape:<14} {exact['kernel_class']:<45} {exact['audits']:>6}  {exact['false_rejections']:>9}  {exact['differing_positions']:>8}")
        else:
            lines.append(f"{shape:<14} refused: {exact['refused'][:200]}")
        for mode, rows in entry["wall"].items():
            if mode == "exact_over_stock" or "refused" in rows:
                continue
            for batch, row in rows.items():
                lines.append(f"  {mode:<9} {batch:<7} generate {row['generate_s']:.4f} s  verify {row['verify_s']:.4f} s  verify/generate {row['verify_over_generate']:.3f}")
        for batch, ratio in entry["wall"].get("exact_over_stock", {}).items():
            lines.append(f"  exact/stock {batch:<7} generate {ratio['generate']:.3f}  verify {ratio['verify']:.3f}")
    for direction, row in report.get("cross_device_fp32", {}).items():
        if isinstance(row, dict):
            lines.append(f"fp32 {direction}: {row['rejected']}/{row['jobs']} rejected {row['reasons']}, largest error / threshold: max {row['largest_error_share_max']:.3f}, median {row['largest_error_share_median']:.3f}")
    return "\n".join(lines)
