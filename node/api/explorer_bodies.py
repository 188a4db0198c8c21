"""The bodies of the explorer's JSON routes for jobs and audits, built from the dispatcher's tables and
the chain events the node records (node/store/explorer_tables.py). No chain reads here: the views
add what is live (an open audit's next step, block timestamps)."""

from verillm.spec.outcome import AuditOutcome, compute_outcome_dict

from verillm.node.api.explorer_audit import compute_conduct_of, compute_rounds
from verillm.node.dispatcher.status import compute_job_status
from verillm.node.store.explorer_tables import ExplorerTables

# Events of one audit, in the order the protocol emits them (docs/protocol.md §12).
AUDIT_EVENTS = ("AuditStarted", "WorkerReceiptShown", "CommitteeDrawn", "CommitteeReceiptPosted", "ChallengeDrawn", "VoteSealed", "Opened", "RoundDecided",
                "EscalationStarted", "EscalationLapsed", "Contested", "Adjudicated", "PartySlashed", "AuditAbandoned", "AuditSettled")
WORKER_OUTCOMES = {"pass": "passed: the committee's data matched its receipt", "open": "its receipt is being checked",
                   "tie": "not judged: the committee split evenly", "abandoned": "not judged: the audit was abandoned"}


def compute_hex(value: str | None) -> str | None:
    """Return a stored hex value (no 0x in the store) as 0x-hex."""
    return None if value is None else value if value.startswith("0x") else "0x" + value


def compute_event_json(e: dict) -> dict:
    return {"block": e["block_number"], "log_index": e["log_index"], "event": e["name"], "contract": e["contract"],
            "tx_hash": compute_hex(e["tx_hash"]), "audit_id": e["audit_id"], "batch_id": e["batch_id"], "args": e["args"]}


def compute_job_row(row: dict, explorer: ExplorerTables) -> dict:
    """One row of the jobs list: the job, its status, batch and audit (votes as they turned out, slashes)."""
    body = {"job_hash": "0x" + row["job_hash"], "worker": "0x" + row["worker"], "status": row["status"], "created_at": row["created_at"],
            "model_id": "0x" + row["model_id"], "audit_requested": bool(row["audit_requested"]), "batch": None, "audit": None}
    if row["batch_row"] is not None:
        body["batch"] = {"batch_id": row["batch_id"], "index": row["batch_index"], "posted_block": row["posted_block"]}
    if row["audit_id"] is not None:
        body["audit"] = compute_audit_brief(explorer, row["audit_id"], "0x" + row["worker"])
    return body


def compute_audit_brief(explorer: ExplorerTables, audit_id: int, worker: str) -> dict:
    """An audit in a list: its votes (a caught liar's marked), verdict and slashes, from its outcome (`verillm.spec.outcome`)."""
    events = explorer.get_audit_events(audit_id)
    rounds = compute_rounds(events)
    outcome = explorer.get_outcome(audit_id, worker)
    conduct = compute_conduct_of(outcome, rounds)
    votes = [{"node": s["node"], "round": r["round"], "vote": s["opening"]["vote"] if s["opening"] else None, **_conduct_of(conduct, s["node"])}
             for r in rounds for s in r["members"] if not s["replaced"]]
    decided = outcome.rounds[-1] if outcome.rounds else None
    return {"audit_id": audit_id, "votes": votes, "slashed": compute_slashes(outcome),
            "outcome": outcome.verdict, "round_verdict": decided.verdict if decided else None}


def _conduct_of(conduct: dict, node: str) -> dict:
    c = conduct.get(node.lower(), {})
    return {"label": c.get("label", ""), "lie": c.get("lie", False)}


def _contest_events(explorer: ExplorerTables, events: list[dict]) -> list[dict]:
    return explorer.get_contest_events(sorted({e["contest_id"] for e in events if e["name"] == "Contested"}))


