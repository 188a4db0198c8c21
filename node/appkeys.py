"""Every typed key of the node's aiohttp application, in one place."""

from aiohttp import web

from verillm.spec.receipt import SigningDomain

from verillm.node.config import NodeConfig
from verillm.node.dispatch import Dispatcher
from verillm.node.engines import ServedModel
from verillm.node.keys import NodeKey
from verillm.node.metrics import NodeMetrics
from verillm.node.store import Store
from verillm.node.worker import Worker

APP_CONFIG = web.AppKey("config", NodeConfig)
APP_METRICS = web.AppKey("metrics", NodeMetrics)
APP_KEY = web.AppKey("node_key", NodeKey)
APP_DOMAIN = web.AppKey("signing_domain", SigningDomain)
APP_MODEL = web.AppKey("served_model", ServedModel)
APP_STORE = web.AppKey("store", Store)
APP_WORKER = web.AppKey("worker", Worker)
APP_DISPATCHER = web.AppKey("dispatcher", Dispatcher)
