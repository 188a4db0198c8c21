"""What `verillm audit chain` says each audit came to: `verillm.spec.outcome` over the chain's events,
rendered as the report's state line, its `caught` lines (every slash with node, rule and amount)
and the `--json` body. The same derivation backs the status body, the explorer and the devnet.
"""

from verillm.chain.events import ChainEvent, get_events
from verillm.spec.outcome import AuditOutcome, EventRecord, Slash, compute_audit_outcome, compute_counted_tally, compute_eth_text, compute_outcome_dict, compute_tx_key

WEI_PER_ETH = 10**18


def compute_event_record(event: ChainEvent) -> EventRecord:
    return EventRecord(event.name, dict(event.args), event.block_number, event.log_index, compute_tx_key(event.tx_hash))


def get_audit_records(events: list[ChainEvent], audit_id: int) -> list[EventRecord]:
    """The events `compute_audit_outcome` reads for ``audit_id``: those carrying its id, its contests'
    `ContestLost` (they name no audit) and the Registry's `Slashed` and Jobs' `Credited` of the same transactions."""
    own = [e for e in events if e.args.get("auditId") == audit_id]
    contests = {e.args["contestId"] for e in own if e.name == "Contested"}
    lost = [e for e in events if e.name == "ContestLost" and e.args["contestId"] in contests]
    txs = {e.tx_hash for e in own + lost}
    taken = [e for e in events if e.name in ("Slashed", "Credited") and e.tx_hash in txs]
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


# --- `verillm audit replay`: what the chain decided, beside the replay's own verdict ---------------

AGREEING = {"pass": True, "fail": False, "worker-default": False}
"""A round verdict the replay's verdict can agree with: ACCEPT is pass, REJECT is fail (a tie decides nothing)."""


def read_audit_outcome(chain, deployment, audit_id: int, receipt_hash: bytes) -> AuditOutcome | str:
    """Return what the chain decided for audit ``audit_id`` (`verillm.spec.outcome` over its events, read
    with `get_events` as `audit chain` reads them), or why there is nothing to show: no such audit, or
    an audit of another receipt than the replayed one (evidence naming the wrong audit)."""
    from verillm.chain.protocol import Protocol

    protocol = Protocol(chain, deployment)
    events = get_events(chain, [protocol.jobs, protocol.batches, protocol.disputes, protocol.delivery, protocol.registry], deployment.start_block)
    started = next((e for e in events if e.name == "AuditStarted" and e.args["auditId"] == audit_id), None)
    if started is None:
        return f"no audit {audit_id} on this chain (head {chain.get_block_number()}): is --addresses this job's deployment?"
    if bytes(started.args["receiptHash"]) != receipt_hash:
        return f"audit {audit_id} on this chain is of receipt 0x{bytes(started.args['receiptHash']).hex()}, not the replayed 0x{receipt_hash.hex()}"
    return compute_outcome(events, audit_id)


def format_chain_decision(outcome: AuditOutcome) -> list[str]:
    """The chain's decision as the replay report ends with it: the state, each round's verdict and the
    votes that counted (a proven lie named, not counted), every slash and penalty with node, rule and
    amount (`format_slash`, the lines of `audit chain`), and who was paid."""
    lines = [f"  audit {outcome.audit_id}: {outcome.state}" + (f", verdict {outcome.verdict}" if outcome.state == "settled" else "")
             + (f" in round {outcome.abandoned_round} ({outcome.abandoned_reason})" if outcome.state == "abandoned" else "")]
    for decision in outcome.rounds:
        agree, disagree = compute_counted_tally(outcome, decision.round_index)
        votes = sorted((v for v in outcome.votes if v.round_index == decision.round_index), key=lambda v: v.slot)
        lines.append(f"  round {decision.round_index}: {decision.verdict}; votes that counted: {agree} agree, {disagree} disagree")
        lines += [f"    seat {v.slot} {v.node}: {'agree' if v.vote == 1 else 'disagree'}" + ("" if v.counted else " — proven a lie, not counted") for v in votes]
    lines += [f"  slashed: {format_slash(outcome.audit_id, s).split(': ', 1)[1]}" for s in outcome.slashes] or ["  slashed: nobody"]
    lines += [f"  paid: {p.node} {compute_eth_text(p.amount_wei)} ETH (block {p.block_number})" for p in outcome.paid] or ["  paid: nobody"]
    return lines


def format_agreement(outcome: AuditOutcome, round_index: int, replay_accepts: bool) -> str:
    """Whether the replay's verdict agrees with the verdict the chain gave the round it replayed."""
    mine = "ACCEPT" if replay_accepts else "REJECT"
    decision = next((d for d in outcome.rounds if d.round_index == round_index), None)
    if decision is None:
        return f"replay vs chain: the chain has not decided round {round_index} (audit {outcome.state}); the replay says {mine}"
    if decision.verdict not in AGREEING:
        return f"replay vs chain: round {round_index} decided {decision.verdict}, which neither passes nor fails the worker; the replay says {mine}"
    agrees = AGREEING[decision.verdict] == replay_accepts
    return (f"replay vs chain: {'AGREE' if agrees else 'DISAGREE'} — the replay says {mine}, the chain's round {round_index} verdict is "
            f"{decision.verdict}" + ("" if outcome.state != "settled" or outcome.verdict == decision.verdict else f" (settled {outcome.verdict} after the appeal)"))
