"""One network, four honest nodes and one that serves an int8-quantized model under the honest
manifest. Every job is audited (MINIMAL): honest jobs end verified, the cheater's job fails and
the cheater is slashed (as a worker, and as a member that votes against honest workers); the
audit tools then agree with the chain from public data alone."""

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from verillm.chain.protocol import Protocol
from verillm.client import verify_promise
from verillm.devnet.network import NodeSpec
from verillm.spec import promise
from verillm.spec.settlement import FAIL, PASS

from e2e_network import SETTLE_TIMEOUT_S, get_status, send_jobs, start_network, wait_for, wait_settled

pytestmark = pytest.mark.usefixtures("anvil_installed")
VERILLM = str(Path(sys.executable).parent / "verillm")


@pytest.fixture(scope="module")
def served_network(tmp_path_factory, anvil_installed):
    """The network and its five answered jobs, before their audits settle (the batching-promise test
    claims within the promise's claim window, which closes while the audits run on a loaded machine)."""
    net = start_network(tmp_path_factory, [NodeSpec(), NodeSpec(), NodeSpec(), NodeSpec(), NodeSpec(attack="int8")], "cheater")
    completions = send_jobs(net, 5)  # round-robin: one job per node
    yield net, completions
    net.stop()


@pytest.fixture(scope="module")
def cheater_network(served_network):
    net, completions = served_network
    return net, completions, wait_settled(net, completions)


def test_every_job_came_with_a_batching_promise_the_gateway_kept_and_defends(served_network):
    """docs/protocol.md §12 "Batching promises": node 0 (the gateway) signed a promise with every
    job and batched each receipt by its promised block; a griefer's claim on one is answered by
    the gateway's watcher with an inclusion proof, and the gateway is paid its answer out of the bond."""
    net, completions = served_network
    protocol = Protocol(net.protocol.chain, net.protocol.deployment)
    gateway = net.nodes[0].address
    wait_for(lambda: all((get_status(net, c).get("batch") or {}).get("posted_block") for c in completions), SETTLE_TIMEOUT_S, "every job batched")
    for completion in completions:
        body = get_status(net, completion)
        assert verify_promise(completion, protocol.get_promise_domain(), dispatcher=gateway).lower() == gateway.lower()
        assert body["batch"]["posted_block"] <= completion.promise.promise.batch_by_block, body
    # The first test of the module, on the network as its jobs were answered: a claim closes
    # OMISSION_CLAIM_WINDOW_BLOCKS after the promised block, and waiting for every audit to settle
    # first took longer than that on CI (ClaimClosed).
    signed = completions[0].promise
    griefer = protocol.chain.dev_accounts[9]
    while protocol.chain.get_block_number() <= signed.promise.batch_by_block:
        time.sleep(0.5)
    assert protocol.chain.get_block_number() <= signed.promise.batch_by_block + protocol.preset.OMISSION_CLAIM_WINDOW_BLOCKS
    claim_id = protocol.claim_omitted(griefer, signed).value
    deadline = protocol.get_omission_claim(claim_id)["prove_deadline"]
    while protocol.get_omission_claim(claim_id)["state"] == promise.OPEN and protocol.chain.get_block_number() <= deadline + 1:
        time.sleep(0.5)
    assert protocol.get_omission_claim(claim_id)["state"] == promise.ANSWERED
    # The gateway is paid its answer's gas (capped at the bond), the griefer gets the rest back; read
    # from the answer's event and its credits, since the audits running beside it credit the gateway too.
    answered = protocol.coverage.web3.events.OmissionAnswered().get_logs(from_block=0, argument_filters={"claimId": claim_id})
    assert len(answered) == 1
    paid, refunded = answered[0]["args"]["paidWei"], answered[0]["args"]["refundedWei"]
    assert paid > 0 and paid + refunded == protocol.preset.OMISSION_CLAIM_BOND_WEI
    credited = {log["args"]["to"].lower(): log["args"]["amountWei"]
                for log in protocol.jobs.web3.events.Credited().get_logs(from_block=answered[0]["blockNumber"], to_block=answered[0]["blockNumber"])
                if log["transactionHash"] == answered[0]["transactionHash"]}
    assert credited == {a: v for a, v in ((gateway.lower(), paid), (griefer.address.lower(), refunded)) if v}


def _by_worker(net, bodies):
    return {net.node_of(b["worker"]).index: b for b in bodies}


def test_honest_jobs_end_verified(cheater_network):
    net, _, bodies = cheater_network
    by_worker = _by_worker(net, bodies)
    assert sorted(by_worker) == [0, 1, 2, 3, 4]
    for index in range(4):
        body = by_worker[index]
        assert body["status"] == "final" and body["audit"]["verdict"] == "pass", body
        assert net.node_of(body["worker"]).address.lower() not in {s["node"].lower() for s in body["audit"]["slashed"]}