def compute_slashes(outcome: AuditOutcome) -> list[dict]:
    """The audit's slashes, as its outcome has them: a conviction (failed audit, proven lie) apart from a
    penalty (``penalty``); ``reason`` in plain words, ``rule`` the contract's (or the event that took the stake)."""
    return [{"node": s.node, "amount_wei": s.amount_wei, "reason": s.meaning, "rule": s.rule, "role": s.role, "penalty": s.penalty, "lie": s.lie,
             "block": s.block_number, "tx_hash": s.tx_hash} for s in outcome.slashes]


def _output_tokens(started: dict, events: list[dict]) -> int | None:
    """N as signed by the worker: in a public start's event; a private start shows the receipt with
    its reveal (`WorkerReceiptShown`); None until it does."""
    shown = next((e for e in events if e["name"] == "WorkerReceiptShown"), None)
    return shown["args"]["outputTokens"] if shown else started["outputTokens"] or None


def compute_audit_body(explorer: ExplorerTables, audit_id: int) -> dict | None:
    """One audit, chain-wide: its start, batch, dispatcher, rounds and seats, conduct, slashes and timeline."""
    started = explorer.get_audit_outcome(audit_id)
    if started is None:
        return None
    args = started["args"]
    events = explorer.get_audit_events(audit_id)
    contests = _contest_events(explorer, events)
    batch_events = explorer.get_batch_events(args["batchId"])
    posted = next((e for e in batch_events if e["name"] == "BatchPosted"), None)
    rounds = compute_rounds(events)
    outcome = explorer.get_outcome(audit_id)
    conduct = compute_conduct_of(outcome, rounds)
    mine = explorer.get_dispatched_audit(audit_id)
    registry = [e for e in explorer.get_txs_events(sorted({e["tx_hash"] for e in events})) if e["name"] == "Slashed"]
    timeline = [e for e in batch_events if e["name"] in ("BatchPosted", "AuditDrawn")] + events + contests + registry
    timeline.sort(key=lambda e: (e["block_number"], e["log_index"]))
    slashes = compute_slashes(outcome)
    worker = conduct[args["worker"].lower()]
    if worker["label"] == "worker":
        worker["label"] = WORKER_OUTCOMES.get(outcome.verdict, "worker")
    return {
        "audit_id": audit_id, "outcome": outcome.verdict, "started_block": started["started_block"], "ended_block": started["ended_block"],
        "worker": args["worker"], "receipt_hash": args["receiptHash"], "output_tokens": _output_tokens(args, events), "requested": args["requested"],
        "batch": {"batch_id": args["batchId"], "index": args["index"], "posted_block": posted["block_number"] if posted else None},
        "dispatcher": posted["args"]["dispatcher"] if posted else None,
        "job_hash": "0x" + mine["job_hash"] if mine else None,
        "rounds": rounds, "conduct": conduct, "slashed": slashes, "chain_outcome": compute_outcome_dict(outcome),
        "timeline": [compute_event_json(e) for e in timeline],
    }


def compute_job_body(tables, explorer: ExplorerTables, job_hash: bytes, head: int, preset) -> dict:
    """One job this node dispatched: the status route's body, its model, the audit (as on the audit
    page) and the timeline from the receipt's batch to settlement."""
    body = compute_job_status(tables, job_hash, head, preset)
    job = tables.get_dispatched_job(job_hash)
    body["model_id"] = "0x" + job.job.model_id.hex()
    body["output_tokens"] = len(job.output_tokens)
    rows = explorer.get_job_rows([job_hash.hex()], head, preset.START_WINDOW_BLOCKS)
    body["created_at"] = rows[0]["created_at"]
    events = []
    if body.get("batch") is not None and body["batch"]["batch_id"] is not None:
        events = [e for e in explorer.get_batch_events(body["batch"]["batch_id"]) if e["name"] in ("BatchPosted", "AuditDrawn")]
    body["audit_detail"] = None
    if body.get("audit") is not None:
        detail = compute_audit_body(explorer, body["audit"]["audit_id"])
        body["audit_detail"] = detail
        body["timeline"] = detail["timeline"] if detail else [compute_event_json(e) for e in events]
    else:
        body["timeline"] = [compute_event_json(e) for e in events]
    return body
