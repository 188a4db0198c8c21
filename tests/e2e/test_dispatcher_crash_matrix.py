"""The crash matrix, dispatcher role: node 0 (the gateway, which batches, draws, starts audits,
finalizes and settles) SIGKILLs itself at a chain action (node/faults.py: `tx_sent_*` submitted
and not mined, `tx_mined_*` mined and its hash not recorded, `tx_recorded_*` recorded and the
step's own state not updated), is restarted on the same store and must finish every audit.

Checked after each kill and restart (`check_chain_actions`):
- the process died at the point (exit -9) and the restarted one settles every job: honest
  verdicts, nobody slashed, no audit abandoned or stuck;
- nonces: node 0 has no transaction left pending (pending nonce = mined nonce);
- no chain action duplicated: every root posted once, every batch drawn once, every leaf's
  audit started once, every round finalized once, every audit settled once, none reverted;
- no chain action lost: every hash in node 0's `chain_txs` is one of its mined transactions, and
  at most those in flight at the kill (one per job's task) are missing from the table;
- no receipt re-signed: the receipt each audit started on chain is the one the client holds.

The default suite runs one point (the batch root mined, its hash not recorded) up to the
audits' start; every point up to settlement, and kills at random moments under load, are `slow`.
"""

import random
import signal
import sqlite3
import threading
import time

import pytest

from verillm.devnet.windows import compute_timed_preset
from verillm.devnet.network import NodeSpec
from verillm.spec.params import MINIMAL

from e2e_network import get_status, send_jobs, start_network, wait_settled

pytestmark = pytest.mark.usefixtures("anvil_installed")
JOBS_FUNCTIONS_ONCE = {"postBatch": "root", "drawAudit": "batchId", "settle": "auditId"}
# A restart takes 25-70 s on a loaded 2-core machine (load average 30-50 measured). MINIMAL's
# 10-block draw window cannot hold it (the first run: "batch 0: missed its draw window"), nor a
# 60-block commit window a 70 s restart right after startAudit (the committee's receipts, which
# the dispatcher posts, came too late: the audit was abandoned). Deadlines of 120 s (draw and
# start 240 blocks) absorb any restart seen here; an audit still abandoned fails the check.
PRESET = compute_timed_preset(MINIMAL, 1.0, 120.0)


@pytest.fixture(scope="module")
def network(tmp_path_factory, anvil_installed):
    # 5 honest nodes: a committee of 3 is drawn without the worker and without the dispatcher.
    net = start_network(tmp_path_factory, [NodeSpec() for _ in range(5)], "dispatcher-crash", preset=PRESET)
    yield net
    net.stop()


def restart_gateway(net, monkeypatch, fault_point: str | None) -> None:
    """Stop node 0 (SIGTERM) and start it again, with ``fault_point`` armed or none."""
    if net.nodes[0].process.poll() is None:
        net.kill_node(0, signal.SIGTERM)
    if fault_point:
        monkeypatch.setenv("VERILLM_FAULT_POINT", fault_point)
    else:
        monkeypatch.delenv("VERILLM_FAULT_POINT", raising=False)
    net.start_node(0)
    monkeypatch.delenv("VERILLM_FAULT_POINT", raising=False)
    net.wait_gateway_sees_all()


def wait_killed(net, point: str, timeout_s: float = 180.0) -> None:
    process = net.nodes[0].process
    try:
        process.wait(timeout=timeout_s)
    except Exception:  # noqa: BLE001 (subprocess.TimeoutExpired: reported with the log)
        pytest.fail(f"node 0 never reached {point} in {timeout_s} s:\n{net.tail_log(0)}")
    assert process.returncode == -signal.SIGKILL, f"node 0 exited {process.returncode}, not killed at {point}:\n{net.tail_log(0)}"


