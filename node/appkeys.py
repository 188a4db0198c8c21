"""Every typed key of the node's aiohttp application, in one place."""

from aiohttp import web

from verillm.spec.receipt import SigningDomain

from verillm.node.config import NodeConfig
from verillm.node.dispatcher.local import Dispatcher
from verillm.node.worker.engines import ServedModel
from verillm.node.keys import NodeKey
from verillm.node.metrics import NodeMetrics
from verillm.node.store.store import Store
from verillm.node.worker.worker import Worker

APP_CONFIG = web.AppKey("config", NodeConfig)
APP_METRICS = web.AppKey("metrics", NodeMetrics)
APP_KEY = web.AppKey("node_key", NodeKey)
APP_DOMAIN = web.AppKey("signing_domain", SigningDomain)
APP_MODEL = web.AppKey("served_model", ServedModel)
APP_STORE = web.AppKey("store", Store)
APP_WORKER = web.AppKey("worker", Worker)
APP_DISPATCHER = web.AppKey("dispatcher", Dispatcher)