def test_cheating_worker_is_slashed(cheater_network):
    net, _, bodies = cheater_network
    body = _by_worker(net, bodies)[4]
    assert body["status"] == "slashed" and body["audit"]["verdict"] == "fail"
    assert set(body["audit"]["votes"].values()) == {2}  # every honest member disagrees
    cheater = net.nodes[4].address.lower()
    assert cheater in {s["node"].lower() for s in body["audit"]["slashed"]}
    protocol = Protocol(net.protocol.chain, net.protocol.deployment)
    assert protocol.get_node(net.nodes[4].address)["stake_wei"] == 0
    assert not protocol.get_node(net.nodes[4].address)["active"]
    for honest in net.nodes[:4]:
        assert protocol.get_node(honest.address)["stake_wei"] == 10 * net.preset.MIN_STAKE_WEI


def test_the_cheater_on_a_committee_votes_no_and_is_slashed_as_the_minority(cheater_network):
    net, _, bodies = cheater_network
    cheater = net.nodes[4].address.lower()
    on_committee = [b for b in bodies if cheater in {m.lower() for m in b["audit"]["committee"]}]
    assert on_committee, "the cheater sat on no committee (4 of 5 nodes are drawn for each honest job: practically impossible)"
    for body in on_committee:
        assert body["audit"]["verdict"] == "pass" and {k.lower(): v for k, v in body["audit"]["votes"].items()}[cheater] == 2
        assert any(s["node"].lower() == cheater and "minority" in s["reason"] for s in body["audit"]["slashed"])


def test_the_dispatcher_counts_draws_verdicts_and_slashes_in_its_metrics(cheater_network):
    net, _, bodies = cheater_network
    text = urllib.request.urlopen(f"{net.gateway_url}/metrics", timeout=10).read().decode()
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("verillm_dispatcher_")}
    assert values['verillm_dispatcher_audit_draws_total{selected="true"}'] == len(bodies)
    assert values['verillm_dispatcher_verdicts_total{verdict="verified"}'] == 4
    assert values['verillm_dispatcher_verdicts_total{verdict="slashed"}'] == 1
    members = sum(len({s["node"].lower() for s in b["audit"]["slashed"]} - {b["worker"].lower()}) for b in bodies)
    assert values['verillm_dispatcher_verdicts_total{verdict="member_slashed"}'] == members > 0


def test_replay_accepts_an_honest_job_and_rejects_the_cheaters(cheater_network):
    net, completions, bodies = cheater_network
    by_job = {b["job_hash"]: b for b in bodies}
    for completion in completions:
        body = by_job["0x" + completion.job_hash.hex()]
        if body["status"] == "slashed" or net.node_of(body["worker"]).index == 0:
            token = completion.status_url.partition("?token=")[2]  # the evidence holds the prompt: the requester's read token
            run = subprocess.run([VERILLM, "audit", "replay", body["job_hash"], "--node", net.gateway_url, "--token", token],
                                 capture_output=True, text=True, timeout=120)
            assert run.returncode == (1 if body["status"] == "slashed" else 0), run.stdout + run.stderr
            assert ("verdict: REJECT" if body["status"] == "slashed" else "verdict: ACCEPT") in run.stdout
            assert run.stdout.rstrip().endswith("chain decision: not read (no --rpc-url)")  # no chain access: said, not guessed


def test_chain_audit_finds_every_audit_consistent(cheater_network):
    net, _, bodies = cheater_network
    run = subprocess.run([VERILLM, "audit", "chain", "--rpc-url", net.rpc_url, "--addresses", str(net.deployment_file)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{len(bodies)} audits" in run.stdout and "inconsistencies: 0" in run.stdout


def test_every_first_round_is_drawn_privately_and_each_member_learns_its_seat_with_its_receipt(cheater_network):
    """docs/protocol.md §12 "Private draws", watched from the chain alone: the gateway started every
    selected audit with a draw commitment; each first-round committee was named by a `revealRound`
    transaction, which posted the receipts of the members that had answered their (indistinguishable)
    jobs; no `CommitteeDrawn` for a first round came from a public `drawRound`."""
    net, _, bodies = cheater_network
    protocol = Protocol(net.protocol.chain, net.protocol.deployment)
    events = protocol.jobs.web3.events
    audits = {b["audit"]["audit_id"] for b in bodies}
    drawn = [log for log in events.CommitteeDrawn().get_logs(from_block=0) if log["args"]["auditId"] in audits and log["args"]["round"] == 0]
    assert {log["args"]["auditId"] for log in drawn} == audits
    posted = events.CommitteeReceiptPosted().get_logs(from_block=0)
    revealed_with_receipts = 0
    for log in drawn:
        tx = protocol.chain.w3.eth.get_transaction(log["transactionHash"])
        function, _ = protocol.jobs.web3.decode_function_input(tx["input"])
        assert function.fn_name == "revealRound", (log["args"]["auditId"], function.fn_name)
        in_tx = [p for p in posted if p["transactionHash"] == log["transactionHash"]]
        assert {p["args"]["member"] for p in in_tx} <= set(log["args"]["members"])
        revealed_with_receipts += len(in_tx)
    # the tiny model answers in well under the draw window: most seats are revealed with their receipt
    assert revealed_with_receipts > len(drawn), f"{revealed_with_receipts} receipts in {len(drawn)} reveals"
