"""Foundry-style tools for a local chain: `verillm chain anvil` prints its funded accounts,
`verillm chain fund` is a faucet, `verillm chain mine` moves the head; every transaction a
command sends is announced on stderr before it waits for its block."""

import re
import subprocess
import sys

from click.testing import CliRunner
from eth_account import Account

from verillm.chain.anvil import find_free_port
from verillm.chain.backends import MINE_CHUNK_BLOCKS, RpcChain
from verillm.chain.chain import ChainConfig
from verillm.errors import ChainError
from verillm.cli.chain import chain as chain_cli, format_dev_accounts

STRANGER = "0x000000000000000000000000000000000000bEEF"


def test_fund_sends_ether_from_the_dev_account_and_says_it_waits(anvil_chain):
    before = anvil_chain.get_balance(STRANGER)
    result = CliRunner().invoke(chain_cli, ["fund", STRANGER, "1.5", "--rpc-url", anvil_chain.url])
    assert result.exit_code == 0, result.output
    assert anvil_chain.get_balance(STRANGER) == before + 15 * 10**17
    assert "transfer: sent; waiting for the transaction to be mined" in result.stderr
    assert f"sent 1.5 ETH from {anvil_chain.dev_accounts[0].address}" in result.stdout


def test_fund_from_a_given_key_and_refuses_a_bad_address(anvil_chain):
    payer = anvil_chain.dev_accounts[3]
    before = anvil_chain.get_balance(payer.address)
    key = "0x" + bytes(payer.key).hex()
    result = CliRunner().invoke(chain_cli, ["fund", STRANGER, "2wei", "--rpc-url", anvil_chain.url, "--key", key])
    assert result.exit_code == 0, result.output
    assert anvil_chain.get_balance(payer.address) < before - 2
    assert "not an Ethereum address" in str(CliRunner().invoke(chain_cli, ["fund", "0x12", "1", "--rpc-url", anvil_chain.url]).exception)


def test_mine_moves_the_head_by_blocks_and_to_a_block(anvil_chain):
    head = anvil_chain.get_block_number()
    assert CliRunner().invoke(chain_cli, ["mine", "--rpc-url", anvil_chain.url, "--blocks", "7"]).exit_code == 0
    assert anvil_chain.get_block_number() == head + 7
    result = CliRunner().invoke(chain_cli, ["mine", "--rpc-url", anvil_chain.url, "--to-block", str(head + 30)])
    assert result.exit_code == 0 and f"head {head + 30}" in result.stdout
    refused = CliRunner().invoke(chain_cli, ["mine", "--rpc-url", anvil_chain.url, "--blocks", "1", "--to-block", "5"])
    assert refused.exit_code == 2 and "exactly one of" in refused.output


def test_a_long_mine_lands_on_its_target_with_progress(anvil_chain):
    """Issue 36: `chain mine --past-unbonding` on a kept devnet overshot (3,020 blocks reported, the
    head 3,400 past its target) and printed nothing for 7 minutes. A long mine goes in steps, says
    where it is, and lands on the target block exactly."""
    head = anvil_chain.get_block_number()
    goal = head + 3 * MINE_CHUNK_BLOCKS + 17
    result = CliRunner().invoke(chain_cli, ["mine", "--rpc-url", anvil_chain.url, "--to-block", str(goal)])
    assert result.exit_code == 0, result.output
    assert anvil_chain.get_block_number() == goal
    assert f"mined {goal - head} blocks: head {goal}" in result.stdout
    assert result.stderr.count(f" of {goal} (") == 4  # one line per step


def test_a_mine_whose_rpc_call_times_out_is_never_mined_twice(anvil_chain):
    """The overshoot's cause: one `anvil_mine` outlived the client's RPC timeout after anvil had
    mined, and a block-by-block fallback mined the blocks again. Whatever times out, the head ends
    on the goal (the head is re-read before each step)."""
    impatient = RpcChain(anvil_chain.url, config=ChainConfig(rpc_timeout_s=0.02))
    head = anvil_chain.get_block_number()
    goal = head + 2 * MINE_CHUNK_BLOCKS
    for _ in range(50):  # a 20 ms timeout fails some reads too: retry the whole mine, as a user would
        try:
            impatient.mine_to(goal)
            break
        except ChainError:
            continue
    assert anvil_chain.get_block_number() == goal


def test_the_printed_dev_accounts_are_anvils_funded_ones(anvil_chain):
    text = format_dev_accounts(10, 10_000)
    rows = re.findall(r"\((\d+)\) (0x[0-9a-fA-F]{40})  key (0x[0-9a-f]{64})", text)
    assert len(rows) == 10
    for _, address, key in rows:
        assert Account.from_key(key).address == address
        assert anvil_chain.get_balance(address) > 0  # anvil funds exactly these
    assert rows[0][1] == anvil_chain.dev_accounts[0].address


def test_chain_anvil_prints_its_accounts(anvil_binary):
    port = find_free_port()
    process = subprocess.Popen([sys.executable, "-c", "from verillm.cli import main; main()", "chain", "anvil", "--port", str(port), "--accounts", "3"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = [process.stdout.readline() for _ in range(5)]
    finally:
        process.terminate()
        process.wait(timeout=15)
    assert "anvil listening on" in lines[0] and "funded dev accounts (10,000 ETH each" in lines[1]
    assert [line.split()[0] for line in lines[2:5]] == ["(0)", "(1)", "(2)"]
