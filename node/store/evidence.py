"""The evidence of one dispatched job: what an auditor replays it from (`verillm audit replay`).

Read from the dispatcher's tables only, so it is served by the node (`GET
/v1/verillm/audits/{job}/evidence`) and read from a copied store file (`--db`) the same way.
"""

from verillm.errors import NotFound
from verillm.spec.receipt import SigningDomain
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.wire import job_to_json, opening_to_json, receipt_to_json


def get_evidence_parties(tables: DispatcherTables, job_hash: bytes) -> set[bytes]:
    """The addresses that may read a job's evidence (besides its requester): its worker and every
    member whose receipt for its audit was posted. Read before any evidence is built."""
    job = tables.get_dispatched_job(job_hash)
    if job is None:
        raise NotFound(f"this node did not dispatch job 0x{job_hash.hex()}")
    parties = {job.worker}
    audit = tables.get_audit_for_leaf(job.batch_row, job.batch_index) if job.batch_row is not None else None
    if audit is not None:
        parties |= {seat.member for seat in tables.get_committee_jobs(audit["audit_id"]) if seat.status == "posted"}
    return parties


def compute_evidence(tables: DispatcherTables, job_hash: bytes, domain: SigningDomain | None = None) -> dict:
    """Return the data an auditor replays a job from (`verillm audit replay`; the route serves it to the requester and the audit's parties).

    The job, its output and the worker's signed receipt; per audit round, the challenge seed,
    the committee's verification jobs and receipts, and every opening this dispatcher proved
    against its party's committed root (leaves with their Merkle proofs).
    """
    job = tables.get_dispatched_job(job_hash)
    if job is None:
        raise NotFound(f"this node did not dispatch job 0x{job_hash.hex()}")
    body = {"job_hash": "0x" + job_hash.hex(), "job": job_to_json(job.job), "output_tokens": list(job.output_tokens),
            "receipt": receipt_to_json(job.receipt), "audits": []}
    if domain is not None:
        body["signing_domain"] = {"chain_id": domain.chain_id, "verifying_contract": "0x" + domain.verifying_contract.hex()}
    audit = tables.get_audit_for_leaf(job.batch_row, job.batch_index) if job.batch_row is not None else None
    if audit is None:
        return body
    rounds: dict[int, dict] = {}
    for round_index, slot, seed, opening in tables.get_proven_openings(audit["audit_id"]):
        entry = rounds.setdefault(round_index, {"audit_id": audit["audit_id"], "round": round_index, "challenge_seed": "0x" + seed.hex(), "openings": {}, "members": {}})
        entry["openings"][str(slot)] = opening_to_json(opening)
    for seat in tables.get_committee_jobs(audit["audit_id"]):
        if seat.status == "posted" and seat.round in rounds:
            rounds[seat.round]["members"][str(seat.slot + 1)] = {
                "address": "0x" + seat.member.hex(), "job": job_to_json(seat.job),
                "output_tokens": list(seat.output_tokens or ()), "receipt": receipt_to_json(seat.receipt),
            }
    body["audits"] = [rounds[r] for r in sorted(rounds)]
    return body
