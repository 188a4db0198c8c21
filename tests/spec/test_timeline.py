"""One timeline (docs/protocol.md §12 "One timeline"): every window of the protocol composed once
(`verillm.spec.params.compute_timeline`, the twin of contracts/src/Params.sol `timeline`), and the
epoch and unbonding lengths validated against the longest path through it.

The property test walks the rules themselves, not the formula: a round, then an audit (a round,
an escalation at the last block of the dispute window, a second round, a contest answered at the
end of its proof window), then a leaver's last audit, with every party's timing drawn by
hypothesis anywhere inside its window (the window-edge timer included), one claim per round in
any attempt, published at any block or never, redraws at the first block after each deadline
(an honest party). Over random window sets, whenever the contracts would accept the preset:
every draw of a round falls within one epoch of its entry (readable: no redraw becomes an
abandonment at an epoch boundary, wherever in its epoch the round began), and every duty of a
node that unbonds ends before it may withdraw. And the bound is reached: the all-edges path
draws at exactly the round's draw span.
"""

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from verillm.spec.params import MAINNET, MINIMAL, Preset, compute_leaver_schedule, compute_timeline, compute_timeline_problems


def test_the_spans_hand_checked_on_minimal_and_mainnet():
    # MINIMAL: delay 1, draw 10, start 80, commit 20, open 20, dispute 10, proof 5, 1 redraw, horizon 30
    t = compute_timeline(MINIMAL)
    assert t.private_fallback == 1 + 10 + 10 + 1 == 22  # a private draw missed: its window, its reveal grace, the lapse
    assert t.round_draw_span == 22 + 1 + 10 + 1 * 21 + 40 == 94
    assert t.round_span == 94 + 20 + 1 + 3 * 20 + 1 == 176  # three open windows: the worker's, the seals, their openings
    # the appeal and its decider are drawn publicly; the decider waits out a contest of the appeal
    assert t.audit_span == 3 * (176 + 10) - 2 * 22 + 2 * (5 + 1) == 526
    assert t.leaver_duty_span == 30 + (1 + 10 + 80) + 526 == 647 <= MINIMAL.UNBONDING_BLOCKS == 670
    assert t.receipt_duty_span == 200 + 526 == 726 and MINIMAL.RECEIPT_HORIZON_BLOCKS - (30 + 91) == 79  # the lag tolerated
    t = compute_timeline(MAINNET)  # delay 2, draw 100, start 100, commit 50, open 50, dispute 100, proof 50, 2 redraws, horizon 300
    assert t.private_fallback == 2 + 100 + 100 + 1 == 203  # grace 100
    assert (t.round_draw_span, t.round_span, t.audit_span, t.leaver_duty_span) == (507, 710, 2126, 2628)
    assert t.receipt_duty_span == 600 + 2126 and MAINNET.RECEIPT_HORIZON_BLOCKS - (300 + 202) == 98
    assert MAINNET.EPOCH_BLOCKS - t.round_draw_span == 93  # the slack a late redraw has (docs/protocol.md §12)


def test_a_leaver_is_told_the_block_its_duties_end():
    plan = compute_leaver_schedule(1_000, MINIMAL)
    assert plan.duties_end_block == 1_647 <= plan.withdraw_from_block == 1_670
    assert plan.last_start_block == 1_000 + 30 + 91 and plan.seated_until_block == 1_000 - 1 - 1 + 94


# --- the walk ------------------------------------------------------------------------------------

