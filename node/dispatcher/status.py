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
from verillm.spec.settlement import FAIL, PASS, TIE, VERDICT_NAMES, WORKER_DEFAULT

from verillm.node.store.dispatcher_tables import DispatcherTables


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
    body["audit"] = compute_audit_summary(tables, audit)
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


def compute_audit_summary(tables: DispatcherTables, audit: dict) -> dict:
    """Return an audit's committee, votes, verdict and slashes from the recorded events."""
    audit_id = audit["audit_id"]
    committees = tables.get_events("CommitteeDrawn", audit_id)
    decided = tables.get_events("RoundDecided", audit_id)
    votes = {e["args"]["party"]: e["args"]["vote"] for e in tables.get_events("Opened", audit_id) if e["args"]["slot"] > 0}
    opened = {e["args"]["party"].lower() for e in tables.get_events("Opened", audit_id)}
    slashes = [compute_party_slash(e["args"], opened) for e in tables.get_events("PartySlashed", audit_id)]
    contests = {e["contest_id"] for e in tables.get_events("Contested", audit_id)}  # ContestLost names no audit
    slashes += [{"node": e["args"]["party"], "amount_wei": e["args"]["slashedWei"], "reason": "lost a contest: could not prove its opening", "penalty": False}
                for e in tables.get_events("ContestLost") if e["contest_id"] in contests]
    amounts = {e["tx_hash"]: e["args"]["amountWei"] for e in tables.get_events("Slashed")}
    slashes += [{"node": e["args"]["member"], "amount_wei": amounts.get(e["tx_hash"]), "reason": "adjudicated: vote contradicts its own data", "penalty": False}
                for e in tables.get_events("Adjudicated", audit_id)]
    round_verdict = decided[-1]["args"]["verdict"] if decided else None
    return {
        "audit_id": audit_id, "status": audit["status"], "requested": bool(audit["requested"]),
        "committee": committees[-1]["args"]["members"] if committees else [],
        "votes": votes, "round_verdict": round_verdict,
        "verdict": VERDICT_NAMES.get(audit["verdict"]) if audit["verdict"] else None,
        "escalated": audit["escalated"] == 1, "slashed": slashes,
    }


MEMBER_PENALTY_REASON = "missed opening or minority vote"  # Jobs._settleParties names both rules at once
OVERTURNED_REASON = "overturned"  # Jobs._settleParties: a worker an appeal failed after round 0 did not (a penalty)


def compute_party_slash(args: dict, opened: set[str]) -> dict:
    """Return one `PartySlashed` as the status lists it, saying which rule a member penalty applied:
    a member that opened was outvoted (a minority vote), one that did not missed its opening.
    ``penalty``: a member penalty (a small share of the stake, not a provable lie), not a conviction."""
    reason = args["reason"]
    penalty = reason in (MEMBER_PENALTY_REASON, OVERTURNED_REASON)
    if reason == OVERTURNED_REASON:
        reason = "overturned: the appeal failed it where round 0 did not (the penalty, not the slash)"
    elif penalty:
        reason = ("minority vote: it opened and voted against the verdict" if args["node"].lower() in opened
                  else "missed opening: it did not open after the worker did")
    return {"node": args["node"], "amount_wei": args["amountWei"], "reason": reason, "penalty": penalty}
