"""`verillm bench cost`: what verification and commitment cost, measured in one run.

- verify_over_generate: prefill replay of the verification job (prompt ‖ output, 1 new
  token, with capture and commitment) over the worker's generation (with capture and
  commitment), same engine, batch 1.
- commit_overhead: generation with capture + commitment over the same generation with
  capture off, minus 1 (interleaved repeats; the minimum of each, the least-disturbed
  sample, with the medians beside it).
Times are process CPU time with one torch thread by default (`--threads`), so a busy shared
machine does not distort the ratios; absolute times count only on a dedicated GPU box.
- bytes_per_token_per_layer: the retained blob (`encode_trace_blob`) per committed position
  per committed layer; `bytes_per_generated_token_per_layer` divides by output tokens instead.
- check_ms_per_position: CPU time of `compute_pair_check` (Merkle proofs + statistics) per
  distinct challenged position, all its layers included.
"""

import dataclasses
import random
import statistics
import time

from verillm.engine.torch_engine import TorchEngine
from verillm.spec.challenge import compute_opened_cells
from verillm.spec.check import compute_pair_check
from verillm.spec.commitment import compute_commitment
from verillm.node.worker.trace_blob import encode_trace_blob
from verillm.spec.job import compute_model_id
from verillm.spec.params import MAINNET
from verillm.spec.policy import ToleranceProfile
from verillm.spec.types import Job, SamplingParams
from verillm.verifier.local import Party, commit_runs, compute_audit_challenge, compute_member_jobs


def _timed(fn):
    # Process CPU time, not wall-clock: this machine is shared, and with one torch thread CPU
    # time is the work done by this run alone (wall-clock swung 20x between identical runs).
    start = time.process_time()
    value = fn()
    return time.process_time() - start, value


def _commit(engine, job, layers):
    trace = engine.run([job])[0]
    compute_commitment(trace, layers)
    encode_trace_blob(trace)
    return trace


def make_cost_job(manifest, prompt_tokens: int, output_tokens: int) -> Job:
    """Return a job of exactly ``prompt_tokens`` random inputs and ``output_tokens`` outputs."""
    rng = random.Random("cost")
    prompt = tuple(rng.randrange(3, manifest.vocab_size) for _ in range(prompt_tokens))
    return Job(compute_model_id(manifest), prompt, SamplingParams(), output_tokens, b"\x00" * 32)


def measure_generation(model, tokenizer, manifest, job: Job, repeats: int) -> dict:
    """Time generation with and without capture+commitment, and the verification prefill."""
    layers = tuple(manifest.committed_layers)
    capture = TorchEngine(model, tokenizer, manifest, max_batch_size=1)
    plain = TorchEngine(model, tokenizer, manifest, max_batch_size=1, capture=False)
    plain.run([dataclasses.replace(job, max_new_tokens=4)])  # warm-up
    with_commit, without, verify = [], [], []
    trace = None
    for _ in range(repeats):
        elapsed, trace = _timed(lambda: _commit(capture, job, layers))
        with_commit.append(elapsed)
        without.append(_timed(lambda: plain.run([job]))[0])
    member_job = compute_member_jobs(commit_runs([job], [trace], manifest, Party(b"\x01" * 32)))[0]
    for _ in range(repeats):
        verify.append(_timed(lambda: _commit(capture, member_job, layers))[0])
    # The minimum of interleaved repeats is the least-disturbed sample on a shared machine
    # (contention only ever adds time); medians are reported beside it.
    generate_s, plain_s, verify_s = (min(v) for v in (with_commit, without, verify))
    medians = {f"median_{k}": statistics.median(v) for k, v in (("generate_s", with_commit), ("generate_plain_s", without), ("verify_s", verify))}
    return {"trace": trace, "generate_s": generate_s, "generate_plain_s": plain_s, "verify_s": verify_s, **medians}


def measure_check(worker_run, member_run, manifest, profile: ToleranceProfile, repeats: int = 20) -> float:
    """Return milliseconds of `compute_pair_check` per distinct challenged position."""
    challenge = compute_audit_challenge(worker_run, MAINNET.CHALLENGE_POSITIONS)
    worker, member = worker_run.result(challenge), member_run.result(challenge)
    positions = {p for p, _ in compute_opened_cells(challenge, member_run.commitment.num_positions)}
    start = time.process_time()
    for _ in range(repeats):
        compute_pair_check(worker, member, challenge, manifest, profile)
    return (time.process_time() - start) / repeats / len(positions) * 1000


def measure_cost(model, tokenizer, manifest, profile: ToleranceProfile, prompt_tokens: int, output_tokens: int, repeats: int) -> dict:
    """Return the cost report for one model (see module docstring)."""
    manifest = dataclasses.replace(manifest, stop_tokens=())  # force exactly output_tokens
    job = make_cost_job(manifest, prompt_tokens, output_tokens)
    timing = measure_generation(model, tokenizer, manifest, job, repeats)
    trace = timing["trace"]
    layers = len(manifest.committed_layers)
    blob = len(encode_trace_blob(trace))
    worker_run = commit_runs([job], [trace], manifest, Party(b"\x01" * 32))[0]
    member_job = compute_member_jobs([worker_run])[0]
    member_run = commit_runs([member_job], TorchEngine(model, tokenizer, manifest, max_batch_size=1).run([member_job]), manifest, Party(b"\x02" * 32))[0]
    return {
        "verify_over_generate": timing["verify_s"] / timing["generate_s"],
        "commit_overhead": timing["generate_s"] / timing["generate_plain_s"] - 1,
        "bytes_per_token_per_layer": blob / (trace.num_positions * layers),
        "bytes_per_generated_token_per_layer": blob / (len(trace.output_tokens) * layers),
        "check_ms_per_position": measure_check(worker_run, member_run, manifest, profile),
        "prompt_tokens": prompt_tokens,
        "output_tokens": len(trace.output_tokens),
        "committed_layers": layers,
        "generate_s": timing["generate_s"],
        "generate_plain_s": timing["generate_plain_s"],
        "verify_s": timing["verify_s"],
        "median_commit_overhead": timing["median_generate_s"] / timing["median_generate_plain_s"] - 1,
        "repeats": repeats,
    }
