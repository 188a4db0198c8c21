"""TorchEngine against the Engine protocol semantics (verillm/engine/base.py), on the tiny model."""

import dataclasses

import numpy as np
import pytest
import torch

from verillm.engine.base import Engine
from verillm.engine.models import build_manifest, build_tiny_llama, TINY_COMMITTED_LAYERS
from verillm.engine.torch_engine import TorchEngine, compute_greedy_flags
from verillm.errors import ConfigError, InvalidInput, PromptTooLong
from verillm.spec.commitment import compute_fingerprints, compute_projection
from verillm.spec.job import compute_num_positions, compute_verification_job
from verillm.spec.sampling import compute_sample_and_gaps, compute_sampled_token, compute_scores, compute_token_gaps
from verillm.spec.types import SamplingParams
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN

SAMPLED = SamplingParams(temperature_milli=800, top_k=50, top_p_ppm=900_000, seed=7)
FP32_BAND = 1e-4


def test_engine_satisfies_protocol(tiny_engine):
    assert isinstance(tiny_engine, Engine)


def test_capture_shapes_and_position_count(tiny_engine, tiny_prompts, make_job):
    jobs = [make_job(tiny_engine, p, max_new_tokens=n) for p, n in zip(tiny_prompts, (5, 9, 1, 12))]
    traces = tiny_engine.run(jobs)
    for job, trace in zip(jobs, traces):
        assert len(trace.output_tokens) == job.max_new_tokens  # the tiny model never hits EOS this early
        positions = compute_num_positions(job, len(trace.output_tokens))
        assert trace.fingerprints.shape == (positions, len(TINY_COMMITTED_LAYERS), 1)
        assert trace.fingerprints.dtype == np.float32
        assert trace.flags.shape == (positions,) and trace.flags.dtype == np.uint8
        assert np.isfinite(trace.fingerprints).all()


def test_same_job_twice_is_bit_identical(tiny_engine, tiny_prompts, make_job):
    job = make_job(tiny_engine, tiny_prompts[1], max_new_tokens=10, sampling=SAMPLED)
    first, second = tiny_engine.run([job])[0], tiny_engine.run([job])[0]
    assert first.output_tokens == second.output_tokens
    assert first.fingerprints.tobytes() == second.fingerprints.tobytes()
    assert first.flags.tobytes() == second.flags.tobytes()


def test_prompt_fingerprints_equal_spec_math_on_hf_hidden_states(tiny_engine, tiny_model, tiny_prompts, make_job):
    model, _, manifest = tiny_model
    prompt = tiny_prompts[0]
    trace = tiny_engine.run([make_job(tiny_engine, prompt, max_new_tokens=1)])[0]
    with torch.inference_mode():
        hidden = model(torch.tensor([prompt]), output_hidden_states=True).hidden_states
    for slot, layer in enumerate(manifest.committed_layers):
        projection = compute_projection(tiny_engine.model_id, layer, manifest.hidden_size, 1)
        expected = compute_fingerprints(hidden[layer][0].numpy(), projection)
        np.testing.assert_allclose(trace.fingerprints[:, slot], expected, atol=1e-5, rtol=0)


def _decode_vs_prefill(engine, job):
    trace = engine.run([job])[0]
    verification = compute_verification_job(job, trace.output_tokens, b"\x01" * 32)
    replay = engine.run([verification])[0]
    shared = trace.num_positions
    return trace, replay, np.abs(replay.fingerprints[:shared] - trace.fingerprints).max(axis=(0, 2))


def test_decode_vs_prefill_within_fp32_band(tiny_engine, tiny_prompts, make_job):
    trace, replay, deltas = _decode_vs_prefill(tiny_engine, make_job(tiny_engine, tiny_prompts[0], max_new_tokens=24, sampling=SAMPLED))
    assert (deltas < FP32_BAND).all(), deltas
    assert replay.num_positions == trace.num_positions + 1
    # The verifier's prefill sees every output token within margin of its own sampler.
    outputs_from = len(tiny_prompts[0]) - 1
    assert (replay.flags[outputs_from:-1] & FLAG_NEXT_WITHIN_MARGIN).all()


