"""`verillm bench cost --dtype bf16`, exact mode: what bit-identical verification costs, by component.

Measured in one run (process CPU time, one torch thread by default, the minimum of
interleaved repeats as in `cost.py`), at batch 1 and batch 8, each step added to the one
before it:

    stock      stock bf16 generation (sdpa attention, stock linears), no capture
    linears    + row-invariant linears (a one-row input runs as two rows)
    attention  + exact-sum attention (`engine/exact_attention.py`): the exact kernels
    capture    + fingerprints at the committed layers and token flags at every position
    commit     + the Merkle commitment (exact mode retains no trace: nothing is encoded)

`exact_overhead_b1` / `_b8` = commit / stock − 1; each component's `+x` is its increment over
stock and `share` its part of the overhead. `verify_over_generate`: the verifier's exact
prefill of the verification job (with capture and commitment) over the exact generation
(batch 1). Retention: trace bytes kept per generated token in exact mode (0: tokens only)
and, with full retention, the blob; `rebuild_s_1024`: rebuilding a 1,024-position trace from
its tokens (one exact prefill), its commitment and a challenge's opening, i.e. the latency an
opening costs a worker that keeps only tokens.

Canonical-pass design, for comparison: a worker that decodes with stock bf16 kernels and then
runs the canonical pass must regenerate from every token where the canonical sampler
disagrees with what it emitted (ties included: exact mode's tie rule). `regeneration_jobs_rate`
is the share of jobs with such a flip, `flips_per_1k_tokens` their density,
`canonical_pass_overhead` the extra decode and passes they cost (each flip regenerates the
rest of the output and runs one more pass). Exact decode regenerates nothing.
"""

import dataclasses
import random
import statistics

from verillm.bench.cost import _timed, make_cost_job
from verillm.bench.workloads import Workload, make_jobs
from verillm.engine.exact import exact_kernels, get_kernel_form
from verillm.engine.torch_engine import TorchEngine
from verillm.errors import ConfigError
from verillm.node.worker.commit import compute_rebuilt_trace
from verillm.node.worker.trace_blob import encode_trace_blob
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.commitment import compute_commitment, compute_opening
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN
from verillm.spec.job import compute_model_id
from verillm.spec.params import MAINNET
from verillm.spec.types import Job
from verillm.verifier.local import Party, commit_runs, compute_member_jobs

COMPONENTS = ("stock", "linears", "attention", "capture", "commit")
REBUILD_POSITIONS = 1024


def get_stock(manifest):
    """Return the tolerance-mode twin of an exact manifest (stock kernels) and its model id."""
    stock = dataclasses.replace(manifest, kernel_class="", token_margin_micrologits=500_000)
    return stock, compute_model_id(stock)


def make_batch(manifest, prompt_tokens: int, output_tokens: int, batch: int) -> list[Job]:
    """``batch`` jobs of distinct random prompts of exactly ``prompt_tokens`` tokens."""
    first = make_cost_job(manifest, prompt_tokens, output_tokens)
    rng = random.Random(f"cost-batch-{prompt_tokens}")
    others = [tuple(rng.randrange(3, manifest.vocab_size) for _ in range(prompt_tokens)) for _ in range(batch - 1)]
    return [first] + [dataclasses.replace(first, input_tokens=p, nonce=bytes([i + 1]) * 32) for i, p in enumerate(others)]


class ComponentRuns:
    """The five cumulative configurations over one batch of jobs."""

    def __init__(self, model, tokenizer, manifest, jobs: list[Job]):
        stock_manifest, stock_id = get_stock(manifest)
        batch = len(jobs)
        self.model, self.jobs, self.layers = model, jobs, tuple(manifest.committed_layers)
        self.stock_jobs = [dataclasses.replace(j, model_id=stock_id) for j in jobs]
        self.stock = TorchEngine(model, tokenizer, stock_manifest, max_batch_size=batch, capture=False)
        self.plain = TorchEngine(model, tokenizer, manifest, max_batch_size=batch, capture=False)
        self.exact = TorchEngine(model, tokenizer, manifest, max_batch_size=batch)

    def run(self, component: str):
        if component == "stock":
            return self.stock.run(self.stock_jobs)
        if component == "linears":
            with exact_kernels(self.model, linears=True, attention=False, form=get_kernel_form(self.exact.manifest.kernel_class)):
                return self.stock.run(self.stock_jobs)
        if component == "attention":
            return self.plain.run(self.jobs)
        traces = self.exact.run(self.jobs)
        if component == "commit":
            for trace in traces:
                compute_commitment(trace, self.layers)
        return traces


def measure_components(model, tokenizer, manifest, jobs: list[Job], repeats: int) -> tuple[dict, dict, list]:
    """Return ({component: least CPU s}, {component: median CPU s}, the last traces) over interleaved repeats."""
    runs = ComponentRuns(model, tokenizer, manifest, jobs)
    warm = [dataclasses.replace(j, max_new_tokens=2) for j in jobs[:1]]
    runs.stock.run([dataclasses.replace(warm[0], model_id=runs.stock_jobs[0].model_id)])
    runs.exact.run(warm)
    samples = {c: [] for c in COMPONENTS}
    traces = None
    for _ in range(repeats):
        for component in COMPONENTS:
            elapsed, traces = _timed(lambda: runs.run(component))
            samples[component].append(elapsed)
    return {c: min(v) for c, v in samples.items()}, {c: statistics.median(v) for c, v in samples.items()}, traces


