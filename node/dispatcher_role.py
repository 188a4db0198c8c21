"""Wiring the networked dispatcher role into the node's aiohttp app.

`node/app.py` calls `network_dispatcher_context` instead of installing the `LocalDispatcher`
when ``[dispatcher] enabled = true`` (the role's HTTP handlers: node/api/dispatcher_views.py). The
context connects to the chain, checks the deployment against the node's signing domain,
installs `NetworkDispatcher` under APP_DISPATCHER and runs the `ChainWatcher` on a thread of its
own (`WatcherThread`) until cleanup.
It reads the app's keys, so it sits in the app layer, above node/dispatcher/ (tests/test_layers.py).
"""

import asyncio
import logging
import time

import aiohttp
from aiohttp import web

from verillm.chain.deploy import Deployment
from verillm.errors import ConfigError

from verillm.node.appkeys import APP_CONFIG, APP_DISPATCHER, APP_DOMAIN, APP_FAULTS, APP_KEY, APP_METRICS, APP_SERVICE, APP_STORE, APP_WORKER
from verillm.node.dispatcher.batches import BatchScheduler
from verillm.node.dispatcher.chainio import ChainIO, compute_vrf_secret_key
from verillm.node.dispatcher.promises import OmissionAnswers, Promises
from verillm.node.dispatcher.audit.delivery import DeliveryDuties
from verillm.node.dispatcher.audit.duties import PartyDuties, PartyFaults
from verillm.node.dispatcher.audit.driver import AuditDriver
from verillm.node.dispatcher.peer import StreamLimits
from verillm.node.dispatcher.router import NetworkDispatcher, RegistryView
from verillm.node.dispatcher.service import DispatchService
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.dispatcher.tasks import KeyedTasks
from verillm.node.dispatcher.watcher import ChainWatcher
from verillm.node.dispatcher.watcher_thread import WatcherThread
from verillm.node.dispatcher.readiness import ReadinessMonitor
from verillm.node.dispatcher.seats import SeatBook
from verillm.node.dispatcher.pruner import StorePruner
from verillm.node.dispatcher.stakes import EpochStakes
from verillm.node.store.retention import compute_audit_horizon_blocks, compute_horizons
from verillm.spec.receipt import compute_auditable_until_block

log = logging.getLogger(__name__)


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


