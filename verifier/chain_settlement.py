"""An audit's rounds as the contract saw them at one moment, rebuilt from events alone.

`compute_audit_record(auditor, audit_id, before)` returns the `verillm.spec.settlement`
`AuditRecord` that `Jobs` held just before event ``before``: each round's seats (the last
committee draw), who posted a receipt, who opened and how it voted, who was already slashed
by an adjudication or a lost contest (`Jobs.recordFault`), and whether the worker was. The
auditor then runs the spec's tally and settlement rules over it and compares them with the
`RoundDecided`, `AuditSettled` and `PartySlashed` events the contract emitted
(`check_decisions`, `check_settlement`, `check_unsettled`: the auditor's findings on them).
"""

from dataclasses import dataclass

from verillm.chain.events import ChainEvent
from verillm.chain.protocol import PHASE_NAMES
from verillm.spec.outcome import MEMBER_PENALTY_RULE, OVERTURNED_RULE
from verillm.spec import settlement as spec_settlement
from verillm.spec.constants import BPS

MEMBER_PENALTY_REASON = MEMBER_PENALTY_RULE  # Jobs._settleParties: one string for both
WORKER_SLASH_REASON = "failed audit"
WORKER_PENALTY_REASON = OVERTURNED_RULE  # an appeal's FAIL of a round 0 that did not fail the worker: the penalty (issue 34)
ABANDONED_PHASE = next(code for code, name in PHASE_NAMES.items() if name == "abandoned")


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


def check_decisions(auditor, audit_id: int, worker: str) -> None:
    """Every RoundDecided: the tally of the members that opened and were not slashed, and its verdict."""
    for event in auditor.named("RoundDecided", auditId=audit_id):
        round_index = event.args["round"]
        record = compute_audit_record(auditor, audit_id, worker, event)
        round_ = compute_round_record(auditor, audit_id, round_index, event, compute_faults(auditor, audit_id, event))
        agree, disagree = spec_settlement.compute_tally(round_)
        verdict = spec_settlement.compute_round_verdict(record, round_)
        got = (event.args["verdict"], event.args["agree"], event.args["disagree"])
        auditor._add(got == (verdict, agree, disagree), f"audit {audit_id} round {round_index}",
                     f"decided {spec_settlement.VERDICT_NAMES[verdict]}, {agree} agree / {disagree} disagree, as the votes tally",
                     f"decided {got}, but the votes tally to {(verdict, agree, disagree)}")


def check_settlement(auditor, audit_id: int, worker: str) -> None:
    settled = auditor.named("AuditSettled", auditId=audit_id)
    if not settled:
        return check_unsettled(auditor, audit_id)
    subject, event = f"audit {audit_id}", settled[0]
    record = compute_audit_record(auditor, audit_id, worker, event)
    verdict = spec_settlement.compute_round_verdict(record, record.rounds[-1])
    name = spec_settlement.VERDICT_NAMES.get(event.args["verdict"], str(event.args["verdict"]))
    auditor._add(event.args["verdict"] == verdict, subject, f"settled {name}: the final round's verdict over the votes still counted",
                 f"settled {name}, but the final round's votes give {spec_settlement.VERDICT_NAMES.get(verdict, verdict)}")
    at_settle = [e for e in auditor.named("PartySlashed", auditId=audit_id) if e.tx_hash == event.tx_hash]
    penalties = compute_member_penalties(record, event.args["verdict"])
    penalised_nodes = {e.args["node"].lower() for e in at_settle if e.args["reason"] == MEMBER_PENALTY_REASON}
    auditor._add(penalised_nodes == set(penalties), subject, f"members penalised at settlement: {_list(penalties) or 'none'}",
                 f"members penalised {sorted(penalised_nodes)}, but the rules penalise {_list(penalties) or 'none'}")
    convicted = event.args["verdict"] in (spec_settlement.FAIL, spec_settlement.WORKER_DEFAULT) and not record.worker_slashed
    # An appeal's FAIL of a round 0 that did not fail it: the penalty, "overturned" (Proportionality)
    reason = WORKER_PENALTY_REASON if spec_settlement.is_worker_penalty_only(record, event.args["verdict"]) else WORKER_SLASH_REASON
    worker_slashed = any(e.args["node"].lower() == worker and e.args["reason"] == reason for e in at_settle)
    auditor._add(worker_slashed == convicted, subject, "the worker is slashed exactly when the verdict fails it", "worker slashing disagrees with the verdict")
    _check_amounts(auditor, subject, event, at_settle, worker)


def _check_amounts(auditor, subject: str, settled: ChainEvent, at_settle: list[ChainEvent], worker: str) -> None:
    taken = [e for e in auditor.named("Slashed") if e.tx_hash == settled.tx_hash]
    penalty_bps = min(auditor.preset.MEMBER_PENALTY_BPS, auditor.preset.SLASH_FRACTION_BPS)
    for event in at_settle:
        node = event.args["node"].lower()
        bps = auditor.preset.SLASH_FRACTION_BPS if node == worker and event.args["reason"] == WORKER_SLASH_REASON else penalty_bps
        match = [t for t in taken if t.args["node"].lower() == node and t.args["amountWei"] == event.args["amountWei"]]
        auditor._add(bool(match) and is_slash_amount(match[0], bps), subject, f"{node} lost {bps / 100:g}% of its stake ({_eth(event.args['amountWei'])})",
                     f"{node} lost {_eth(event.args['amountWei'])}, not {bps / 100:g}% of the stake it held")


def _list(penalties: dict[str, str]) -> str:
    return ", ".join(f"{node} ({why})" for node, why in sorted(penalties.items()))


def check_unsettled(auditor, audit_id: int) -> None:
    """An audit with no AuditSettled: abandoned (who was slashed for it), or still open (its phase)."""
    subject = f"audit {audit_id}"
    state = auditor.protocol.get_audit(audit_id)
    abandoned = auditor.named("AuditAbandoned", auditId=audit_id)
    if not abandoned:
        return auditor._note(subject, f"not settled yet: {auditor.states[audit_id]}")
    round_index = abandoned[-1].args["round"]
    slashes = [e for e in auditor.named("PartySlashed", auditId=audit_id) if e.tx_hash == abandoned[-1].tx_hash]
    named = "; ".join(f"{e.args['node']} ({e.args['reason']}, {_eth(e.args['amountWei'])})" for e in slashes) or "nobody"
    if round_index > 0:  # an escalation that could not be staffed lapses: round 0's verdict stands
        return auditor._note(subject, f"abandoned: escalation round {round_index} could not be staffed and lapsed; slashed {named}")
    # docs/protocol.md §12: a round that cannot be staffed ends with nobody slashed (issue 9); a
    # selected audit whose committee nobody drew slashes its dispatcher (issue 20: the draw was its duty).
    if abandoned[-1].args["reason"] == "committee never drawn":
        dispatcher = auditor.protocol.get_audit(audit_id).dispatcher.lower()
        return auditor._add(state.phase == ABANDONED_PHASE and all(e.args["node"].lower() == dispatcher for e in slashes), subject,
                            f"abandoned: its committee was never drawn; slashed {named}", f"abandoned undrawn but others were slashed: {named}")
    auditor._add(state.phase == ABANDONED_PHASE and not slashes, subject,
                 "abandoned: no full committee could be drawn in round 0; nobody slashed for it",
                 f"abandoned in round 0 but parties were slashed for it: {named}")


def _eth(wei: int) -> str:
    return f"{wei / 1e18:g} ETH"
