import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verillm.spec.sampling import compute_filter_floor, compute_gumbel_noise, compute_sampled_token, compute_scores, compute_token_gaps
from verillm.spec.types import SamplingParams

params = st.builds(
    SamplingParams,
    temperature_milli=st.sampled_from([0, 300, 1000, 1500]),
    top_k=st.sampled_from([0, 1, 5, 50]),
    top_p_ppm=st.sampled_from([1_000_000, 900_000, 500_000, 1]),
    seed=st.integers(0, 2**64 - 1),
)


def logits_for(seed, vocab=300):
    return np.random.default_rng(seed).normal(size=vocab).astype(np.float32) * 4


def test_greedy_is_argmax():
    logits = logits_for(1)
    assert compute_sampled_token(logits, SamplingParams(), 17) == int(np.argmax(logits))


@given(params, st.integers(0, 10_000), st.integers(0, 1000))
@settings(max_examples=150, deadline=None)
def test_replay_is_exact_and_the_emitted_token_has_zero_gap(p, position, seed):
    logits = logits_for(seed)
    token = compute_sampled_token(logits, p, position)
    assert compute_sampled_token(logits.copy(), p, position) == token
    assert compute_token_gaps(logits, p, position, [token]) == [0.0]
    assert np.isfinite(compute_scores(logits, p, position)[token])


@given(params, st.integers(0, 1000))
@settings(max_examples=100, deadline=None)
def test_emitted_token_survives_the_filters(p, seed):
    logits = logits_for(seed)
    token = compute_sampled_token(logits, p, 3)
    if p.temperature_milli and p.top_k:
        assert token in np.argsort(-logits)[: p.top_k]
    assert logits[token] >= compute_filter_floor(logits, p)


def test_top_k_1_is_greedy_and_top_p_tiny_is_greedy():
    logits = logits_for(2)
    for p in (SamplingParams(1000, 1, 1_000_000, 5), SamplingParams(1000, 0, 1, 5)):
        assert compute_sampled_token(logits, p, 9) == int(np.argmax(logits))


def test_noise_depends_on_seed_and_position_only():
    a = compute_gumbel_noise(1, 5, 100)
    assert np.array_equal(a, compute_gumbel_noise(1, 5, 100))
    assert not np.array_equal(a, compute_gumbel_noise(2, 5, 100))
    assert not np.array_equal(a, compute_gumbel_noise(1, 6, 100))


def test_sampling_follows_the_temperature_distribution():
    logits = np.log(np.array([0.6, 0.3, 0.1], dtype=np.float64)).astype(np.float32)
    p = SamplingParams(temperature_milli=1000, seed=123)
    counts = np.bincount([compute_sampled_token(logits, p, i) for i in range(6000)], minlength=3) / 6000
    assert np.allclose(counts, [0.6, 0.3, 0.1], atol=0.03)


def test_small_numeric_noise_moves_gaps_by_at_most_the_noise():
    logits = logits_for(3)
    p = SamplingParams(800, 40, 950_000, 11)
    token = compute_sampled_token(logits, p, 4)
    noisy = logits + np.random.default_rng(0).normal(size=logits.shape).astype(np.float32) * 1e-6
    assert compute_token_gaps(noisy, p, 4, [token])[0] < 1e-5


def test_wrong_seed_is_visible_in_gaps():
    logits = logits_for(4, vocab=2000) / 4  # flat distribution: many plausible tokens
    p, wrong = SamplingParams(1000, 0, 1_000_000, 1), SamplingParams(1000, 0, 1_000_000, 2)
    tokens = [compute_sampled_token(logits, wrong, i) for i in range(50)]
    gaps = [compute_token_gaps(logits, p, i, [t])[0] for i, t in enumerate(tokens)]
    assert sum(g > 1e-3 for g in gaps) > 40


@pytest.mark.parametrize("p", [SamplingParams(1000, 3, 1_000_000, 1), SamplingParams(1000, 0, 500_000, 1)])
def test_a_token_just_outside_the_filter_gets_a_finite_gap(p):
    logits = logits_for(5)
    outside = int(np.argsort(-logits)[20])
    gap = compute_token_gaps(logits, p, 2, [outside])[0]
    assert np.isfinite(gap) and gap > 0