def build_service(app: web.Application, session: aiohttp.ClientSession, chainio: ChainIO, tables: DispatcherTables,
                  duty_session: aiohttp.ClientSession | None = None) -> DispatchService:
    """Assemble router, batches, audits, duties and the watcher from the app's resources. ``duty_session``:
    the connections of this node's duties (committee jobs, the openings it checks), apart from its clients'."""
    config, worker, metrics, key = app[APP_CONFIG].dispatcher, app[APP_WORKER], app[APP_METRICS], app[APP_KEY]
    tasks = KeyedTasks()
    chain_tasks = KeyedTasks()  # the watcher's own loop's: batches, omission answers (node/dispatcher/watcher_thread.py)
    view = RegistryView(chainio, worker.served.model_id, config.registry_refresh_s)
    router = NetworkDispatcher(worker, app[APP_STORE], tables, view, key, app[APP_DOMAIN], session, chainio.preset.COMMITTEE_SIZE,
                               chainio.preset.MAX_TRANSCRIPT_TOKENS)
    router.duty_session = duty_session or session
    router.client_jobs_per_worker = config.client_jobs_per_worker
    router.stream_limits = StreamLimits(config.stream_first_token_s, config.stream_idle_s)
    router.on_equivocation = lambda worker_address, evidence: tasks.spawn(
        f"stream-equivocation:0x{worker_address.hex()}:0x{evidence.prefix.prefix.job_hash.hex()}",
        lambda: chainio.send("slash_stream_equivocation", evidence))
    batches = BatchScheduler(chainio, tables, metrics, compute_vrf_secret_key(key), config.batch_max_receipts, config.batch_max_wait_s)
    audits = AuditDriver(chainio, tables, router, view, tasks, metrics, config.escalate)
    faults = app.get(APP_FAULTS, PartyFaults())
    duties = PartyDuties(chainio, tables, app[APP_STORE], worker, faults)
    audits.committee.withhold_jobs = faults.committee_jobs == "withhold"
    delivery = DeliveryDuties(chainio, tables, app[APP_STORE], worker)
    router.promises = batches.promises = Promises(chainio, tables, key)
    watcher = ChainWatcher(chainio, tables, view, batches, audits, duties, tasks, metrics, config.poll_interval_s, config.confirmations,
                           delivery, OmissionAnswers(chainio, tables), chain_tasks)
    # Every slashable duty's deadline, known to the node: new client work is shed before one would miss it.
    chainio.duties.get_head, chainio.duties.shed_at_slack_blocks, chainio.duties.metrics = lambda: watcher.head, config.shed_at_slack_blocks, metrics
    router.duties = chainio.duties
    router.readiness = ReadinessMonitor(chainio, key.address, worker.served.model_id, config.registry_refresh_s)
    # Every receipt this node signs is auditable until the head it last read + RECEIPT_HORIZON_BLOCKS
    # (before the watcher's first tick — jobs re-run at a restart — the chain's head, read now:
    # a horizon from block 0 would be expired and refused by every dispatcher).
    # The chain's head is read for each receipt, not the watcher's last poll: after a burst of
    # blocks the watcher lags, and a dispatcher refuses a receipt whose horizon that lag shortened
    # below its promise (e2e test_a_dispatcher_killed_mid_audit_resumes_and_settles, once).
    worker.runner.horizon = lambda: compute_auditable_until_block(chainio.chain.get_block_number(), chainio.preset)
    seats = SeatBook(chainio, tables, lambda: watcher.head, compute_audit_horizon_blocks(chainio.preset))
    seats.on_seat = lambda seat: worker.promote_committee_job(seats.admit)  # a job that came before its seat was known
    store = app[APP_CONFIG].store
    pruner = StorePruner(tables.db, compute_horizons(chainio.preset, store.retention_blocks), lambda: watcher.head, store.prune_interval_s,
                         store.retention_s)
    worker.retention_s = None  # with a chain, the pruner keeps each job by its receipt's horizon in blocks, not by the clock
    stakes = EpochStakes(chainio, worker.served.model_id, lambda: watcher.head)
    return DispatchService(chainio, tables, router, watcher, tasks, seats, pruner, stakes, chain_tasks)


async def network_dispatcher_context(app: web.Application):
    """Connect to the chain, install the routing dispatcher, run the watcher until cleanup."""
    config = app[APP_CONFIG]
    deployment = load_deployment(app)
    tables = DispatcherTables(app[APP_STORE].db)
    started = time.monotonic()
    log.info("dispatcher: connecting to the chain at %s ...", config.chain.rpc_url)
    chainio = await asyncio.to_thread(ChainIO, config.chain.rpc_url, deployment, app[APP_KEY], tables)
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=config.dispatcher.request_timeout_s))
    # The duties' own connections: a client load that holds every connection of `session` never delays
    # a committee job or an opening this node checks (issue 35).
    duty_session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=config.dispatcher.request_timeout_s))
    service = build_service(app, session, chainio, tables, duty_session)
    await chainio.wait_own_pending_mined()  # a previous run's last transaction lands before its step is redone
    log.info("dispatcher: catching up with the contracts' events and the Registry ...")
    await service.router.view.refresh()  # the Registry's workers, on this loop (the router's), before serving
    # The watcher ticks on a thread and loop of its own, its batch posts beside it: no client on this loop
    # can delay them (duties first, issue 35). Its first tick catches up with the chain before serving.
    watcher_thread = WatcherThread(service.watcher, on_thread_end=getattr(tables.db, "close_this_thread", None))
    await watcher_thread.start()
    log.info("dispatcher: caught up with the chain at block %s in %.1f s", service.watcher.head, time.monotonic() - started)
    app[APP_DISPATCHER] = service.router
    app[APP_SERVICE] = service
    seats_task = asyncio.get_running_loop().create_task(service.seats.run_forever(), name="verillm-committee-seats")
    pruner_task = asyncio.get_running_loop().create_task(service.pruner.run_forever(), name="verillm-store-pruner")
    log.info("dispatcher: chain %s, deployment Jobs %s, %d workers serve the model", config.chain.rpc_url,
             deployment.addresses["Jobs"], len(service.router.view.workers))
    yield
    await watcher_thread.stop()
    for task in (seats_task, pruner_task):
        task.cancel()
    await asyncio.gather(seats_task, pruner_task, return_exceptions=True)
    await service.tasks.close()
    await session.close()
    await duty_session.close()
