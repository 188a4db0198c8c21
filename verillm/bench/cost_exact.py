"""`verillm bench cost --dtype bf16`, exact mode: what bit-identical verification costs a worker.

Measured in one run (process CPU time, one torch thread by default, minima of interleaved
repeats as in `cost.py`):
- exact_overhead: exact-mode generation with capture and commitment (the exact-decode
  design: row-invariant kernels on every step, no extra pass) over plain stock bf16
  generation without capture, minus 1.
- kernel_overhead: the same without capture on either side: the kernels' share of it.
- verify_over_generate: the exact verification prefill over the exact generation.
- canonical-pass design, for comparison: a worker that decodes with stock bf16 kernels and
  then runs the canonical pass must regenerate from every token where the canonical
  sampler disagrees with what it emitted. `regeneration_jobs_rate` is the share of jobs with
  at least one such flip, `flips_per_1k_tokens` their density, and
  `canonical_pass_overhead` = (stock decode + one canonical pass + the regenerated tokens'
  decode and their extra canonical passes) / stock decode − 1, from the measured flip
  positions (each flip regenerates the rest of the output and costs one more pass).
The exact-decode design regenerates nothing: its decode equals the canonical pass bit for bit.
"""

import dataclasses
import statistics

from verillm.bench.cost import _timed, make_cost_job
from verillm.bench.workloads import Workload, make_jobs
from verillm.engine.torch_engine import TorchEngine
from verillm.spec.commitment import compute_commitment
from verillm.node.worker.trace_blob import encode_trace_blob
from verillm.spec.job import compute_model_id
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN
from verillm.verifier.local import Party, commit_runs, compute_member_jobs


def _run_committed(engine, job, layers):
    trace = engine.run([job])[0]
    compute_commitment(trace, layers)
    encode_trace_blob(trace)
    return trace


def get_stock(manifest):
    """Return the tolerance-mode twin of an exact manifest (stock kernels) and its model id."""
    stock = dataclasses.replace(manifest, kernel_class="", token_margin_micrologits=500_000)
    return stock, compute_model_id(stock)


def measure_exact_generation(model, tokenizer, manifest, job, repeats: int) -> dict:
    """Time exact generation (with and without capture), stock bf16 generation and the exact verification."""
    stock_manifest, stock_id = get_stock(manifest)
    stock_job = dataclasses.replace(job, model_id=stock_id)
    layers = tuple(manifest.committed_layers)
    exact = TorchEngine(model, tokenizer, manifest, max_batch_size=1)
    exact_plain = TorchEngine(model, tokenizer, manifest, max_batch_size=1, capture=False)
    stock_plain = TorchEngine(model, tokenizer, stock_manifest, max_batch_size=1, capture=False)
    stock_plain.run([dataclasses.replace(stock_job, max_new_tokens=4)])  # warm-up
    exact_plain.run([dataclasses.replace(job, max_new_tokens=4)])
    samples = {"exact": [], "exact_plain": [], "stock_plain": [], "verify": []}
    trace = None
    for _ in range(repeats):
        elapsed, trace = _timed(lambda: _run_committed(exact, job, layers))
        samples["exact"].append(elapsed)
        samples["exact_plain"].append(_timed(lambda: exact_plain.run([job]))[0])
        samples["stock_plain"].append(_timed(lambda: stock_plain.run([stock_job]))[0])
    member_job = compute_member_jobs(commit_runs([job], [trace], manifest, Party(b"\x01" * 32)))[0]
    for _ in range(repeats):
        samples["verify"].append(_timed(lambda: _run_committed(exact, member_job, layers))[0])
    best = {k: min(v) for k, v in samples.items()}
    return {
        "exact_overhead": best["exact"] / best["stock_plain"] - 1,
        "kernel_overhead": best["exact_plain"] / best["stock_plain"] - 1,
        "verify_over_generate": best["verify"] / best["exact"],
        "exact_generate_s": best["exact"],
        "exact_plain_generate_s": best["exact_plain"],
        "stock_plain_generate_s": best["stock_plain"],
        "verify_s": best["verify"],
        "median_exact_overhead": statistics.median(samples["exact"]) / statistics.median(samples["stock_plain"]) - 1,
    }


def measure_regeneration(model, tokenizer, manifest, model_name: str, jobs_count: int, max_new_tokens: int) -> dict:
    """Stock bf16 decode, then the canonical (exact) pass over prompt ‖ output: where do the samplers disagree?"""
    stock_manifest, stock_id = get_stock(manifest)
    jobs = make_jobs(Workload("regeneration", jobs_count, max_new_tokens), model_name, manifest, tokenizer, "cost-regeneration")
    stock = TorchEngine(model, tokenizer, stock_manifest, max_batch_size=8)
    traces = stock.run([dataclasses.replace(j, model_id=stock_id) for j in jobs])
    runs = commit_runs(jobs, traces, manifest, Party(b"\x01" * 32))
    canonical = TorchEngine(model, tokenizer, manifest, max_batch_size=8).run(compute_member_jobs(runs))
    tokens, flips, jobs_with_flip, first_flips = 0, 0, 0, []
    for job, trace, member in zip(jobs, traces, canonical, strict=True):
        start = len(job.input_tokens) - 1
        disagree = [i for i in range(len(trace.output_tokens)) if not member.flags[start + i] & FLAG_NEXT_WITHIN_MARGIN]
        tokens += len(trace.output_tokens)
        flips += len(disagree)
        if disagree:
            jobs_with_flip += 1
            first_flips.append((disagree[0], len(trace.output_tokens)))
    return {
        "regeneration_jobs": jobs_count,
        "regeneration_tokens": tokens,
        "regeneration_jobs_rate": jobs_with_flip / jobs_count,
        "flips_per_1k_tokens": 1000 * flips / max(tokens, 1),
        "first_flips": first_flips,
    }


def estimate_canonical_pass_overhead(regeneration: dict, verify_over_generate: float) -> float:
    """Extra worker cost of the canonical-pass design, in units of one stock decode of the job.

    One canonical pass (≈ verify_over_generate of a decode) always; per flip at output i of
    n, a regeneration of the remaining n − i tokens (fraction of a decode) and another pass.
    Flip positions after a regeneration are assumed as frequent as before (the same rate).
    """
    jobs = regeneration["regeneration_jobs"]
    extra = verify_over_generate * jobs
    for first, length in regeneration["first_flips"]:
        extra += (length - first) / length + verify_over_generate
    return extra / jobs


def measure_exact_cost(model, tokenizer, manifest, model_name: str, prompt_tokens: int, output_tokens: int, repeats: int, regeneration_jobs: int) -> dict:
    """Return the exact-mode cost report (see module docstring)."""
    manifest_no_stop = dataclasses.replace(manifest, stop_tokens=())
    job = make_cost_job(manifest_no_stop, prompt_tokens, output_tokens)
    timing = measure_exact_generation(model, tokenizer, manifest_no_stop, job, repeats)
    regeneration = measure_regeneration(model, tokenizer, manifest, model_name, regeneration_jobs, min(output_tokens, 64))
    canonical = estimate_canonical_pass_overhead(regeneration, timing["verify_over_generate"])
    first = regeneration.pop("first_flips")
    return {
        "mode": "exact",
        "kernel_class": manifest.kernel_class,
        **timing,
        "regeneration_rate_exact_decode": 0.0,
        **regeneration,
        "first_flip_positions": [f for f, _ in first],
        "canonical_pass_overhead": canonical,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "repeats": repeats,
    }