def send_concurrently(net, count: int) -> list:
    """Send ``count`` jobs at once (they are answered before the batch that carries them is posted)."""
    results: list = [None] * count
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, send_jobs(net, 1)[0])) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def node0_transactions(net, from_block: int) -> list[tuple[str, dict, dict]]:
    """(function, args, receipt) of every Jobs and Batches transaction node 0 sent since ``from_block``
    (batches, their draws and starts go to Batches; rounds, votes and settlement to Jobs)."""
    chain = net.protocol.chain
    contracts = {handle.address.lower(): handle for handle in (net.protocol.jobs, net.protocol.batches)}
    address = net.nodes[0].address.lower()
    found = []
    for number in range(from_block, chain.get_block_number() + 1):
        block = chain.w3.eth.get_block(number, full_transactions=True)
        for tx in block["transactions"]:
            contract = contracts.get((tx.get("to") or "").lower())
            if tx["from"].lower() != address or contract is None:
                continue
            function, args = contract.web3.decode_function_input(tx["input"])
            found.append((function.fn_name, dict(args), chain.w3.eth.get_transaction_receipt(tx["hash"])))
    return found


def recorded_hashes(net) -> set[str]:
    with sqlite3.connect(net.nodes[0].key_file.parent / "node.sqlite") as db:
        return {row[0] for row in db.execute("SELECT tx_hash FROM chain_txs")}


def wait_audits_started(net, completions: list, timeout_s: float = 180.0) -> list[dict]:
    """Poll node 0 until every job's audit has its committee drawn; return the status bodies."""
    deadline = time.monotonic() + timeout_s
    while True:
        bodies = [get_status(net, c) for c in completions]
        if all((b.get("audit") or {}).get("committee") for b in bodies):
            return bodies
        if time.monotonic() > deadline:
            pytest.fail(f"audits not started in {timeout_s} s: {[(b['status'], b.get('audit')) for b in bodies]}\n{net.tail_log(0)}")
        time.sleep(1.0)


SETTLE_TIMEOUT_S = 600.0  # an audit a party did not open in time finalizes only when the open windows close


def check_chain_actions(net, completions: list, from_block: int, unrecorded_allowed: int, settle: bool = True) -> None:
    bodies = wait_settled(net, completions, SETTLE_TIMEOUT_S) if settle else wait_audits_started(net, completions)
    for body in bodies:
        audit = body["audit"]
        assert audit["status"] != "abandoned" and not audit["slashed"], body
        if settle:
            assert body["status"] == "final" and audit["status"] == "settled" and audit["verdict"] == "pass", body
    w3, address = net.protocol.chain.w3, net.nodes[0].address
    counts = lambda: (w3.eth.get_transaction_count(address, "pending"), w3.eth.get_transaction_count(address, "latest"))  # noqa: E731
    deadline = time.monotonic() + 30  # node 0 may be sending right now (its audits just started): nothing may stay pending
    while (pending := counts())[0] != pending[1] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert pending[0] == pending[1], f"node 0's transactions stuck pending: nonces pending/mined {pending}"
    txs = node0_transactions(net, from_block)
    assert all(receipt["status"] == 1 for _, _, receipt in txs), [f for f, _, r in txs if r["status"] != 1]
    for function, key in JOBS_FUNCTIONS_ONCE.items():
        values = [bytes(args[key]).hex() if isinstance(args[key], bytes) else args[key] for f, args, _ in txs if f == function]
        assert len(values) == len(set(values)), f"{function} sent twice for the same {key}: {values}"
    starts = [(args["batchId"], args["index"]) for f, args, _ in txs if f in ("startAudit", "startPrivateAudit")]
    assert len(starts) == len(set(starts)), f"an audit started twice: {starts}"
    finalized = [args["auditId"] for f, args, _ in txs if f == "finalize"]
    assert len(finalized) == len(set(finalized)), f"a round finalized twice: {finalized}"  # one round each: all honest
    mined = {bytes(receipt["transactionHash"]).hex() for _, _, receipt in txs}
    recorded = recorded_hashes(net)
    assert recorded <= mined | _older_hashes(net, from_block), "a recorded transaction is not on chain"
    assert len(mined - recorded) <= unrecorded_allowed, f"{len(mined - recorded)} of node 0's transactions are not in chain_txs"
    signatures = {(args["batchId"], args["index"]): bytes(args["signature"]) for f, args, _ in txs if f in ("startAudit", "startPrivateAudit")}
    for completion, body in zip(completions, bodies, strict=True):
        leaf = (body["batch"]["batch_id"], body["batch"]["index"])
        if leaf in signatures:  # started after from_block (all of them, but for an audit started before a kill)
            assert signatures[leaf] == completion.receipt.signature, f"job 0x{completion.job_hash.hex()}: re-signed differently"


