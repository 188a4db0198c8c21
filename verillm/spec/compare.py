"""Measurement: raw statistics of one worker-vs-member comparison. No thresholds here.

Fingerprint error of a cell (position, layer) = ‖f_worker − f_member‖₂ / √dims. Fingerprints
are projections of unit vectors, so the error estimates the relative L2 error of the hidden
vector (perpendicular part) times a |N(0,1)| factor. Per layer we report the largest cell
error (where it is) and the root mean square over the opened cells; the policy
(`verillm.spec.policy`) decides what is acceptable.

Token statistics come from the member's flags: at every position that predicts one of the
worker's output tokens, FLAG_NEXT_WITHIN_MARGIN says whether that token is within the token
margin of what the member's own sampler emits there.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from verillm.spec.types import Challenge, Leaf
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN

Cells = Mapping[tuple[int, int], Leaf]


@dataclass(frozen=True)
class LayerStatistics:
    """Fingerprint errors at one committed layer over the opened cells."""

    layer: int
    cells: int
    max_error: float
    max_error_position: int
    rms_error: float


@dataclass(frozen=True)
class TokenStatistics:
    """What the member's flags say about the worker's output tokens."""

    checked: int
    disputed_output_indices: tuple[int, ...]
    """Indices into the output whose token is outside the member's margin."""
    stopped_early: bool
    """The output is shorter than max_new_tokens and does not end with a stop token."""
    member_would_stop: bool
    """The member's last position emits, or has within margin, a stop token."""


@dataclass(frozen=True)
class AuditMeasurement:
    """Every statistic of one comparison."""

    layers: tuple[LayerStatistics, ...]
    tokens: TokenStatistics


def compute_cell_error(worker: Leaf, member: Leaf) -> float:
    """Return the fingerprint error of one cell; infinite when the shapes differ or any value is
    not finite (as on-chain: `spec.audit.compute_cell_squared_error` fails such a cell). A NaN
    must never compare as "within": NaN > threshold is False."""
    a = np.asarray(worker.fingerprint, dtype=np.float64)
    b = np.asarray(member.fingerprint, dtype=np.float64)
    if a.shape != b.shape or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return math.inf
    return float(np.linalg.norm(a - b) / math.sqrt(len(a)))


def compute_layer_statistics(layer: int, worker: Cells, member: Cells) -> LayerStatistics:
    """Return the statistics of ``layer`` over the cells both parties opened."""
    shared = sorted(p for (p, l) in worker if l == layer and (p, l) in member)
    errors = [compute_cell_error(worker[(p, layer)], member[(p, layer)]) for p in shared]
    if not errors:
        return LayerStatistics(layer=layer, cells=0, max_error=0.0, max_error_position=-1, rms_error=0.0)
    worst = int(np.argmax(errors))
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    return LayerStatistics(layer=layer, cells=len(errors), max_error=errors[worst], max_error_position=shared[worst], rms_error=rms)


def is_stopped_early(output_tokens: tuple[int, ...], max_new_tokens: int, stop_tokens: tuple[int, ...]) -> bool:
    """Check if an output ended before max_new_tokens without sampling a stop token."""
    return len(output_tokens) < max_new_tokens and (not output_tokens or output_tokens[-1] not in stop_tokens)


def compute_token_statistics(
    member: Cells,
    challenge: Challenge,
    prompt_len: int,
    output_tokens: tuple[int, ...],
    max_new_tokens: int,
    member_output_tokens: tuple[int, ...],
    stop_tokens: tuple[int, ...],
) -> TokenStatistics:
    """Return what the member's flags say about each output token and about the stop."""
    last_layer = challenge.layers[-1]
    disputed, checked = [], 0
    for index in range(len(output_tokens)):
        leaf = member.get((prompt_len - 1 + index, last_layer))
        if leaf is None:
            continue
        checked += 1
        if not leaf.flags & FLAG_NEXT_WITHIN_MARGIN:
            disputed.append(index)
    final = member.get((prompt_len + len(output_tokens) - 1, last_layer))
    would_stop = bool(member_output_tokens and member_output_tokens[0] in stop_tokens)
    would_stop = would_stop or bool(final is not None and final.flags & FLAG_STOP_WITHIN_MARGIN)
    return TokenStatistics(
        checked=checked,
        disputed_output_indices=tuple(disputed),
        stopped_early=is_stopped_early(output_tokens, max_new_tokens, stop_tokens),
        member_would_stop=would_stop,
    )


def compute_audit_measurement(
    worker: Cells,
    member: Cells,
    challenge: Challenge,
    prompt_len: int,
    output_tokens: tuple[int, ...],
    max_new_tokens: int,
    member_output_tokens: tuple[int, ...],
    stop_tokens: tuple[int, ...],
) -> AuditMeasurement:
    """Return every statistic of one worker-vs-member comparison."""
    layers = tuple(compute_layer_statistics(layer, worker, member) for layer in challenge.layers)
    tokens = compute_token_statistics(member, challenge, prompt_len, output_tokens, max_new_tokens, member_output_tokens, stop_tokens)
    return AuditMeasurement(layers=layers, tokens=tokens)
