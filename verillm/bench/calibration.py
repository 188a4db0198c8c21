"""Calibration: derive a tolerance profile from honest audits (`verillm calibrate`).

threshold = safety factor × the largest honest value seen, per committed layer, for the max
cell error and for the RMS (over audits with at least `min_cells_for_rms` cells). The
provenance records how many honest cells and audits back each number, so the confidence
statement "P(an honest cell exceeds the observed maximum) ≤ 3/n at 95%" (rule of three) can
be read off the profile.
"""

from collections.abc import Sequence

from verillm.spec.policy import LayerTolerance, ToleranceProfile

# bf16 noise is heavy-tailed: 1.5x the maximum of 64 calibration audits rejected 21% of fresh
# honest audits (docs/benchmarks.md), 2.0x none of them.
DEFAULT_SAFETY_FACTOR = {"float32": 4.0, "bfloat16": 2.0}
MIN_CELLS_FOR_RMS = 8


def compute_layer_maxima(results, min_cells_for_rms: int) -> dict[int, dict]:
    """Return per layer: the largest cell error, the largest RMS, and how many cells/audits."""
    maxima: dict[int, dict] = {}
    for result in results:
        for stats in result.measurement.layers:
            entry = maxima.setdefault(stats.layer, {"max_cell_error": 0.0, "rms_error": 0.0, "cells": 0, "rms_audits": 0})
            entry["max_cell_error"] = max(entry["max_cell_error"], stats.max_error)
            entry["cells"] += stats.cells
            if stats.cells >= min_cells_for_rms:
                entry["rms_error"] = max(entry["rms_error"], stats.rms_error)
                entry["rms_audits"] += 1
    return maxima


def compute_profile(model: str, dtype: str, results: Sequence, safety_factor: float, command: str, min_cells_for_rms: int = MIN_CELLS_FOR_RMS) -> ToleranceProfile:
    """Return the profile that accepts every honest result with ``safety_factor`` to spare."""
    maxima = compute_layer_maxima(results, min_cells_for_rms)
    layers = tuple(
        LayerTolerance(layer, safety_factor * m["max_cell_error"], safety_factor * m["rms_error"])
        for layer, m in sorted(maxima.items())
    )
    cells = min(m["cells"] for m in maxima.values())
    provenance = {
        "command": command,
        "honest_audits": len(results),
        "safety_factor": safety_factor,
        "observed": {str(layer): m for layer, m in sorted(maxima.items())},
        "confidence": f"with {cells} honest cells per layer and none above the observed maximum, "
        f"P(honest cell > observed max) <= {3 / cells:.2e} at 95% (rule of three); thresholds are {safety_factor}x that maximum",
    }
    return ToleranceProfile(model=model, dtype=dtype, layers=layers, min_cells_for_rms=min_cells_for_rms, provenance=provenance)
