"""A dispatcher killed with SIGKILL in the middle of its audits restarts from its SQLite store
and finishes them: committee jobs are resent (the same job, so the members answer with the
receipt they already signed), receipts posted, openings checked, rounds finalized, settled.

The fifth node posts, as a worker, opened leaves nudged by two ulps: inside every tolerance
band (its committee agrees) but not what it committed to. Only the dispatcher's check of the
opening against the worker's root catches it: a contest the worker cannot answer slashes it.

The network runs MINIMAL with windows that absorb a restart. A dispatcher process takes 8–20 s
to come back (interpreter, model, store, chain catch-up); at one block a second MINIMAL's
10-block draw window closes on a batch posted just before the kill, and a dispatcher that misses
a draw is rightly slashable: the protocol cannot tell a restart from a withheld draw. Operators
size windows in time with the same margin (docs/operators.md, "Restarts")."""

import signal
import time

import pytest

from verillm.devnet.windows import compute_timed_preset
from verillm.devnet.network import NodeSpec
from verillm.spec.params import MINIMAL

from e2e_network import get_status, send_jobs, start_network, wait_for, wait_settled

pytestmark = pytest.mark.usefixtures("anvil_installed")

# Two-minute windows at one block a second, as the devnet sizes them: a restart fits in each even
# on a loaded machine (42 s measured at load average 35 on 2 cores, where 45-block commit windows
# closed). The proof window stays MINIMAL's: the tamperer never answers its contest, and a longer
# window would only delay its slash.
RESTART_PRESET = compute_timed_preset(MINIMAL, 1.0, 120.0).replace(PROOF_WINDOW_BLOCKS=MINIMAL.PROOF_WINDOW_BLOCKS)


@pytest.fixture(scope="module")
def network(tmp_path_factory, anvil_installed):
    net = start_network(tmp_path_factory, [NodeSpec(), NodeSpec(), NodeSpec(), NodeSpec(), NodeSpec(tamper_opening=True)], "restart",
                        preset=RESTART_PRESET)
    yield net
    net.stop()


def test_a_dispatcher_killed_mid_audit_resumes_and_settles(network):
    completions = send_jobs(network, 5)  # round-robin: one job per node
    wait_for(lambda: any(get_status(network, c)["status"] == "audited" for c in completions), 90, "an audit to start")
    before = [get_status(network, c) for c in completions]
    assert not all((b.get("audit") or {}).get("status") == "settled" for b in before)

    network.kill_node(0, signal.SIGKILL)
    time.sleep(2.0)
    network.start_node(0)

    bodies = wait_settled(network, completions)
    honest = [b for b in bodies if network.node_of(b["worker"]).spec.is_honest]
    assert len(honest) == 4 and all(b["status"] == "final" and b["audit"]["verdict"] == "pass" and not b["audit"]["slashed"] for b in honest)
    log = network.nodes[0].log_file.read_text()
    assert log.count("verillm devnode listening") == 2  # the same store, served by a second process
    tamperer = next(b for b in bodies if not network.node_of(b["worker"]).spec.is_honest)
    assert tamperer["status"] == "slashed" and tamperer["audit"]["verdict"] == "worker-default"
    assert set(tamperer["audit"]["votes"].values()) == {1}  # its nudged leaves pass every member's comparison
    assert [s["reason"] for s in tamperer["audit"]["slashed"]] == ["lost a contest: could not prove its opening"]
