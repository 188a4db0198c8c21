"""A dispatched job's verification, phase by phase, as read from its dispatcher's status route
(GET /v1/verillm/audits/{0xjob_hash}, node/dispatcher/status.py): nothing here is guessed, each
phase is a fact of that body, and the body's ids (batch, audit) can be checked on the contracts.

    served        the worker answered; its receipt waits for the dispatcher's next batch
    batched       the receipt is in a batch posted on-chain; the audit draw comes next
    drawn         the batch is drawn and no audit of this job has started (yet): unless one starts,
                  it is final once the start window closes
    draw_missed   the dispatcher let the draw window pass (it is slashable for that); no audit will start
    audit_started an audit started; its committee is being drawn
    committee     a committee is drawn: its members run the job, commit, then open and vote
    voting        members have opened their votes
    verified      the round passed the worker; the dispute window is open (an appeal may still overturn it)
    slashed       the worker failed the audit (or defaulted); final once the audit settles
    tie           the committee split evenly; another round or settlement follows
    abandoned     the committee never filled; nobody was slashed (final)
    final         nothing can change it any more: settled as passed, or never selected for audit

`is_final` says when the status can no longer change; `compute_outcome` names how it ended. Each
phase also carries the contract deadline it waits on (``phase_ends_block``, named by ``deadline``) and
the latest block the job is final by, as the status body gives them (node/dispatcher/status.py,
verillm/spec/deadlines.py), and the time left to them, estimated from the node's seconds per block.
"""

from dataclasses import dataclass, field

from verillm.spec.settlement import VERDICT_NAMES

FINAL_AUDIT_STATES = ("settled", "abandoned")

PASSED, SLASHED, UNDECIDED = "passed", "slashed", "undecided"
"""How a final job ended: the worker passed (or was never audited), was slashed, or nothing was decided about it."""


def is_final(body: dict) -> bool:
    """Whether a status body can no longer change: ``final``, or its audit settled or abandoned."""
    audit = body.get("audit")
    return body.get("status") == "final" or (isinstance(audit, dict) and audit.get("status") in FINAL_AUDIT_STATES)


@dataclass(frozen=True)
class JobPhase:
    """One phase of a job's verification: its ``name`` (above), a line saying what it means here, whether
    the status can no longer change, the head block the dispatcher read it at and the body it was read
    from (two reads are the same phase when name, detail, finality and deadline agree: the head moves on)."""

    name: str
    detail: str
    final: bool
    head: int | None = field(default=None, compare=False)
    status: dict = field(default_factory=dict, compare=False, repr=False)
    deadline: str | None = None
    """The contract deadline this phase waits on (batch_by, draw_by, start_by, round_draw_by, reveal_by,
    publish_by, commit_by, worker_open_by, members_open_by, dispute_by); None once final."""
    phase_ends_block: int | None = None
    """The last block of that deadline's window: the phase ends by then (or, past it, at the next call)."""
    final_by_block: int | None = field(default=None, compare=False)
    """The latest block the job is final by, whatever every party does (the audit span of the timeline)."""
    seconds_per_block: float | None = field(default=None, compare=False)
    """The dispatcher's measured mean block interval over its last blocks."""

    @property
    def blocks_left(self) -> int | None:
        """Blocks from the head the phase was read at to ``phase_ends_block`` (0 once passed); None if unknown."""
        return _blocks_left(self.phase_ends_block, self.head)

    @property
    def seconds_left(self) -> float | None:
        """An ESTIMATE of the seconds left in this phase: ``blocks_left`` × the node's measured seconds per
        block (blocks come as fast as the chain mines them, not on a clock); None if either is unknown."""
        return _seconds(self.blocks_left, self.seconds_per_block)

    @property
    def final_blocks_left(self) -> int | None:
        """Blocks from the head to ``final_by_block``: the most the job can still take."""
        return _blocks_left(self.final_by_block, self.head)

    @property
    def final_seconds_left(self) -> float | None:
        """An ESTIMATE of the most seconds the job can still take to be final (as ``seconds_left``)."""
        return _seconds(self.final_blocks_left, self.seconds_per_block)

    def line(self) -> str:
        """``[block 123] batched: ...; draw by: ~14 s left (block 130); final by block 580 at the latest`` (what
        `verillm complete --wait` prints)."""
        at = f"[block {self.head}] " if self.head is not None else ""
        return f"{at}{self.name}{' (final)' if self.final and self.name != 'final' else ''}: {self.detail}{self._left()}"

    def _left(self) -> str:
        if self.final or self.phase_ends_block is None:
            return ""
        left = f"~{self.seconds_left:.0f} s left" if self.seconds_left is not None else f"{self.blocks_left} blocks left"
        final = f"; final by block {self.final_by_block} at the latest" if self.final_by_block is not None else ""
        waits = f"{self.deadline.replace('_', ' ')}: " if self.deadline else ""
        return f"; {waits}{left} (block {self.phase_ends_block}){final}"


