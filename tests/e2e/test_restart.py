"""A dispatcher killed with SIGKILL in the middle of its audits restarts from its SQLite store
and finishes them: committee jobs are resent (the same job, so the members answer with the
receipt they already signed), receipts posted, openings checked, rounds finalized, settled."""

import signal
import time

import pytest

from verillm.node.dispatcher.localnet import NodeSpec

from conftest import get_status, send_jobs, start_network, wait_settled

pytestmark = pytest.mark.usefixtures("anvil_installed")


@pytest.fixture(scope="module")
def network(tmp_path_factory, anvil_installed):
    net = start_network(tmp_path_factory, [NodeSpec() for _ in range(4)], "restart")
    yield net
    net.stop()


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.3)


def test_a_dispatcher_killed_mid_audit_resumes_and_settles(network):
    completions = send_jobs(network, 4)
    _wait_for(lambda: any(get_status(network, c)["status"] == "audited" for c in completions), 90, "an audit to start")
    before = [get_status(network, c) for c in completions]
    assert not all((b.get("audit") or {}).get("status") == "settled" for b in before)

    network.kill_node(0, signal.SIGKILL)
    time.sleep(2.0)
    network.start_node(0)

    bodies = wait_settled(network, completions)
    assert [b["status"] for b in bodies] == ["final"] * 4, [b["status"] for b in bodies]
    assert all(b["audit"]["verdict"] == "pass" and not b["audit"]["slashed"] for b in bodies)
    log = network.nodes[0].log_file.read_text()
    assert log.count("verillm devnode listening") == 2  # the same store, served by a second process
