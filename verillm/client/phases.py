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

`is_final` says when the status can no longer change; `compute_outcome` names how it ended.
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
    from (two reads are the same phase when name, detail and finality agree: the head moves on)."""

    name: str
    detail: str
    final: bool
    head: int | None = field(default=None, compare=False)
    status: dict = field(default_factory=dict, compare=False, repr=False)

    def line(self) -> str:
        """``[block 123] batched: ...`` (what `verillm complete --wait` prints)."""
        at = f"[block {self.head}] " if self.head is not None else ""
        return f"{at}{self.name}{' (final)' if self.final and self.name != 'final' else ''}: {self.detail}"


def compute_phase(body: dict) -> JobPhase:
    """Return the phase a status body shows."""
    name, detail = _name_and_detail(body)
    return JobPhase(name, detail, is_final(body), body.get("head"), body)


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
