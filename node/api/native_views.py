"""Handlers of the native API (dispatcher ↔ worker) and the operational endpoints.

    POST /v1/verillm/jobs                      signed envelope, payload = encode(Job)
                                               → 200 {job_hash, status, output_tokens, receipt, status_url}
                                               (?wait=0 → 202 once the job is durable and queued;
                                               ?stream=1 → 200 NDJSON: {"tokens": [...], "signed": {...}} lines as the
                                               engine samples them, then {"done": <the body above>} or
                                               {"error": ...}: node/api/streaming.py)
    GET  /v1/verillm/jobs/{0xjob_hash}         → {job_hash, status, error, attempts, ..., receipt, output_tokens}
                                               (the requester's ?token= or a signed read by the submitter: node/api/access.py)
    POST /v1/verillm/jobs/{0xjob_hash}/openings signed envelope, payload = JSON {"cells": [[position, layer], ...]}
                                               or {"challenge": "0x<encode(Challenge)>"} → {job_hash, opening}
    GET  /v1/verillm/info                      → worker address, served model, manifest, signing domain, chain (if networked)
    GET  /healthz                              → {status: "ok", ...}
    GET  /metrics                              → Prometheus text format

Jobs are admitted by accountability (node/api/admission.py): a seat the chain proves, a staked
peer, or a sender the operator named; anyone else gets 403 with the reason.

Only a job's submitter (the envelope sender that posted it) or this node itself may ask for
its openings: an opening hands out committed leaves, and a lazy committee member that could
fetch an honest member's leaves before committing could copy its root without computing.
Openings are parsed, computed and serialized off the event loop (node/worker/openings.py).
"""

import asyncio
import dataclasses

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from verillm.errors import NotFound
from verillm.spec.encoding import decode, encode
from verillm.spec.job import compute_job_hash
from verillm.spec.types import Job

from verillm.node import faults
from verillm.node.api.access import verify_reader
from verillm.node.api.admission import compute_lane, get_peer_job_limit
from verillm.node.api.dispatcher_views import get_serving
from verillm.node.worker.opening_process import parse_opening_payload  # noqa: F401  (the fuzzers' entry point)
from verillm.node.appkeys import APP_CONFIG, APP_DISPATCHER, APP_DOMAIN, APP_KEY, APP_METRICS, APP_MODEL, APP_SERVICE, APP_STORE, APP_WORKER
from verillm.node.api.http import get_status_url, read_signed_envelope, remember_nonce
from verillm.node.api.streaming import write_job_stream
from verillm.node.worker.stream_signer import PrefixSigner
from verillm.node.store.migrations import get_schema_version
from verillm.wire import from_hex, receipt_to_json, to_hex


async def post_job(request: web.Request) -> web.Response:
    """Run a job sent by another node (a dispatcher); answer with its receipt."""
    envelope = await read_signed_envelope(request)
    job = decode(Job, envelope.payload)
    job_hash, worker = compute_job_hash(job), request.app[APP_WORKER]
    lane = await compute_lane(request.app, envelope.sender, job, job_hash)  # 403 for a sender nobody answers for
    share = await get_peer_job_limit(request.app, envelope.sender) if lane == "peer" else None  # by stake (admission.py)
    record = worker.verify_acceptance(job, job_hash, envelope.sender, lane, share)
    remember_nonce(request, envelope)
    faults.reach("nonce_recorded")
    # A stream shows the tokens of a run it saw start; a run under way or a stored result comes whole.
    arrived: asyncio.Queue[int] = asyncio.Queue()
    streamed = request.query.get("stream") == "1" and worker.is_fresh_run(job_hash, record)
    unsubscribe = worker.queue.subscribe(job_hash, arrived.put_nowait) if streamed else (lambda: None)
    try:
        worker.accept_checked_job(job, envelope.sender, job_hash, record, lane)
        faults.reach("job_accepted")
        if request.query.get("wait") == "0":
            body = {"job_hash": to_hex(job_hash), "status": "accepted", "status_url": get_status_url(request, job_hash)}
            return web.json_response(body, status=202)
        if request.query.get("stream") == "1":
            signer = PrefixSigner(job_hash, request.app[APP_KEY], request.app[APP_DOMAIN])
            return await write_job_stream(request, arrived, worker.wait_job(job_hash), lambda result: compute_job_body(request, result), signer)
        return web.json_response(compute_job_body(request, await worker.wait_job(job_hash)))
    finally:
        unsubscribe()


