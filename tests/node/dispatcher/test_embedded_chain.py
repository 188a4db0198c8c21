"""The embedded chain: eth-tester behind a loopback JSON-RPC endpoint, used through `RpcChain`
exactly like anvil — deploys, reads, reverts decoded by name, blocks mined on a clock."""

import time

import pytest
from eth_account import Account

from verillm.chain import RpcChain, TransactionReverted
from verillm.chain.protocol import Protocol
from verillm.devnet.embedded_chain import EmbeddedChainServer
from verillm.spec.params import MINIMAL


@pytest.fixture(scope="module")
def embedded():
    server = EmbeddedChainServer(block_time_s=0.2).start()
    yield server
    server.stop()


def test_a_deployment_is_read_and_written_over_json_rpc(embedded):
    deployed = Protocol.deploy(embedded.chain, MINIMAL, embedded.chain.dev_accounts[0])
    remote = RpcChain(embedded.url)
    assert remote.chain_id == embedded.chain.chain_id
    protocol = Protocol(remote, deployed.deployment)
    assert protocol.preset.COMMITTEE_SIZE == MINIMAL.COMMITTEE_SIZE
    stranger = Account.create()
    embedded.chain.transfer(embedded.chain.dev_accounts[0], stranger.address, 10**18)
    assert remote.get_balance(stranger.address) == 10**18
    with pytest.raises(TransactionReverted) as raised:
        protocol.post_batch(stranger, [b"\x01" * 32])
    assert raised.value.error == "NotActiveNode"


def test_blocks_advance_on_the_clock_without_transactions(embedded):
    remote = RpcChain(embedded.url)
    first = remote.get_block_number()
    time.sleep(0.7)
    assert remote.get_block_number() >= first + 2


def test_unknown_methods_are_refused(embedded):
    answer = embedded.handle({"jsonrpc": "2.0", "id": 1, "method": "debug_traceTransaction", "params": []})
    assert answer["error"]["code"] == -32601
