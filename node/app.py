"""The node daemon's aiohttp application: `create_app(config)` and `run_node(config)`.

Resources with a lifetime are `cleanup_ctx` generators, set up in order and torn down in
reverse: metrics → key → store → model (engine) → worker (batcher task, restart recovery)
→ dispatcher. Tests build the app the same way; they may pass an already loaded
`ServedModel` so the model is loaded once per test session.
"""

import asyncio
import contextlib
import gc
import logging
import signal
import time
from collections import Counter

from aiohttp import web

from verillm.chain.bn254 import install_fast_bn254
from verillm.spec.receipt import SigningDomain

from verillm.node.appkeys import APP_CONFIG, APP_DISPATCHER, APP_DOMAIN, APP_KEY, APP_METRICS, APP_MODEL, APP_STORE, APP_WORKER
from verillm.node.config import NodeConfig
from verillm.node.dispatcher.local import LocalDispatcher
from verillm.node.dispatcher_role import network_dispatcher_context
from verillm.node.worker.engines import ServedModel, build_served_model
from verillm.node.keys import load_node_key
from verillm.node.metrics import NodeMetrics
from verillm.node.api.clients import client_middleware
from verillm.node.appkeys import APP_INFLIGHT
from verillm.node.middlewares import SERVER_LOG, error_middleware
from verillm.node.profiling import install_profile_toggle
from verillm.node.routes import setup_routes
from verillm.node.store.store import open_store
from verillm.wire import from_hex
from verillm.node.worker.worker import Worker
from verillm.node.worker.opening_process import start_pool

log = logging.getLogger(__name__)


def create_app(config: NodeConfig, served: ServedModel | None = None) -> web.Application:
    """Build the node's application from ``config`` (``served``: a preloaded model, for tests)."""
    install_fast_bn254()  # VRF proofs checked in revm's precompiles when pyrevm is installed
    app = web.Application(middlewares=[error_middleware, client_middleware], client_max_size=config.limits.max_request_bytes)
    app[APP_INFLIGHT] = Counter()
    app[APP_CONFIG] = config
    app[APP_METRICS] = NodeMetrics()
    app[APP_DOMAIN] = SigningDomain(chain_id=config.chain.chain_id, verifying_contract=from_hex(config.chain.jobs_address, "chain.jobs_address", 20))
    app.cleanup_ctx.append(key_context)
    app.cleanup_ctx.append(store_context)
    app.cleanup_ctx.append(_model_context(served))
    app.cleanup_ctx.append(worker_context)
    app.cleanup_ctx.append(dispatcher_context)
    setup_routes(app)
    return app


async def key_context(app: web.Application):
    """Load the node's signing key."""
    identity = app[APP_CONFIG].identity
    app[APP_KEY] = load_node_key(identity.key_file, identity.password_env)
    yield


async def store_context(app: web.Application):
    """Open (and migrate) the store; close it last."""
    config = app[APP_CONFIG].store
    store = open_store(config.path, config.synchronous, config.receipts_synchronous)
    app[APP_STORE] = store
    yield
    getattr(store.db, "close_all", store.db.conn.close)()  # a file store: every thread's connection (node/store/connections.py)


def _model_context(served: ServedModel | None):
    async def model_context(app: web.Application):
        """Load the engine and model named by the config (in a thread: it takes seconds)."""
        if served is None:
            engine, started = app[APP_CONFIG].engine, time.monotonic()
            log.info("loading model %s (%s, engine %s): tens of seconds for a real model ...", engine.model, engine.dtype, engine.kind)
            app[APP_MODEL] = await asyncio.to_thread(build_served_model, engine)
            log.info("model %s loaded in %.1f s", app[APP_MODEL].name, time.monotonic() - started)
        else:
            app[APP_MODEL] = served
        yield

    return model_context


async def worker_context(app: web.Application):
    """Start the worker's batcher and re-queue jobs left unfinished by the last run."""
    config = app[APP_CONFIG]
    worker = Worker(app[APP_MODEL], app[APP_STORE], app[APP_KEY], app[APP_DOMAIN], config.limits, config.queue, app[APP_METRICS],
                    retention_s=config.store.retention_s)
    app[APP_WORKER] = worker
    batcher = asyncio.get_running_loop().create_task(worker.queue.run_forever(), name="verillm-batcher")
    worker.on_startup()
    yield
    batcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await batcher
    worker.queue.close()


async def dispatcher_context(app: web.Application):
    """Install the dispatcher role (local: every job runs on this node's worker)."""
    if app[APP_CONFIG].dispatcher.enabled:  # routing dispatcher + audit scheduler + chain watcher (node/dispatcher/)
        async for _ in network_dispatcher_context(app):
            yield
        return
    app[APP_DISPATCHER] = LocalDispatcher(app[APP_WORKER], app[APP_STORE])
    yield


def get_runner_options(config: NodeConfig) -> dict:
    """The `web.AppRunner` options of a node: no access log, the slowloris limit, one line per unparsable request."""
    return {"access_log": None, "keepalive_timeout": config.limits.header_timeout_s, "logger": SERVER_LOG}


async def start_node(config: NodeConfig, served: ServedModel | None = None) -> tuple[web.AppRunner, int]:
    """Start the node on config.server.host:port; return the runner and the bound port."""
    # aiohttp's keep-alive timer is the only clock on a connection whose headers never finish (its
    # default is an hour): limits.header_timeout_s closes a slowloris client instead.
    runner = web.AppRunner(create_app(config, served), **get_runner_options(config))
    await runner.setup()
    site = web.TCPSite(runner, config.server.host, config.server.port)
    await site.start()
    return runner, runner.addresses[0][1]


async def run_node(config: NodeConfig) -> None:
    """Run the node until SIGINT or SIGTERM, then stop accepting and tear down in order."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    install_profile_toggle(loop)  # only with VERILLM_NODE_PROFILE set (`verillm bench node --profile`)
    runner, port = await start_node(config)
    await start_pool(config.limits.max_concurrent_openings)  # the openings' processes, before any request needs one
    # The model and every import are loaded now: freeze them out of the cyclic GC, whose full
    # collections would otherwise walk ~450k objects (~0.3 s with the event loop stopped) each
    # time a burst of requests (65,536 opening cells) allocates enough to trigger one.
    gc.collect()
    gc.freeze()
    log.info("verillm node %s serving %s on http://%s:%d", runner.app[APP_KEY].address_hex, runner.app[APP_MODEL].name, config.server.host, port)
    print(f"verillm node listening on http://{config.server.host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        log.info("stopping; jobs not finished stay in the store and re-run at the next start")
        await runner.cleanup()