def test_decode_vs_prefill_bf16_is_noisier_but_bounded(tiny_prompts, make_job):
    model, tokenizer = build_tiny_llama(seed=0, dtype="bfloat16")
    manifest = build_manifest("tiny-bf16", model, tokenizer, "bfloat16", TINY_COMMITTED_LAYERS)
    engine = TorchEngine(model, tokenizer, manifest)
    _, _, deltas = _decode_vs_prefill(engine, make_job(engine, tiny_prompts[0], max_new_tokens=24))
    assert (deltas < 0.1).all(), deltas


def test_batched_with_padding_equals_alone(tiny_engine, tiny_prompts, make_job):
    samplings = [SamplingParams(), SAMPLED]
    jobs = [make_job(tiny_engine, p, max_new_tokens=8 + i, sampling=samplings[i % 2]) for i, p in enumerate(tiny_prompts)]
    batched = tiny_engine.run(jobs)
    for job, together in zip(jobs, batched):
        alone = tiny_engine.run([job])[0]
        assert alone.output_tokens == together.output_tokens
        assert np.abs(alone.fingerprints - together.fingerprints).max() < FP32_BAND
        assert (alone.flags == together.flags).all()


def test_batches_larger_than_max_batch_size_keep_order(tiny_model, tiny_prompts, make_job):
    model, tokenizer, manifest = tiny_model
    engine = TorchEngine(model, tokenizer, manifest, max_batch_size=2)
    jobs = [make_job(engine, p, max_new_tokens=3) for p in tiny_prompts]
    traces = engine.run(jobs)
    assert [t.num_positions for t in traces] == [len(p) + 2 for p in tiny_prompts]


def test_thread_counts_agree_within_band(tiny_model, tiny_prompts, make_job):
    model, tokenizer, manifest = tiny_model
    one = TorchEngine(model, tokenizer, manifest, num_threads=1)
    two = TorchEngine(model, tokenizer, manifest, num_threads=2)
    before = torch.get_num_threads()
    job = make_job(one, tiny_prompts[1], max_new_tokens=16)
    a, b = one.run([job])[0], two.run([job])[0]
    assert torch.get_num_threads() == before
    assert a.output_tokens == b.output_tokens
    assert np.abs(a.fingerprints - b.fingerprints).max() < FP32_BAND


@pytest.mark.parametrize("sampling", [SAMPLED, SamplingParams(temperature_milli=1000, seed=3), SamplingParams(temperature_milli=500, top_k=5, seed=11)])
def test_emitted_tokens_replay_with_spec_sampler(tiny_engine, tiny_model, tiny_prompts, make_job, sampling):
    model = tiny_model[0]
    prompt = tiny_prompts[2]
    trace = tiny_engine.run([make_job(tiny_engine, prompt, max_new_tokens=20, sampling=sampling)])[0]
    sequence = list(prompt) + list(trace.output_tokens)
    with torch.inference_mode():
        logits = model(torch.tensor([sequence])).logits[0].float().numpy()
    for k, token in enumerate(trace.output_tokens):
        position = len(prompt) - 1 + k
        gap = compute_token_gaps(logits[position], sampling, position, [token])[0]
        assert gap <= 1e-3, (k, token, compute_sampled_token(logits[position], sampling, position))
    assert len(set(trace.output_tokens)) > 5  # sampling at T > 0 really varies the tokens