def walk_round(p: Preset, entered: int, pick, private: bool = False) -> dict:
    """One round entered at ``entered``, every adversarial timing from ``pick(lo, hi)`` (an int
    in [lo, hi]) and ``pick(0, 1)`` for a choice. Returns its draw blocks and how it ended. A
    ``private`` first round may see its dispatcher reveal late (in its grace, the same draw) or never:
    lapsed the block after the grace, it is entered again there for a public draw (the weights still
    those of its entry)."""
    commit = p.COMMIT_WINDOW_BLOCKS
    private_end = pick(0, 2) if private else 0  # 0: drawn in its window, 1: revealed in its grace, 2: never revealed
    if private_end == 2:
        entered = entered + p.AUDIT_DRAW_DELAY_BLOCKS + p.DRAW_WINDOW_BLOCKS + p.PRIVATE_REVEAL_GRACE_BLOCKS + 1
    if private_end == 1:
        draws = [entered + p.AUDIT_DRAW_DELAY_BLOCKS + p.DRAW_WINDOW_BLOCKS + pick(1, p.PRIVATE_REVEAL_GRACE_BLOCKS)]
    else:
        draws = [entered + p.AUDIT_DRAW_DELAY_BLOCKS + pick(1, p.DRAW_WINDOW_BLOCKS)]  # drawRound, anyone, in its window
    deadline = draws[0] + commit
    claim_window = None  # the round's one publish deadline
    for attempt in range(p.MAX_COMMITTEE_REDRAWS + 1):
        if claim_window is None and pick(0, 1):  # a member (a false claimant too) claims in this attempt
            claim = pick(draws[-1], deadline)
            claim_window = claim + commit
            deadline = max(deadline, claim_window + commit)
            if not pick(0, 1):  # never published: the worker defaults the block after the window
                return {"draws": draws, "verdict": claim_window + 1}
            deadline = max(deadline, pick(claim, claim_window) + commit)
        if pick(0, 1):  # every receipt in: ready at the block the last one lands
            ready = pick(draws[-1], deadline)
            worker_open_by = ready + p.AUDIT_DRAW_DELAY_BLOCKS + p.OPEN_WINDOW_BLOCKS
            # finalize: every member opened its sealed vote, or after the windows (the seals', then their openings')
            verdict = pick(ready + 1, worker_open_by + 2 * p.OPEN_WINDOW_BLOCKS + 1)
            return {"draws": draws, "verdict": verdict}
        if attempt == p.MAX_COMMITTEE_REDRAWS:
            return {"draws": draws, "verdict": None, "abandoned": deadline + 1}
        draws.append(deadline + 1)  # an honest party redraws at the first block it may
        deadline = draws[-1] + commit
    raise AssertionError("unreachable")


def walk_audit(p: Preset, started: int, pick) -> dict:
    """An audit from its start: round 0, an escalation at any block of the dispute window, round 1,
    its decider (round 2) when it contradicted round 0,
    a contest at the end of the dispute window answered or resolved at the end of its proof window."""
    first = walk_round(p, started, pick, private=True)
    rounds = [first]
    end = first.get("abandoned") or first["verdict"] + p.DISPUTE_WINDOW_BLOCKS + 1
    if first["verdict"] is not None and pick(0, 1):
        escalated = pick(first["verdict"], first["verdict"] + p.DISPUTE_WINDOW_BLOCKS)
        if pick(0, 1):  # nobody draws round 1: it lapses, round 0 settles
            end = max(end, escalated + p.AUDIT_DRAW_DELAY_BLOCKS + p.DRAW_WINDOW_BLOCKS + 1)
        else:
            second = walk_round(p, escalated, pick)
            rounds.append(second)
            end = second.get("abandoned") or second["verdict"] + p.DISPUTE_WINDOW_BLOCKS + 1
            if second["verdict"] is not None and pick(0, 1):  # the appeal contradicted round 0: settling it enters the decider
                contested = pick(0, 1)  # a contest in the appeal's last dispute block holds that settle to its proof window's end
                entered = second["verdict"] + p.DISPUTE_WINDOW_BLOCKS + 1 + (p.PROOF_WINDOW_BLOCKS + 1 if contested else 0)
                if pick(0, 1):  # nobody draws the decider: it lapses, the audit is abandoned
                    end = entered + p.AUDIT_DRAW_DELAY_BLOCKS + p.DRAW_WINDOW_BLOCKS + 1
                else:
                    third = walk_round(p, entered, pick)
                    rounds.append(third)
                    end = third.get("abandoned") or third["verdict"] + p.DISPUTE_WINDOW_BLOCKS + 1
    last = rounds[-1]
    if last["verdict"] is not None and pick(0, 1):  # a contest in the last block of the dispute window
        end = max(end, last["verdict"] + p.DISPUTE_WINDOW_BLOCKS + p.PROOF_WINDOW_BLOCKS + 1)
    return {"rounds": rounds, "end": end}


def _windows():
    small = st.integers(1, 60)
    return st.builds(
        lambda delay, draw, start, commit, opening, dispute, proof, redraws, horizon, epoch_extra, unbond_extra, receipt_extra, grace: _sized(
            MINIMAL.replace(AUDIT_DRAW_DELAY_BLOCKS=delay, DRAW_WINDOW_BLOCKS=draw, PRIVATE_REVEAL_GRACE_BLOCKS=grace,
                            START_WINDOW_BLOCKS=start, COMMIT_WINDOW_BLOCKS=commit,
                            OPEN_WINDOW_BLOCKS=opening, DISPUTE_WINDOW_BLOCKS=dispute, PROOF_WINDOW_BLOCKS=proof,
                            MAX_COMMITTEE_REDRAWS=redraws, AUDIT_HORIZON_BLOCKS=max(horizon, MINIMAL.BATCH_BY_BLOCKS)),
            epoch_extra, unbond_extra, receipt_extra),
        st.integers(1, 8), st.integers(1, 255), small, small, st.integers(1, 255), small, small, st.integers(0, 4), st.integers(0, 90),
        st.integers(-40, 40), st.integers(-40, 40), st.integers(-10, 60), st.integers(1, 120))


