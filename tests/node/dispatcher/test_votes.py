"""Member votes, provable lies and escalation: the pure rules of verillm/spec/honest.py."""

import pytest

from verillm.spec.audit import OnchainModel
from verillm.spec.honest import compute_member_vote, is_escalation_warranted, is_provable_lie
from verillm.spec.settlement import AGREE, DISAGREE, FAIL, PASS, TIE, WORKER_DEFAULT
from verillm.spec.types import Leaf
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN

LAYERS = (1, 3)
MODEL = OnchainModel(b"\x01" * 32, LAYERS, 1, max_cell_error_ppb=(1000, 1000), rms_error_ppb=(1000, 1000), min_cells_for_rms=100)
PROMPT_LEN, STOP = 4, (9,)


def _cells(outputs: int, offset: float = 0.0, flags: int = FLAG_NEXT_WITHIN_MARGIN, member: bool = False) -> dict:
    positions = range(PROMPT_LEN - 1, PROMPT_LEN - 1 + outputs + (1 if member else 0))
    return {(p, l): Leaf(p, l, (0.25 + offset,), flags) for p in positions for l in LAYERS}


def _vote(member: dict, output=(5, 6, 7), max_new_tokens=3, member_output=(8,)):
    return compute_member_vote(_cells(len(output)), member, MODEL, PROMPT_LEN, output, max_new_tokens, STOP, member_output)


def test_same_states_and_tokens_agree():
    assert _vote(_cells(3, member=True)) is True


def test_a_fingerprint_outside_the_band_disagrees():
    assert _vote(_cells(3, offset=1e-4, member=True)) is False  # 100,000 ppb > 1,000 ppb


def test_a_token_outside_the_margin_disagrees():
    member = _cells(3, member=True)
    member[(PROMPT_LEN, 3)] = Leaf(PROMPT_LEN, 3, (0.25,), 0)
    assert _vote(member) is False


def test_an_early_stop_needs_the_members_sampler_to_stop_there():
    stopped_early = dict(output=(5, 6), max_new_tokens=8)
    assert _vote(_cells(2, member=True), **stopped_early) is False
    assert _vote(_cells(2, member=True), **stopped_early, member_output=(9,)) is True
    flagged = _cells(2, member=True, flags=FLAG_NEXT_WITHIN_MARGIN | FLAG_STOP_WITHIN_MARGIN)
    assert _vote(flagged, **stopped_early) is True


@pytest.mark.parametrize("vote, onchain, full, lie", [
    (AGREE, True, True, False), (AGREE, False, False, True), (AGREE, True, False, False),
    # a "disagree" is never adjudicated: it may rest on the stop rule the contract cannot run
    (DISAGREE, False, False, False), (DISAGREE, True, True, False), (DISAGREE, True, False, False),
])
def test_which_votes_are_provable_lies(vote, onchain, full, lie):
    assert is_provable_lie(vote, onchain, full) is lie


def test_escalation_when_proven_data_contradict_the_verdict():
    assert is_escalation_warranted(FAIL, [False, True, False])
    assert is_escalation_warranted(TIE, [True, False])
    assert not is_escalation_warranted(FAIL, [False, False, False])
    assert not is_escalation_warranted(PASS, [True, False, True])
    assert is_escalation_warranted(PASS, [False, False, True])  # a colluding majority outvoted the proven data
    assert not is_escalation_warranted(WORKER_DEFAULT, [True])
