"""What the explorer says about one audit (node/api/explorer_audit.py): each seat's conduct from the
recorded events (a proven lie is a lie, not a vote; a penalty says which rule), and, while the audit is
open, what happens next, by whom, by which block: the deadlines Jobs.sol enforces (the revert bounds
of drawRound, lapse, postCommitteeReceipt, publishTranscript, drawChallenge, openWorker, sealVote,
openAndVote and escalate), read from the round's state as `Jobs.getRoundState` gives it (spec.audit.RoundState)."""

import pytest

from verillm.chain.protocol import ABANDONED, COMMITTING, DECIDED, DRAWING, LAPSED, OPENING, SETTLED
from verillm.node.api.explorer_audit import compute_conduct, compute_next_step, compute_rounds
from verillm.spec.audit import Phase, RoundState, compute_round_deadlines
from verillm.spec.params import MINIMAL

WORKER, DISPATCHER = "0x" + "0a" * 20, "0x" + "0d" * 20
A, B, C, D = ("0x" + f"{n:02x}" * 20 for n in (0xA1, 0xB2, 0xC3, 0xD4))
PRESET = MINIMAL.replace(COMMIT_WINDOW_BLOCKS=11, OPEN_WINDOW_BLOCKS=13, DISPUTE_WINDOW_BLOCKS=17, DRAW_WINDOW_BLOCKS=19, AUDIT_DRAW_DELAY_BLOCKS=2)


def _events(*rows) -> list[dict]:
    return [{"name": name, "block_number": block, "log_index": i, "tx_hash": f"{i:064x}", "audit_id": 7, "contest_id": args.pop("contest_id", None),
             "args": args} for i, (block, name, args) in enumerate(rows)]


def _drawn(block=10, members=(A, B, C), attempt=0):
    return (block, "CommitteeDrawn", {"round": 0, "attempt": attempt, "members": list(members)})


def _posted(slot, block=12):
    return (block, "CommitteeReceiptPosted", {"round": 0, "slot": slot, "member": (A, B, C)[slot], "commitmentRoot": "0x01"})


def _sealed(slot, block=18):
    return (block, "VoteSealed", {"round": 0, "slot": slot, "member": (A, B, C)[slot - 1]})


def _opened(slot, vote, block=20):
    return (block, "Opened", {"round": 0, "slot": slot, "party": WORKER if slot == 0 else (A, B, C)[slot - 1], "vote": vote})


AUDIT = {"worker": WORKER, "dispatcher": DISPATCHER, "requested": False}


def _view(phase, *, round=0, attempt=0, entered_block=5, commit_deadline=21, ready_block=30, verdict_block=50, challenge_drawn=True,
          worker_opened=True, pending_contests=0, publish_deadline=0, published=False) -> RoundState:
    deadlines = compute_round_deadlines(entered_block, commit_deadline, ready_block, verdict_block, PRESET)
    return RoundState(Phase(phase), round, attempt, 3, 3, 0, 0, worker_opened, challenge_drawn, published, pending_contests, publish_deadline, deadlines)


def test_a_lie_proven_by_adjudication_is_shown_as_a_lie_and_penalties_say_which_rule():
    events = _events(_drawn(), _posted(0), _posted(1), _posted(2), _opened(0, 0), _opened(1, 1), _opened(2, 2),
                     (25, "Adjudicated", {"round": 0, "slot": 1, "member": A, "dataAgrees": False, "vote": 1}),
                     (30, "RoundDecided", {"round": 0, "verdict": 2, "agree": 0, "disagree": 1}),
                     (40, "PartySlashed", {"node": C, "amountWei": 5, "reason": "missed opening or minority vote"}),
                     (40, "PartySlashed", {"node": WORKER, "amountWei": 9, "reason": "failed audit"}))
    rounds = compute_rounds(events)
    conduct = compute_conduct(events, [], rounds, WORKER)
    assert conduct[A.lower()]["lie"] and conduct[A.lower()]["vote"] == 1 and "lied" in conduct[A.lower()]["label"]
    assert not conduct[B.lower()]["lie"] and conduct[B.lower()]["label"] == "voted with the verdict"
    assert conduct[C.lower()]["label"] == "missed its opening (penalised)" and conduct[C.lower()]["slashed_wei"] == 5
    assert conduct[WORKER.lower()]["lie"] and "failed audit" in conduct[WORKER.lower()]["label"]
    assert rounds[0]["decided"]["verdict"] == "fail" and rounds[0]["worker_opened_block"] == 20