def test_greedy_fast_path_equals_spec():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 300, generator=generator)
    logits[::4, 7] = logits[::4].max(dim=-1).values  # exact ties: argmax must pick the first
    logits[1::4, 9] = logits[1::4].max(dim=-1).values - 5e-4  # near ties inside a 1e-3 margin
    next_ids = torch.randint(0, 300, (64,), generator=generator)
    next_ids[1::4] = 9
    stop_ids = torch.tensor([7, 299])
    flags = compute_greedy_flags(logits, next_ids, stop_ids, 1e-3)
    greedy = SamplingParams(top_k=3, top_p_ppm=500_000)  # filters must not matter for greedy
    for n in range(64):
        row = logits[n].numpy()
        assert int(logits[n].argmax()) == compute_sampled_token(row, greedy, n)
        gaps = compute_token_gaps(row, greedy, n, [int(next_ids[n]), 7, 299])
        expected = (FLAG_NEXT_WITHIN_MARGIN if gaps[0] <= 1e-3 else 0) | (FLAG_STOP_WITHIN_MARGIN if min(gaps[1:]) <= 1e-3 else 0)
        assert int(flags[n]) == expected
    assert (flags[1::4] & FLAG_NEXT_WITHIN_MARGIN).all() and (flags[::4] & FLAG_STOP_WITHIN_MARGIN).all()


def test_flags_follow_spec_at_every_position(tiny_engine, tiny_model, tiny_prompts, make_job):
    model, _, manifest = tiny_model
    prompt = tiny_prompts[1]
    for sampling in (SamplingParams(), SAMPLED):
        trace = tiny_engine.run([make_job(tiny_engine, prompt, max_new_tokens=6, sampling=sampling)])[0]
        sequence = list(prompt) + list(trace.output_tokens)
        with torch.inference_mode():
            logits = model(torch.tensor([sequence])).logits[0].float().numpy()
        for position in range(trace.num_positions):
            gaps = compute_token_gaps(logits[position], sampling, position, [sequence[position + 1], *manifest.stop_tokens])
            expected = (FLAG_NEXT_WITHIN_MARGIN if gaps[0] <= 1e-3 else 0) | (FLAG_STOP_WITHIN_MARGIN if min(gaps[1:]) <= 1e-3 else 0)
            assert trace.flags[position] == expected, position
        # A random tiny model rarely predicts its own next prompt token; outputs always are.
        assert not (trace.flags[: len(prompt) - 1] & FLAG_NEXT_WITHIN_MARGIN).all()
        assert (trace.flags[len(prompt) - 1 :] & FLAG_NEXT_WITHIN_MARGIN).all()


def test_stop_token_ends_each_job_and_is_kept(tiny_model, tiny_prompts, make_job):
    model, tokenizer, manifest = tiny_model
    probe = TorchEngine(model, tokenizer, manifest)
    free = probe.run([make_job(probe, tiny_prompts[0], max_new_tokens=12, sampling=SAMPLED)])[0]
    stop = free.output_tokens[4]
    stopping_manifest = dataclasses.replace(manifest, stop_tokens=(stop,))
    engine = TorchEngine(model, tokenizer, stopping_manifest)
    jobs = [make_job(engine, tiny_prompts[0], max_new_tokens=12, sampling=SAMPLED), make_job(engine, tiny_prompts[3], max_new_tokens=3)]
    stopped, other = engine.run(jobs)
    first = free.output_tokens.index(stop)
    assert stopped.output_tokens == free.output_tokens[: first + 1]
    assert stopped.flags[-1] & FLAG_STOP_WITHIN_MARGIN
    assert len(other.output_tokens) == 3 or other.output_tokens[-1] == stop


def test_capture_off_gives_same_tokens_and_no_fingerprints(tiny_model, tiny_prompts, make_job, tiny_engine):
    model, tokenizer, manifest = tiny_model
    plain = TorchEngine(model, tokenizer, manifest, capture=False)
    jobs = [make_job(plain, p, max_new_tokens=7, sampling=SAMPLED) for p in tiny_prompts]
    for with_capture, without in zip(tiny_engine.run(jobs), plain.run(jobs)):
        assert with_capture.output_tokens == without.output_tokens
        assert without.fingerprints.shape[0] == 0 and without.flags.shape == (0,)


