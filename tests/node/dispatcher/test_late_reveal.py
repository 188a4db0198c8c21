"""Issue 34, "Proportionality": a dispatcher that missed its private draw's window still reveals in
the grace (the same draw, at MEMBER_PENALTY_BPS), and nobody lapses the round before the grace ends
(docs/protocol.md §12 "Private draws"). The node's two decisions, over every block of the round's
drawing phase: `is_reveal_due` (its own reveal) and `compute_due_steps` (a watcher's `lapse`).
The contract side is `tests/contracts/test_issue34_late_reveal.py`."""

import dataclasses

from verillm.node.dispatcher.audit.private_draw import is_reveal_due
from verillm.spec.audit import Phase, RoundState, compute_due_steps, compute_round_deadlines
from verillm.spec.params import MAINNET, MINIMAL


def _drawing(preset, entered: int = 100, private: bool = True) -> RoundState:
    deadlines = compute_round_deadlines(entered, 0, 0, 0, preset)
    return RoundState(Phase.DRAWING, 0, 0, 0, 0, 0, 0, False, False, False, 0, 0, deadlines, private_draw=private, receipt_known=not private)


def test_reveal_by_is_the_draw_window_plus_the_grace():
    for preset in (MINIMAL, MAINNET):
        d = _drawing(preset).deadlines
        assert d.reveal_by == d.draw_by + preset.PRIVATE_REVEAL_GRACE_BLOCKS
        assert d.reveal_by - d.draw_after < 256  # the late reveal still reads the seed block's hash


def test_a_dispatcher_past_its_window_still_reveals_until_the_grace_ends():
    state = _drawing(MINIMAL)
    d = state.deadlines
    for head in range(d.draw_after, d.reveal_by + 5):
        due = is_reveal_due(state, head, seats=3, answered=0)  # no member answered: only the clock decides
        landing = head + 1
        if landing > d.reveal_by:
            assert not due, head  # the contract refuses it (TooLate): the lapse is next
        elif landing > d.draw_by:
            assert due, f"head {head}: a late reveal is the same draw, at the penalty: it must go out"


def test_nobody_lapses_a_private_draw_before_its_grace_ends_and_a_public_one_after_its_window():
    private = _drawing(MINIMAL)
    d = private.deadlines
    for block in range(d.draw_after + 1, d.reveal_by + 3):
        assert (compute_due_steps(private, block) == ("lapse",)) == (block > d.reveal_by), block
    public = dataclasses.replace(private, private_draw=False, receipt_known=True)
    assert compute_due_steps(public, d.draw_by + 1) == ("lapse",)
    assert compute_due_steps(public, d.draw_by) == ("draw_round",)
