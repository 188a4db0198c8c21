"""End-to-end fixtures: whole networks on loopback — a real anvil process (the chain layer's
`AnvilProcess`), the contracts deployed with the `minimal` preset, and every node a separate
`devnode` process (tiny model, its own key, SQLite store and port), registered and staked.
Helpers live in `e2e_network.py` (a unique module name: test folders are not packages).

A network takes ~35 s to start on 2 cores (five Python processes importing torch); each
module shares one (`scope="module"`). One fixture is here: the two-cheater devnet that the explorer's
browser test and the consistency test of every view's audit outcomes share (once per session).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

VERILLM = str(Path(sys.executable).parent / "verillm")
TWO_CHEATERS_START_TIMEOUT_S = 600


@pytest.fixture(scope="session")
def two_cheater_devnet(tmp_path_factory, anvil_installed):
    """`verillm devnet --model tiny --cheater int8 --cheater lazy --jobs 10 --keep`, once per session:
    the devnet command's own tests (test_kept_devnet.py), the explorer's browser test and the
    consistency test of every view's outcome share it (its network.json, plus ``log``: the devnet's
    output, lines and summary). SIGTERM at the end must stop it with exit 0 and leave no process. ``VERILLM_KEPT_DEVNET=
    WORKDIR/network.json`` uses one you keep running with the same options (its log beside it as
    devnet.log, if there is one)."""
    reuse = os.environ.get("VERILLM_KEPT_DEVNET")
    if reuse:
        log = Path(reuse).parent.parent / "devnet.log"
        yield {**json.loads(Path(reuse).read_text()), "log": log if log.exists() else None}
        return
    workdir = tmp_path_factory.mktemp("two-cheaters") / "devnet"
    log_path = workdir.parent / "devnet.log"
    log = log_path.open("w")
    # 10 jobs: the lazy member is caught whenever it sits on a committee; it is drawn into most.
    process = subprocess.Popen([VERILLM, "devnet", "--model", "tiny", "--cheater", "int8", "--cheater", "lazy", "--jobs", "10", "--keep",
                                "--workdir", str(workdir)], stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    network_file = workdir / "network.json"
    deadline = time.monotonic() + TWO_CHEATERS_START_TIMEOUT_S
    while not network_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail("devnet --keep did not come up:\n" + log_path.read_text()[-4000:])
        time.sleep(1.0)
    yield {**json.loads(network_file.read_text()), "workdir": workdir, "process": process, "log": log_path}
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    log.close()
    assert process.returncode == 0, log_path.read_text()[-3000:]  # SIGTERM stops it cleanly ...
    assert wait_no_processes_in(workdir), "processes left behind"  # ... and leaves nothing running


def list_processes_in(workdir: Path) -> list[int]:
    """The pids of processes whose command line names ``workdir`` (a devnet's nodes and chain)."""
    lines = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()[1:]
    return [int(line.split()[0]) for line in lines if str(workdir) in line]


def wait_no_processes_in(workdir: Path, timeout_s: float = 30.0) -> bool:
    """Whether every process naming ``workdir`` has exited within ``timeout_s`` (reaped children linger a moment)."""
    deadline = time.monotonic() + timeout_s
    while list_processes_in(workdir):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
