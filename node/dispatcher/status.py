"""Where a dispatched job stands: the body of GET /v1/verillm/audits/{0xjob_hash}.

    status   dispatched  the worker answered; its receipt waits for a batch
             committed   the receipt is in a batch on-chain; the draw has not selected it (yet)
             audited     an audit is running (committee, challenge, openings, votes)
             verified    the round decided that the worker passed; the dispute window runs
             final       settled as passed, or never selected and the start window closed
             slashed     the worker failed the audit (or defaulted) and was slashed
             tie         the committee split evenly; nobody was slashed for a vote
             abandoned   the committee never filled; nobody was slashed (docs/protocol.md §12)

    phase_ends_block   the contract deadline the current step waits on (``phase_deadline`` names it:
                       batch_by, draw_by, start_by, round_draw_by, reveal_by, publish_by, commit_by,
                       worker_open_by, members_open_by, dispute_by; verillm/spec/deadlines.py)
    final_by_block     the latest block the job is final by, whatever every party does
    seconds_per_block  this node's measure over the last blocks: a client's estimate of the time left
"""

from verillm.errors import NotFound
from verillm.spec.audit import RoundState
from verillm.spec.deadlines import (
    Deadline, compute_batch_draw_by, compute_batch_start_by, compute_final_by_started, compute_final_by_unstarted, compute_round_deadline,
)
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
    drawn = [e for e in tables.get_events("AuditDrawn") if e["batch_id"] == batch["batch_id"]]
    body["batch"] = {"batch_id": batch["batch_id"], "index": job.batch_index, "posted_block": batch["posted_block"], "status": batch["status"],
                     "drawn_block": drawn[0]["block_number"] if drawn and batch["status"] in ("drawn", "started") else None}
    audit = tables.get_audit_for_leaf(job.batch_row, job.batch_index)
    if audit is None:
        body["status"] = _unaudited_status(body["batch"], head, preset)
        return body
    body["audit"] = compute_audit_summary(tables, audit, body["worker"])
    body["status"] = _audit_status(audit, body["audit"]["round_verdict"])
    return body


def _receipt_hash(job) -> str:
    return compute_receipt_hash(job.receipt).hex()


def _unaudited_status(batch: dict, head: int, preset: Preset) -> str:
    if batch["drawn_block"] is not None and head > compute_batch_start_by(batch["drawn_block"], preset):
        return "final"
    return "committed"


def compute_job_deadlines(tables: DispatcherTables, body: dict, preset: Preset, round_state: RoundState | None,
                          seconds_per_block: float | None) -> dict:
    """Add to a status body (`compute_job_status`) the deadline its current step waits on
    (``phase_deadline``, ``phase_ends_block``), the latest block it is final by (``final_by_block``)
    and ``seconds_per_block`` (all None once final: a final body stays the same read after read). ``round_state``: the open audit's current round as
    `Jobs.getRoundState` gives it (its deadlines are the contract's own), None when no audit is open."""
    deadline, final_by, rate = None, None, None
    if is_waiting(body):  # once final nothing is left to wait for
        deadline, final_by = _find_deadlines(tables, body, preset, round_state)
        rate = seconds_per_block
    body.update(phase_deadline=deadline.name if deadline else None, phase_ends_block=deadline.block if deadline else None,
                final_by_block=final_by, seconds_per_block=rate)
    return body


def is_waiting(body: dict) -> bool:
    """Whether the job can still change: not final, its audit (if any) neither settled nor abandoned."""
    return body["status"] not in ("final", "abandoned") and (body.get("audit") or {}).get("status") not in ("settled", "abandoned")


def _find_deadlines(tables: DispatcherTables, body: dict, preset: Preset, round_state: RoundState | None) -> tuple[Deadline | None, int | None]:
    job_hash = bytes.fromhex(body["job_hash"][2:])
    batch, audit = body.get("batch"), body.get("audit")
    if audit is not None:
        started = tables.get_events("AuditStarted", audit["audit_id"])
        started_block = started[0]["block_number"] if started else None
        if started_block is None and round_state is not None and round_state.round == 0:
            started_block = round_state.deadlines.entered_block
        deadline = compute_round_deadline(round_state) if round_state is not None else None
        return deadline, compute_final_by_started(started_block, preset) if started_block is not None else None
    auditable_until = tables.get_dispatched_job(job_hash).receipt.auditable_until_block
    if batch is None:
        promise = tables.get_promise(job_hash)
        return (Deadline("batch_by", promise[0]) if promise else None), compute_final_by_unstarted(auditable_until, None, None, preset)
    if batch["status"] == "missed":  # no audit of it can start any more (Batches.drawAudit refuses the late draw)
        return None, None
    if batch["drawn_block"] is not None:
        return (Deadline("start_by", compute_batch_start_by(batch["drawn_block"], preset)),
                compute_final_by_unstarted(auditable_until, batch["posted_block"], batch["drawn_block"], preset))
    return (Deadline("draw_by", compute_batch_draw_by(batch["posted_block"], preset)),
            compute_final_by_unstarted(auditable_until, batch["posted_block"], None, preset))


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
