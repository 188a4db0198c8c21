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


def test_the_worker_appeals_its_own_fail_or_tie_never_a_pass():
    # Honest work gets verified (issue 34): a TIE (a lazy agree voided against a false disagree)
    # goes to a new round, appealed by the worker's own node; the bond comes back when it decides.
    from verillm.spec.honest import is_worker_appeal_warranted

    assert is_worker_appeal_warranted(FAIL) and is_worker_appeal_warranted(TIE)
    assert not is_worker_appeal_warranted(PASS) and not is_worker_appeal_warranted(WORKER_DEFAULT)


def _round0(worker_offset: float = 0.0, changed: Leaf | None = None) -> dict:
    cells = _cells(3, offset=worker_offset, member=True)
    if changed is not None:
        cells[(changed.position, changed.layer)] = changed
    return cells


def test_only_members_whose_data_fail_the_appeal_cells_are_hunted_and_only_after_a_pass():
    from verillm.spec.honest import compute_hunt_targets

    worker = _cells(3)
    fabricated = _round0(worker_offset=1e-4)  # every cell 100,000 ppb off: a framing liar
    flagless = _round0(changed=Leaf(PROMPT_LEN, 3, (0.25,), 0))  # one token refused
    off_layer_1 = _round0(changed=Leaf(PROMPT_LEN, 1, (0.9,), FLAG_NEXT_WITHIN_MARGIN))  # not an appeal cell
    honest = _round0()  # an honest DISAGREE (the stop rule) on honest data
    members = {1: fabricated, 2: flagless, 3: off_layer_1, 4: honest}
    targets = compute_hunt_targets(PASS, worker, members, MODEL, PROMPT_LEN, 3, first_majority=PASS)
    assert targets == {1: ((3, 3), (4, 3), (5, 3)), 2: ((PROMPT_LEN, 3),)}
    for verdict in (FAIL, TIE, WORKER_DEFAULT):
        assert compute_hunt_targets(verdict, worker, members, MODEL, PROMPT_LEN, 3, first_majority=PASS) == {}
    for first in (FAIL, TIE):  # the appeal overturned round 0: one round against another convicts nobody in full (issue 34)
        assert compute_hunt_targets(PASS, worker, members, MODEL, PROMPT_LEN, 3, first_majority=first) == {}


def test_a_hunt_names_at_most_one_contests_cells():
    from verillm.spec.constants import MAX_CONTEST_CELLS
    from verillm.spec.honest import compute_lie_cells

    worker = {(p, 3): Leaf(p, 3, (0.25,), FLAG_NEXT_WITHIN_MARGIN) for p in range(PROMPT_LEN - 1, PROMPT_LEN + 39)}
    liar = {cell: Leaf(*cell, (0.5,), FLAG_NEXT_WITHIN_MARGIN) for cell in worker}
    cells = compute_lie_cells(worker, liar, MODEL, PROMPT_LEN, 40)
    assert len(cells) == MAX_CONTEST_CELLS and list(cells) == sorted(cells)


def test_a_hunt_starts_only_while_a_late_answer_still_leaves_a_block_to_adjudicate():
    from verillm.spec.honest import is_hunt_in_time

    assert is_hunt_in_time(head=100, dispute_by=107, proof_window_blocks=5)  # answer by 106, adjudicate at 107
    assert not is_hunt_in_time(head=101, dispute_by=107, proof_window_blocks=5)


def test_an_appeal_dissenter_hunts_only_first_round_agrees_its_data_contradict_and_only_after_a_fail():
    from verillm.spec.honest import compute_vouch_targets

    own = _cells(3, member=True)  # the appeal "disagree" voter's data: honest
    vouched = _round0(worker_offset=1e-4)  # the cheat's fabricated leaves, copied by a colluder
    honest_agree = _round0(worker_offset=1e-7)  # 100 ppb off: inside the band
    dissenter = _round0(worker_offset=1e-4)  # its data differ too, but it voted disagree
    members = {1: vouched, 2: honest_agree, 3: dissenter}
    votes = {1: AGREE, 2: AGREE, 3: DISAGREE}
    targets = compute_vouch_targets(FAIL, DISAGREE, own, members, votes, MODEL, PROMPT_LEN, 3, first_majority=FAIL)
    assert targets == {1: ((3, 3), (4, 3), (5, 3))}
    assert compute_vouch_targets(PASS, DISAGREE, own, members, votes, MODEL, PROMPT_LEN, 3, first_majority=FAIL) == {}
    assert compute_vouch_targets(FAIL, AGREE, own, members, votes, MODEL, PROMPT_LEN, 3, first_majority=FAIL) == {}  # not a reference
    # the cheat defaulted in the appeal (no vote there): every seat's committed data serve
    assert compute_vouch_targets(WORKER_DEFAULT, 0, own, members, votes, MODEL, PROMPT_LEN, 3, first_majority=FAIL) == targets
    assert compute_vouch_targets(TIE, DISAGREE, own, members, votes, MODEL, PROMPT_LEN, 3, first_majority=FAIL) == {}
    for first in (PASS, TIE):  # round 0 did not fail the cheat: no two rounds against the agrees (issue 34, attack 1)
        assert compute_vouch_targets(FAIL, DISAGREE, own, members, votes, MODEL, PROMPT_LEN, 3, first_majority=first) == {}


def test_across_rounds_exact_mode_compares_bit_for_bit_flags_included():
    from verillm.spec.honest import is_cell_contradicted

    exact = OnchainModel(b"\x02" * 32, LAYERS, 1, max_cell_error_ppb=(0, 0), rms_error_ppb=(0, 0), min_cells_for_rms=100)
    mine = Leaf(PROMPT_LEN, 3, (0.25,), FLAG_NEXT_WITHIN_MARGIN)
    assert not is_cell_contradicted(mine, mine, exact)
    assert is_cell_contradicted(mine, Leaf(PROMPT_LEN, 3, (0.25,), 0), exact)  # a token the reference refused
    assert is_cell_contradicted(mine, Leaf(PROMPT_LEN, 3, (0.2500001,), FLAG_NEXT_WITHIN_MARGIN), exact)
    assert not is_cell_contradicted(mine, Leaf(PROMPT_LEN, 3, (0.25,), 0), MODEL)  # tolerance mode: the band only
