"""VllmEngine against the reference TorchEngine on the tiny model: same tokens, same flags,
fingerprints inside the calibrated band, audits accepted in both directions."""

import dataclasses

import numpy as np
import pytest

from verillm.engine.base import Engine
from verillm.engine.torch_engine import TorchEngine
from verillm.errors import InvalidInput
from verillm.spec.job import compute_num_positions
from verillm.spec.types import SamplingParams
from verillm.verifier.local import run_local_audits

pytestmark = pytest.mark.vllm

SAMPLED = SamplingParams(temperature_milli=800, top_k=50, top_p_ppm=900_000, seed=7)
HOT = SamplingParams(temperature_milli=1500, seed=11)  # flat distribution: many near-ties exercised


def _jobs(engine, prompts, make_job, new_tokens=24):
    return [make_job(engine, p, max_new_tokens=new_tokens, sampling=s) for p in prompts for s in (SamplingParams(), SAMPLED, HOT)]


@pytest.fixture(scope="module")
def paired_runs(vllm_tiny, tiny_engine, tiny_prompts, make_job):
    """The same jobs (greedy, top-k/top-p sampled, hot sampled) on vLLM and on the reference."""
    jobs = _jobs(vllm_tiny, tiny_prompts, make_job)
    return jobs, vllm_tiny.run(jobs), tiny_engine.run(jobs)


def _max_error_per_layer(a, b):
    return np.abs(a.fingerprints - b.fingerprints).max(axis=(0, 2))


def test_engine_satisfies_protocol_with_the_reference_model_id(vllm_tiny, tiny_engine):
    assert isinstance(vllm_tiny, Engine)
    assert vllm_tiny.model_id == tiny_engine.model_id and vllm_tiny.manifest == tiny_engine.manifest


def test_tokens_and_flags_equal_the_reference(paired_runs):
    jobs, vllm_traces, reference = paired_runs
    for job, ours, theirs in zip(jobs, vllm_traces, reference):
        assert ours.output_tokens == theirs.output_tokens, job.sampling
        assert ours.fingerprints.shape == theirs.fingerprints.shape == (compute_num_positions(job, len(ours.output_tokens)), 3, 1)
        assert np.array_equal(ours.flags, theirs.flags)


def test_fingerprints_inside_the_calibrated_band(paired_runs, tiny_limits):
    _, vllm_traces, reference = paired_runs
    worst = np.max([_max_error_per_layer(a, b) for a, b in zip(vllm_traces, reference)], axis=0)
    assert (worst <= tiny_limits).all(), (worst, tiny_limits)
    assert worst.max() > 0  # two different engines: if this were 0 the comparison would be vacuous


@pytest.mark.parametrize("direction", ["vllm_worker", "vllm_verifier", "vllm_both"])
def test_audits_accept_across_engines(direction, vllm_tiny, tiny_engine, tiny_prompts, make_job, tiny_profile):
    worker, verifier = {"vllm_worker": (vllm_tiny, tiny_engine), "vllm_verifier": (tiny_engine, vllm_tiny), "vllm_both": (vllm_tiny, vllm_tiny)}[direction]
    jobs = _jobs(vllm_tiny, tiny_prompts, make_job, new_tokens=32)
    results = run_local_audits(worker, verifier, jobs, tiny_profile, challenge_positions=32)
    assert all(r.accepted for r in results), [r.reasons for r in results if not r.accepted]


def test_batched_and_single_runs_agree(vllm_tiny, tiny_prompts, make_job, tiny_limits):
    jobs = _jobs(vllm_tiny, tiny_prompts[:2], make_job, new_tokens=12)
    batched = vllm_tiny.run(jobs)
    for job, together in zip(jobs, batched):
        alone = vllm_tiny.run([job])[0]
        assert alone.output_tokens == together.output_tokens
        assert np.array_equal(alone.flags, together.flags)
        assert (_max_error_per_layer(alone, together) <= tiny_limits).all()


def test_stop_token_ends_the_output_and_is_kept(vllm_tiny, tiny_model, tiny_prompts, make_job):
    """Force EOS at output 3 on both engines: both stop there and keep it; traces agree."""
    model, tokenizer, manifest = tiny_model
    eos = manifest.stop_tokens[0]

    class ForceEos(TorchEngine):
        def force_token(self, job, output_index, token, logits):
            return eos if output_index == 3 else token

    class VllmForceEos(type(vllm_tiny)):
        def forced_tokens(self, job):
            return {3: eos}

    job = make_job(vllm_tiny, tiny_prompts[0], max_new_tokens=10)
    ours = VllmForceEos.sharing(vllm_tiny).run([job])[0]
    theirs = ForceEos(model, tokenizer, manifest).run([job])[0]
    assert len(ours.output_tokens) == 4 and ours.output_tokens[-1] == eos
    assert ours.output_tokens == theirs.output_tokens and np.array_equal(ours.flags, theirs.flags)


def test_capture_off_is_plain_vllm_and_greedy_tokens_match(vllm_tiny, tiny_prompts, make_job):
    jobs = [make_job(vllm_tiny, p, max_new_tokens=8) for p in tiny_prompts]
    captured = vllm_tiny.run(jobs)
    vllm_tiny.set_capture(False)
    try:
        plain = vllm_tiny.run(jobs)
    finally:
        vllm_tiny.set_capture(True)
    assert [t.output_tokens for t in plain] == [t.output_tokens for t in captured]  # vLLM's own greedy = the spec's
    assert all(t.num_positions == 0 for t in plain)
    assert vllm_tiny.run(jobs[:1])[0].fingerprints.shape == captured[0].fingerprints.shape  # capture is back


def test_foreign_jobs_are_refused(vllm_tiny, tiny_prompts, make_job):
    job = make_job(vllm_tiny, tiny_prompts[0])
    with pytest.raises(InvalidInput):
        vllm_tiny.run([dataclasses.replace(job, model_id=b"\x01" * 32)])
    with pytest.raises(InvalidInput):
        vllm_tiny.run([dataclasses.replace(job, input_tokens=(5, 10_000))])


@pytest.fixture(scope="module")
def vllm_tiny_chunked(tiny_model, start_vllm_engine):
    """An engine whose scheduler splits prompts into 16-token chunks and mixes them with decodes."""
    engine = start_vllm_engine(tiny_model, "tiny", max_batch_size=4, max_model_len=256, max_num_batched_tokens=16)
    yield engine
    engine.close()


def test_chunked_prefill_and_mixed_batches_map_rows_to_positions(vllm_tiny_chunked, tiny_engine, tiny_prompts, make_job, tiny_profile, tiny_limits):
    jobs = _jobs(vllm_tiny_chunked, tiny_prompts, make_job, new_tokens=20)
    assert max(len(job.input_tokens) for job in jobs) > 16  # the scheduler must chunk them
    ours, theirs = vllm_tiny_chunked.run(jobs), tiny_engine.run(jobs)
    for a, b in zip(ours, theirs):
        assert a.output_tokens == b.output_tokens and np.array_equal(a.flags, b.flags)
        assert (_max_error_per_layer(a, b) <= tiny_limits).all()
    results = run_local_audits(tiny_engine, vllm_tiny_chunked, jobs, tiny_profile, challenge_positions=32)
    assert all(r.accepted for r in results), [r.reasons for r in results if not r.accepted]
