"""An audit's rounds as the contract saw them at one moment, rebuilt from events alone.

`compute_audit_record(auditor, audit_id, before)` returns the `verillm.spec.settlement`
`AuditRecord` that `Jobs` held just before event ``before``: each round's seats (the last
committee draw), who posted a receipt, who opened and how it voted, who was already slashed
by an adjudication or a lost contest (`Jobs.recordFault`), and whether the worker was. The
auditor then runs the spec's tally and settlement rules over it and compares them with the
`RoundDecided`, `AuditSettled` and `PartySlashed` events the contract emitted.
"""

from dataclasses import dataclass

from verillm.chain.events import ChainEvent
from verillm.spec import settlement as spec_settlement
from verillm.spec.constants import BPS

MEMBER_PENALTY_REASON = "missed opening or minority vote"  # Jobs._settleParties: one string for both
WORKER_SLASH_REASON = "failed audit"
WORKER_PENALTY_REASON = "overturned"  # an appeal's FAIL of a round 0 that did not fail the worker: the penalty (issue 34)


@dataclass(frozen=True)
class Fault:
    """A party slashed through Disputes before settlement: (round, slot), slot 0 = the worker."""

    round_index: int
    slot: int
    node: str
    how: str


def _key(event: ChainEvent) -> tuple[int, int]:
    return event.block_number, event.log_index


def compute_faults(auditor, audit_id: int, before: ChainEvent | None = None) -> list[Fault]:
    """Return every adjudication and lost contest of ``audit_id`` (before ``before``, if given)."""
    def earlier(e):
        return before is None or _key(e) < _key(before)

    faults = [Fault(e.args["round"], e.args["slot"], e.args["member"].lower(), "adjudicated: voted agree against its own posted data")
              for e in auditor.named("Adjudicated", auditId=audit_id) if earlier(e)]
    contests = {e.args["contestId"]: e for e in auditor.named("Contested", auditId=audit_id)}
    for lost in auditor.named("ContestLost"):
        contest = contests.get(lost.args["contestId"])
        if contest is not None and earlier(lost):
            faults.append(Fault(contest.args["round"], contest.args["slot"], lost.args["party"].lower(),
                                "lost a contest: could not prove its posted opening"))
    faults += [Fault(0, 0, e.args["worker"].lower(), "never published the job a member claimed (delivery default)")
               for e in auditor.named("DeliveryDefaulted", auditId=audit_id) if earlier(e)]
    return faults


def compute_round_record(auditor, audit_id: int, round_index: int, before: ChainEvent, faults: list[Fault]) -> spec_settlement.RoundRecord:
    """Return round ``round_index`` of ``audit_id`` as it stood just before ``before``."""
    def earlier(e):
        return _key(e) < _key(before) and e.args["round"] == round_index

    draws = [e for e in auditor.named("CommitteeDrawn", auditId=audit_id) if earlier(e)]
    seats = [m.lower() for m in draws[-1].args["members"]] if draws else []
    posted = {e.args["slot"] for e in auditor.named("CommitteeReceiptPosted", auditId=audit_id) if earlier(e)}
    opened = {e.args["slot"]: e.args["vote"] for e in auditor.named("Opened", auditId=audit_id) if earlier(e)}
    slashed = {f.slot for f in faults if f.round_index == round_index}
    members = tuple(spec_settlement.MemberRecord(node, posted=seat in posted, opened=seat + 1 in opened,
                                                 vote=opened.get(seat + 1, spec_settlement.NO_VOTE), slashed=seat + 1 in slashed)
                    for seat, node in enumerate(seats))
    return spec_settlement.RoundRecord(worker_opened=0 in opened, members=members)


def compute_audit_record(auditor, audit_id: int, worker: str, before: ChainEvent) -> spec_settlement.AuditRecord:
    """Return the audit as `Jobs` held it just before ``before`` (rounds 0 and, if escalated and not lapsed, 1)."""
    faults = compute_faults(auditor, audit_id, before)
    escalated = [e for e in auditor.named("EscalationStarted", auditId=audit_id) if _key(e) < _key(before)]
    lapsed = [e for e in auditor.named("EscalationLapsed", auditId=audit_id) if _key(e) < _key(before)]
    rounds = 2 if escalated and not lapsed else 1
    return spec_settlement.AuditRecord(
        worker=worker, rounds=tuple(compute_round_record(auditor, audit_id, r, before, faults) for r in range(rounds)),
        worker_slashed=any(f.slot == 0 for f in faults))


def compute_member_penalties(record: spec_settlement.AuditRecord, verdict: int) -> dict[str, str]:
    """Return the members `settle` penalises, each with which rule: "missed opening" or "minority vote"."""
    penalties = {}
    for round_ in record.rounds:
        for member in round_.members:
            slash_it, _ = spec_settlement.compute_member_judgement(round_, member, verdict)
            if slash_it:
                penalties[member.node] = "missed opening" if round_.worker_opened and not member.opened else "minority vote"
    return penalties


def is_slash_amount(slashed: ChainEvent, bps: int) -> bool:
    """Return whether a Registry `Slashed` event took ``bps`` of the stake the node held just before."""
    before = slashed.args["amountWei"] + slashed.args["stakeLeftWei"]
    return slashed.args["amountWei"] == before * bps // BPS