def compute_job_body(request: web.Request, result) -> dict:
    """The answer to a job: its hash, output tokens, signed receipt and status URL."""
    return {
        "job_hash": to_hex(result.job_hash),
        "status": "done",
        "output_tokens": list(result.output_tokens),
        "receipt": receipt_to_json(result.receipt),
        "status_url": get_status_url(request, result.job_hash),
    }


async def get_job(request: web.Request) -> web.Response:
    """Return a job's status, and its receipt and output tokens once done."""
    job_hash = from_hex(request.match_info["job_hash"], "job_hash", 32)
    store = request.app[APP_STORE]
    record = store.get_job(job_hash)
    if record is None:
        return web.json_response(get_dispatched_job_body(request, job_hash))
    verify_reader(request, job_hash, {record.sender} if record.sender else set())
    body = {
        "job_hash": to_hex(job_hash), "status": record.status, "error": record.error, "attempts": record.attempts,
        "model_id": to_hex(record.job.model_id), "received_at": record.received_at, "updated_at": record.updated_at,
    }
    if record.status == "done":
        body["receipt"] = receipt_to_json(store.get_receipt(job_hash))
        body["output_tokens"] = list(record.output_tokens or ())
    return web.json_response(body)


def get_dispatched_job_body(request: web.Request, job_hash: bytes) -> dict:
    """A job this node dispatched to another worker, as its dispatcher holds it (the receipt it checked):
    the status URL a gateway hands out names this node, whichever worker ran the job."""
    tables = getattr(request.app.get(APP_DISPATCHER), "tables", None)
    dispatched = tables.get_dispatched_job(job_hash) if tables is not None else None
    if dispatched is None:
        raise NotFound(f"no job 0x{job_hash.hex()} on this node")
    verify_reader(request, job_hash, {dispatched.worker})
    return {"job_hash": to_hex(job_hash), "status": "done", "error": None, "model_id": to_hex(dispatched.job.model_id),
            "worker": to_hex(dispatched.worker), "receipt": receipt_to_json(dispatched.receipt), "output_tokens": list(dispatched.output_tokens)}


async def post_opening(request: web.Request) -> web.Response:
    """Open cells of a done job for its submitter: who asks is checked first, the work is done in a
    separate process (node/worker/openings.py)."""
    job_hash = from_hex(request.match_info["job_hash"], "job_hash", 32)
    envelope = await read_signed_envelope(request)
    openings = request.app[APP_WORKER].openings
    openings.verify_access(job_hash, envelope.sender)
    await openings.verify_payload(envelope.payload)  # a malformed request spends no nonce
    remember_nonce(request, envelope)
    tables = getattr(request.app.get(APP_DISPATCHER), "tables", None)  # a node with a chain knows its seats
    seat = tables.get_seat_of_job(job_hash) if tables is not None else None
    body = await openings.answer(job_hash, envelope.sender, envelope.payload, seat)
    return web.Response(body=body, content_type="application/json")


async def get_info(request: web.Request) -> web.Response:
    """Describe this node: worker address, served model and manifest, receipt signing domain."""
    served, domain = request.app[APP_MODEL], request.app[APP_DOMAIN]
    body = {
        "worker": request.app[APP_KEY].address_hex,
        "model": {"name": served.name, "model_id": to_hex(served.model_id), "manifest": to_hex(encode(served.manifest))},
        "signing_domain": {"chain_id": domain.chain_id, "verifying_contract": to_hex(domain.verifying_contract)},
    }
    service = request.app.get(APP_SERVICE)
    if service is not None:  # a networked node names its chain: `verillm complete` checks the signer there by default
        chain = request.app[APP_CONFIG].chain
        body["chain"] = {"rpc_url": chain.public_rpc_url or chain.rpc_url, "deployment": dataclasses.asdict(service.chainio.deployment)}
    return web.json_response(body)


async def get_healthz(request: web.Request) -> web.Response:
    """Liveness and a summary: model, queue depth, jobs by status, schema version, whether it can serve."""
    store, worker = request.app[APP_STORE], request.app[APP_WORKER]
    return web.json_response({
        "status": "ok",
        "model": request.app[APP_MODEL].name,
        "worker": request.app[APP_KEY].address_hex,
        "queue_depth": worker.queue.depth,
        "jobs": store.get_job_counts(),
        "schema_version": get_schema_version(store.db),
        "serving": await get_serving(request.app),  # ready, or why not (node/dispatcher/readiness.py)
    })


async def get_metrics(request: web.Request) -> web.Response:
    """Prometheus scrape endpoint."""
    metrics = request.app[APP_METRICS]
    service = request.app.get(APP_SERVICE)
    if service is not None:  # read at scrape time: the table is the truth, no counter to drift
        metrics.unbatched_receipts.set(service.tables.count_unbatched_jobs())
    return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})
