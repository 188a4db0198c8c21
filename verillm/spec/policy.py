"""Policy: what a measurement must satisfy to be accepted. Thresholds, never statistics.

Thresholds live in a `ToleranceProfile` per (model, dtype), derived from honest runs by
`verillm calibrate` and shipped in `verillm/profiles/<model>-<dtype>.json`. A check result
carries every reason for rejection, each naming the statistic, where it was seen, its value
and the threshold it broke, so an auditor can read why.
"""

import json
from dataclasses import asdict, dataclass, field

from verillm.errors import ConfigError
from verillm.spec.compare import AuditMeasurement

REASON_FINGERPRINT = "fingerprint"
REASON_TOKEN = "token"
REASON_TRUNCATION = "truncation"
REASON_PROOF = "proof"
REASON_CONSISTENCY = "consistency"


@dataclass(frozen=True)
class LayerTolerance:
    """Largest acceptable fingerprint errors at one committed layer."""

    layer: int
    max_cell_error: float
    """No single opened cell may exceed this."""
    rms_error: float
    """The RMS over the layer's opened cells may not exceed this (when cells ≥ min_cells_for_rms)."""


@dataclass(frozen=True)
class ToleranceProfile:
    """Calibrated thresholds for one model and dtype, with where they came from."""

    model: str
    dtype: str
    layers: tuple[LayerTolerance, ...]
    min_cells_for_rms: int = 8
    provenance: dict = field(default_factory=dict, compare=False)

    def for_layer(self, layer: int) -> LayerTolerance:
        for tolerance in self.layers:
            if tolerance.layer == layer:
                return tolerance
        raise ConfigError(f"profile {self.model}/{self.dtype} has no tolerance for layer {layer}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "ToleranceProfile":
        raw = json.loads(text)
        layers = tuple(LayerTolerance(**item) for item in raw.pop("layers"))
        return cls(layers=layers, **raw)


def compute_exact_profile(model: str, dtype: str, layers: tuple[int, ...]) -> ToleranceProfile:
    """Return the zero-tolerance profile of an exact-mode manifest: any differing bit rejects.

    min_cells_for_rms = 1 so the RMS test runs too (redundant at 0, but it keeps the
    on-chain encoding of the thresholds the same shape as a calibrated profile's).
    """
    zero = tuple(LayerTolerance(layer=layer, max_cell_error=0.0, rms_error=0.0) for layer in layers)
    return ToleranceProfile(model=model, dtype=dtype, layers=zero, min_cells_for_rms=1, provenance={"mode": "exact"})


@dataclass(frozen=True)
class Reason:
    """Why a check rejected: the kind (REASON_*) and a sentence for humans."""

    kind: str
    detail: str


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one worker-vs-member comparison."""

    accepted: bool
    reasons: tuple[Reason, ...]
    measurement: AuditMeasurement | None

    @property
    def reason_kinds(self) -> set[str]:
        return {r.kind for r in self.reasons}


def compute_fingerprint_reasons(measurement: AuditMeasurement, profile: ToleranceProfile) -> list[Reason]:
    """Return a reason for every layer statistic above its threshold."""
    reasons = []
    for stats in measurement.layers:
        tolerance = profile.for_layer(stats.layer)
        if stats.max_error > tolerance.max_cell_error:
            reasons.append(Reason(REASON_FINGERPRINT, f"layer {stats.layer}: fingerprint error {stats.max_error:.3g} at position {stats.max_error_position} exceeds {tolerance.max_cell_error:.3g}"))
        if stats.cells >= profile.min_cells_for_rms and stats.rms_error > tolerance.rms_error:
            reasons.append(Reason(REASON_FINGERPRINT, f"layer {stats.layer}: RMS fingerprint error {stats.rms_error:.3g} over {stats.cells} cells exceeds {tolerance.rms_error:.3g}"))
    return reasons


def compute_token_reasons(measurement: AuditMeasurement, output_tokens: tuple[int, ...]) -> list[Reason]:
    """Return reasons from the token check and the stop check."""
    tokens = measurement.tokens
    reasons = []
    if tokens.disputed_output_indices:
        shown = ", ".join(f"#{i} (token {output_tokens[i]})" for i in tokens.disputed_output_indices[:5])
        more = len(tokens.disputed_output_indices) - 5
        reasons.append(Reason(REASON_TOKEN, f"{len(tokens.disputed_output_indices)} of {tokens.checked} output tokens are outside the verifier's sampling margin: {shown}" + (f" and {more} more" if more > 0 else "")))
    if tokens.stopped_early and not tokens.member_would_stop:
        reasons.append(Reason(REASON_TRUNCATION, f"output stopped after {len(output_tokens)} tokens without a stop token, and the verifier's sampler does not stop there"))
    return reasons


def compute_check_result(measurement: AuditMeasurement, profile: ToleranceProfile, output_tokens: tuple[int, ...]) -> CheckResult:
    """Return accept/reject for ``measurement`` under ``profile``, with every reason."""
    reasons = compute_fingerprint_reasons(measurement, profile) + compute_token_reasons(measurement, output_tokens)
    return CheckResult(accepted=not reasons, reasons=tuple(reasons), measurement=measurement)
