"""Fixtures for the spec tests that compare the Python twins with the contracts."""

import pytest

from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilProcess
from verillm.chain.protocol import Protocol
from verillm.spec.params import MINIMAL


@pytest.fixture(scope="module")
def protocol(anvil_installed):
    """The protocol contracts deployed (MINIMAL) on a real anvil process, one per test module."""
    with AnvilProcess() as anvil:
        chain = RpcChain(anvil.url)
        yield Protocol.deploy(chain, MINIMAL, chain.dev_accounts[0])
