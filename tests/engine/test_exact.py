"""Exact mode (bf16, kernel class in the manifest): honest audits are bit-identical, cheats are caught.

Every honest pair below is compared with zero tolerance: the worker's decode-time leaves and
the verifier's prefill leaves must be equal bit for bit, and the token check has no margin.
"""

import copy
import dataclasses

import numpy as np
import pytest
import torch

from verillm.engine.attacks import ATTACKS, compute_fp8_kv
from verillm.engine.exact import compute_exact_fingerprints, compute_tree_sum, exact_kernels
from verillm.engine.kernel_class import compute_kernel_class
from verillm.engine.models import load_model
from verillm.engine.torch_engine import TorchEngine, compute_fingerprints_torch
from verillm.errors import ConfigError
from verillm.spec.job import compute_model_id
from verillm.bench.detect import is_attack_effective
from verillm.spec.policy import REASON_FINGERPRINT, REASON_TOKEN, REASON_TRUNCATION
from verillm.engine.profiles import select_profile
from verillm.spec.types import SamplingParams
from verillm.verifier.local import Party, check_pair, commit_runs, compute_member_jobs

SAMPLED = SamplingParams(temperature_milli=900, top_k=40, seed=11)
WORKER, MEMBER = Party(b"\x57" * 32), Party(b"\x4d" * 32)


@pytest.fixture(scope="module")
def exact_tiny():
    return load_model("tiny", "bfloat16")


@pytest.fixture(scope="module")
def exact_jobs(exact_tiny, tiny_prompts, make_job):
    model, tokenizer, manifest = exact_tiny
    engine = TorchEngine(model, tokenizer, manifest)
    return [make_job(engine, p, max_new_tokens=20, sampling=s, nonce=bytes([i]) * 32) for i, p in enumerate(tiny_prompts) for s in (SamplingParams(), SAMPLED)]


def _audit(engine_pair, jobs, manifest, profile):
    worker, verifier = engine_pair
    worker_runs = commit_runs(jobs, worker.run(jobs), manifest, WORKER)
    member_jobs = compute_member_jobs(worker_runs)
    member_traces = verifier.run(member_jobs)
    member_runs = commit_runs(member_jobs, member_traces, manifest, MEMBER)
    return worker_runs, member_traces, [check_pair(w, m, manifest, profile, 8) for w, m in zip(worker_runs, member_runs, strict=True)]


def test_bf16_defaults_to_exact_and_the_class_is_part_of_the_model_id(exact_tiny):
    _, _, manifest = exact_tiny
    assert manifest.kernel_class == compute_kernel_class(exact_tiny[0], manifest.fingerprint_dims) and manifest.token_margin_micrologits == 0
    tolerant = load_model("tiny", "bfloat16", mode="tolerance")[2]
    assert tolerant.kernel_class == "" and tolerant.token_margin_micrologits > 0
    assert compute_model_id(tolerant) != compute_model_id(manifest)
    assert load_model("tiny", "float32")[2].kernel_class == ""
    profile = select_profile(manifest, "tiny")
    assert all(t.max_cell_error == 0 and t.rms_error == 0 for t in profile.layers)
    with pytest.raises(ConfigError):
        load_model("tiny", "bfloat16", mode="approximate")
    with pytest.raises(ConfigError):
        select_profile(manifest, "tiny", "some-profile.json")


def test_an_engine_refuses_a_kernel_class_it_cannot_reproduce(exact_tiny):
    model, tokenizer, manifest = exact_tiny
    with pytest.raises(ConfigError, match="kernel class"):
        TorchEngine(model, tokenizer, dataclasses.replace(manifest, kernel_class="cuda-h100-vllm0.32-batchinv"))


@pytest.mark.parametrize(
    ("worker_threads", "worker_batch", "verifier_threads", "verifier_batch", "attention"),
    [(1, 1, 2, 8, "sdpa"), (2, 8, 1, 1, "eager"), (1, 3, 2, 5, "sdpa")],
)
def test_honest_exact_audits_are_bit_identical(exact_tiny, exact_jobs, worker_threads, worker_batch, verifier_threads, verifier_batch, attention):
    model, tokenizer, manifest = exact_tiny
    verifier_model = copy.deepcopy(model)
    verifier_model.config._attn_implementation = attention  # the exact kernels replace either
    pair = (
        TorchEngine(model, tokenizer, manifest, max_batch_size=worker_batch, num_threads=worker_threads),
        TorchEngine(verifier_model, tokenizer, manifest, max_batch_size=verifier_batch, num_threads=verifier_threads),
    )
    worker_runs, member_traces, results = _audit(pair, exact_jobs, manifest, select_profile(manifest, "tiny"))
    assert all(r.accepted for r in results), [r.reasons for r in results if not r.accepted]
    for run, member in zip(worker_runs, member_traces):
        count = run.trace.num_positions
        assert np.array_equal(run.trace.fingerprints.view(np.uint32), member.fingerprints[:count].view(np.uint32))
    assert model.config._attn_implementation == "sdpa" and not model.get_decoder().layers[0].mlp.down_proj._forward_hooks


REASONS = {"fingerprint": REASON_FINGERPRINT, "token": REASON_TOKEN, "truncation": REASON_TRUNCATION}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_every_attack_is_caught_with_zero_tolerance(exact_tiny, exact_jobs, name):
    model, tokenizer, manifest = exact_tiny
    pair = (ATTACKS[name].build(model, tokenizer, manifest, max_batch_size=8), TorchEngine(model, tokenizer, manifest, max_batch_size=8))
    worker_runs, _, results = _audit(pair, exact_jobs, manifest, select_profile(manifest, "tiny"))
    honest_runs = commit_runs(exact_jobs, pair[1].run(exact_jobs), manifest, WORKER)
    effective = [i for i, (cheat, honest) in enumerate(zip(worker_runs, honest_runs)) if is_attack_effective(cheat, honest)]
    assert effective, f"{name} changed nothing on any job"
    assert all(REASONS[ATTACKS[name].category] in results[i].reason_kinds for i in effective), [results[i].reasons for i in effective]


def test_exact_fingerprints_do_not_depend_on_the_batch_shape():
    generator = torch.Generator().manual_seed(3)
    hidden = (torch.randn(37, 576, generator=generator) * torch.rand(37, 1, generator=generator) * 5).bfloat16()
    projection = torch.randn(576, 16, generator=generator)
    together = compute_exact_fingerprints(hidden, projection)
    alone = torch.cat([compute_exact_fingerprints(hidden[i : i + 1], projection) for i in range(37)])
    assert torch.equal(together, alone) and together.dtype == torch.float32
    assert torch.allclose(together, compute_fingerprints_torch(hidden, projection), rtol=1e-4, atol=1e-5)
    values = torch.arange(11, dtype=torch.float64)
    assert float(compute_tree_sum(values)) == 55.0


def test_fp8_kv_rounds_to_e4m3_and_exact_kernels_are_undone_on_error(exact_tiny):
    states = torch.tensor([0.1, 1.0, 3.3, 500.0], dtype=torch.bfloat16)
    stored = compute_fp8_kv(states, 1.0)
    assert stored[1] == 1.0 and stored[3] == 448.0 and stored[2] != states[2]
    model = exact_tiny[0]
    with pytest.raises(RuntimeError), exact_kernels(model):
        assert model.config._attn_implementation == "verillm_exact"
        raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"
    assert not any(m._forward_pre_hooks for m in model.modules() if isinstance(m, torch.nn.Linear))
