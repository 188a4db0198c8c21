"""An operator's own checkpoint, end to end on one node: a node is refused the model until
`verillm calibrate --model <directory>` has written the profile where the node looks; then
`verillm node run --model <HF directory>` (a real process, real HTTP) serves a chat completion
with a signed receipt."""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from eth_account import Account

from verillm.chain.anvil import find_free_port
from verillm.cli.calibrate import calibrate
from verillm.cli.model import model as model_group
from verillm.engine.profiles import find_profile, get_profile_path
from verillm.engine.tiny_checkpoints import save_tiny_checkpoint
from verillm.errors import ProfileMissing
from verillm.node.config import EngineConfig
from verillm.node.worker.engines import build_served_model
from verillm.node.keys import new_node_key, write_key_file
from verillm.wire import receipt_from_json
from verillm.spec.job import compute_transcript_hash
from verillm.spec.receipt import SigningDomain, verify_receipt_signature

VERILLM = str(Path(sys.executable).parent / "verillm")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def operator(tmp_path_factory):
    """An operator's working directory holding a tiny Qwen2 checkpoint and (later) its profiles."""
    home = tmp_path_factory.mktemp("operator")
    save_tiny_checkpoint("qwen2", home / "tiny-qwen2")
    return home


def _post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def _wait_healthy(process: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + 240  # a cold start (torch, transformers, the model) on a loaded 2-core machine
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"node exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=1)
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.3)
    pytest.fail(f"node did not become healthy:\n{log.read_text()[-3000:]}")


def test_node_refuses_a_model_without_a_profile_and_names_the_command(operator, tmp_path):
    config = EngineConfig(model=str(operator / "tiny-qwen2"), profile_dir=str(tmp_path / "profiles"))
    with pytest.raises(ProfileMissing) as caught:
        build_served_model(config)
    assert f"verillm calibrate --model {operator / 'tiny-qwen2'} --dtype fp32 --profile-dir {tmp_path / 'profiles'}" in str(caught.value)


def test_calibrate_then_node_run_serves_a_chat_completion_with_a_receipt(operator):
    model = str(operator / "tiny-qwen2")
    key = new_node_key()
    write_key_file(key, operator / "key.json")
    calibrated = CliRunner().invoke(calibrate, ["--model", model, "--jobs", "1", "--profile-dir", str(operator / "profiles")], catch_exceptions=False)
    assert calibrated.exit_code == 0, calibrated.output
    inspected = json.loads(CliRunner().invoke(model_group, ["inspect", model, "--json", "--profile-dir", str(operator / "profiles")], catch_exceptions=False).output)
    model_id = bytes.fromhex(inspected["model_id"][2:])
    assert get_profile_path(operator / "profiles", model_id, "float32").is_file()
    assert inspected["profile"] == str(get_profile_path(operator / "profiles", model_id, "float32"))
    assert find_profile(model, model_id, "float32", operator / "profiles").provenance["model_id"] == inspected["model_id"]

    port = find_free_port()
    log = operator / "node.log"
    with open(log, "wb") as handle:
        process = subprocess.Popen([VERILLM, "node", "run", "--model", model, "--port", str(port), "--store", str(operator / "node.sqlite"), "--key-file", str(operator / "key.json")],
                                   cwd=operator, env=ENV, stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(process, url, log)
        name = inspected["manifest"]["name"]
        chat = _post_json(f"{url}/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 6, "temperature": 0})
    finally:
        process.terminate()
        process.wait(timeout=30)
    verillm = chat["verillm"]
    receipt = receipt_from_json(verillm["receipt"])
    verify_receipt_signature(receipt, SigningDomain())
    assert "0x" + receipt.worker.hex() == Account.from_key(key.private_key).address.lower()
    assert receipt.model_id == model_id
    assert receipt.output_hash == compute_transcript_hash(verillm["input_tokens"], verillm["output_tokens"])  # the whole transcript
    assert chat["model"] == name and chat["choices"][0]["message"]["role"] == "assistant"
