"""Each attack engine changes what it should, and only that, relative to the honest engine."""

import numpy as np
import pytest
import torch

from verillm.engine.attacks import ATTACKS, compute_fp8_weights, compute_int4_weights, compute_int8_weights, compute_lowrank_update, get_attack
from verillm.engine.base import Engine
from verillm.engine.models import compute_weights_digest
from verillm.errors import ConfigError
from verillm.spec.job import compute_model_id
from verillm.spec.sampling import compute_token_gaps
from verillm.spec.types import SamplingParams
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN

SAMPLED = SamplingParams(temperature_milli=800, top_k=50, seed=5)
BAND = 1e-4  # honest fp32 noise is ~1e-6 (test_torch_engine)


@pytest.fixture(scope="module")
def honest(tiny_engine, tiny_prompts, make_job):
    """Jobs (greedy and sampled, 24 new tokens) and the honest traces for them."""
    jobs = [make_job(tiny_engine, p, max_new_tokens=24, sampling=s) for p in tiny_prompts[:3] for s in (SamplingParams(), SAMPLED)]
    return jobs, tiny_engine.run(jobs)


def _attacked(name, tiny_model, honest, **kw):
    model, tokenizer, manifest = tiny_model
    engine = ATTACKS[name].build(model, tokenizer, manifest, **kw)
    return engine, engine.run(honest[0])


def _max_delta_per_layer(a, b):
    shared = min(a.num_positions, b.num_positions)
    return np.abs(a.fingerprints[:shared] - b.fingerprints[:shared]).max(axis=(0, 2))


def test_registry_is_complete_and_typed():
    expected = {"int8", "int4", "fp8", "other_model", "lowrank", "one_layer", "kv_int8", "kv_fp8", "kv_evict", "speculative", "prompt_edit", "token_substitute", "truncate", "wrong_temperature", "wrong_seed"}
    assert set(ATTACKS) == expected
    assert {spec.category for spec in ATTACKS.values()} == {"fingerprint", "token", "truncation"}
    assert all(spec.name == name and spec.description for name, spec in ATTACKS.items())
    with pytest.raises(ConfigError):
        get_attack("nope")


def test_quantizers_have_the_expected_error():
    weight = torch.randn(64, 128, generator=torch.Generator().manual_seed(0)) * 0.02
    for quantize, low, high in ((compute_int8_weights, 1e-3, 2e-2), (compute_int4_weights, 3e-2, 0.3), (compute_fp8_weights, 1e-2, 0.1)):
        error = float((quantize(weight) - weight).norm() / weight.norm())
        assert low < error < high, (quantize.__name__, error)
    assert len(torch.unique(compute_int4_weights(weight)[0, :32])) <= 16
    updated = compute_lowrank_update(weight, 1e-3, 4, torch.Generator().manual_seed(1))
    assert float((updated - weight).norm() / weight.norm()) == pytest.approx(1e-3, rel=1e-3)
    assert torch.linalg.matrix_rank(updated - weight) == 4


@pytest.mark.parametrize("name", ["int8", "int4", "fp8", "other_model", "lowrank"])
def test_weight_attacks_move_every_committed_layer_from_the_prompt_on(name, tiny_model, honest):
    engine, traces = _attacked(name, tiny_model, honest)
    assert isinstance(engine, Engine) and engine.model_id == compute_model_id(tiny_model[2])
    for trace, reference in zip(traces, honest[1]):
        assert np.abs(trace.fingerprints[0] - reference.fingerprints[0]).max() > BAND  # already at position 0
        assert (_max_delta_per_layer(trace, reference) > 5 * BAND).all(), (name, _max_delta_per_layer(trace, reference))
    assert compute_weights_digest(tiny_model[0]) == tiny_model[2].weights_digest  # the honest model is untouched


def test_one_layer_leaves_earlier_layers_bit_identical(tiny_model, honest):
    _, traces = _attacked("one_layer", tiny_model, honest)  # decoder layer 2 of 0..3 → hidden states 3 and 4
    for trace, reference in zip(traces, honest[1]):
        prompt = len(honest[0][0].input_tokens)
        assert np.array_equal(trace.fingerprints[:prompt, :2], reference.fingerprints[:prompt, :2])
        assert _max_delta_per_layer(trace, reference)[2] > 10 * BAND


@pytest.mark.parametrize("name", ["kv_int8", "kv_evict"])
def test_kv_attacks_change_only_decode_positions(name, tiny_model, honest):
    _, traces = _attacked(name, tiny_model, honest)
    for job, trace, reference in zip(honest[0], traces, honest[1]):
        prompt = len(job.input_tokens)
        assert np.array_equal(trace.fingerprints[:prompt], reference.fingerprints[:prompt])  # the prefill is honest
        decode = np.abs(trace.fingerprints[prompt:] - reference.fingerprints[prompt : trace.num_positions])
        assert decode.max() > 10 * BAND, (name, decode.max())


