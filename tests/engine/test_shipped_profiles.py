"""The shipped fp32 profiles accept today's engine on the traffic they ship for, with room to spare.

A profile is a measurement of one engine: when the engine's numerics move (a kernel, the
order fingerprints are computed in), an old profile can sit below honest noise. That
happened: the SmolLM2 profile of 2026-11-21 rejected an honest devnet job at layer 15
(1.30e-05 against 1.24e-05). These tests run honest pairs under a worker and a verifier
configuration of the calibration matrix (`run_honest_matrix`) and require every drawable
cell, not only the challenged ones, to stay under half its threshold.
"""

import pytest

from verillm.bench.calibration import STALE_RATIO
from verillm.bench.noise import EngineConfig, compute_permissive_profile, run_honest_matrix
from verillm.bench.workloads import DEVNET_PROMPTS
from verillm.engine.text import compute_chat_tokens
from verillm.spec.job import compute_model_id
from verillm.spec.params import MAINNET
from verillm.engine.profiles import load_profile
from verillm.spec.types import Job, SamplingParams

HEADROOM = STALE_RATIO  # the bar `verillm calibrate --check` holds a profile to


def measure_worst_ratio(model_triple, prompts, profile, max_new_tokens: int) -> tuple[float, str]:
    """Return the largest cell error / threshold over honest pairs of ``prompts``, and where it is."""
    model, tokenizer, manifest = model_triple
    model_id = compute_model_id(manifest)
    jobs = [Job(model_id, compute_chat_tokens(tokenizer, [{"role": "user", "content": p}]), SamplingParams(), max_new_tokens, bytes([i + 1]) * 32)
            for i, p in enumerate(prompts)]
    audits = run_honest_matrix(model, tokenizer, manifest, jobs, compute_permissive_profile(manifest), MAINNET.CHALLENGE_POSITIONS,
                               worker_configs=(EngineConfig(threads=2, batch=2),), verifier_configs=(EngineConfig(threads=1, batch=1),))
    worst = (0.0, "")
    for prompt, audit in zip(prompts, audits, strict=True):
        for slot, tolerance in enumerate(profile.layers):
            error = float(audit.cell_errors[:, slot].max())
            if error / tolerance.max_cell_error > worst[0]:
                worst = (error / tolerance.max_cell_error, f"{prompt!r} layer {tolerance.layer}: {error:.3g} vs {tolerance.max_cell_error:.3g}")
    return worst


@pytest.mark.smollm2
def test_the_smollm2_profile_accepts_the_devnet_traffic_with_headroom(smollm2_model):
    ratio, where = measure_worst_ratio(smollm2_model, DEVNET_PROMPTS, load_profile("smollm2", "float32"), max_new_tokens=16)
    assert 0 < ratio <= HEADROOM, where


def test_the_tiny_profile_accepts_honest_pairs_with_headroom(tiny_model):
    prompts = ("What is the capital of France?", "Please write a short poem about the sea.", "Hi", "Name three prime numbers, then explain why.")
    ratio, where = measure_worst_ratio(tiny_model, prompts, load_profile("tiny", "float32"), max_new_tokens=24)
    assert 0 < ratio <= HEADROOM, where
