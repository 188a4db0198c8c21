"""Calibration: derive a tolerance profile from honest audits (`verillm calibrate`).

Per committed layer, each threshold is the larger of two bounds on the honest statistic:
- `safety factor × the largest honest value seen`, the margin for hardware and kernels
  outside the matrix;
- a tail fit: an exponential tail (a generalised Pareto tail of shape 0) fitted to the
  largest `TAIL_FRACTION` of the honest values, extrapolated to the quantile an honest value
  exceeds with probability `TARGET_EXCEEDANCE`.
The samples are every cell a challenge can draw (every output position of every honest
audit, not only the cells that audit's own challenge opened), and for the RMS test the RMS
over many simulated challenges of the smallest size any preset draws (fewer cells make a
noisier RMS). Why: honest fp32 noise at SmolLM2's layer 15 has a cluster of rare positions
about 10× the bulk; a profile fitted to fewer, challenged-only cells missed it and rejected
an honest devnet job (`docs/benchmarks.md`, "The stale profile").

The shape-0 tail is a choice, not a fit: a probability-weighted-moments estimate of the
shape on the same honest cells swung from 0.15 to 0.67 with the tail size (fp32 errors are
quantised and repeat across verifiers), and a positive shape extrapolated to 10⁻⁸ gives
thresholds that would hide mild attacks. The safety-factor bound keeps a floor under it.
"""

import math
from collections.abc import Sequence

import numpy as np

from verillm.spec.params import PRESETS
from verillm.spec.policy import LayerTolerance, ToleranceProfile

# bf16 noise is heavy-tailed: 1.5x the maximum of 64 calibration audits rejected 21% of fresh
# honest audits (docs/benchmarks.md), 2.0x none of them.
DEFAULT_SAFETY_FACTOR = {"float32": 4.0, "bfloat16": 2.0}
MIN_CELLS_FOR_RMS = 8
# An honest audit opens at most a few dozen cells per layer: 1e-8 per cell keeps an honest
# party's false-rejection chance per audit near 1e-6.
TARGET_EXCEEDANCE = 1e-8
TAIL_FRACTION = 0.01
MIN_TAIL_SAMPLES = 20
RMS_DRAWS_PER_AUDIT = 64
SMALLEST_CHALLENGE_POSITIONS = min(p.CHALLENGE_POSITIONS for p in PRESETS.values())


def compute_tail_quantile(samples: np.ndarray, exceedance: float = TARGET_EXCEEDANCE, tail_fraction: float = TAIL_FRACTION) -> float | None:
    """Return the value an honest sample exceeds with probability ``exceedance`` under an exponential tail fit.

    Over the largest ``tail_fraction`` of the samples, above u (the value just below them):
    P(X > u + t) ≈ tail_fraction · exp(−t / mean excess). None when fewer than
    MIN_TAIL_SAMPLES samples lie in the tail (a fit on so few says nothing).
    """
    values = np.sort(np.asarray(samples, dtype=np.float64).ravel())
    tail = int(len(values) * tail_fraction)
    if tail < MIN_TAIL_SAMPLES:
        return None
    threshold = float(values[-tail - 1])
    mean_excess = float(np.mean(values[-tail:] - threshold))
    return threshold + mean_excess * math.log(tail_fraction / exceedance)