def test_admission_rejects_other_model_and_overlong_jobs(tiny_engine, tiny_prompts, make_job):
    job = make_job(tiny_engine, tiny_prompts[0])
    with pytest.raises(InvalidInput, match="not tiny"):
        tiny_engine.run([dataclasses.replace(job, model_id=b"\x99" * 32)])
    with pytest.raises(PromptTooLong):
        tiny_engine.run([dataclasses.replace(job, max_new_tokens=tiny_engine.manifest.max_context_tokens)])
    with pytest.raises(InvalidInput, match="vocabulary"):
        tiny_engine.run([dataclasses.replace(job, input_tokens=(5, 5000))])


@pytest.mark.parametrize("sampling", [SamplingParams(), SAMPLED, SamplingParams(temperature_milli=300, top_p_ppm=500_000, seed=2)])
def test_one_pass_sampler_equals_the_spec_functions(sampling):
    """The engine samples and flags sampled rows with compute_sample_and_gaps: same token, same gaps."""
    logits = np.random.default_rng(1).standard_normal((20, 400)).astype(np.float32) * 3
    for position, row in enumerate(logits):
        tokens = [0, 5, int(np.argsort(row)[-60]), int(np.argmin(row))]  # in and outside the filters
        token, gaps = compute_sample_and_gaps(row, sampling, position, tokens)
        assert token == compute_sampled_token(row, sampling, position) == int(np.argmax(compute_scores(row, sampling, position)))
        scores = compute_scores(row, sampling, position)
        for t, gap in zip(tokens, gaps):
            assert gap == (scores.max() - scores[t] if np.isfinite(scores[t]) else gap) and gap >= 0


def test_engine_refuses_a_manifest_of_another_shape(tiny_model):
    model, tokenizer, manifest = tiny_model
    with pytest.raises(ConfigError, match="hidden, vocab, layers"):
        TorchEngine(model, tokenizer, dataclasses.replace(manifest, num_layers=30))
    with pytest.raises(ConfigError):
        TorchEngine(model, tokenizer, manifest, max_batch_size=0)


def test_one_token_prompts_alone_and_in_a_batch(tiny_engine, tiny_prompts, make_job):
    short = make_job(tiny_engine, (7,), max_new_tokens=4)
    alone = tiny_engine.run([short])[0]
    together = tiny_engine.run([short, make_job(tiny_engine, tiny_prompts[0], max_new_tokens=2)])[0]
    assert alone.fingerprints.shape == (4, 3, 1) and alone.flags.shape == (4,)
    assert alone.output_tokens == together.output_tokens
    assert np.abs(alone.fingerprints - together.fingerprints).max() < FP32_BAND


def test_two_engines_over_one_model_run_from_two_threads_without_mixing_captures(tiny_model, tiny_prompts, make_job):
    # Nodes in one process (tests, an embedded devnet) can share a loaded model: each run hooks the
    # model's layers, so two runs at once used to mix hidden states (a 500 "stack expects each
    # tensor to be equal size" under load). Runs over one model now queue on the model's lock.
    from concurrent.futures import ThreadPoolExecutor

    model, tokenizer, manifest = tiny_model
    engines = [TorchEngine(model, tokenizer, manifest, max_batch_size=8) for _ in range(2)]
    batches = [[make_job(engines[0], p, max_new_tokens=n) for p, n in zip(tiny_prompts, (6, 2, 9))],
               [make_job(engines[1], p, max_new_tokens=n) for p, n in zip(tiny_prompts[1:], (3, 11))]]
    alone = [engine.run(jobs) for engine, jobs in zip(engines, batches)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(engines[i % 2].run, batches[i % 2]) for i in range(8)]
        together = [f.result() for f in futures]
    for i, traces in enumerate(together):
        for got, want in zip(traces, alone[i % 2], strict=True):
            assert got.output_tokens == want.output_tokens
            assert np.array_equal(got.fingerprints, want.fingerprints) and np.array_equal(got.flags, want.flags)