def test_a_member_that_lost_a_contest_is_caught_and_a_replaced_seat_says_nobody_was_slashed():
    events = _events(_drawn(members=(A, B, D)), _drawn(block=22, members=(A, B, C), attempt=1), _posted(0), _posted(1), _posted(2, block=24),
                     (40, "Contested", {"round": 0, "slot": 2, "contestId": 3, "challenger": DISPATCHER, "contest_id": 3}))
    contests = [{"name": "ContestLost", "contest_id": 3, "block_number": 60, "args": {"contestId": 3, "party": B, "slashedWei": 1}}]
    rounds = compute_rounds(events)
    conduct = compute_conduct(events, contests, rounds, WORKER)
    assert conduct[B.lower()]["lie"] and "contest lost" in conduct[B.lower()]["label"]
    replaced = [s for s in rounds[0]["members"] if s["replaced"]]
    assert [s["node"] for s in replaced] == [D] and "nobody slashed" in conduct[D.lower()]["label"]


@pytest.mark.parametrize("attempt, then", [(0, "redrawn"), (PRESET.MAX_COMMITTEE_REDRAWS, "abandons the audit")])
def test_committing_names_the_members_without_a_receipt_and_the_commit_deadline(attempt, then):
    rounds = compute_rounds(_events(_drawn(attempt=attempt), _posted(1)))
    step = compute_next_step(_view(COMMITTING, attempt=attempt, commit_deadline=21), AUDIT, rounds, PRESET, head=15)
    assert step["steps"][0]["action"] == "postCommitteeReceipt" and step["steps"][0]["who"]["parties"] == [A, C]
    assert step["steps"][0]["by_block"] == 21 and then in step["then"] and "block 22" in step["then"]  # replaceMissing: TooEarly until deadline + 1


def test_opening_goes_challenge_then_worker_then_members_with_the_contract_s_windows():
    rounds = compute_rounds(_events(_drawn(), _posted(0), _posted(1), _posted(2), _opened(1, 1)))
    seed = 30 + PRESET.AUDIT_DRAW_DELAY_BLOCKS
    challenge = compute_next_step(_view(OPENING, challenge_drawn=False, worker_opened=False), AUDIT, rounds, PRESET, head=31)["steps"][0]
    assert (challenge["action"], challenge["from_block"], challenge["by_block"]) == ("drawChallenge", seed + 1, seed + PRESET.OPEN_WINDOW_BLOCKS)
    worker = compute_next_step(_view(OPENING, worker_opened=False), AUDIT, rounds, PRESET, head=35)
    assert worker["steps"][0]["who"]["parties"] == [WORKER] and worker["steps"][0]["by_block"] == seed + PRESET.OPEN_WINDOW_BLOCKS
    assert "defaults" in worker["then"]
    sealing = compute_next_step(_view(OPENING), AUDIT, rounds, PRESET, head=40)
    members = sealing["steps"][0]
    assert members["action"] == "sealVote" and members["who"]["parties"] == [B, C] and members["by_block"] == seed + 2 * PRESET.OPEN_WINDOW_BLOCKS
    assert f"block {seed + 3 * PRESET.OPEN_WINDOW_BLOCKS}" in sealing["then"] and "openAndVote" in sealing["then"]
    sealed = compute_rounds(_events(_drawn(), _posted(0), _posted(1), _posted(2), _opened(1, 1), _sealed(2), _sealed(3)))
    opening = compute_next_step(_view(OPENING), AUDIT, sealed, PRESET, head=41)["steps"][0]
    assert opening["action"] == "openAndVote" and opening["who"]["parties"] == [B, C] and opening["by_block"] == seed + 3 * PRESET.OPEN_WINDOW_BLOCKS
    assert [s["seal"] is not None for s in sealed[0]["members"]] == [False, True, True]
    # C never sealed and the seal window closed: B opens, then finalize waits for the openings' window to close
    one_sealed = compute_rounds(_events(_drawn(), _posted(0), _posted(1), _posted(2), _opened(1, 1), _sealed(2), _opened(2, 1, block=60)))
    late = compute_next_step(_view(OPENING), AUDIT, one_sealed, PRESET, head=61)
    assert late["steps"][0]["action"] == "finalize" and late["steps"][0]["from_block"] == seed + 3 * PRESET.OPEN_WINDOW_BLOCKS + 1
    assert "never sealed" in late["then"]
    everyone = compute_rounds(_events(_drawn(), _posted(0), _posted(1), _posted(2), _opened(1, 1), _opened(2, 1), _opened(3, 2)))
    final = compute_next_step(_view(OPENING), AUDIT, everyone, PRESET, head=40)["steps"][0]
    assert final["action"] == "finalize" and final["who"] == {"anyone": True, "usually": DISPATCHER} and final["from_block"] == 40


