"""Wiring the networked dispatcher role into the node's aiohttp app.

`node/app.py` calls `network_dispatcher_context` instead of installing the `LocalDispatcher`
when ``[dispatcher] enabled = true``, and `setup_dispatcher_routes` once at build time. The
context connects to the chain, checks the deployment against the node's signing domain,
installs `NetworkDispatcher` under APP_DISPATCHER and runs the `ChainWatcher` until cleanup.
"""

import asyncio
import logging

import aiohttp
from aiohttp import web

from verillm.chain.deploy import Deployment
from verillm.errors import ConfigError, NotBatched, NotFound

from verillm.node.appkeys import APP_CONFIG, APP_DISPATCHER, APP_KEY, APP_METRICS, APP_DOMAIN, APP_STORE, APP_WORKER
from verillm.node.dispatcher.batches import BatchScheduler
from verillm.node.dispatcher.chainio import ChainIO, compute_vrf_secret_key
from verillm.node.dispatcher.promises import OmissionAnswers, Promises, find_stored_inclusion
from verillm.node.dispatcher.audit.delivery import DeliveryDuties
from verillm.node.dispatcher.audit.duties import PartyDuties, PartyFaults
from verillm.node.dispatcher.audit.driver import AuditDriver
from verillm.node.dispatcher.router import NetworkDispatcher, RegistryView
from verillm.node.api.access import compute_evidence_parties, verify_reader
from verillm.node.dispatcher.status import compute_job_status
from verillm.node.store.evidence import compute_evidence
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.dispatcher.tasks import KeyedTasks
from verillm.node.dispatcher.watcher import ChainWatcher
from verillm.node.dispatcher.readiness import ReadinessMonitor
from verillm.wire import from_hex, to_hex

log = logging.getLogger(__name__)


class DispatchService:
    """Everything the networked dispatcher role runs, for the status route and tests."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, router: NetworkDispatcher, watcher: ChainWatcher, tasks: KeyedTasks):
        self.chainio, self.tables, self.router, self.watcher, self.tasks = chainio, tables, router, watcher, tasks


APP_FAULTS = web.AppKey("dispatcher_faults", PartyFaults)
APP_SERVICE = web.AppKey("dispatcher_service", DispatchService)


def load_deployment(app: web.Application) -> Deployment:
    """Read the address book and check it is the deployment the node signs receipts for."""
    config = app[APP_CONFIG]
    if not config.dispatcher.deployment_file:
        raise ConfigError("dispatcher.enabled needs dispatcher.deployment_file (the address book of the contracts)")
    deployment = Deployment.load(config.dispatcher.deployment_file)
    jobs = deployment.addresses.get("Jobs", "")
    if jobs.lower() != config.chain.jobs_address.lower() or deployment.chain_id != config.chain.chain_id:
        raise ConfigError(f"{config.dispatcher.deployment_file} is Jobs {jobs} on chain {deployment.chain_id}; "
                          f"chain.jobs_address / chain.chain_id say {config.chain.jobs_address} on {config.chain.chain_id}")
    return deployment


def build_service(app: web.Application, session: aiohttp.ClientSession, chainio: ChainIO, tables: DispatcherTables) -> DispatchService:
    """Assemble router, batches, audits, duties and the watcher from the app's resources."""
    config, worker, metrics, key = app[APP_CONFIG].dispatcher, app[APP_WORKER], app[APP_METRICS], app[APP_KEY]
    tasks = KeyedTasks()
    view = RegistryView(chainio, worker.served.model_id, config.registry_refresh_s)
    router = NetworkDispatcher(worker, app[APP_STORE], tables, view, key, app[APP_DOMAIN], session, chainio.preset.COMMITTEE_SIZE)
    batches = BatchScheduler(chainio, tables, metrics, compute_vrf_secret_key(key), config.batch_max_receipts, config.batch_max_wait_s)
    audits = AuditDriver(chainio, tables, router, view, tasks, metrics, config.escalate)
    faults = app.get(APP_FAULTS, PartyFaults())
    duties = PartyDuties(chainio, tables, app[APP_STORE], worker, faults)
    audits.committee.withhold_jobs = faults.committee_jobs == "withhold"
    delivery = DeliveryDuties(chainio, tables, app[APP_STORE], worker)
    router.promises = batches.promises = Promises(chainio, tables, key)
    watcher = ChainWatcher(chainio, tables, view, batches, audits, duties, tasks, metrics, config.poll_interval_s, config.confirmations,
                           delivery, OmissionAnswers(chainio, tables))
    router.readiness = ReadinessMonitor(chainio, key.address, worker.served.model_id, config.registry_refresh_s)
    return DispatchService(chainio, tables, router, watcher, tasks)


