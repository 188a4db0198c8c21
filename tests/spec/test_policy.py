"""Spec tests for `verillm.spec.policy`: what a measurement must satisfy to be accepted.

A `ToleranceProfile` holds per committed layer the largest acceptable cell error and RMS.
`compute_check_result` turns a measurement (`verillm.spec.compare`) into accept/reject with
every reason, each naming the statistic, where it was seen, its value and the threshold it
broke. Exact mode uses the zero profile: any differing bit rejects.
"""

import numpy as np
import pytest

from verillm.errors import ConfigError
from verillm.spec.compare import AuditMeasurement, LayerStatistics, TokenStatistics, compute_audit_measurement
from verillm.spec.policy import (
    REASON_FINGERPRINT,
    REASON_TOKEN,
    REASON_TRUNCATION,
    LayerTolerance,
    ToleranceProfile,
    compute_check_result,
    compute_exact_profile,
)
from verillm.spec.types import Challenge, Leaf

PROFILE = ToleranceProfile(
    model="toy",
    dtype="float32",
    layers=(LayerTolerance(layer=1, max_cell_error=0.5, rms_error=0.25), LayerTolerance(layer=4, max_cell_error=1.0, rms_error=0.5)),
    min_cells_for_rms=2,
)
OUTPUT = (10, 11, 12)
GOOD_TOKENS = TokenStatistics(checked=3, disputed_output_indices=(), stopped_early=False, member_would_stop=False)


def layer(layer, max_error=0.0, rms=0.0, cells=4, where=7):
    return LayerStatistics(layer=layer, cells=cells, max_error=max_error, max_error_position=where, rms_error=rms)


def check(*layers, tokens=GOOD_TOKENS, profile=PROFILE, output=OUTPUT):
    measurement = AuditMeasurement(layers=layers or (layer(1), layer(4)), tokens=tokens)
    return compute_check_result(measurement, profile, output)


def test_a_measurement_within_every_threshold_is_accepted_with_no_reasons():
    result = check(layer(1, 0.4, 0.2), layer(4, 0.9, 0.4))
    assert result.accepted and result.reasons == () and result.reason_kinds == set()


def test_a_statistic_exactly_at_its_threshold_is_accepted():
    assert check(layer(1, 0.5, 0.25), layer(4, 1.0, 0.5)).accepted


def test_a_cell_error_above_its_layers_threshold_rejects_naming_layer_position_value_and_threshold():
    result = check(layer(1, 0.75, 0.2, where=7), layer(4))
    assert not result.accepted
    [reason] = result.reasons
    assert reason.kind == REASON_FINGERPRINT
    assert reason.detail == "layer 1: fingerprint error 0.75 at position 7 exceeds 0.5"


def test_thresholds_are_per_layer():
    # 0.75 breaks layer 1's 0.5 but is within layer 4's 1.0.
    assert check(layer(1), layer(4, 0.75, 0.2)).accepted


def test_an_rms_above_its_threshold_rejects_naming_the_cell_count():
    [reason] = check(layer(1, 0.4, 0.3, cells=2), layer(4)).reasons
    assert reason.kind == REASON_FINGERPRINT
    assert reason.detail == "layer 1: RMS fingerprint error 0.3 over 2 cells exceeds 0.25"


def test_the_rms_is_not_judged_over_fewer_cells_than_the_profile_asks_for():
    assert check(layer(1, 0.4, 0.3, cells=1), layer(4)).accepted


def test_disputed_tokens_reject_listing_each_index_and_token():
    tokens = TokenStatistics(checked=3, disputed_output_indices=(0, 2), stopped_early=False, member_would_stop=False)
    [reason] = check(tokens=tokens).reasons
    assert reason.kind == REASON_TOKEN
    assert reason.detail == "2 of 3 output tokens are outside the verifier's sampling margin: #0 (token 10), #2 (token 12)"


def test_a_long_list_of_disputed_tokens_shows_five_and_counts_the_rest():
    output = tuple(range(100, 108))
    tokens = TokenStatistics(checked=8, disputed_output_indices=tuple(range(8)), stopped_early=False, member_would_stop=False)
    [reason] = check(tokens=tokens, output=output).reasons
    assert reason.detail.endswith("#4 (token 104) and 3 more")