def _sized(p: Preset, epoch_extra: int, unbond_extra: int, receipt_extra: int = 0) -> Preset:
    """``p`` with an epoch, unbonding period and receipt horizon near the least the timeline needs (some below it)."""
    t = compute_timeline(p)
    epoch = max(1, t.round_draw_span + epoch_extra)
    receipt = max(1, p.BATCH_BY_BLOCKS + t.start_span + receipt_extra)
    return p.replace(EPOCH_BLOCKS=epoch, RECEIPT_HORIZON_BLOCKS=receipt,
                     UNBONDING_BLOCKS=max(1, t.leaver_duty_span + unbond_extra, 2 * epoch, p.BATCH_BY_BLOCKS + p.OMISSION_CLAIM_WINDOW_BLOCKS + 1))


@settings(max_examples=400, deadline=None)
@given(p=_windows(), data=st.data(), offset=st.integers(0, 10_000))
def test_every_draw_falls_in_a_readable_epoch_and_every_leaver_duty_ends_before_its_withdrawal(p, data, offset):
    t = compute_timeline(p)
    valid = not compute_timeline_problems(p)
    pick = lambda lo, hi: data.draw(st.integers(lo, hi))  # noqa: E731
    # a round entered anywhere in its epoch, its last block included
    entered = offset * p.EPOCH_BLOCKS + p.EPOCH_BLOCKS - 1 - data.draw(st.integers(0, p.EPOCH_BLOCKS - 1))
    walked = walk_round(p, entered, pick, private=True)
    assert max(walked["draws"]) - entered <= t.round_draw_span  # the composed span bounds every path
    readable = all(b // p.EPOCH_BLOCKS <= entered // p.EPOCH_BLOCKS + 1 for b in walked["draws"])
    if valid:
        assert readable, (p, entered, walked)  # an epoch boundary never turns a redraw into an abandonment
    if walked["verdict"] is not None:
        assert walked["verdict"] - entered <= t.round_span
    # a leaver's last audit: its batch posted at the horizon's edge, drawn and started at the windows' ends
    left = data.draw(st.integers(1, 10_000))
    posted = left + pick(0, p.AUDIT_HORIZON_BLOCKS)
    drawn = posted + p.AUDIT_DRAW_DELAY_BLOCKS + pick(1, p.DRAW_WINDOW_BLOCKS)
    started = drawn + pick(0, p.START_WINDOW_BLOCKS)
    audit = walk_audit(p, started, pick)
    assert audit["end"] - started <= t.audit_span
    assert audit["end"] <= compute_leaver_schedule(left, p).duties_end_block
    if valid:
        assert audit["end"] <= left + p.UNBONDING_BLOCKS  # it withdraws with no audit holding it
    # a receipt's audit: signed at S (horizon S + RECEIPT_HORIZON_BLOCKS), promised at any later head
    # the dispatcher and client accept (the horizon reaches the promise + the start span), batched
    # by the promise, drawn and started at the windows' ends
    signed = data.draw(st.integers(0, 10_000))
    until = signed + p.RECEIPT_HORIZON_BLOCKS
    lag = pick(0, max(0, p.RECEIPT_HORIZON_BLOCKS - p.BATCH_BY_BLOCKS - t.start_span))
    posted = signed + lag + pick(1, p.BATCH_BY_BLOCKS)
    started = posted + p.AUDIT_DRAW_DELAY_BLOCKS + pick(1, p.DRAW_WINDOW_BLOCKS) + pick(0, p.START_WINDOW_BLOCKS)
    if valid:
        assert started <= until, (p, signed, lag, posted, started)  # a receipt batched in time is always auditable
    if started <= until:
        assert walk_audit(p, started, pick)["end"] <= signed + t.receipt_duty_span  # the worker's duties end there


@settings(max_examples=200, deadline=None)
@given(p=_windows())
def test_the_all_edges_path_reaches_the_bound(p):
    """The adversary at every edge: a private draw never revealed (not in its grace either), the public draw at its window's last block, a false claim at the
    last block of the first commit window, the publication at the last block of the publish
    window, the seat withheld through every redraw. The last draw lands exactly at the composed
    draw span: the bound is reached, not merely an upper bound (with at least one redraw; with
    none, no claim can push a draw and the span is 2 commit windows loose)."""
    assume(p.MAX_COMMITTEE_REDRAWS > 0)
    script = iter([2, "hi", 1, "hi", 1, "hi"] + [0] * (p.MAX_COMMITTEE_REDRAWS + 1))
    walked = walk_round(p, 0, lambda lo, hi: hi if (step := next(script)) == "hi" else step, private=True)
    assert max(walked["draws"]) == compute_timeline(p).round_draw_span, walked
