"""`verillm devnet --keep` as a developer uses it, on the session's two-cheater devnet
(tests/e2e/conftest.py: `--model tiny --cheater int8 --cheater lazy --jobs 10 --keep`, ten nodes):
the command runs its jobs, checks them against the chain, prints its summary and the chain audit,
leaves the network up and writes network.json; then the SDK, `verillm audit chain` and the printed
replay command are pointed at it. SIGTERM stops it with exit 0, leaving no process behind (the
fixture's teardown). The same command without `--keep` (it exits 0 once its checks hold) is
test_devnet.py, marked slow: it runs this path and then stops."""

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from verillm.client import Client, verify_receipt
from verillm.spec.receipt import SigningDomain

pytestmark = pytest.mark.usefixtures("anvil_installed")
VERILLM = str(Path(sys.executable).parent / "verillm")
JOBS = 10


@pytest.fixture
def kept(two_cheater_devnet):
    if two_cheater_devnet.get("log") is None:
        pytest.skip("a reused devnet (VERILLM_KEPT_DEVNET) without its devnet.log")
    return two_cheater_devnet


def test_the_devnet_checks_its_jobs_against_the_chain_and_names_what_the_contracts_caught(kept):
    """What test_devnet.py checks of a run that exits: every job settled as the protocol says, the lazy
    member caught by the adjudication (the one outcome's words, issue 36), the gas table, the devnet's
    own `verillm audit chain` with 0 inconsistencies, and the replay command filled in."""
    text = kept["log"].read_text()
    assert "every job settled as the protocol says it should" in text and "unexpected outcome" not in text
    assert "adjudicated: voted agree against its own posted data" in text
    assert "Batches.postBatch" in text and "Disputes.adjudicate" in text
    assert re.search(r"chain audit: \d+ consistent checks, 0 inconsistencies", text), text[-3000:]
    assert "(member): adjudicated: voted agree against its own posted data" in text
    assert "--token" in text and "--addresses" in text


def test_the_devnet_prints_endpoints_keys_and_full_job_hashes_once(kept):
    text = kept["log"].read_text()
    assert text.count("the network stays up") == 1 and kept["owner"]["private_key"] in text
    assert all(node["url"] in text and node["address"] in text for node in kept["nodes"])
    assert text.count("job hash 0x") == JOBS and all(len(line.split("job hash ")[1].strip()) == 66 for line in text.splitlines() if "job hash 0x" in line)
    assert "starting 10 node processes" in text and "node 9 answers on" in text
    served = Client(kept["gateway_url"]).models()[0]["id"]  # the name clients see, not --model's (issue 36)
    assert kept["served_model"] == served and f"model={served}" in text and f"  model      {served} (--model tiny)" in text


def test_the_sdk_takes_hex_ids_and_every_status_url_works(kept):
    client = Client(kept["gateway_url"])
    model_hex = client.models()[0]["verillm"]["model_id"]
    assert model_hex == kept["model_id"]
    domain = SigningDomain(kept["chain_id"], bytes.fromhex(kept["addresses"]["Jobs"][2:]))
    gateway = kept["nodes"][0]["address"]
    workers = set()
    for n in range(2):  # round-robin: at least one of them runs on another worker than the gateway
        completion = client.complete(f"Hello {n}", max_tokens=3, temperature=0)
        signer = verify_receipt(completion.receipt, domain, model_id=model_hex, job=completion.job, output_tokens=completion.tokens)
        workers.add(signer)
        with urllib.request.urlopen(completion.status_url, timeout=10) as response:  # wherever it ran
            assert json.load(response)["job_hash"] == completion.job_id
    assert workers - {gateway}, "both jobs ran on the gateway"


def test_audit_chain_reports_every_audit_of_the_kept_network(kept):
    run = subprocess.run([VERILLM, "audit", "chain", "--rpc-url", kept["rpc_url"], "--addresses", kept["addresses_file"]],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    settled = [line for line in run.stdout.splitlines() if line.strip().startswith("audit ") and "settled:" in line]
    assert len(settled) >= JOBS and any("fail" in line for line in settled) and any("pass" in line for line in settled), run.stdout
    assert "inconsistencies: 0" in run.stdout and "committee differs" not in run.stdout
    cheater = next(n["address"] for n in kept["nodes"] if n["role"].startswith("cheater"))
    assert f"{cheater}: failed audit" in run.stdout  # the cheater named, with the rule that caught it


def test_the_printed_replay_command_works_as_printed(kept):
    """The replay command the devnet prints for a job (its read token, the address book for the
    receipt's signing domain) runs as printed: it rejects the cheater's job, signature valid."""
    slashed = next(job for job in kept["jobs"] if job["status"] == "slashed")
    assert slashed["replay"] in kept["log"].read_text()
    run = subprocess.run(slashed["replay"].replace("verillm", VERILLM, 1).split(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert "receipt signature valid (chain" in run.stdout and "verdict: REJECT" in run.stdout
    # the command carries --rpc-url: the report ends with what the chain decided, and the replay agrees with it
    assert "chain decision (verillm/spec/outcome.py" in run.stdout and ": fail; votes that counted: " in run.stdout, run.stdout[-2000:]
    assert run.stdout.rstrip().splitlines()[-1].startswith("replay vs chain: AGREE — the replay says REJECT"), run.stdout[-2000:]
    assert "loading the model" in run.stderr  # progress while the model loads