def _older_hashes(net, from_block: int) -> set[str]:
    return {h for h in recorded_hashes(net) if net.protocol.chain.w3.eth.get_transaction_receipt(h)["blockNumber"] < from_block}


def run_point(net, monkeypatch, point: str, jobs: int = 2, armed: bool = False, settle: bool = True) -> None:
    """Arm ``point`` in node 0 (unless the network started with it ``armed``), send ``jobs`` at once,
    let node 0 die there, restart it clean and check every chain action."""
    if not armed:
        restart_gateway(net, monkeypatch, point)
    from_block = net.protocol.chain.get_block_number()
    completions = send_concurrently(net, jobs)
    wait_killed(net, point)
    time.sleep(1.0)
    restart_gateway(net, monkeypatch, None)
    # In flight at the kill: the point's own transaction (unless tx_recorded_), and those of the
    # other jobs' tasks sending at that moment (tx_recorded_settle once left another job's settle
    # mined and unrecorded): at most one per job. Their effect is found on chain (all settle).
    check_chain_actions(net, completions, from_block, unrecorded_allowed=jobs, settle=settle)


DEFAULT_POINT = "tx_mined_post_batch"


@pytest.fixture(scope="module")
def armed_network(tmp_path_factory, anvil_installed):
    """Every node started with the default point armed: only node 0, the gateway, posts batches."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VERILLM_FAULT_POINT", DEFAULT_POINT)
        net = start_network(tmp_path_factory, [NodeSpec() for _ in range(5)], "dispatcher-crash-armed", preset=PRESET)
    yield net
    net.stop()


def test_dispatcher_killed_after_posting_a_batch_posts_it_once(armed_network, monkeypatch):
    """The default suite's kill point: the root is on chain, node 0 has not recorded it. After the
    restart the batch is found, not posted again; it is drawn and its audits start, once."""
    run_point(armed_network, monkeypatch, DEFAULT_POINT, jobs=1, armed=True, settle=False)


SLOW_POINTS = [
    "tx_sent_post_batch", "tx_mined_post_batch", "tx_recorded_post_batch",
    "tx_sent_draw_audit", "tx_mined_draw_audit", "tx_recorded_draw_audit",
    "tx_sent_start_audit", "tx_mined_start_audit", "tx_recorded_start_audit",
    "tx_sent_finalize", "tx_mined_finalize", "tx_recorded_finalize",
    "tx_sent_settle", "tx_mined_settle", "tx_recorded_settle",
]


@pytest.mark.slow
@pytest.mark.parametrize("point", SLOW_POINTS)
def test_dispatcher_crash_matrix(network, monkeypatch, point):
    run_point(network, monkeypatch, point)


@pytest.mark.slow
def test_dispatcher_killed_at_random_moments_under_load(network, monkeypatch):
    """Jobs keep coming while node 0 is SIGKILLed three times at random moments; everything settles once."""
    restart_gateway(network, monkeypatch, None)
    from_block = network.protocol.chain.get_block_number()
    rng = random.Random(11)
    completions = []
    for _ in range(3):
        completions += send_concurrently(network, 3)
        time.sleep(rng.uniform(0.5, 8.0))
        network.kill_node(0, signal.SIGKILL)
        time.sleep(1.0)
        restart_gateway(network, monkeypatch, None)
    # Several transactions may be in flight at a kill (tasks run concurrently): one per kill and task.
    check_chain_actions(network, completions, from_block, unrecorded_allowed=3 * 4)
    assert all(get_status(network, c)["status"] == "final" for c in completions)
