"""Decode ≡ prefill bit for bit on the hold-out shapes nobody tuned for (issue 21): 1-token
prompts, prompts past the 512-key switch of the exact attention, heavy left padding, rows that
leave the batch mid-decode, outputs that end exactly at max_new_tokens, sampled jobs; every
committed position and flag, not only opened leaves.
"""

import random

import numpy as np
import pytest
import torch

from verillm.engine.exact_attention import compute_canonical_rows, compute_exact_sum_attention, compute_power_of_two, compute_rounded
from verillm.engine.models import load_model
from verillm.engine.torch_engine import TorchEngine
from verillm.spec.job import compute_verification_job
from verillm.spec.types import Job, SamplingParams

SAMPLED = SamplingParams(temperature_milli=700, top_p_ppm=950_000, seed=21)


@pytest.fixture(scope="module")
def exact_tiny():
    return load_model("tiny", "bfloat16")


def make_prompt(length: int, seed: int, vocab: int) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.randrange(3, vocab) for _ in range(length))


def assert_same_bits(worker_traces, verifier_traces):
    for worker, member in zip(worker_traces, verifier_traces, strict=True):
        count = worker.num_positions
        assert np.array_equal(worker.fingerprints.view(np.uint32), member.fingerprints[:count].view(np.uint32))
        assert np.array_equal(worker.flags, member.flags[:count])


def test_decode_equals_prefill_on_holdout_shapes(exact_tiny):
    model, tokenizer, manifest = exact_tiny
    engine = TorchEngine(model, tokenizer, manifest, max_batch_size=8, num_threads=1)
    model_id, vocab = engine.model_id, manifest.vocab_size
    lengths = (1, 1, 7, 40, 530, 700)  # 530 and 700: decode crosses the 512-key switch, the prefill starts past it
    news = (9, 1, 23, 5, 17, 3)  # rows leave at different steps; stops may end some earlier
    jobs = [
        Job(model_id, make_prompt(n, i, vocab), SAMPLED if i % 2 else SamplingParams(), new, bytes([i]) * 32)
        for i, (n, new) in enumerate(zip(lengths, news))
    ]
    worker = engine.run(jobs)  # one batch: up to 699 positions of left padding
    assert any(len(t.output_tokens) == j.max_new_tokens for t, j in zip(worker, jobs))
    members = [compute_verification_job(j, t.output_tokens, bytes([40 + i]) * 32) for i, (j, t) in enumerate(zip(jobs, worker))]
    alone = TorchEngine(model, tokenizer, manifest, max_batch_size=1, num_threads=2).run(members)
    assert_same_bits(worker, alone)
    filler = Job(model_id, make_prompt(1100, 99, vocab), SamplingParams(), 2, b"\xff" * 32)
    padded = engine.run([members[0], filler, members[2], filler, filler, members[4], filler])  # ~1,100 positions of padding
    assert_same_bits([worker[0], worker[2], worker[4]], [padded[0], padded[2], padded[5]])
    one_by_one = [TorchEngine(model, tokenizer, manifest, max_batch_size=1, num_threads=1).run([j])[0] for j in jobs[:2]]
    assert [t.output_tokens for t in one_by_one] == [t.output_tokens for t in worker[:2]]
    assert_same_bits(worker[:2], one_by_one)


def naive_float64_attention(q, k, v, scaling):
    """The previous exact-in-practice kernel: float64 softmax and BLAS sums, order as given."""
    weights = torch.softmax((q.double() @ k.double().transpose(-1, -2)) * scaling, dim=-1)
    return (weights @ v.double()).to(q.dtype)


def test_exact_sum_attention_does_not_depend_on_the_order_of_the_keys():
    # Wide rows: a key whose v is 2^100, one with −2^100, ordinary ones. A float64 sum in key
    # order gives (2^100 − 2^100) + x = x one way round and 0 the other: order decides bits.
    generator = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 1, 16, generator=generator).bfloat16() * 0
    k = torch.randn(1, 2, 40, 16, generator=generator).bfloat16()
    v = torch.randn(1, 2, 40, 16, generator=generator).bfloat16()
    v[:, :, 0], v[:, :, 1] = 2.0**100, -(2.0**100)
    order = torch.randperm(40, generator=generator)
    order = torch.cat([order[order > 1], torch.tensor([1, 0])])  # the big pair last, reversed
    allowed = torch.ones(1, 1, 1, 40, dtype=torch.bool)
    assert not torch.equal(naive_float64_attention(q, k, v, 0.25), naive_float64_attention(q, k[:, :, order], v[:, :, order], 0.25))
    first = compute_exact_sum_attention(q, k, v, allowed, 0.25)
    assert torch.equal(first.view(torch.int16), compute_exact_sum_attention(q, k[:, :, order], v[:, :, order], allowed, 0.25).view(torch.int16))
    q, k, v = (torch.randn(2, 4, 30, 32, generator=generator) * 3).bfloat16(), torch.randn(2, 2, 600, 32, generator=generator).bfloat16(), torch.randn(2, 2, 600, 32, generator=generator).bfloat16()
    allowed = torch.rand(2, 1, 30, 600, generator=generator) > 0.3
    order = torch.randperm(600, generator=generator)
    first = compute_exact_sum_attention(q, k, v, allowed, 0.2)
    assert torch.equal(first.view(torch.int16), compute_exact_sum_attention(q, k[:, :, order], v[:, :, order], allowed[..., order], 0.2).view(torch.int16))


def test_the_exact_helpers_are_exact():
    values = torch.tensor([0.0, 1.0, 1.5, 3.0 * 2.0**-130, 2.0**100 * 1.75, 0.999999], dtype=torch.float64)
    assert compute_power_of_two(values).tolist() == [1.0, 1.0, 1.0, 2.0**-129, 2.0**100, 0.5]
    halves = torch.tensor([0.5, 1.5, 2.5, -0.5, 2.0**40 + 0.5, 7.49], dtype=torch.float64)
    assert compute_rounded(halves.clone()).tolist() == [0.0, 2.0, 2.0, -0.0, 2.0**40, 7.0]  # ties to even
    rows = torch.tensor([[1.0, 2.0**-14, 2.0**-15, -0.5], [0.0, 0.0, 0.0, 0.0]], dtype=torch.bfloat16)
    canonical, peak = compute_canonical_rows(rows)  # kept: ≥ 2^−14 of the row's largest |x|
    assert canonical.tolist() == [[1.0, 2.0**-14, 0.0, -0.5], [0.0, 0.0, 0.0, 0.0]] and peak[:, 0].tolist() == [1.0, 0.0]
