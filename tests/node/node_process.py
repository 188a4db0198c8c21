"""A real node daemon in its own process (`python -m verillm.node run`), for tests that must
see it crash: a segfault or a SIGKILL ends the process, which an in-process node would hide.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from verillm.node.keys import new_node_key, write_key_file

STARTUP_TIMEOUT_S = 300  # a cap, not a wait: on a loaded 2-core machine loading the model alone took 77 s


class NodeProcess:
    """One node daemon on loopback with its key, config and store in ``directory``."""

    def __init__(self, directory: Path, sections: dict[str, dict] | None = None, dispatcher=None):
        """``dispatcher``: a NodeKey the operator names for the native job route (node/api/admission.py)."""
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.key = new_node_key()
        write_key_file(self.key, self.directory / "key.json")
        self.store_path = self.directory / "node.sqlite"
        self.config_path = self.directory / "node.toml"
        self.starts = 0
        self.process: subprocess.Popen | None = None
        self.url = ""
        tables = {"identity": {"key_file": str(self.directory / "key.json")}, "server": {"port": 0},
                  "store": {"path": str(self.store_path)}, "queue": {"max_batch_size": 1}}
        if dispatcher is not None:
            tables["auth"] = {"allowed_senders": [dispatcher.address_hex]}
        for section, values in (sections or {}).items():
            tables.setdefault(section, {}).update(values)
        self.config_path.write_text("".join(f"[{s}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in t.items()) for s, t in tables.items()))

    @property
    def log_path(self) -> Path:
        return self.directory / f"node-{self.starts}.log"

    def start(self, env: dict[str, str] | None = None) -> str:
        """Start the daemon (``env``: extra variables, e.g. a fault point); return its URL once it listens."""
        self.starts += 1
        environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        environment.pop("VERILLM_FAULT_POINT", None)  # only where this start names one
        environment.update(env or {})
        with open(self.log_path, "w") as log:
            command = [sys.executable, "-m", "verillm.node", "run", "--config", str(self.config_path)]
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in self.log_path.read_text().splitlines():
                if line.startswith("verillm node listening on "):
                    self.url = line.rsplit(" ", 1)[1]
                    return self.url
            if self.process.poll() is not None:
                return ""  # died during startup (a migration fault point): the caller checks returncode
            time.sleep(0.05)
        raise TimeoutError(f"the node did not start:\n{self.log_path.read_text()}")

    def wait_exit(self, timeout_s: float = 60) -> int:
        """Return the exit status once the process ends (-9: SIGKILL, -11: SIGSEGV)."""
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL the daemon and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> int:
        """SIGTERM the daemon and return its exit status (0: a clean shutdown)."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
