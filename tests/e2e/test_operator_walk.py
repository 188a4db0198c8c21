"""A new operator's walk with the `verillm` commands, on a chain the test starts separately (an
anvil process standing in for a public testnet): deploy (the network's owner), a fresh node
key funded from a faucet, the node daemon with its dispatcher role, add-model (owner), then
the operator's register → status → stake → models → unbond → withdraw. The node's own
/healthz and its 503 say why it cannot serve at every step.

The audit part of the walk (a job a separate dispatcher audits) is `test_operator_walk_slow.py`.
"""

import json

import pytest
from web3 import Web3

from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilProcess
from verillm.chain.backends import compute_anvil_accounts
from verillm.client import Client
from verillm.errors import InvalidInput, QueueFull
from verillm.spec.params import MINIMAL, compute_leaver_schedule
from verillm.devnet.network import get_json
from verillm.node.worker.engines import ServedModel
from helpers.nodes import ThreadedNode, make_local_config

from e2e_network import run_cli, wait_for

pytestmark = pytest.mark.usefixtures("anvil_installed")


@pytest.fixture
def walk(tmp_path, tiny_engine):
    with AnvilProcess() as anvil:
        chain = RpcChain(anvil.url)
        owner_key = "0x" + bytes(compute_anvil_accounts(1)[0].key).hex()
        book = tmp_path / "addresses.json"
        run_cli("chain", "deploy", "--rpc-url", anvil.url, "--preset", "minimal", "--key", owner_key, "--out", book)
        addresses = json.loads(book.read_text())["addresses"]
        key_file = tmp_path / "node-key.json"
        address = Web3.to_checksum_address(run_cli("keys", "new", "--out", key_file).split()[0])
        chain.transfer(chain.dev_accounts[1], address, 2 * 10**18)  # the testnet faucet
        config = make_local_config(
            tmp_path / "node",
            identity={"key_file": key_file},
            chain={"rpc_url": anvil.url, "chain_id": chain.chain_id, "jobs_address": addresses["Jobs"], "registry_address": addresses["Registry"]},
            dispatcher={"enabled": "true", "deployment_file": book, "registry_refresh_s": 0.2},
        )
        node = ThreadedNode(config, ServedModel("tiny", tiny_engine, tiny_engine.tokenizer))
        try:
            yield {"anvil": anvil, "chain": chain, "owner_key": owner_key, "book": book, "key_file": key_file,
                   "address": address, "node": node}
        finally:
            node.stop()


def serving_reasons(node) -> list[str]:
    import urllib.error
    try:
        return get_json(f"{node.url}/healthz")["serving"]["reasons"]
    except urllib.error.HTTPError as exc:
        raise AssertionError(exc.read()) from None


def wait_reasons(node, predicate, timeout_s: float = 20.0) -> None:
    """Wait until ``predicate(reasons)``: the node re-reads the chain every few seconds
    (`ReadinessMonitor.refresh_s`), so a change just mined shows up within one refresh."""
    wait_for(lambda: predicate(serving_reasons(node)), timeout_s, "the node's /healthz reasons to show the change just mined")


def test_register_stake_models_status_unbond_withdraw(walk):
    node, chain, address = walk["node"], walk["chain"], walk["address"]
    operator = ["--rpc-url", walk["anvil"].url, "--addresses", walk["book"], "--key-file", walk["key_file"]]
    reasons = serving_reasons(node)
    assert any("not registered" in r for r in reasons) and any("not added to the Registry" in r for r in reasons), reasons
    with pytest.raises(QueueFull, match="not registered"):  # the 503 says why
        Client(node.url).complete("Hello", max_tokens=2, temperature=0)
    assert "cannot serve" in run_cli("node", "status", *operator)

    run_cli("chain", "add-model", "--rpc-url", walk["anvil"].url, "--addresses", walk["book"], "--key", walk["owner_key"], "--node", node.url)
    out = run_cli("node", "register", *operator, "--endpoint", node.url, "--stake", "0.05")
    assert f"registered {address}: stake 0.05 ETH" in out
    status = json.loads(run_cli("node", "status", *operator, "--node", node.url, "--json"))
    assert status["registered"] and status["active"] and status["stake_wei"] == 5 * 10**16
    assert len(status["reasons"]) == 1, status["reasons"]  # a registration weighs in draws from the next epoch on
    assert status["reasons"][0].startswith("0 workers weigh in this epoch's committee draws for model " + status["models"][0]), status["reasons"]
    assert "1 weigh from the next epoch" in status["reasons"][0]
    wait_reasons(node, lambda reasons: reasons == status["reasons"])
    explorer = get_json(f"{node.url}/v1/verillm/explorer/network")["serving"]  # the explorer's banner says the same
    assert explorer["ready"] is False and explorer["reasons"] == status["reasons"]

    assert "stake now 0.15 ETH" in run_cli("node", "stake", *operator, "--amount", "0.1")
    assert "stake now 0.2 ETH" in run_cli("node", "top-up", *operator, "--amount", "0.05")
    model_id = status["models"][0]
    assert f"declares {model_id}" in run_cli("node", "models", *operator, "--model-id", model_id)

    unbond = run_cli("node", "unbond", *operator)
    assert "deregistered: withdraw from block" in unbond
    # the node is told until when it must stay up (its last audit duty), as the status says
    left = chain.get_block_number()
    stay_up = compute_leaver_schedule(left, MINIMAL).duties_end_block
    assert f"keep the node up until block {stay_up}" in unbond
    status = json.loads(run_cli("node", "status", *operator, "--json"))
    assert status["stay_up_until_block"] == stay_up <= status["unbonding_end_block"]
    assert f"keep the node up until block {stay_up}" in run_cli("node", "status", *operator)
    wait_reasons(node, lambda reasons: any("unbonding until block" in r for r in reasons))
    with pytest.raises(InvalidInput, match="still unbonding"):
        run_cli("node", "withdraw", *operator)
    before = chain.get_balance(address)
    chain.mine(MINIMAL.UNBONDING_BLOCKS + 1)  # the preset's unbonding period
    assert "withdrew 0.2 ETH" in run_cli("node", "withdraw", *operator)
    assert chain.get_balance(address) > before + 19 * 10**16  # the stake, less the gas
    wait_reasons(node, lambda reasons: any("not registered" in r for r in reasons))
