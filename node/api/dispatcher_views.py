"""The dispatcher role's routes: where a dispatched job stands, its evidence, the dispatcher's
view, and the inclusion proof of a promised receipt (registered in node/routes.py)."""

from aiohttp import web

from verillm.errors import NotBatched, NotFound
from verillm.node.api.access import verify_reader
from verillm.node.api.explorer_clock import BlockClock
from verillm.node.api.http import get_base_url
from verillm.node.appkeys import APP_DOMAIN, APP_SERVICE
from verillm.node.dispatcher.promises import find_stored_inclusion
from verillm.node.dispatcher.status import compute_job_deadlines, compute_job_status, is_waiting
from verillm.node.store.evidence import compute_evidence, get_evidence_parties
from verillm.wire import from_hex, to_hex


def require_dispatch_service(request: web.Request, consequence: str = ""):
    """The dispatcher role's service; NotFound (404) on a node that runs without it."""
    service = request.app.get(APP_SERVICE)
    if service is None:
        raise NotFound("this node runs without the networked dispatcher ([dispatcher] enabled = false)" + (f": {consequence}" if consequence else ""))
    return service


async def get_serving(app: web.Application) -> dict:
    """For /healthz: whether this node can serve jobs now, and if not, why (node/dispatcher/readiness.py; a node without the role always can)."""
    service = app.get(APP_SERVICE)
    if service is None:
        return {"ready": True, "reasons": [], "role": "local: runs every job itself, no chain checks"}
    reasons = await service.router.readiness.get_reasons()
    return {"ready": not reasons, "reasons": reasons, "role": "networked dispatcher and worker"}


async def get_dispatch_status(request: web.Request) -> web.Response:
    """Where a job this node dispatched stands: batch, audit, committee, votes, verdict, slashes."""
    service = require_dispatch_service(request)
    job_hash = from_hex(request.match_info["job_hash"], "job_hash", 32)
    body = compute_job_status(service.tables, job_hash, service.watcher.head, service.chainio.preset)
    return web.json_response(await add_job_deadlines(service, name_own_worker(request, body)))


def name_own_worker(request: web.Request, body: dict) -> dict:
    """Fill ``worker_url`` for a job this node ran itself (the store keeps '' for its own worker): a
    client reads the worker's job route from it, wherever the job ran."""
    if body.get("worker_url") == "":
        body["worker_url"] = get_base_url(request)
    return body


async def read_current_round(service, audit_id: int):
    """The audit (`Jobs.getAudit`) and its current round (`getRoundState`), read once for every part of a
    body that describes the audit: two reads would show two moments of the chain side by side (the
    explorer's job page showed a reveal deadline beside the opening step the reveal had started)."""
    chainio = service.chainio
    audit = await chainio.read_for_clients(chainio.protocol.get_audit, audit_id)
    return audit, await chainio.read_for_clients(chainio.protocol.get_round_state, audit_id, audit.round)


async def add_job_deadlines(service, body: dict, current_round=None) -> dict:
    """Add the deadline the job's current step waits on, the block it is final by at the latest and this
    node's seconds per block (`compute_job_deadlines`); an open audit's round is read from Jobs, so its
    deadlines are the ones the contract enforces (``current_round``: `read_current_round`'s, if read already)."""
    chainio, audit, batch = service.chainio, body.get("audit"), body.get("batch")
    if batch is not None and batch["status"] in ("drawn", "started") and batch["drawn_block"] is None:  # drawn by this node, its event not read yet
        batch["drawn_block"] = (await chainio.read_for_clients(chainio.protocol.get_batch, batch["batch_id"]))["drawn_block"] or None
    open_audit = audit is not None and audit["status"] == "open"
    if open_audit and current_round is None:
        current_round = await read_current_round(service, audit["audit_id"])
    round_state = current_round[1] if open_audit else None
    seconds_per_block = await BlockClock.of(service).get_seconds_per_block(body["head"]) if is_waiting(body) else None  # no read once final
    return compute_job_deadlines(service.tables, body, chainio.preset, round_state, seconds_per_block)


async def get_dispatch_evidence(request: web.Request) -> web.Response:
    """The data to replay a dispatched job's audit (job, output, receipts, proven openings), for its requester and the audit's parties."""
    service = require_dispatch_service(request)
    job_hash = from_hex(request.match_info["job_hash"], "job_hash", 32)
    verify_reader(request, job_hash, get_evidence_parties(service.tables, job_hash))  # who asks, before any work: node/api/access.py
    return web.json_response(compute_evidence(service.tables, job_hash, request.app[APP_DOMAIN]))


async def get_dispatcher_info(request: web.Request) -> web.Response:
    """The dispatcher's view: chain head, the Registry's workers for the model, pending work."""
    service = require_dispatch_service(request)
    tables = service.tables
    return web.json_response({
        "address": "0x" + service.chainio.address.hex(),
        "head": service.watcher.head,
        "promise_domain": {"chain_id": service.chainio.chain.chain_id, "verifying_contract": service.chainio.protocol.coverage.address,
                           "batch_by_blocks": service.chainio.preset.BATCH_BY_BLOCKS},
        "workers": [{"address": "0x" + w.address.hex(), "url": w.url, "stake_wei": w.stake_wei} for w in service.router.view.workers],
        "batches": {s: len(tables.get_batches((s,))) for s in ("posting", "posted", "drawn", "started", "missed")},
        "audits": {s: len(tables.get_audit_rows(s)) for s in ("open", "settled", "abandoned")},
        "duties": len(tables.get_duties()),
        "failing_steps": {**service.chain_tasks.failures, **service.tasks.failures},  # the chain steps run on the watcher's thread
    })


async def get_receipt_inclusion(request: web.Request) -> web.Response:
    """The proof that a receipt this node promised is in one of its posted batches (docs/protocol.md
    §12 "Batching promises"). Public like the audit status: a receipt hash is no secret, and the
    proof is what the node would answer an omission claim with (`find_stored_inclusion`)."""
    service = require_dispatch_service(request)
    receipt_hash = from_hex(request.match_info["receipt_hash"], "receipt_hash", 32)
    batch_by_block = service.tables.get_promise_by_receipt_hash(receipt_hash)
    if batch_by_block is None:
        raise NotFound(f"unknown receipt 0x{receipt_hash.hex()}: this dispatcher never promised to batch it")
    found = find_stored_inclusion(service.tables, receipt_hash)
    if found is None:
        raise NotBatched(f"receipt 0x{receipt_hash.hex()} is not batched yet; due by block {batch_by_block}")
    proof = found.proof
    return web.json_response({
        "receipt_hash": to_hex(receipt_hash), "dispatcher": to_hex(service.chainio.address), "batch_by_block": batch_by_block,
        "batch_id": found.batch_id, "posted_block": found.posted_block, "root": to_hex(found.root),
        "leaf_index": proof.index, "leaf_count": proof.leaf_count, "siblings": [to_hex(s) for s in proof.siblings],
    })