async def get_serving(app: web.Application) -> dict:
    """For /healthz: whether this node can serve jobs now, and if not, why (node/dispatcher/readiness.py)."""
    service = app.get(APP_SERVICE)
    if service is None:
        return {"ready": True, "reasons": [], "role": "local: runs every job itself, no chain checks"}
    reasons = await service.router.readiness.get_reasons()
    return {"ready": not reasons, "reasons": reasons, "role": "networked dispatcher and worker"}


async def network_dispatcher_context(app: web.Application):
    """Connect to the chain, install the routing dispatcher, run the watcher until cleanup."""
    config = app[APP_CONFIG]
    deployment = load_deployment(app)
    tables = DispatcherTables(app[APP_STORE].db)
    chainio = await asyncio.to_thread(ChainIO, config.chain.rpc_url, deployment, app[APP_KEY], tables)
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=config.dispatcher.request_timeout_s))
    service = build_service(app, session, chainio, tables)
    await chainio.wait_own_pending_mined()  # a previous run's last transaction lands before its step is redone
    await service.watcher.tick()  # catch up with the chain (and the Registry) before serving
    app[APP_DISPATCHER] = service.router
    app[APP_SERVICE] = service
    loop_task = asyncio.get_running_loop().create_task(service.watcher.run_forever(), name="verillm-chain-watcher")
    log.info("dispatcher: chain %s, deployment Jobs %s, %d workers serve the model", config.chain.rpc_url,
             deployment.addresses["Jobs"], len(service.router.view.workers))
    yield
    loop_task.cancel()
    await asyncio.gather(loop_task, return_exceptions=True)
    await service.tasks.close()
    await session.close()


async def get_dispatch_status(request: web.Request) -> web.Response:
    """Where a job this node dispatched stands: batch, audit, committee, votes, verdict, slashes."""
    service = request.app.get(APP_SERVICE)
    if service is None:
        raise NotFound("this node runs without the networked dispatcher ([dispatcher] enabled = false)")
    job_hash = from_hex(request.match_info["job_hash"], "job_hash", 32)
    body = compute_job_status(service.tables, job_hash, service.watcher.head, service.chainio.preset)
    return web.json_response(body)


async def get_dispatch_evidence(request: web.Request) -> web.Response:
    """The public data to replay a dispatched job's audit: job, output, receipts, proven openings."""
    service = request.app.get(APP_SERVICE)
    if service is None:
        raise NotFound("this node runs without the networked dispatcher ([dispatcher] enabled = false)")
    job_hash = from_hex(request.match_info["job_hash"], "job_hash", 32)
    evidence = compute_evidence(service.tables, job_hash, request.app[APP_DOMAIN])
    verify_reader(request, job_hash, compute_evidence_parties(evidence))  # the prompt is the client's: node/api/access.py
    return web.json_response(evidence)


async def get_dispatcher_info(request: web.Request) -> web.Response:
    """The dispatcher's view: chain head, the Registry's workers for the model, pending work."""
    service = request.app.get(APP_SERVICE)
    if service is None:
        raise NotFound("this node runs without the networked dispatcher ([dispatcher] enabled = false)")
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
        "failing_steps": service.tasks.failures,
    })


async def get_receipt_inclusion(request: web.Request) -> web.Response:
    """The proof that a receipt this node promised is in one of its posted batches (docs/protocol.md
    §12 "Batching promises"). Public like the audit status: a receipt hash is no secret, and the
    proof is what the node would answer an omission claim with (`find_stored_inclusion`)."""
    service = request.app.get(APP_SERVICE)
    if service is None:
        raise NotFound("this node runs without the networked dispatcher ([dispatcher] enabled = false)")
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


def setup_dispatcher_routes(app: web.Application) -> None:
    """Register the dispatcher role's routes."""
    app.router.add_get("/v1/verillm/audits/{job_hash}", get_dispatch_status)
    app.router.add_get("/v1/verillm/audits/{job_hash}/evidence", get_dispatch_evidence)
    app.router.add_get("/v1/verillm/dispatcher", get_dispatcher_info)
    app.router.add_get("/v1/verillm/receipts/{receipt_hash}/inclusion", get_receipt_inclusion)
