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
