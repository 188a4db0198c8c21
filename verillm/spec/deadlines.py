"""The deadline each step of a job's verification waits on, and the latest block the job is final
by, as the contracts enforce them (docs/protocol.md §12 "One timeline"):

    served     the dispatcher's promise: its batch posted by batchByBlock (Coverage: an omission is slashed)
    batched    the batch's draw: by posted + AUDIT_DRAW_DELAY_BLOCKS + DRAW_WINDOW_BLOCKS (Batches.drawAudit)
    drawn      its audits' starts: by drawn + START_WINDOW_BLOCKS (Batches._admit); none started: final after it
    audited    the current round's deadline as Jobs computes it (`RoundState.deadlines`, Jobs._deadlines):
               the draw (the reveal of a private one), the publication a claim waits on or the commit
               deadline, the worker's opening, the members' openings, the dispute window
    final by   no audit of the receipt starts after its auditableUntilBlock, nor after its batch's start
               window; a started audit settles within `Timeline.audit_span` of its start

Windows are "(a, b]": ``block`` is the last block the step may land in. Each window is read from the
preset or the contract's own deadlines and composed once, by `compute_timeline`; the dispatcher's
batch draw and the status route both take them from here.
"""

from dataclasses import dataclass

from verillm.spec.audit import Phase, RoundState, is_claim_standing
from verillm.spec.params import Preset, compute_timeline


@dataclass(frozen=True)
class Deadline:
    """A contract deadline: ``name`` says which (batch_by, draw_by, start_by, round_draw_by, reveal_by,
    publish_by, commit_by, worker_open_by, members_open_by, dispute_by), ``block`` the last block of its window."""

    name: str
    block: int


def compute_batch_draw_by(posted_block: int, p: Preset) -> int:
    """Return the last block a batch posted in ``posted_block`` may be drawn in (Batches.drawAudit: its
    seed block is posted + delay; a draw later than seed + DRAW_WINDOW_BLOCKS is refused, and slashed)."""
    return posted_block + p.AUDIT_DRAW_DELAY_BLOCKS + p.DRAW_WINDOW_BLOCKS


def compute_batch_start_by(drawn_block: int, p: Preset) -> int:
    """Return the last block an audit of a batch drawn in ``drawn_block`` may start in (Batches._admit)."""
    return drawn_block + p.START_WINDOW_BLOCKS


def compute_round_deadline(state: RoundState) -> Deadline | None:
    """Return the deadline the round's current phase waits on (after it, a permissionless call moves
    the round on: `compute_due_steps`); None once the round is over (settled, abandoned, lapsed)."""
    d = state.deadlines
    if state.phase == Phase.DRAWING:
        return Deadline("reveal_by", d.reveal_by) if state.private_draw else Deadline("round_draw_by", d.draw_by)
    if state.phase == Phase.COMMITTING:
        return Deadline("publish_by", state.publish_deadline) if is_claim_standing(state) else Deadline("commit_by", d.commit_by)
    if state.phase == Phase.OPENING:
        return Deadline("members_open_by", d.members_open_by) if state.worker_opened else Deadline("worker_open_by", d.worker_open_by)
    if state.phase == Phase.DECIDED:
        return Deadline("dispute_by", d.dispute_by)
    return None


def compute_final_by_unstarted(auditable_until_block: int, posted_block: int | None, drawn_block: int | None, p: Preset) -> int:
    """Return the latest block a job whose audit has not started is final by: an audit starting at the
    last block it may start in, settled at the end of the audit span."""
    t = compute_timeline(p)
    last_start = auditable_until_block
    if drawn_block is not None:
        last_start = min(last_start, compute_batch_start_by(drawn_block, p))
    elif posted_block is not None:
        last_start = min(last_start, posted_block + t.start_span)
    return last_start + t.audit_span


def compute_final_by_started(started_block: int, p: Preset) -> int:
    """Return the latest block an audit started in ``started_block`` settles by (`Timeline.audit_span`)."""
    return started_block + compute_timeline(p).audit_span
