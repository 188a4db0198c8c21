"""Fixtures for node tests: a real node on loopback (real tiny-model engine, aiohttp, SQLite).

The tiny TorchEngine is the session fixture `tiny_engine` from tests/conftest.py, loaded once
and shared by every node of the session.
"""

import dataclasses

import aiohttp
import pytest

from verillm.node.app import start_node
from verillm.node.config import NodeConfig
from verillm.node.worker.engines import ServedModel
from verillm.node.keys import new_node_key
from verillm.node.dispatcher.peer import PeerClient
from helpers.nodes import make_local_config


@pytest.fixture(scope="session")
def served_tiny(tiny_engine):
    """The tiny model as a node serves it."""
    return ServedModel(alias="tiny", engine=tiny_engine, tokenizer=tiny_engine.tokenizer)


@dataclasses.dataclass
class RunningNode:
    """A node serving on loopback."""

    url: str
    app: object
    config: NodeConfig


@pytest.fixture
async def start(served_tiny, tmp_path, dispatcher_key):
    """``await start(**sections)`` starts a node (per-section config overrides); all stop at teardown.

    Unless ``auth`` is given, its operator names ``dispatcher_key`` for the native job route
    (node/api/admission.py): the tests' dispatcher is accountable, a fresh key is not."""
    runners = []

    async def _start(config: NodeConfig | None = None, served: ServedModel | None = None, **sections) -> RunningNode:
        sections.setdefault("auth", {"allowed_senders": [dispatcher_key.address_hex]})
        config = config or make_local_config(tmp_path, **sections)
        runner, port = await start_node(config, served or served_tiny)
        runners.append(runner)
        return RunningNode(f"http://127.0.0.1:{port}", runner.app, config)

    yield _start
    for runner in reversed(runners):
        await runner.cleanup()


@pytest.fixture
async def node(start):
    """A node with the default config (its operator naming ``dispatcher_key`` for the native job route)."""
    return await start()


@pytest.fixture
async def http():
    """An aiohttp client session."""
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def dispatcher_key():
    """The key of a dispatcher that sends signed jobs to the node."""
    return new_node_key()


@pytest.fixture
def peer(node, http, dispatcher_key):
    """A signed native-API client to ``node``, as a dispatcher."""
    return PeerClient(node.url, dispatcher_key, http)
