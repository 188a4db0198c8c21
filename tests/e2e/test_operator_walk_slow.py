"""The whole walk of a new operator, audit included (slow: ~3 minutes): an anvil the test starts
separately (a stand-in for a public testnet); an existing network on it (four devnode
processes, one of them the gateway whose dispatcher audits every job, MINIMAL preset); the
newcomer's fresh key, funded; its own `verillm node run` process; register → stake → declare
the model with the `verillm node` commands; a job the gateway routes to the newcomer, audited
by a committee drawn from the others, settled as passed; then unbond → withdraw."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from web3 import Web3

from verillm.chain.anvil import AnvilConfig, AnvilProcess, find_free_port
from verillm.client import Client
from verillm.devnet.network import LocalNetwork, NodeSpec, get_json

from e2e_network import run_cli, wait_settled

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("anvil_installed")]


def _wait_http(url: str, process: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the node exited:\n{log.read_text()[-3000:]}")
        try:
            get_json(url, 1.0)
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"the node did not answer {url}:\n{log.read_text()[-3000:]}")


def test_a_new_operator_serves_an_audited_job_then_leaves(tmp_path):
    with AnvilProcess(AnvilConfig(block_time_s=1.0)) as anvil, \
            LocalNetwork(tmp_path / "net", [NodeSpec() for _ in range(4)], model="tiny", chain=anvil.url, log=lambda line: None) as net:
        book = net.deployment_file
        addresses = json.loads(book.read_text())["addresses"]
        key_file = tmp_path / "newcomer" / "key.json"
        key_file.parent.mkdir()
        address = Web3.to_checksum_address(run_cli("keys", "new", "--out", key_file).split()[0])
        net.protocol.chain.transfer(net.protocol.chain.dev_accounts[2], address, 10**18)  # the faucet
        port = find_free_port()
        config = key_file.parent / "node.toml"
        config.write_text("\n".join([
            "[identity]", f'key_file = "{key_file}"', "[server]", 'host = "127.0.0.1"', f"port = {port}",
            "[engine]", 'model = "tiny"', 'preset = "minimal"', "[store]", f'path = "{key_file.parent / "node.sqlite"}"',
            "[chain]", f'rpc_url = "{anvil.url}"', f"chain_id = {net.protocol.chain.chain_id}",
            f'jobs_address = "{addresses["Jobs"]}"', f'registry_address = "{addresses["Registry"]}"',
            "[dispatcher]", "enabled = true", f'deployment_file = "{book}"', "poll_interval_s = 0.5", "registry_refresh_s = 0.5", ""]))
        log = key_file.parent / "node.log"
        with open(log, "w") as handle:
            node = subprocess.Popen([str(Path(sys.executable).parent / "verillm"), "node", "run", "--config", str(config)],
                                    stdout=handle, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_http(f"{url}/healthz", node, log)
            assert any("not registered" in r for r in get_json(f"{url}/healthz")["serving"]["reasons"])
            run_cli("node", "register", "--config", config, "--endpoint", url, "--stake", "0.02")
            run_cli("node", "stake", "--config", config, "--amount", "0.03")
            model_id = "0x" + net.model_id.hex()
            run_cli("node", "models", "--config", config, "--model-id", model_id)
            status = json.loads(run_cli("node", "status", "--config", config, "--json"))
            assert status["ready"] and status["stake_wei"] == 5 * 10**16, status
            deadline = time.monotonic() + 60
            while len(get_json(f"{net.gateway_url}/v1/verillm/dispatcher")["workers"]) < 5:
                assert time.monotonic() < deadline, "the gateway never saw the newcomer"
                time.sleep(0.5)

            client = Client(net.gateway_url)  # a separate dispatcher: node 0 routes and audits
            completions = [client.complete(f"The newcomer's job {i}", max_tokens=6, temperature=0) for i in range(5)]
            mine = [c for c in completions if c.worker == address]
            assert mine, "round-robin never reached the newcomer"
            body = wait_settled(net, mine[:1])[0]
            assert body["status"] == "final" and body["audit"]["verdict"] == "pass", body
            assert address.lower() not in {m.lower() for m in body["audit"]["committee"]}

            run_cli("node", "unbond", "--config", config)
            deadline = time.monotonic() + 240  # its own committee seats must settle before the stake unlocks
            while json.loads(run_cli("node", "status", "--config", config, "--json"))["locks"]:
                assert time.monotonic() < deadline, "the newcomer's stake stayed locked"
                time.sleep(2)
            net.protocol.chain.mine(101)  # MINIMAL: 100 unbonding blocks
            before = net.protocol.chain.get_balance(address)
            assert "withdrew 0.05 ETH" in run_cli("node", "withdraw", "--config", config)
            assert net.protocol.chain.get_balance(address) > before
        finally:
            node.send_signal(signal.SIGTERM)
            node.wait(30)
