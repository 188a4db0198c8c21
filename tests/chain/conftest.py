"""Chain fixtures: a real anvil process per session, a fresh eth-tester chain per test, and
`chain` parametrised over both backends, each with ten prefunded dev accounts."""

from pathlib import Path

import pytest

from verillm.chain import EthTesterChain, RpcChain
from verillm.chain.anvil import AnvilProcess, find_anvil_binary
from verillm.chain.artifacts import ArtifactStore

TEST_ARTIFACTS = Path(__file__).parent / "contracts" / "artifacts"


@pytest.fixture(scope="session")
def anvil_binary(anvil_installed) -> str:
    """The anvil executable; tests that start their own anvil skip without one."""
    return find_anvil_binary()


@pytest.fixture(scope="session")
def artifacts() -> ArtifactStore:
    """The project's artifacts plus the test-only ChainProbe."""
    return ArtifactStore((TEST_ARTIFACTS,))


@pytest.fixture(scope="session")
def anvil_process(anvil_binary):
    """One anvil process for the session, killed at the end."""
    with AnvilProcess() as process:
        yield process


@pytest.fixture
def anvil_chain(anvil_process, artifacts):
    """An RpcChain on the session's anvil; the chain state is rolled back after each test."""
    chain = RpcChain(anvil_process.url, artifacts=artifacts)
    snapshot = chain.snapshot()
    yield chain
    chain.set_automine(True)
    chain.revert(snapshot)


@pytest.fixture
def tester_chain(artifacts):
    """A fresh in-process eth-tester chain."""
    return EthTesterChain(artifacts=artifacts)


@pytest.fixture(params=["eth-tester", "anvil"])
def chain(request):
    """Each test that takes `chain` runs on both backends."""
    return request.getfixturevalue("tester_chain" if request.param == "eth-tester" else "anvil_chain")


@pytest.fixture
def probe(chain):
    """A ChainProbe (min payment 0.001 ether) deployed by dev account 0."""
    return chain.deploy("ChainProbe", 10**15, sender=chain.dev_accounts[0])
