"""Spec tests for `verillm.spec.compare`: the statistics of one worker-vs-member comparison.

Measurement only, never a verdict: per committed layer the largest cell error (and where) and
the RMS over the cells both parties opened; per output token whether the member's flag
accepts it; whether the output stopped early and whether the member would stop there.
A cell error is ‖f_worker − f_member‖₂ / √dims. Deciding is `verillm.spec.policy`'s job.
"""

import math

import pytest

from verillm.spec.compare import (
    AuditMeasurement,
    compute_audit_measurement,
    compute_cell_error,
    compute_layer_statistics,
    compute_token_statistics,
    is_stopped_early,
)
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN
from verillm.spec.types import Challenge, Leaf

STOP = 2
NEXT, STOP_FLAG = FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN


def leaf(position, layer, *fingerprint, flags=NEXT):
    return Leaf(position=position, layer=layer, fingerprint=tuple(fingerprint), flags=flags)


def cells(*leaves):
    return {(item.position, item.layer): item for item in leaves}


def challenge(layers=(1, 4)):
    return Challenge(seed=b"\x00" * 32, positions=(), layers=layers, token_positions=())


# --- fingerprint errors ---------------------------------------------------------------------


def test_the_cell_error_is_the_l2_distance_divided_by_the_square_root_of_dims():
    # Δ = (1, 1, 1, 1): ‖Δ‖ = 2, √4 = 2, so the error is exactly 1.
    assert compute_cell_error(leaf(0, 1, 1.0, 1.0, 1.0, 1.0), leaf(0, 1, 0.0, 0.0, 0.0, 0.0)) == 1.0
    # Δ = (3, −4): ‖Δ‖ = 5, over √2.
    assert compute_cell_error(leaf(0, 1, 3.0, 0.0), leaf(0, 1, 0.0, 4.0)) == pytest.approx(5 / math.sqrt(2))


def test_equal_fingerprints_have_zero_error_and_the_error_is_symmetric():
    a, b = leaf(0, 1, 0.25, -0.5), leaf(0, 1, 0.75, 0.5)
    assert compute_cell_error(a, a) == 0.0
    assert compute_cell_error(a, b) == compute_cell_error(b, a) == pytest.approx(math.sqrt((0.25 + 1.0) / 2))


def test_fingerprints_of_different_lengths_are_infinitely_far_apart():
    assert compute_cell_error(leaf(0, 1, 1.0), leaf(0, 1, 1.0, 1.0)) == math.inf


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_cell_with_a_value_that_is_not_finite_is_infinitely_far_from_anything(bad):
    """As on-chain (`spec.audit.compute_cell_squared_error`): a NaN must never pass as "within"."""
    assert compute_cell_error(leaf(0, 1, bad, 0.0), leaf(0, 1, 0.0, 0.0)) == math.inf
    assert compute_cell_error(leaf(0, 1, 0.0, 0.0), leaf(0, 1, 0.0, bad)) == math.inf
    assert compute_cell_error(leaf(0, 1, bad), leaf(0, 1, bad)) == math.inf


def test_layer_statistics_report_the_largest_error_where_it_is_and_the_rms():
    worker = cells(leaf(5, 1, 1.0), leaf(6, 1, 7.0))
    member = cells(leaf(5, 1, 0.0), leaf(6, 1, 0.0))
    stats = compute_layer_statistics(1, worker, member)
    # errors 1 and 7: max 7 at position 6, RMS √((1 + 49) / 2) = 5.
    assert (stats.layer, stats.cells, stats.max_error, stats.max_error_position) == (1, 2, 7.0, 6)
    assert stats.rms_error == pytest.approx(5.0)


def test_layer_statistics_use_only_cells_both_parties_opened_at_that_layer():
    worker = cells(leaf(5, 1, 1.0), leaf(6, 1, 100.0), leaf(5, 4, 50.0))
    member = cells(leaf(5, 1, 0.0), leaf(7, 1, 100.0), leaf(5, 4, 0.0))
    stats = compute_layer_statistics(1, worker, member)
    assert (stats.cells, stats.max_error, stats.max_error_position, stats.rms_error) == (1, 1.0, 5, 1.0)


