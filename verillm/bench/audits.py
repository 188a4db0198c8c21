"""`verillm bench audits`: N fresh honest exact-mode audits, counting false rejections.

Every audit is a new job drawn from a seed (`--seed` names an independent sample): prompt
length from 1 token to past the 512-key switch of the exact attention, greedy or sampled at a
random temperature, top-k and top-p, output length up to `--max-new-tokens` (outputs that
end at max_new_tokens and at a stop token both occur). The worker runs the jobs in batches
of random size with random left padding (the jobs of a batch have different lengths, and
rows leave as they finish), on 1 or 2 threads; the committee member runs the verification
jobs in batches of another composition and thread count. Each pair is checked as the
protocol does (challenge, openings, zero-tolerance profile), and beyond it every committed
position and flag is compared: `false_rejections` counts rejected honest audits,
`differing_positions` positions whose leaf differs in any bit, opened or not.
"""

import random
import time
from collections.abc import Callable

import numpy as np

from verillm.engine.profiles import select_profile
from verillm.engine.torch_engine import TorchEngine
from verillm.spec.params import MAINNET
from verillm.spec.types import Job, SamplingParams
from verillm.verifier.local import Party, check_pair, commit_runs, compute_member_jobs

LONG_PROMPT_SHARE = 0.05  # prompts past the 512-key switch: slow, but the hold-out's weak spot
MAX_BATCH = 8


def draw_job(rng: random.Random, manifest, model_id: bytes, index: int, max_new_tokens: int, long_prompt_tokens: int) -> Job:
    """One fresh job: length, sampling and output budget drawn from ``rng``."""
    if rng.random() < LONG_PROMPT_SHARE:
        length = rng.randint(513, long_prompt_tokens)
    else:
        length = rng.choice([1, 1, 2, rng.randint(3, 40), rng.randint(40, 200)])
    prompt = tuple(rng.randrange(3, manifest.vocab_size) for _ in range(length))
    if rng.random() < 0.5:
        sampling = SamplingParams()
    else:
        sampling = SamplingParams(temperature_milli=rng.choice([300, 700, 1000, 1300]), top_k=rng.choice([0, 5, 40]), top_p_ppm=rng.choice([1_000_000, 900_000, 500_000]), seed=rng.randrange(2**63))
    return Job(model_id, prompt, sampling, rng.randint(1, max_new_tokens), index.to_bytes(32, "big"))


def _batches(rng: random.Random, count: int) -> list[range]:
    out, start = [], 0
    while start < count:
        size = rng.randint(1, MAX_BATCH)
        out.append(range(start, min(count, start + size)))
        start += size
    return out


def _run_in_batches(engines: dict, rng: random.Random, jobs: list[Job]) -> tuple[list, list[str]]:
    traces, configs = [None] * len(jobs), []
    for batch in _batches(rng, len(jobs)):
        threads = rng.choice(sorted(engines))
        traces[batch.start : batch.stop] = engines[threads].run([jobs[i] for i in batch])
        configs.append(f"{len(batch)}x{threads}t")
    return traces, configs


def run_honest_audits(model, tokenizer, manifest, model_name: str, audits: int, max_new_tokens: int = 24, seed: str = "audits", long_prompt_tokens: int = 700, progress: Callable[[str], None] | None = None, chunk: int = 64, threads: tuple[int, ...] = (1, 2), on_chunk: Callable[[dict], None] | None = None) -> dict:
    """Run ``audits`` fresh honest audits (worker and member: this machine, this kernel class); return the counts.

    ``threads``: the torch thread counts each batch draws from (1 and 2 by default; on a
    machine whose cores are busy a 2-thread run spin-waits, so a count of 1 alone is faster).
    ``on_chunk(report)`` gets the counts so far after every ``chunk`` audits (a long run keeps them).
    """
    profile = select_profile(manifest, model_name)
    engines = {t: TorchEngine(model, tokenizer, manifest, max_batch_size=MAX_BATCH, num_threads=t) for t in threads}
    model_id = engines[1].model_id
    rng = random.Random(f"{seed}:{manifest.kernel_class}")
    report = {"audits": 0, "false_rejections": 0, "differing_positions": 0, "positions": 0, "rejected": [], "batch_shapes": set(), "long_prompts": 0, "ended_at_max": 0}
    started = time.process_time()
    for first in range(0, audits, chunk):
        jobs = [draw_job(rng, manifest, model_id, first + i, max_new_tokens, long_prompt_tokens) for i in range(min(chunk, audits - first))]
        worker_traces, worker_configs = _run_in_batches(engines, rng, jobs)
        worker_runs = commit_runs(jobs, worker_traces, manifest, Party(b"\x57" * 32))
        member_jobs = compute_member_jobs(worker_runs)
        member_traces, member_configs = _run_in_batches(engines, rng, member_jobs)
        member_runs = commit_runs(member_jobs, member_traces, manifest, Party(b"\x4d" * 32))
        for job, run, member_run, member in zip(jobs, worker_runs, member_runs, member_traces):
            result = check_pair(run, member_run, manifest, profile, MAINNET.CHALLENGE_POSITIONS)
            count = run.trace.num_positions
            differ = np.any(run.trace.fingerprints.view(np.uint32) != member.fingerprints[:count].view(np.uint32), axis=(1, 2)) | (run.trace.flags != member.flags[:count])
            report["audits"] += 1
            report["positions"] += count
            report["differing_positions"] += int(differ.sum())
            report["long_prompts"] += len(job.input_tokens) > 512
            report["ended_at_max"] += len(run.trace.output_tokens) == job.max_new_tokens
            if not result.accepted:
                report["false_rejections"] += 1
                report["rejected"].append({"job": int.from_bytes(job.nonce, "big"), "reasons": [r.detail for r in result.reasons]})
        report["batch_shapes"].update(worker_configs + member_configs)
        if progress:
            progress(f"{report['audits']}/{audits} audits, {report['false_rejections']} false rejections, {report['differing_positions']} differing positions")
        if on_chunk:
            on_chunk(_finished(report, model_name, manifest, seed, max_new_tokens, threads, started))
    return _finished(report, model_name, manifest, seed, max_new_tokens, threads, started)


def _finished(report: dict, model_name: str, manifest, seed: str, max_new_tokens: int, threads: tuple[int, ...], started: float) -> dict:
    """The report as written: JSON-safe, with what produced it."""
    meta = {"model": model_name, "kernel_class": manifest.kernel_class, "seed": seed, "max_new_tokens": max_new_tokens, "threads": list(threads), "cpu_s": time.process_time() - started}
    return {**report, "batch_shapes": sorted(report["batch_shapes"]), **meta}
