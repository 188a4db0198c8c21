"""No anvil outlives the process that started it: `verillm chain anvil` on SIGTERM, any parent on SIGKILL."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from verillm.chain.anvil import find_free_port


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie child of someone else still answers kill 0; read its state
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().split(")")[-1].split()[0] != "Z"


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


def _start_cli_anvil():
    port = find_free_port()
    process = subprocess.Popen([sys.executable, "-c", "from verillm.cli import main; main()", "chain", "anvil", "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = process.stdout.readline()
    match = re.search(r"pid (\d+)", line)
    assert match, f"no pid in {line!r}"
    return process, int(match.group(1))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_chain_anvil_leaves_no_anvil_behind(anvil_binary, sig):
    process, anvil_pid = _start_cli_anvil()
    try:
        assert _pid_alive(anvil_pid)
        process.send_signal(sig)
        process.wait(timeout=15)
        assert _wait_gone(anvil_pid), f"anvil {anvil_pid} still runs after {sig.name} of its parent"
    finally:
        if process.poll() is None:
            process.kill()
        if _pid_alive(anvil_pid):
            os.kill(anvil_pid, signal.SIGKILL)


def test_anvil_writes_no_state_files_however_long_the_chain(tmp_path):
    # anvil persists states past its in-memory window under $HOME/.foundry/anvil/tmp and leaves
    # them behind when it is killed (75 GB after a day of test runs here, a full disk). The
    # project's anvil keeps recent states in memory and writes none.
    from verillm.chain.anvil import AnvilConfig, AnvilProcess
    from web3 import Web3

    env_home = os.environ.get("HOME")
    os.environ["HOME"] = str(tmp_path)  # anvil's state cache lives under $HOME
    try:
        anvil = AnvilProcess(AnvilConfig()).start()
    finally:
        os.environ["HOME"] = env_home
    try:
        w3 = Web3(Web3.HTTPProvider(anvil.url))
        sender, receiver = w3.eth.accounts[:2]
        for _ in range(600):  # a state change in every block: anvil persists past ~500 (measured)
            w3.eth.send_transaction({"from": sender, "to": receiver, "value": 1})
        assert w3.eth.get_block_number() >= 600
        assert w3.eth.call({"to": receiver, "data": "0x"}, block_identifier=w3.eth.get_block_number() - 1) == b""
        written = [p for p in tmp_path.rglob("*") if p.is_file()]  # while it runs: a SIGKILL removes nothing
    finally:
        anvil.stop()
    assert written == [], written[:5]