def simulate_challenge_rms(cell_errors: np.ndarray, challenge_positions: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Return (draws, layers) RMS errors of one honest audit under random challenges of ``challenge_positions``.

    The rule of `spec/challenge.py`: a drawn position opens every committed layer; the last
    committed layer is also opened at every output position (the token check), so its RMS is
    over all of them.
    """
    positions, layers = cell_errors.shape
    picked = min(positions, challenge_positions)
    squares = cell_errors**2
    rms = np.empty((draws, layers))
    for draw in range(draws):
        chosen = rng.choice(positions, size=picked, replace=False)
        rms[draw, :-1] = np.sqrt(squares[chosen, :-1].mean(axis=0))
        rms[draw, -1] = math.sqrt(squares[:, -1].mean())
    return rms


def collect_samples(audits: Sequence, min_cells_for_rms: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return (every drawable cell error, simulated challenge RMS) pooled over ``audits``, each (samples, layers)."""
    rng = np.random.default_rng(seed)
    cells = [a.cell_errors for a in audits if len(a.cell_errors)]
    rms = [simulate_challenge_rms(c, SMALLEST_CHALLENGE_POSITIONS, RMS_DRAWS_PER_AUDIT, rng) for c in cells if len(c) >= min_cells_for_rms]
    layers = cells[0].shape[1]
    return np.concatenate(cells), (np.concatenate(rms) if rms else np.zeros((0, layers)))


def compute_observed_max(samples: np.ndarray) -> float:
    """Return the largest honest value of one statistic (0 when there is none: no RMS test ran)."""
    return float(samples.max()) if len(samples) else 0.0


def compute_bound(samples: np.ndarray, safety_factor: float) -> dict:
    """Return the threshold for one statistic of one layer, with both bounds and which one binds."""
    observed_max = compute_observed_max(samples)
    tail = compute_tail_quantile(samples)
    by_factor = safety_factor * observed_max
    threshold = max(by_factor, tail or 0.0)
    return {
        "samples": int(len(samples)),
        "observed_max": observed_max,
        "factor_bound": by_factor,
        "tail_bound": tail,
        "threshold": threshold,
        "binding": "tail" if tail is not None and tail > by_factor else "factor",
    }


def compute_profile(model: str, dtype: str, audits: Sequence, safety_factor: float, command: str, min_cells_for_rms: int = MIN_CELLS_FOR_RMS) -> ToleranceProfile:
    """Return the profile whose thresholds bound every honest statistic seen and its fitted tail.

    ``audits``: `verillm.bench.noise.HonestAudit`s; ``layers`` order is the manifest's.
    """
    layer_ids = [s.layer for s in audits[0].result.measurement.layers]
    cells, rms = collect_samples(audits, min_cells_for_rms)
    bounds = {layer: {"max_cell_error": compute_bound(cells[:, slot], safety_factor), "rms_error": compute_bound(rms[:, slot], safety_factor)}
              for slot, layer in enumerate(layer_ids)}
    layers = tuple(LayerTolerance(layer, b["max_cell_error"]["threshold"], b["rms_error"]["threshold"]) for layer, b in bounds.items())
    provenance = {
        "command": command,
        "honest_audits": len(audits),
        "safety_factor": safety_factor,
        "method": f"threshold = max({safety_factor} x honest max, exponential tail fit over the top {TAIL_FRACTION:g} at P = {TARGET_EXCEEDANCE:g}); "
        f"cells: every output position of every audit; RMS: {RMS_DRAWS_PER_AUDIT} simulated challenges of {SMALLEST_CHALLENGE_POSITIONS} positions per audit",
        "bounds": {str(layer): b for layer, b in bounds.items()},
        "confidence": f"{len(cells)} honest cells per layer; each threshold is at least {safety_factor}x the largest honest value and, where "
        f"{MIN_TAIL_SAMPLES}+ samples lie in the top {TAIL_FRACTION:g}, at least the fitted value an honest one exceeds with probability {TARGET_EXCEEDANCE:g}",
    }
    return ToleranceProfile(model=model, dtype=dtype, layers=layers, min_cells_for_rms=min_cells_for_rms, provenance=provenance)


# A profile whose threshold today's honest engine reaches half of is stale: the margin that the
# factor of 4 bought for hardware outside the matrix is mostly spent (`verillm calibrate --check`).
STALE_RATIO = 0.5


def compute_profile_check(profile: ToleranceProfile, audits: Sequence, min_cells_for_rms: int = MIN_CELLS_FOR_RMS) -> list[dict]:
    """Return, per layer and statistic, today's honest maximum against ``profile``'s threshold."""
    cells, rms = collect_samples(audits, min_cells_for_rms)
    rows = []
    for slot, tolerance in enumerate(profile.layers):
        for statistic, samples, threshold in (("max_cell_error", cells[:, slot], tolerance.max_cell_error), ("rms_error", rms[:, slot], tolerance.rms_error)):
            honest_max = compute_observed_max(samples)
            rows.append({"layer": tolerance.layer, "statistic": statistic, "honest_max": honest_max, "threshold": threshold,
                         "ratio": honest_max / threshold if threshold > 0 else float("inf")})
    return rows
