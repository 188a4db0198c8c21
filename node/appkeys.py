"""Every typed key of the node's aiohttp application, in one place."""

from collections import Counter
from typing import TYPE_CHECKING

from aiohttp import web

from verillm.spec.receipt import SigningDomain

from verillm.node.config import NodeConfig
from verillm.node.dispatcher.local import Dispatcher
from verillm.node.worker.engines import ServedModel
from verillm.node.keys import NodeKey
from verillm.node.metrics import NodeMetrics
from verillm.node.store.store import Store
from verillm.node.worker.worker import Worker

if TYPE_CHECKING:  # the dispatcher role imports the chain stack; only its nodes load it
    from verillm.node.dispatcher.audit.duties import PartyFaults
    from verillm.node.dispatcher.service import DispatchService

APP_CONFIG = web.AppKey("config", NodeConfig)
APP_METRICS = web.AppKey("metrics", NodeMetrics)
APP_KEY = web.AppKey("node_key", NodeKey)
APP_DOMAIN = web.AppKey("signing_domain", SigningDomain)
APP_MODEL = web.AppKey("served_model", ServedModel)
APP_STORE = web.AppKey("store", Store)
APP_WORKER = web.AppKey("worker", Worker)
APP_DISPATCHER = web.AppKey("dispatcher", Dispatcher)
APP_INFLIGHT = web.AppKey("inflight_per_client", Counter)
"""Requests in flight per client (node/api/clients.py)."""
APP_SERVICE: "web.AppKey[DispatchService]" = web.AppKey("dispatcher_service")
"""The networked dispatcher role, when enabled (node/dispatcher/service.py)."""
APP_FAULTS: "web.AppKey[PartyFaults]" = web.AppKey("dispatcher_faults")
"""Faults the party duties injected for tests (node/dispatcher/audit/duties.py)."""