def test_a_layer_without_shared_cells_reports_zero_cells_and_no_position():
    stats = compute_layer_statistics(4, cells(leaf(5, 1, 1.0)), cells(leaf(5, 1, 0.0)))
    assert (stats.cells, stats.max_error, stats.max_error_position, stats.rms_error) == (0, 0.0, -1, 0.0)


def test_of_equal_largest_errors_the_earliest_position_is_reported():
    worker = cells(leaf(9, 1, 2.0), leaf(3, 1, 2.0))
    member = cells(leaf(9, 1, 0.0), leaf(3, 1, 0.0))
    assert compute_layer_statistics(1, worker, member).max_error_position == 3


# --- stop -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "output, max_new, expected",
    [
        ((5, 6, 7), 3, False),  # used the whole budget
        ((5, STOP), 3, False),  # ended with a stop token
        ((5, 6), 3, True),  # short, and the last token is not a stop token
        ((), 3, True),  # nothing at all
        ((STOP, 6), 3, True),  # a stop token that is not last does not count
    ],
)
def test_an_output_stopped_early_when_it_is_short_and_does_not_end_with_a_stop_token(output, max_new, expected):
    assert is_stopped_early(output, max_new, (STOP,)) is expected


# --- tokens ---------------------------------------------------------------------------------
# Prompt of 3 tokens, output (10, 11, 12): positions 2, 3, 4 predict output #0, #1, #2 and
# position 5 (the member's extra position) says whether the member would stop after #2.

PROMPT_LEN, OUTPUT = 3, (10, 11, 12)


def token_statistics(member, max_new=3, member_output=(20,)):
    return compute_token_statistics(member, challenge(), PROMPT_LEN, OUTPUT, max_new, member_output, (STOP,))


def test_every_output_token_whose_predicting_leaf_lacks_the_margin_flag_is_disputed():
    member = cells(leaf(2, 4, 0.0), leaf(3, 4, 0.0, flags=0), leaf(4, 4, 0.0), leaf(5, 4, 0.0))
    stats = token_statistics(member)
    assert (stats.checked, stats.disputed_output_indices) == (3, (1,))


def test_tokens_are_judged_by_the_last_committed_layer_only():
    # Layer 1 denies every token; layer 4 (the last) accepts them: nothing is disputed.
    member = cells(*(leaf(p, 1, 0.0, flags=0) for p in (2, 3, 4)), *(leaf(p, 4, 0.0) for p in (2, 3, 4)))
    assert token_statistics(member).disputed_output_indices == ()


def test_tokens_whose_leaf_was_not_opened_are_not_counted_as_checked():
    stats = token_statistics(cells(leaf(2, 4, 0.0, flags=0)))
    assert (stats.checked, stats.disputed_output_indices) == (1, (0,))


def test_the_member_would_stop_when_its_final_leaf_has_a_stop_within_margin():
    member = cells(leaf(5, 4, 0.0, flags=STOP_FLAG))
    assert token_statistics(member, max_new=8).member_would_stop
    assert not token_statistics(cells(leaf(5, 4, 0.0, flags=NEXT)), max_new=8).member_would_stop


def test_the_member_would_stop_when_its_own_sampled_token_is_a_stop_token():
    assert token_statistics({}, member_output=(STOP,)).member_would_stop
    assert not token_statistics({}, member_output=(20,)).member_would_stop


def test_token_statistics_say_whether_the_output_stopped_early():
    assert token_statistics({}, max_new=3).stopped_early is False
    assert token_statistics({}, max_new=8).stopped_early is True


# --- a whole measurement --------------------------------------------------------------------


def test_a_measurement_has_one_layer_statistic_per_challenged_layer_in_order_and_no_verdict():
    worker = cells(leaf(2, 1, 0.5), leaf(2, 4, 3.0))
    member = cells(leaf(2, 1, 0.0), leaf(2, 4, 0.0), leaf(3, 4, 0.0), leaf(4, 4, 0.0))
    measurement = compute_audit_measurement(worker, member, challenge((1, 4)), PROMPT_LEN, OUTPUT, 3, (20,), (STOP,))
    assert isinstance(measurement, AuditMeasurement)
    assert [(s.layer, s.max_error) for s in measurement.layers] == [(1, 0.5), (4, 3.0)]
    assert measurement.tokens.checked == 3
    # Measurement never decides: however large the error, there is nothing to accept or reject.
    assert not hasattr(measurement, "accepted") and not hasattr(measurement, "reasons")
