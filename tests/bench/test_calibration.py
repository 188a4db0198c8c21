"""Threshold derivation: the tail fit, the simulated challenge RMS, and which bound a profile takes."""

import math
from dataclasses import dataclass

import numpy as np
import pytest

from verillm.bench.calibration import MIN_TAIL_SAMPLES, TAIL_FRACTION, compute_profile, compute_tail_quantile, simulate_challenge_rms
from verillm.spec.compare import AuditMeasurement, LayerStatistics, TokenStatistics
from verillm.spec.policy import CheckResult


def test_the_tail_fit_recovers_an_exponential_quantile():
    samples = np.random.default_rng(1).exponential(scale=2e-6, size=200_000)
    fitted = compute_tail_quantile(samples, exceedance=1e-8)
    assert fitted == pytest.approx(2e-6 * math.log(1e8), rel=0.05)


def test_the_tail_fit_declines_when_the_tail_is_too_thin_to_say_anything():
    too_few = int(MIN_TAIL_SAMPLES / TAIL_FRACTION) - 1
    assert compute_tail_quantile(np.ones(too_few)) is None
    assert compute_tail_quantile(np.linspace(0, 1, too_few + 1)) is not None


def test_a_challenge_rms_draws_that_many_positions_and_the_last_layer_takes_every_one():
    errors = np.full((20, 3), 1.0)
    errors[7, :] = 9.0  # one outlier position
    rms = simulate_challenge_rms(errors, challenge_positions=8, draws=400, rng=np.random.default_rng(0))
    with_outlier, without = math.sqrt((7 + 81) / 8), 1.0
    assert set(np.round(rms[:, 0], 9)) == {round(with_outlier, 9), round(without, 9)}
    assert (rms[:, 0] == rms[:, 1]).all()  # a drawn position opens every layer
    assert np.allclose(rms[:, 2], math.sqrt((19 + 81) / 20))  # token check: every output position


@dataclass(frozen=True)
class FakeAudit:
    """The two fields calibration reads from a `HonestAudit`."""

    result: CheckResult
    cell_errors: np.ndarray


def make_audits(cell_errors: list[np.ndarray]) -> list[FakeAudit]:
    stats = tuple(LayerStatistics(layer, 0, 0.0, -1, 0.0) for layer in (1, 2))
    measurement = AuditMeasurement(stats, TokenStatistics(0, (), False, False))
    return [FakeAudit(CheckResult(True, (), measurement), e) for e in cell_errors]


def test_a_profile_takes_the_larger_bound_and_says_which():
    rng = np.random.default_rng(2)
    # Layer 1: no tail at all, the observed maximum binds. Layer 2: an exponential tail, whose
    # fitted 1e-8 quantile (~18 scales) lies far beyond the maximum of 6,400 samples (~9 scales).
    audits = [np.stack([np.full(32, 1e-6), rng.exponential(1e-6, size=32)], axis=1) for _ in range(200)]
    profile = compute_profile("m", "float32", make_audits(audits), 1.0, "test")
    bounds = profile.provenance["bounds"]
    every_cell = np.concatenate(audits)
    assert bounds["1"]["max_cell_error"]["binding"] == "factor"
    assert profile.layers[0].max_cell_error == pytest.approx(1e-6)
    assert bounds["2"]["max_cell_error"]["binding"] == "tail"
    assert profile.layers[1].max_cell_error == bounds["2"]["max_cell_error"]["tail_bound"] > 1.5 * every_cell[:, 1].max()
    assert profile.layers[1].max_cell_error == pytest.approx(1e-6 * math.log(1e8), rel=0.25)
    # With the default factor of 4 the same samples are bounded by the factor: the tail fit is a floor, not a ceiling.
    assert compute_profile("m", "float32", make_audits(audits), 4.0, "test").layers[1].max_cell_error == pytest.approx(4.0 * every_cell[:, 1].max())
