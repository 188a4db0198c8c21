"""Where a dispatched job stands: the body of GET /v1/verillm/audits/{0xjob_hash}.

    status   dispatched  the worker answered; its receipt waits for a batch
             committed   the receipt is in a batch on-chain; the draw has not selected it (yet)
             audited     an audit is running (committee, challenge, openings, votes)
             verified    the round decided that the worker passed; the dispute window runs
             final       settled as passed, or never selected and the start window closed
             slashed     the worker failed the audit (or defaulted) and was slashed
             tie         the committee split evenly; nobody was slashed for a vote
             abandoned   the committee never filled; nobody was slashed (docs/protocol.md §12)
"""

from verillm.errors import NotFound
from verillm.spec.params import Preset
from verillm.spec.receipt import compute_receipt_hash
from verillm.spec.outcome import Slash, compute_outcome_dict
from verillm.spec.settlement import FAIL, PASS, TIE, VERDICT_NAMES, WORKER_DEFAULT

from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.store.explorer_tables import ExplorerTables

VERDICT_CODES = {name: code for code, name in VERDICT_NAMES.items()}


def compute_job_status(tables: DispatcherTables, job_hash: bytes, head: int, preset: Preset) -> dict:
    """Return what this dispatcher knows about ``job_hash``, on-chain state included."""
    job = tables.get_dispatched_job(job_hash)
    if job is None:
        raise NotFound(f"this node did not dispatch job 0x{job_hash.hex()}")
    body = {
        "job_hash": "0x" + job_hash.hex(), "worker": "0x" + job.worker.hex(), "worker_url": job.worker_url,
        "receipt_hash": "0x" + _receipt_hash(job), "audit_requested": job.audit_requested, "status": "dispatched",
        "head": head,  # the block this view is of: a watcher sees the chain move while the status stays
    }
    batch = tables.get_batch(job.batch_row) if job.batch_row is not None else None
    if batch is None or batch["status"] == "posting":
        return body
    body["batch"] = {"batch_id": batch["batch_id"], "index": job.batch_index, "posted_block": batch["posted_block"], "status": batch["status"]}
    audit = tables.get_audit_for_leaf(job.batch_row, job.batch_index)
    if audit is None:
        body["status"] = _unaudited_status(tables, batch, head, preset)
        return body
    body["audit"] = compute_audit_summary(tables, audit, body["worker"])
    body["status"] = _audit_status(audit, body["audit"]["round_verdict"])
    return body


def _receipt_hash(job) -> str:
    return compute_receipt_hash(job.receipt).hex()


def _unaudited_status(tables: DispatcherTables, batch: dict, head: int, preset: Preset) -> str:
    drawn = [e for e in tables.get_events("AuditDrawn") if e["batch_id"] == batch["batch_id"]]
    if batch["status"] in ("drawn", "started") and drawn and head > drawn[0]["block_number"] + preset.START_WINDOW_BLOCKS:
        return "final"
    return "committed"


def _audit_status(audit: dict, round_verdict: int | None) -> str:
    if audit["status"] == "abandoned":
        return "abandoned"
    verdict = audit["verdict"] if audit["status"] == "settled" else round_verdict
    if verdict in (FAIL, WORKER_DEFAULT):
        return "slashed"
    if verdict == TIE:
        return "tie"
    if verdict == PASS:
        return "final" if audit["status"] == "settled" else "verified"
    return "audited"


def compute_audit_summary(tables: DispatcherTables, audit: dict, worker: str | None = None) -> dict:
    """Return an audit's committee, votes, verdict and slashes: the chain's outcome as
    `verillm.spec.outcome` derives it from the recorded events (the explorer and `audit chain` render
    the same), under ``chain_outcome``; ``votes`` (party → vote) and ``slashed`` are views of it."""
    audit_id = audit["audit_id"]
    committees = tables.get_events("CommitteeDrawn", audit_id)
    outcome = ExplorerTables(tables.db).get_outcome(audit_id, worker)
    decided = outcome.rounds if outcome else ()
    return {
        "audit_id": audit_id, "status": audit["status"], "requested": bool(audit["requested"]),
        "committee": committees[-1]["args"]["members"] if committees else [],
        "votes": {v.node: v.vote for v in outcome.votes} if outcome else {},
        "round_verdict": VERDICT_CODES.get(decided[-1].verdict) if decided else None,
        "verdict": VERDICT_NAMES.get(audit["verdict"]) if audit["verdict"] else None,
        "escalated": audit["escalated"] == 1,
        "slashed": [compute_slash_json(s) for s in outcome.slashes] if outcome else [],
        "chain_outcome": compute_outcome_dict(outcome) if outcome else None,
    }


def compute_slash_json(slash: Slash) -> dict:
    """One slash as the status lists it: ``reason`` the rule in plain words (a member penalty says which
    of its two rules applied), ``rule`` the contract's, ``penalty`` a share of the stake, not a conviction."""
    return {"node": slash.node, "amount_wei": slash.amount_wei, "reason": slash.meaning, "rule": slash.rule, "role": slash.role,
            "penalty": slash.penalty, "lie": slash.lie}
