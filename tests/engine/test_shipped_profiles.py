"""The shipped fp32 profiles accept today's engine on the traffic they ship for, with room to spare.

A profile is a measurement of one engine: when the engine's numerics move (a kernel, the
order fingerprints are computed in), an old profile can sit below honest noise. That
happened: the SmolLM2 profile of 2026-11-21 rejected an honest devnet job at layer 15
(1.30e-05 against 1.24e-05). These tests run honest pairs under a worker and a verifier
configuration of the calibration matrix and require every drawable cell, not only the
challenged ones, to stay under half its threshold.
"""

import pytest

from verillm.bench.calibration import STALE_RATIO
from verillm.bench.noise import EngineConfig, build_engine, compute_every_cell_error
from verillm.bench.workloads import DEVNET_PROMPTS
from verillm.spec.job import compute_model_id
from verillm.spec.policy import load_profile
from verillm.spec.types import Job, SamplingParams
from verillm.verifier.local import Party, commit_runs, compute_member_jobs

HEADROOM = STALE_RATIO  # the bar `verillm calibrate --check` holds a profile to


def measure_worst_ratio(model_triple, prompts, profile, max_new_tokens: int) -> tuple[float, str]:
    """Return the largest cell error / threshold over honest pairs of ``prompts``, and where it is."""
    model, tokenizer, manifest = model_triple
    model_id = compute_model_id(manifest)
    jobs = []
    for i, prompt in enumerate(prompts):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)["input_ids"]
        jobs.append(Job(model_id, tuple(int(t) for t in ids), SamplingParams(), max_new_tokens, bytes([i + 1]) * 32))
    worker = build_engine(model, tokenizer, manifest, EngineConfig(threads=2, batch=2))
    verifier = build_engine(model, tokenizer, manifest, EngineConfig(threads=1, batch=1))
    worker_runs = commit_runs(jobs, worker.run(jobs), manifest, Party(b"\x57" * 32))
    member_runs = commit_runs(compute_member_jobs(worker_runs), verifier.run(compute_member_jobs(worker_runs)), manifest, Party(b"\x4d" * 32))
    thresholds = [t.max_cell_error for t in profile.layers]
    worst = (0.0, "")
    for prompt, w, m in zip(prompts, worker_runs, member_runs, strict=True):
        errors = compute_every_cell_error(w, m)
        for slot, threshold in enumerate(thresholds):
            ratio = float(errors[:, slot].max()) / threshold
            if ratio > worst[0]:
                worst = (ratio, f"{prompt!r} layer {profile.layers[slot].layer}: {errors[:, slot].max():.3g} vs {threshold:.3g}")
    return worst


@pytest.mark.smollm2
def test_the_smollm2_profile_accepts_the_devnet_traffic_with_headroom(smollm2_model):
    ratio, where = measure_worst_ratio(smollm2_model, DEVNET_PROMPTS, load_profile("smollm2", "float32"), max_new_tokens=16)
    assert 0 < ratio <= HEADROOM, where


def test_the_tiny_profile_accepts_honest_pairs_with_headroom(tiny_model):
    prompts = ("What is the capital of France?", "Please write a short poem about the sea.", "Hi", "Name three prime numbers, then explain why.")
    ratio, where = measure_worst_ratio(tiny_model, prompts, load_profile("tiny", "float32"), max_new_tokens=24)
    assert 0 < ratio <= HEADROOM, where