def test_an_early_stop_rejects_unless_the_member_would_stop_there_too():
    truncated = TokenStatistics(checked=3, disputed_output_indices=(), stopped_early=True, member_would_stop=False)
    [reason] = check(tokens=truncated).reasons
    assert reason.kind == REASON_TRUNCATION and "stopped after 3 tokens" in reason.detail
    agreed = TokenStatistics(checked=3, disputed_output_indices=(), stopped_early=True, member_would_stop=True)
    assert check(tokens=agreed).accepted


def test_every_broken_rule_is_reported_not_just_the_first():
    tokens = TokenStatistics(checked=3, disputed_output_indices=(1,), stopped_early=True, member_would_stop=False)
    result = check(layer(1, 0.9, 0.9), layer(4, 2.0, 0.1), tokens=tokens)
    assert [r.kind for r in result.reasons] == [REASON_FINGERPRINT] * 3 + [REASON_TOKEN, REASON_TRUNCATION]


def test_a_profile_without_a_tolerance_for_a_measured_layer_is_a_configuration_error():
    with pytest.raises(ConfigError, match="toy/float32 has no tolerance for layer 2"):
        check(layer(2))


# --- exact mode -----------------------------------------------------------------------------


def test_the_exact_profile_has_zero_thresholds_at_every_layer_and_judges_rms_from_one_cell():
    profile = compute_exact_profile("toy", "bfloat16", (1, 4))
    assert profile.layers == (LayerTolerance(1, 0.0, 0.0), LayerTolerance(4, 0.0, 0.0))
    assert profile.min_cells_for_rms == 1 and profile.provenance == {"mode": "exact"}


def test_in_exact_mode_one_differing_bit_in_one_fingerprint_rejects():
    profile = compute_exact_profile("toy", "bfloat16", (1,))
    value = np.float32(0.1)
    neighbour = float(np.nextafter(value, np.float32(1.0)))  # the next float32: one bit away
    challenge = Challenge(seed=b"\x00" * 32, positions=(0,), layers=(1,), token_positions=())

    def result(member_value):
        worker = {(0, 1): Leaf(0, 1, (float(value),), 1)}
        member = {(0, 1): Leaf(0, 1, (member_value,), 1)}
        measurement = compute_audit_measurement(worker, member, challenge, 1, (5,), 1, (), ())
        return compute_check_result(measurement, profile, (5,))

    assert result(float(value)).accepted
    rejected = result(neighbour)
    assert not rejected.accepted and rejected.reason_kinds == {REASON_FINGERPRINT}
    assert len(rejected.reasons) == 2  # the cell error and the one-cell RMS


# --- profiles as files ----------------------------------------------------------------------


def test_a_profile_survives_a_json_round_trip_with_its_provenance():
    profile = ToleranceProfile("toy", "float32", PROFILE.layers, min_cells_for_rms=8, provenance={"command": "verillm calibrate", "runs": 3})
    text = profile.to_json()
    assert text.endswith("\n")
    again = ToleranceProfile.from_json(text)
    assert again == profile and again.provenance == profile.provenance
    assert again.for_layer(4) == LayerTolerance(4, 1.0, 0.5)


def test_provenance_does_not_take_part_in_profile_equality():
    assert ToleranceProfile("toy", "float32", PROFILE.layers, 2, {"a": 1}) == ToleranceProfile("toy", "float32", PROFILE.layers, 2, {"b": 2})


def test_a_nan_fingerprint_is_rejected_even_under_the_exact_profile():
    """A worker committing NaN at a challenged cell cannot hide there, nor hide the layer's other errors."""
    worker = {(0, 1): Leaf(0, 1, (float("nan"),), 1), (1, 1): Leaf(1, 1, (5.0,), 1)}
    member = {(0, 1): Leaf(0, 1, (0.0,), 1), (1, 1): Leaf(1, 1, (0.0,), 1)}
    challenge = Challenge(seed=b"\x00" * 32, positions=(0, 1), layers=(1,), token_positions=())
    measurement = compute_audit_measurement(worker, member, challenge, prompt_len=2, output_tokens=(), max_new_tokens=1,
                                           member_output_tokens=(), stop_tokens=())
    result = compute_check_result(measurement, compute_exact_profile("m", "bfloat16", (1,)), ())
    assert not result.accepted and any(r.kind == REASON_FINGERPRINT for r in result.reasons)
