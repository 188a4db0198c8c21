"""The anvil process wrapper: a real process, started on a free port and stopped by PID."""

import os
import time

import pytest

from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilConfig, AnvilProcess
from verillm.chain.backends import compute_anvil_accounts
from verillm.errors import VerillmError


def test_anvil_starts_answers_and_is_gone_after_stop(anvil_binary):
    node = AnvilProcess(AnvilConfig(chain_id=4242, accounts=2))
    with node:
        pid = node.process.pid
        chain = RpcChain(node.url)
        assert chain.chain_id == 4242
        assert chain.dev_accounts == []  # not anvil's default chain id: no dev keys assumed
        assert node.is_ready()
    assert node.process is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not node.is_ready()


def test_anvil_with_block_time_mines_on_its_own(anvil_binary):
    with AnvilProcess(AnvilConfig(block_time_s=0.2)) as node:
        chain = RpcChain(node.url)
        first = chain.get_block_number()
        time.sleep(0.7)
        assert chain.get_block_number() >= first + 2


def test_anvil_with_a_genesis_timestamp_replays_its_block_hashes(anvil_binary):
    """A fixed genesis timestamp and a fixed interval: the same blocks in two processes (the
    protocol fuzzer's seeds replay across runs); the wall clock gives other hashes."""
    def mine_three(config):
        with AnvilProcess(config) as node:
            chain = RpcChain(node.url)
            chain.w3.provider.make_request("anvil_setBlockTimestampInterval", [1])
            chain.mine(3)
            return chain.get_block(3)["hash"], chain.get_block(0)["timestamp"]
    fixed = AnvilConfig(genesis_timestamp_s=1_700_000_000)
    first, genesis = mine_three(fixed)
    assert genesis == 1_700_000_000
    assert mine_three(fixed)[0] == first
    assert mine_three(AnvilConfig())[0] != first


def test_anvil_on_a_taken_port_fails_with_its_message(anvil_process):
    with pytest.raises(VerillmError, match="anvil"):
        AnvilProcess(AnvilConfig(port=anvil_process.port, start_timeout_s=3)).start()


def test_anvil_dev_accounts_are_the_well_known_keys():
    accounts = compute_anvil_accounts(2)
    assert accounts[0].address == "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
    assert accounts[1].address == "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"


def test_anvil_dev_accounts_are_funded(anvil_chain):
    assert anvil_chain.chain_id == 31337
    assert all(anvil_chain.get_balance(a.address) > 10**21 for a in anvil_chain.dev_accounts)
