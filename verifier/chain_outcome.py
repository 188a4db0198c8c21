"""What `verillm audit chain` says each audit came to: `verillm.spec.outcome` over the chain's events,
rendered as the report's state line, its `caught` lines (every slash with node, rule and amount)
and the `--json` body. The same derivation backs the status body, the explorer and the devnet.
"""

from verillm.chain.events import ChainEvent
from verillm.spec.outcome import AuditOutcome, EventRecord, Slash, compute_audit_outcome, compute_counted_tally, compute_eth_text, compute_outcome_dict, compute_tx_key

WEI_PER_ETH = 10**18


def compute_event_record(event: ChainEvent) -> EventRecord:
    return EventRecord(event.name, dict(event.args), event.block_number, event.log_index, compute_tx_key(event.tx_hash))


def get_audit_records(events: list[ChainEvent], audit_id: int) -> list[EventRecord]:
    """The events `compute_audit_outcome` reads for ``audit_id``: those carrying its id, its contests'
    `ContestLost` (they name no audit) and the Registry's `Slashed` of the same transactions."""
    own = [e for e in events if e.args.get("auditId") == audit_id]
    contests = {e.args["contestId"] for e in own if e.name == "Contested"}
    txs = {e.tx_hash for e in own}
    lost = [e for e in events if e.name == "ContestLost" and e.args["contestId"] in contests]
    taken = [e for e in events if e.name == "Slashed" and e.tx_hash in txs | {e.tx_hash for e in lost}]
    return [compute_event_record(e) for e in own + lost + taken]


def compute_outcome(events: list[ChainEvent], audit_id: int) -> AuditOutcome:
    return compute_audit_outcome(get_audit_records(events, audit_id))


def format_amount(wei: int | None) -> str:
    """An amount in ETH and in wei (exact)."""
    if wei is None:
        return "amount not recorded"
    return f"{compute_eth_text(wei)} ETH = {wei} wei"


def _tally(outcome: AuditOutcome) -> str:
    parts = []
    for decision in outcome.rounds:
        agree, disagree = compute_counted_tally(outcome, decision.round_index)
        lies = [v for v in outcome.votes if v.round_index == decision.round_index and v.lie]
        parts.append(f"round {decision.round_index}: {agree} agree / {disagree} disagree counted"
                     + (f", {len(lies)} vote{'s' * (len(lies) > 1)} proven a lie ({', '.join(v.node for v in lies)})" if lies else ""))
    return "; ".join(parts)


def _eth(wei: int | None) -> str:
    return "amount not recorded" if wei is None else f"{compute_eth_text(wei)} ETH"


def format_state(outcome: AuditOutcome, open_phase: str | None = None) -> str:
    """One audit's line: its state and verdict, every slash and penalty with its amount, and the
    votes each round counted (a vote proven a lie does not count, and is named)."""
    convictions = [s for s in outcome.slashes if not s.penalty]
    penalties = [s for s in outcome.slashes if s.penalty]
    if outcome.state == "settled":
        parts = [f"settled: {outcome.verdict}"]
    elif outcome.state == "abandoned":
        parts = [f"abandoned in round {outcome.abandoned_round}"]
    else:
        parts = [f"open: {open_phase or 'in progress'}"]
    if outcome.state != "open" or convictions:
        parts.append("slashed " + ("; ".join(f"{s.node} ({s.meaning}, {_eth(s.amount_wei)})" for s in convictions) or "nobody"))
    if penalties:
        parts.append("penalised " + "; ".join(f"{s.node} ({s.meaning}, {_eth(s.amount_wei)})" for s in penalties))
    tally = _tally(outcome)
    return "; ".join(parts) + (f"; votes {tally}" if tally else "")


def format_slash(audit_id: int, slash: Slash) -> str:
    """One `caught` line: the node, what caught it (a contract's reason string reads as it is; a fault
    proven through Disputes or Delivery names the party's role first), the amount and the rule."""
    if slash.rule == slash.meaning or slash.penalty and slash.rule != "SilentSeat":
        what = f"{slash.node}: {'penalised: ' if slash.penalty else ''}{slash.meaning} ({slash.role})"
    else:
        what = f"{slash.node} ({slash.role}): {slash.meaning}"
    return f"audit {audit_id}: {what}; {format_amount(slash.amount_wei)}; rule \"{slash.rule}\""


def format_caught(outcome: AuditOutcome) -> list[str]:
    return [format_slash(outcome.audit_id, s) for s in outcome.slashes]


def compute_report_json(auditor, shown: list, findings: list) -> dict:
    """`audit chain --json`: the counts, every audit's outcome (the spec's, with its report line), the
    caught lines, the findings ``shown`` (the report's: all with --verbose) and the count of inconsistencies."""
    audits = [{**compute_outcome_dict(o), "summary": auditor.states.get(o.audit_id)} for o in sorted(auditor.outcomes.values(), key=lambda o: o.audit_id)]
    return {"summary": {**auditor.summary(), "consistent checks": sum(1 for f in findings if f.severity == "ok")},
            "audits": audits, "caught": list(auditor.caught),
            "findings": [{"severity": f.severity, "subject": f.subject, "detail": f.detail} for f in shown],
            "inconsistencies": sum(1 for f in findings if f.severity == "inconsistent")}