def _blocks_left(block: int | None, head: int | None) -> int | None:
    return None if block is None or head is None else max(0, block - head)


def _seconds(blocks: int | None, seconds_per_block: float | None) -> float | None:
    return None if blocks is None or seconds_per_block is None else blocks * seconds_per_block


def compute_phase(body: dict) -> JobPhase:
    """Return the phase a status body shows."""
    name, detail = _name_and_detail(body)
    return JobPhase(name, detail, is_final(body), body.get("head"), body, body.get("phase_deadline"), body.get("phase_ends_block"),
                    body.get("final_by_block"), body.get("seconds_per_block"))


def compute_outcome(body: dict) -> str:
    """How a final job ended: PASSED (final: passed its audit, or never selected), SLASHED, or UNDECIDED (tie, abandoned)."""
    status = body.get("status")
    if status == "final":
        return PASSED
    return SLASHED if status == "slashed" else UNDECIDED


def _name_and_detail(body: dict) -> tuple[str, str]:
    status, batch, audit = body.get("status"), body.get("batch") or {}, body.get("audit") or {}
    if status == "dispatched":
        return "served", f"worker {body.get('worker')} answered; its receipt waits for the dispatcher's next batch"
    if status == "committed":
        return _batch_phase(batch)
    if status == "audited":
        return _audit_phase(audit)
    if status == "final":
        return "final", ("passed " + _audit_ref(audit) + "; settled" if audit else
                         f"never selected for audit, and batch {batch.get('batch_id')}'s start window has closed")
    if status == "verified":
        return "verified", f"the committee passed the worker ({_votes(audit)}); the dispute window is open"
    if status == "slashed":
        return "slashed", f"the worker failed {_audit_ref(audit)} ({_votes(audit)}){_settled(audit)}"
    if status == "tie":
        return "tie", f"the committee split evenly in {_audit_ref(audit)}{_settled(audit)}"
    if status == "abandoned":
        return "abandoned", f"{_audit_ref(audit)}: the committee never filled; nobody was slashed"
    return str(status), f"status {status!r}"


def _batch_phase(batch: dict) -> tuple[str, str]:
    where = f"batch {batch.get('batch_id')} (leaf {batch.get('index')}), posted at block {batch.get('posted_block')}"
    if batch.get("status") == "missed":
        return "draw_missed", f"{where}: the dispatcher missed the draw window; no audit will start"
    if batch.get("status") in ("drawn", "started"):
        return "drawn", f"{where} is drawn; no audit of this job has started (yet): unless one starts, it is final once the start window closes"
    return "batched", f"in {where}; the audit draw comes next"


def _audit_phase(audit: dict) -> tuple[str, str]:
    committee, votes = audit.get("committee") or [], audit.get("votes") or {}
    if votes:
        return "voting", f"{len(votes)} of {len(committee)} members of {_audit_ref(audit)} have opened their votes"
    if committee:
        return "committee", f"{_audit_ref(audit)}: committee of {len(committee)} drawn; its members run the job and commit"
    return "audit_started", f"{_audit_ref(audit)} started; its committee is being drawn"


def _audit_ref(audit: dict) -> str:
    return f"audit {audit.get('audit_id')}"


def _votes(audit: dict) -> str:
    votes = list((audit.get("votes") or {}).values())
    verdict = VERDICT_NAMES.get(audit.get("round_verdict"), "no verdict")
    return f"round verdict {verdict}, {len(votes)} votes opened"


def _settled(audit: dict) -> str:
    return "; settled" if audit.get("status") in FINAL_AUDIT_STATES else "; final once the audit settles"
