"""Fixtures for SDK tests: a real node (tiny model) serving from a background thread."""

import pytest

from verillm.node.worker.engines import ServedModel
from helpers.nodes import ThreadedNode, make_local_config


@pytest.fixture(scope="session")
def served_tiny(tiny_engine):
    """The tiny model as a node serves it."""
    return ServedModel(alias="tiny", engine=tiny_engine, tokenizer=tiny_engine.tokenizer)


@pytest.fixture
def threaded_node(served_tiny, tmp_path):
    """A node on its own loop and thread, so synchronous clients can call it."""
    node = ThreadedNode(make_local_config(tmp_path), served_tiny)
    yield node
    node.stop()
