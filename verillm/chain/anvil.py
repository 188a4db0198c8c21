"""Run anvil (from npm `@foundry-rs/anvil`) as a real local chain process.

Used by the JSON-RPC tests and by the devnet. Binds 127.0.0.1 only, on a free port; stopped
by PID (terminate, then kill). On Linux anvil also gets SIGTERM from the kernel when the
process that started it dies, even by SIGKILL (PR_SET_PDEATHSIG), so no chain outlives a
killed devnet or `verillm chain anvil`. The binary is `contracts/node_modules/.bin/anvil` after
`make install` (npm install --prefix contracts), or whatever `VERILLM_ANVIL` or `PATH` names.
"""

import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from verillm import envs
from verillm.chain.artifacts import REPO_CONTRACTS_DIR
from verillm.chain.errors import ChainTimeout, ChainUnavailable
from verillm.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AnvilConfig:
    """How to start anvil."""

    port: int = 0
    """TCP port on 127.0.0.1; 0 picks a free one."""
    chain_id: int = 31337
    block_time_s: float | None = None
    """Seconds between blocks; None mines one block per transaction (automine)."""
    genesis_timestamp_s: int | None = None
    """The genesis block's timestamp (unix seconds); None is the wall clock. Fixed, with
    `anvil_setBlockTimestampInterval`, every block hash replays across processes."""
    hardfork: str | None = None
    """EVM rules, e.g. "prague"; None is anvil's default (the latest it knows)."""
    accounts: int = 10
    balance_ether: int = 10_000
    start_timeout_s: float = 15.0
    """How long to wait for the first answer to eth_chainId."""


def find_anvil_binary() -> str:
    """Return the anvil executable: $VERILLM_ANVIL, the npm one under contracts/, or one on PATH.

    Of the npm package, the native binary is preferred to `.bin/anvil`, a node wrapper that
    would put a second process between us and anvil (and outlive a SIGKILL of the wrapper).
    """
    modules = REPO_CONTRACTS_DIR / "node_modules"
    native = sorted(str(p) for p in modules.glob("@foundry-rs/anvil-*/bin/anvil"))
    candidates = [envs.get_anvil_path(), *native, str(modules / ".bin" / "anvil"), shutil.which("anvil")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ConfigError("anvil not found: run `make install` (npm install --prefix contracts --no-audit --no-fund --no-save) or set VERILLM_ANVIL to its path")


def find_free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_port_free(port: int) -> bool:
    """Return whether 127.0.0.1:``port`` can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def die_with_parent() -> None:
    """Runs in a child between fork and exec: ask the kernel to SIGTERM it when its parent dies.

    PR_SET_PDEATHSIG fires when the *thread* that forked exits, so start long-lived children
    from the main thread (the devnet, the CLI and the test fixtures all do).
    """
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


class AnvilProcess:
    """One anvil process. Use as a context manager, or call `start` and `stop`."""

    def __init__(self, config: AnvilConfig | None = None):
        self.config = config or AnvilConfig()
        self.port = self.config.port or find_free_port()
        self.process: subprocess.Popen | None = None
        self._stderr = None  # a temp file, not a pipe: a pipe nobody reads could fill and block anvil

    @property
    def url(self) -> str:
        """The JSON-RPC URL."""
        return f"http://127.0.0.1:{self.port}"

    def compute_command(self) -> list[str]:
        """Return the argv that starts this anvil."""
        c = self.config
        argv = [find_anvil_binary(), "--host", "127.0.0.1", "--port", str(self.port), "--silent",
                "--chain-id", str(c.chain_id), "--accounts", str(c.accounts), "--balance", str(c.balance_ether),
                # Old states past anvil's in-memory window would otherwise be written under
                # ~/.foundry/anvil/tmp and never removed when anvil is killed: 75 GB in one day of
                # test runs here, which filled the disk. Recent states (replays of a failed
                # transaction on its parent block) stay in memory.
                "--max-persisted-states", "0"]
        if c.block_time_s is not None:
            argv += ["--block-time", str(c.block_time_s)]
        if c.genesis_timestamp_s is not None:
            argv += ["--timestamp", str(c.genesis_timestamp_s)]
        if c.hardfork is not None:
            argv += ["--hardfork", c.hardfork]
        return argv

    def start(self) -> "AnvilProcess":
        """Start anvil and wait until it answers eth_chainId; raise ChainTimeout if it does not."""
        if self.process is not None:
            raise ConfigError(f"anvil already running (pid {self.process.pid})")
        if not is_port_free(self.port):
            # checked first: another node answering on the port would pass for this one
            raise ChainUnavailable(f"cannot start anvil: 127.0.0.1:{self.port} is already in use")
        self._stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(self.compute_command(), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=self._stderr, preexec_fn=die_with_parent)
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.config.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._stderr.seek(0)
                stderr = self._stderr.read().decode(errors="replace").strip()
                raise ChainUnavailable(f"anvil exited with code {self.process.returncode} at start: {stderr}")
            if self.is_ready():
                return
            time.sleep(0.05)
        raise ChainTimeout(f"anvil on port {self.port} did not answer within {self.config.start_timeout_s} s")

    def is_ready(self) -> bool:
        """Return whether anvil answers eth_chainId with its configured chain id."""
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}).encode()
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=1.0) as response:
                return int(json.load(response)["result"], 16) == self.config.chain_id
        except (urllib.error.URLError, ConnectionError, TimeoutError, KeyError, ValueError):
            return False

    def stop(self, timeout_s: float = 5.0) -> None:
        """Terminate anvil by PID; kill it if it has not exited after ``timeout_s``."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                _reap(process, timeout_s)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> "AnvilProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _reap(process: subprocess.Popen, timeout_s: float) -> None:
    """Wait for a killed process; a kill that has not landed in time (a loaded machine) is named
    once instead of ending a clean stop in a traceback (issue 36: a kept devnet's stop did)."""
    try:
        process.wait(timeout=max(timeout_s, 30.0))
    except subprocess.TimeoutExpired:
        log.warning("anvil (pid %d) was killed but has not exited yet; it ends with this process's group", process.pid)