def test_decided_offers_disputes_until_the_window_closes_then_settlement():
    step = compute_next_step(_view(DECIDED, verdict_block=50), AUDIT, [], PRESET, head=55)
    dispute, settle = step["steps"]
    assert dispute["by_block"] == 50 + PRESET.DISPUTE_WINDOW_BLOCKS and "escalate" in dispute["what"]
    assert settle["action"] == "settle" and settle["from_block"] == 51 + PRESET.DISPUTE_WINDOW_BLOCKS
    second = compute_next_step(_view(DECIDED, round=1, pending_contests=2), AUDIT, [], PRESET, head=55)["steps"]
    assert "escalate" not in second[0]["what"] and "2 pending contests" in second[1]["what"]  # one escalation per audit


@pytest.mark.parametrize("round_index, requested, then", [(1, False, "first verdict stands"), (0, False, "dispatcher slashed"), (0, True, "nobody slashed")])
def test_drawing_draws_a_committee_from_the_blockhash_after_entry_or_lapses(round_index, requested, then):
    step = compute_next_step(_view(DRAWING, round=round_index, entered_block=60), {**AUDIT, "requested": requested}, [], PRESET, head=61)
    seed = 60 + PRESET.AUDIT_DRAW_DELAY_BLOCKS
    assert step["steps"][0]["action"] == "drawRound"
    assert step["steps"][0]["from_block"] == seed + 1 and step["steps"][0]["by_block"] == seed + PRESET.DRAW_WINDOW_BLOCKS
    assert f"block {seed + PRESET.DRAW_WINDOW_BLOCKS + 1}" in step["then"] and then in step["then"]


def test_a_private_draw_waits_for_its_dispatcher_s_reveal_and_names_the_fallback():
    import dataclasses
    view = dataclasses.replace(_view(DRAWING, entered_block=60), private_draw=True)
    step = compute_next_step(view, AUDIT, [], PRESET, head=61)
    reveal = step["steps"][0]
    assert reveal["action"] == "revealRound" and reveal["who"]["parties"] == [DISPATCHER]
    assert reveal["by_block"] == 60 + PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS
    assert "dispatcher is slashed" in step["then"] and "drawn publicly" in step["then"]
    # a late reveal is still the same draw (issue 34): the penalty until revealBy, the lapse only after it
    reveal_by = 60 + PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS + PRESET.PRIVATE_REVEAL_GRACE_BLOCKS
    assert f"from block {reveal_by + 1} anyone may call lapse" in step["then"] and f"{PRESET.MEMBER_PENALTY_BPS} bps" in step["then"]


def test_after_a_missed_private_draw_the_page_asks_for_the_worker_s_receipt_before_any_draw():
    import dataclasses
    view = dataclasses.replace(_view(DRAWING, entered_block=80), receipt_known=False)
    step = compute_next_step(view, AUDIT, [], PRESET, head=81)
    supply = step["steps"][0]
    assert supply["action"] == "supplyReceipt" and supply["who"]["anyone"]
    assert supply["by_block"] == 80 + PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS
    assert "abandoned" in step["then"]


def test_a_standing_claim_waits_for_the_worker_s_publication_or_its_default():
    step = compute_next_step(_view(COMMITTING, publish_deadline=44), AUDIT, [], PRESET, head=30)
    assert step["steps"][0]["action"] == "publishTranscript" and step["steps"][0]["who"]["parties"] == [WORKER]
    assert step["steps"][0]["by_block"] == 44 and "block 45" in step["then"] and "slashUndelivered" in step["then"]
    published = compute_next_step(_view(COMMITTING, publish_deadline=44, published=True), AUDIT, [], PRESET, head=30)
    assert published["steps"][0]["action"] == "postCommitteeReceipt"


@pytest.mark.parametrize("phase", [SETTLED, ABANDONED, LAPSED, 0])
def test_an_audit_that_is_over_has_no_next_step(phase):
    assert compute_next_step(_view(phase), AUDIT, [], PRESET, head=100) is None
