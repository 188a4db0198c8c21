"""`verillm devnet --keep` as a developer uses it: the command runs its jobs (tiny model, an int8
cheater among five honest nodes: a committee excludes the worker and the dispatcher), leaves the network up and writes network.json; then the
SDK and `verillm audit chain` are pointed at it (the explorer's browser test, on a devnet with a
lazy member too, is tests/e2e/test_explorer_browser.py). SIGTERM stops it, leaving no process behind."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from verillm.client import Client, verify_receipt
from verillm.spec.receipt import SigningDomain

pytestmark = pytest.mark.usefixtures("anvil_installed")
VERILLM = str(Path(sys.executable).parent / "verillm")
START_TIMEOUT_S = 420


def _processes_in(workdir: Path) -> list[int]:
    lines = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()[1:]
    return [int(line.split()[0]) for line in lines if str(workdir) in line]


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("kept") / "devnet"
    log = (workdir.parent / "devnet.log").open("w")
    process = subprocess.Popen([VERILLM, "devnet", "--model", "tiny", "--cheater", "int8", "--jobs", "6", "--keep", "--workdir", str(workdir)],
                               stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    network_file = workdir / "network.json"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not network_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail("devnet --keep did not come up:\n" + (workdir.parent / "devnet.log").read_text()[-4000:])
        time.sleep(1.0)
    info = json.loads(network_file.read_text())
    yield {**info, "workdir": workdir, "process": process, "log": workdir.parent / "devnet.log"}
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    log.close()
    assert process.returncode == 0, (workdir.parent / "devnet.log").read_text()[-3000:]
    time.sleep(1.0)
    assert _processes_in(workdir) == [], "processes left behind"


def test_the_devnet_prints_endpoints_keys_and_full_job_hashes_once(kept):
    text = kept["log"].read_text()
    assert text.count("the network stays up") == 1 and kept["owner"]["private_key"] in text
    assert all(node["url"] in text and node["address"] in text for node in kept["nodes"])
    assert text.count("job hash 0x") == 6 and all(len(line.split("job hash ")[1].strip()) == 66 for line in text.splitlines() if "job hash 0x" in line)
    assert "starting 6 node processes" in text and "node 5 answers on" in text


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
    assert len(settled) >= 6 and any("fail" in line for line in settled) and any("pass" in line for line in settled), run.stdout
    assert "inconsistencies: 0" in run.stdout and "committee differs" not in run.stdout
    cheater = next(n["address"] for n in kept["nodes"] if n["role"] != "honest")
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