def test_kv_evict_is_invisible_while_the_sequence_fits_the_window(tiny_model, honest):
    _, traces = _attacked("kv_evict", tiny_model, honest, window=1000)
    assert all(np.array_equal(t.fingerprints, r.fingerprints) for t, r in zip(traces, honest[1]))


def test_prompt_edit_changes_positions_from_the_edit_on(tiny_model, honest):
    _, traces = _attacked("prompt_edit", tiny_model, honest)
    for job, trace, reference in zip(honest[0], traces, honest[1]):
        edit = len(job.input_tokens) // 2
        assert np.array_equal(trace.fingerprints[:edit], reference.fingerprints[:edit])
        assert np.abs(trace.fingerprints[edit] - reference.fingerprints[edit]).max() > 10 * BAND


@pytest.mark.parametrize("mode", ["next_id", "runner_up"])
def test_token_substitute_changes_exactly_the_forced_token(mode, tiny_model, honest):
    _, traces = _attacked("token_substitute", tiny_model, honest, mode=mode)
    at = 12  # max_new_tokens // 2
    for job, trace, reference in zip(honest[0], traces, honest[1]):
        assert trace.output_tokens[:at] == reference.output_tokens[:at]
        assert trace.output_tokens[at] != reference.output_tokens[at]
        position = len(job.input_tokens) - 1 + at
        assert np.array_equal(trace.fingerprints[: position + 1], reference.fingerprints[: position + 1])
        assert not trace.flags[position] & FLAG_NEXT_WITHIN_MARGIN  # committed honestly: the token is off-sampler
        assert trace.flags[position + 1 :].all() & FLAG_NEXT_WITHIN_MARGIN


def test_truncate_returns_half_without_a_stop_token(tiny_model, honest):
    _, traces = _attacked("truncate", tiny_model, honest)
    for job, trace, reference in zip(honest[0], traces, honest[1]):
        assert trace.output_tokens == reference.output_tokens[:12]
        assert trace.output_tokens[-1] not in tiny_model[2].stop_tokens
        assert trace.num_positions == len(job.input_tokens) + 11


@pytest.mark.parametrize("name", ["wrong_temperature", "wrong_seed"])
def test_wrong_sampling_emits_tokens_the_jobs_sampler_would_not(name, tiny_model, honest):
    _, traces = _attacked(name, tiny_model, honest)
    model = tiny_model[0]
    for job, trace, reference in zip(honest[0], traces, honest[1]):
        if name == "wrong_seed" and job.sampling.temperature_milli == 0:
            assert trace.output_tokens == reference.output_tokens  # the seed does not matter to greedy
            continue
        sequence = list(job.input_tokens) + list(trace.output_tokens)
        with torch.inference_mode():
            logits = model(torch.tensor([sequence])).logits[0].float().numpy()
        start = len(job.input_tokens) - 1
        gaps = [compute_token_gaps(logits[start + k], job.sampling, start + k, [t])[0] for k, t in enumerate(trace.output_tokens)]
        assert max(gaps) > 1e-3, name


def test_other_model_by_skipping_layers_keeps_earlier_layers(tiny_model, tiny_prompts, make_job):
    """The path SmolLM2 takes (a non-tiny manifest): decoder layers dropped from the same model."""
    import dataclasses

    from verillm.engine.attacks import build_other_model
    from verillm.engine.torch_engine import TorchEngine

    model, tokenizer, manifest = tiny_model
    pruned_manifest = dataclasses.replace(manifest, name="pruned")
    engine = build_other_model(model, tokenizer, pruned_manifest, skip=(1,))
    honest_engine = TorchEngine(model, tokenizer, pruned_manifest)
    jobs = [make_job(engine, p, max_new_tokens=6) for p in tiny_prompts[:2]]
    for job, trace, reference in zip(jobs, engine.run(jobs), honest_engine.run(jobs)):
        prompt = len(job.input_tokens)
        assert np.array_equal(trace.fingerprints[:prompt, 0], reference.fingerprints[:prompt, 0])  # hidden 1: before the skip
        assert np.abs(trace.fingerprints[:prompt, 1:] - reference.fingerprints[:prompt, 1:]).max() > 10 * BAND
    assert len(model.get_decoder().layers[1].state_dict()) > 0  # the honest model keeps its layer


def test_package_exports_attacks_and_engine():
    import verillm.engine as engine_package

    assert engine_package.ATTACKS is ATTACKS
    assert engine_package.TorchEngine.__name__ == "TorchEngine"
    with pytest.raises(AttributeError):
        engine_package.nothing_here