def compute_component_table(best: dict) -> list[dict]:
    """Rows of (component, seconds, increment over stock, share of the overhead)."""
    overhead = best["commit"] - best["stock"]
    rows, previous = [], None
    for component in COMPONENTS:
        increment = 0.0 if previous is None else best[component] - best[previous]
        rows.append({"component": component, "cpu_s": best[component], "over_stock": increment / best["stock"], "share": increment / overhead if overhead > 0 else 0.0})
        previous = component
    return rows


def measure_verify(model, tokenizer, manifest, job: Job, trace, repeats: int) -> float:
    """Return the least CPU seconds of the verifier's exact prefill (capture + commitment) of ``job``'s verification job."""
    verifier = TorchEngine(model, tokenizer, manifest, max_batch_size=1)
    member_job = compute_member_jobs(commit_runs([job], [trace], manifest, Party(b"\x01" * 32)))[0]
    layers = tuple(manifest.committed_layers)
    return min(_timed(lambda: compute_commitment(verifier.run([member_job])[0], layers))[0] for _ in range(repeats))


def measure_rebuild(model, tokenizer, manifest, repeats: int) -> dict:
    """CPU seconds to rebuild a REBUILD_POSITIONS-position trace from tokens, commit and open a challenge."""
    engine = TorchEngine(model, tokenizer, manifest, max_batch_size=1)
    outputs = REBUILD_POSITIONS // 4
    job = make_cost_job(manifest, REBUILD_POSITIONS + 1 - outputs, outputs)
    tokens = make_cost_job(manifest, outputs, 1).input_tokens  # stand-in outputs: the cost is one prefill whatever they are
    layers = tuple(manifest.committed_layers)
    challenge = compute_challenge(b"\x07" * 32, len(job.input_tokens), outputs, layers, MAINNET.CHALLENGE_POSITIONS)

    def rebuild():
        trace = compute_rebuilt_trace(engine, job, tokens)
        commitment = compute_commitment(trace, layers)
        return compute_opening(trace, commitment, compute_opened_cells(challenge, trace.num_positions)), trace

    best, (_, trace) = min((_timed(rebuild) for _ in range(repeats)), key=lambda pair: pair[0])
    return {"rebuild_positions": trace.num_positions, "rebuild_s_1024": best}


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
    """Extra worker cost of the canonical-pass design, in units of one stock decode of the job."""
    jobs = regeneration["regeneration_jobs"]
    extra = verify_over_generate * jobs
    for first, length in regeneration["first_flips"]:
        extra += (length - first) / length + verify_over_generate
    return extra / jobs


def measure_exact_cost(model, tokenizer, manifest, model_name: str, prompt_tokens: int, output_tokens: int, repeats: int, regeneration_jobs: int, batches: tuple[int, ...] = (1, 8)) -> dict:
    """Return the exact-mode cost report (see module docstring); ``report["components"]`` holds the tables."""
    if 1 not in batches:
        raise ConfigError(f"batch sizes {list(batches)} must include 1: the verification ratio is against batch-1 generation")
    no_stop = dataclasses.replace(manifest, stop_tokens=())
    report: dict = {"mode": "exact", "kernel_class": manifest.kernel_class, "components": {}}
    for batch in batches:
        jobs = make_batch(no_stop, prompt_tokens, output_tokens, batch)
        best, medians, traces = measure_components(model, tokenizer, no_stop, jobs, repeats)
        report["components"][f"b{batch}"] = compute_component_table(best)
        report[f"exact_overhead_b{batch}"] = best["commit"] / best["stock"] - 1
        report[f"median_exact_overhead_b{batch}"] = medians["commit"] / medians["stock"] - 1
        report[f"stock_generate_s_b{batch}"] = best["stock"]
        report[f"exact_generate_s_b{batch}"] = best["commit"]
        if batch == 1:
            report["verify_s"] = measure_verify(model, tokenizer, no_stop, jobs[0], traces[0], repeats)
            report["verify_over_generate"] = report["verify_s"] / best["commit"]
            report["retained_bytes_per_generated_token"] = 0.0
            report["full_retention_bytes_per_generated_token"] = len(encode_trace_blob(traces[0])) / len(traces[0].output_tokens)
    report.update(measure_rebuild(model, tokenizer, no_stop, repeats))
    if regeneration_jobs:
        regeneration = measure_regeneration(model, tokenizer, manifest, model_name, regeneration_jobs, min(output_tokens, 64))
        first = regeneration.pop("first_flips")
        report.update(regeneration, first_flip_positions=[f for f, _ in first])
        report["canonical_pass_overhead"] = estimate_canonical_pass_overhead({**regeneration, "first_flips": first}, report["verify_over_generate"])
    report.update(prompt_tokens=prompt_tokens, output_tokens=output_tokens, repeats=repeats)
    return report
