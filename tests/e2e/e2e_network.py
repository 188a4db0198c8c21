"""Helpers of the end-to-end tests: start a network, send jobs, wait for settlement."""

import time

import pytest
from click.testing import CliRunner

from verillm.cli import cli
from verillm.client import Client
from verillm.devnet.run import retry_no_workers
from verillm.devnet.network import LocalNetwork, NodeSpec, get_json

SETTLE_TIMEOUT_S = 240.0


def wait_for(predicate, timeout_s: float, what: str) -> None:
    """Poll ``predicate`` until it holds; fail the test naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.3)


def start_network(tmp_path_factory, specs: list[NodeSpec], name: str, preset="minimal") -> LocalNetwork:
    net = LocalNetwork(tmp_path_factory.mktemp(name), specs, model="tiny", preset=preset, chain="anvil", block_time_s=1.0, log=lambda line: None)
    net.__enter__()
    net.wait_gateway_sees_all()
    return net


def send_jobs(net: LocalNetwork, count: int, max_tokens: int = 8) -> list:
    """Send ``count`` greedy completions through node 0; return the SDK's Completions."""
    client = Client(net.gateway_url)
    return [retry_no_workers(lambda i=i: client.complete(f"The river {i} runs past the mill", max_tokens=max_tokens, temperature=0))
            for i in range(count)]


def get_status(net: LocalNetwork, completion) -> dict:
    return get_json(f"{net.gateway_url}/v1/verillm/audits/0x{completion.job_hash.hex()}")


def wait_settled(net: LocalNetwork, completions: list, timeout_s: float = SETTLE_TIMEOUT_S) -> list[dict]:
    """Poll node 0 until every job's audit has settled; return the status bodies."""
    deadline = time.monotonic() + timeout_s
    while True:
        bodies = [get_status(net, c) for c in completions]
        if all((b.get("audit") or {}).get("status") in ("settled", "abandoned") for b in bodies):
            return bodies
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- node {n.index} ({n.spec.label}):\n{net.tail_log(n.index, 25)}" for n in net.nodes)
            pytest.fail(f"audits did not settle in {timeout_s} s: {[(b['status'], (b.get('audit') or {}).get('status')) for b in bodies]}\n{logs}")
        time.sleep(1.0)


def run_cli(*args) -> str:
    """Run `verillm ARGS` in-process; raise its exception or fail on a non-zero exit; return its output."""
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result.output
