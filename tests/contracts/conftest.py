"""Contract fixtures: one real anvil process per session, one protocol deployment per module
(`world`), rolled back to a snapshot after every test."""

import pytest

from verillm.chain.anvil import AnvilProcess

from helpers.contracts import World, connect

@pytest.fixture(scope="session")
def contracts_anvil(anvil_installed):
    """An anvil process for the contract tests (skipped without the npm binary)."""
    with AnvilProcess() as process:
        yield process


@pytest.fixture(scope="module")
def world_base(contracts_anvil):
    """A deployment with six registered nodes, shared by a module's tests."""
    return World(connect(contracts_anvil))


@pytest.fixture
def world(world_base):
    """The module's deployment, reset to its registered state after the test."""
    chain = world_base.chain
    snapshot = chain.snapshot()
    yield world_base
    chain.set_automine(True)
    chain.revert(snapshot)
