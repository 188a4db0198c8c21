"""A whole network on loopback: a chain, the contracts, N node processes, registered and staked.

Used by `verillm devnet` and the end-to-end tests; everything is real: anvil (or the embedded
eth-tester chain behind its JSON-RPC endpoint), the protocol contracts deployed with a preset,
and each node a separate `devnode` process with its own key, SQLite store and port.

    with LocalNetwork(workdir, model="tiny", nodes=[NodeSpec(), NodeSpec(), NodeSpec(), NodeSpec(attack="int8")]) as net:
        net.gateway_url, net.protocol, net.kill_node(0), net.start_node(0)

Children are stopped by PID (SIGTERM, then SIGKILL); on Linux they also get SIGTERM if this
process dies first (PR_SET_PDEATHSIG), so none outlives a killed devnet.
"""

import ctypes
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from eth_account import Account

from verillm import envs
from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilConfig, AnvilProcess, find_anvil_binary, find_free_port
from verillm.chain.protocol import Protocol
from verillm.spec.audit import OnchainModel
from verillm.errors import ChainError, ConfigError
from verillm.spec.encoding import decode
from verillm.spec.params import Preset, get_preset
from verillm.engine.checkpoints import ALIASES
from verillm.engine.profiles import DEFAULT_PROFILE_DIR, get_model_profile
from verillm.spec.types import ModelManifest

from verillm.node.dispatcher.chainio import compute_vrf_secret_key
from verillm.devnet.embedded_chain import EmbeddedChainServer
from verillm.node.keys import compute_node_key, new_node_key, write_key_file

NODE_FUNDING_WEI = 10**18
STAKE_MULTIPLE = 10  # each node stakes 10 × MIN_STAKE_WEI
START_TIMEOUT_S = 180.0


PROGRESS_EVERY_S = 10.0  # a step that waits longer says what it waits for, this often


@dataclass(frozen=True)
class NodeSpec:
    """How one node behaves: honest, or running a dishonest engine, or lazy on committees."""

    attack: str | None = None
    lazy: bool = False
    tamper_opening: bool = False
    withhold_jobs: bool = False
    """As a dispatcher, never send the committees their verification jobs (not slashable: its
    members claim, the workers publish, docs/protocol.md §13; `is_honest` as a worker)."""
    hostile_stream: str | None = None
    """As a worker, stream injected text, then the real output's receipt (devnode --hostile-stream:
    forged, unsigned or equivocates). Its receipts, openings and votes stay honest."""
    token_delay_ms: float = 0.0
    """The engine samples at most one token per this many ms (honest, only slower: a real model's
    pace, so that streaming is observable on the tiny model; devnode's --token-delay-ms)."""

    @property
    def is_honest(self) -> bool:
        return self.attack is None and not self.lazy and not self.tamper_opening and self.hostile_stream is None

    @property
    def cheats_as_worker(self) -> bool:
        """A lazy node serves honestly; only its committee work is made up."""
        return self.attack is not None or self.tamper_opening

    @property
    def label(self) -> str:
        if self.is_honest:
            return "honest"
        if self.withhold_jobs and self.attack is None and not self.lazy and not self.tamper_opening:
            return "withholding dispatcher"
        if self.hostile_stream and self.attack is None and not self.lazy and not self.tamper_opening:
            return f"hostile stream ({self.hostile_stream})"
        return "lazy member" if self.lazy else ("tampered opening" if self.tamper_opening else f"cheater ({self.attack})")


@dataclass
class NodeProcess:
    index: int
    spec: NodeSpec
    key_file: Path
    config_file: Path
    log_file: Path
    port: int
    address: str
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGTERM it when the parent dies.
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


def get_json(url: str, timeout_s: float = 5.0) -> dict:
    """GET a JSON body (stdlib only)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.load(response)


class LocalNetwork:
    """Chain, contracts and node processes on 127.0.0.1, in ``workdir``."""

    def __init__(self, workdir: str | Path, nodes: list[NodeSpec], model: str = "tiny", dtype: str = "float32",
                 preset: str | Preset = "minimal", chain: str = "auto", block_time_s: float = 1.0,
                 batch_max_receipts: int = 4, batch_max_wait_s: float = 2.0, log=print, profile_dir: str | Path = DEFAULT_PROFILE_DIR):
        self.workdir = Path(workdir)
        self.profile_dir = Path(profile_dir).resolve()  # every node reads the same calibrated profiles
        self.specs, self.dtype = nodes, dtype
        # Node processes read the TOML from their own directories: a model path must be absolute.
        self.model = model if model in ALIASES or not Path(model).expanduser().exists() else str(Path(model).expanduser().resolve())
        self.preset = preset if isinstance(preset, Preset) else get_preset(preset)
        self.chain_kind = self._pick_chain(chain)
        self.block_time_s, self.batch_max_receipts, self.batch_max_wait_s = block_time_s, batch_max_receipts, batch_max_wait_s
        self.log = log
        self.nodes: list[NodeProcess] = []
        self.anvil: AnvilProcess | None = None
        self.embedded: EmbeddedChainServer | None = None
        self.protocol: Protocol | None = None
        self.model_id: bytes | None = None
        self.manifest: ModelManifest | None = None

    @staticmethod
    def _pick_chain(kind: str) -> str:
        if kind != "auto":  # "anvil", "embedded", or the http(s) URL of a chain started elsewhere
            return kind
        try:
            find_anvil_binary()
            return "anvil"
        except ConfigError:
            return "embedded"

    # --- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> "LocalNetwork":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Chain, deploy, node processes, model, registrations; return once every node serves."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        owner_chain = self._start_chain()
        self.owner = owner_chain.dev_accounts[0]
        self.protocol = Protocol.deploy(owner_chain, self.preset, self.owner)
        self.deployment_file = self.workdir / "deployment.json"
        self.protocol.deployment.save(self.deployment_file)
        self.log(f"chain: {self.chain_kind} at {self.rpc_url} (block time {self.block_time_s} s); contracts deployed, preset {self.preset.name}")
        for index, spec in enumerate(self.specs):
            self.nodes.append(self._prepare_node(index, spec, owner_chain))
        for node in self.nodes:
            self.start_node(node.index, wait=False)
        self.log(f"starting {len(self.nodes)} node processes (each imports torch and loads {self.model})…")
        started = time.monotonic()
        for node in self.nodes:
            self.wait_healthy(node.index)
            self.log(f"node {node.index} answers on {node.url} after {time.monotonic() - started:.0f} s")
        self._add_model_and_register()

    def _start_chain(self):
        if self.chain_kind.startswith(("http://", "https://")):  # an existing chain (its first dev account deploys)
            self.rpc_url = self.chain_kind
            return RpcChain(self.rpc_url)
        if self.chain_kind == "anvil":
            self.anvil = AnvilProcess(AnvilConfig(block_time_s=self.block_time_s)).start()
            self.rpc_url = self.anvil.url
            return RpcChain(self.rpc_url)
        if self.chain_kind != "embedded":
            raise ConfigError(f"chain must be auto, anvil or embedded, got {self.chain_kind!r}")
        self.embedded = EmbeddedChainServer(self.block_time_s).start()
        self.rpc_url = self.embedded.url
        return self.embedded.chain

    def _prepare_node(self, index: int, spec: NodeSpec, owner_chain) -> NodeProcess:
        directory = self.workdir / f"node{index}"
        directory.mkdir(parents=True, exist_ok=True)
        key_file = directory / "key.json"
        if not key_file.exists():
            write_key_file(new_node_key(), key_file)
        address = Account.from_key(json.loads(key_file.read_text())["private_key"]).address
        owner_chain.transfer(self.owner, address, NODE_FUNDING_WEI)
        node = NodeProcess(index, spec, key_file, directory / "node.toml", directory / "node.log", find_free_port(), address)
        node.config_file.write_text(self._node_toml(node, owner_chain.chain_id))
        return node

    def _node_toml(self, node: NodeProcess, chain_id: int) -> str:
        jobs, registry = self.protocol.deployment.addresses["Jobs"], self.protocol.deployment.addresses["Registry"]
        return "\n".join([
            "[identity]", f'key_file = "{node.key_file}"',
            "[server]", 'host = "127.0.0.1"', f"port = {node.port}",
            "[engine]", f'model = "{self.model}"', f'dtype = "{self.dtype}"', f'preset = "{self.preset.name}"', f'profile_dir = "{self.profile_dir}"',
            "[store]", f'path = "{node.key_file.parent / "node.sqlite"}"',
            "[queue]", "batch_wait_ms = 5.0",
            "[chain]", f'rpc_url = "{self.rpc_url}"', f"chain_id = {chain_id}", f'jobs_address = "{jobs}"', f'registry_address = "{registry}"',
            "[dispatcher]", "enabled = true", f'deployment_file = "{self.deployment_file}"',
            f"batch_max_receipts = {self.batch_max_receipts}", f"batch_max_wait_s = {self.batch_max_wait_s}",
            f"poll_interval_s = {min(0.5, self.block_time_s / 2)}", "",
        ])

    def start_node(self, index: int, wait: bool = True) -> None:
        """Start (or restart) node ``index``'s process, on its port, store and key."""
        node = self.nodes[index]
        argv = [sys.executable, "-m", "verillm.devnet.devnode", "--config", str(node.config_file)]
        argv += ["--attack", node.spec.attack] if node.spec.attack else []
        argv += ["--lazy"] if node.spec.lazy else []
        argv += ["--tamper-opening"] if node.spec.tamper_opening else []
        argv += ["--withhold-jobs"] if node.spec.withhold_jobs else []
        argv += ["--token-delay-ms", str(node.spec.token_delay_ms)] if node.spec.token_delay_ms else []
        argv += ["--hostile-stream", node.spec.hostile_stream] if node.spec.hostile_stream else []
        env = envs.compute_child_environ(OMP_NUM_THREADS="1")
        log_handle = open(node.log_file, "ab")  # noqa: SIM115 (the child keeps it)
        node.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_handle, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True, preexec_fn=_die_with_parent)
        log_handle.close()
        if wait:
            self.wait_healthy(index)

    def wait_healthy(self, index: int, timeout_s: float = START_TIMEOUT_S) -> None:
        node = self.nodes[index]
        started = time.monotonic()
        deadline, next_word = started + timeout_s, started + PROGRESS_EVERY_S
        while time.monotonic() < deadline:
            if node.process.poll() is not None:
                raise ChainError(f"node {index} exited with code {node.process.returncode}; see {node.log_file}:\n{self.tail_log(index)}")
            try:
                get_json(f"{node.url}/healthz", 1.0)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                time.sleep(0.3)
            if time.monotonic() >= next_word:  # a silent minute on 2 cores reads as a hang (issue 36)
                next_word += PROGRESS_EVERY_S
                last = self.tail_log(index, 1).strip()[:120] or "no log line yet"
                self.log(f"  waiting for node {index} ({time.monotonic() - started:.0f} s): {last}")
        raise ChainError(f"node {index} did not answer /healthz within {timeout_s} s; {node.log_file}:\n{self.tail_log(index)}")

    def tail_log(self, index: int, lines: int = 30) -> str:
        text = self.nodes[index].log_file.read_text(errors="replace") if self.nodes[index].log_file.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def _add_model_and_register(self) -> None:
        info = get_json(f"{self.nodes[0].url}/v1/verillm/info")
        self.manifest = decode(ModelManifest, bytes.fromhex(info["model"]["manifest"][2:]))
        self.model_id = bytes.fromhex(info["model"]["model_id"][2:])
        # Exact-mode manifests (a kernel class, e.g. bf16) get thresholds of 0: the contract's test becomes exact.
        profile = get_model_profile(self.model, self.manifest, None, self.profile_dir)
        self.protocol.add_model(self.owner, OnchainModel.from_profile(self.model_id, self.manifest, profile))
        stake = STAKE_MULTIPLE * self.preset.MIN_STAKE_WEI
        for node in self.nodes:
            key = compute_node_key(bytes.fromhex(json.loads(node.key_file.read_text())["private_key"][2:]))
            account = Account.from_key(key.private_key)
            tx = self.protocol.register(account, compute_vrf_secret_key(key), node.url, [self.model_id], stake)
            self.log(f"node {node.index}: {node.address} on {node.url} registered, stake {stake / 1e18:g} ETH ({tx.gas_used} gas), {node.spec.label}")
        epoch = self.protocol.advance_to_next_epoch()  # registrations weigh in draws from the next epoch
        self.log(f"mined to stake epoch {epoch}: every node is drawable")

    def wait_gateway_sees_all(self, timeout_s: float = 60.0) -> None:
        """Wait until node 0's dispatcher lists every node as an active worker."""
        deadline = time.monotonic() + timeout_s
        while len(get_json(f"{self.gateway_url}/v1/verillm/dispatcher")["workers"]) < len(self.nodes):
            if time.monotonic() > deadline:
                raise ChainError(f"node 0 does not see all {len(self.nodes)} registered nodes after {timeout_s} s")
            time.sleep(0.5)

    def kill_node(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to node ``index`` and wait for it to exit."""
        node = self.nodes[index]
        if node.process is not None and node.process.poll() is None:
            node.process.send_signal(sig)
            node.process.wait(timeout=30)

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 10 s) and the chain."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.terminate()
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                node.process.kill()
                try:
                    node.process.wait(timeout=30)
                except subprocess.TimeoutExpired:  # named, not a traceback: the stop goes on
                    self.log(f"node {node.index} (pid {node.process.pid}) was killed but has not exited yet")
        if self.anvil is not None:
            self.anvil.stop()
            self.anvil = None
        if self.embedded is not None:
            self.embedded.stop()
            self.embedded = None

    # --- views --------------------------------------------------------------------------------

    @property
    def gateway_url(self) -> str:
        return self.nodes[0].url

    def node_of(self, address: str) -> NodeProcess | None:
        return next((n for n in self.nodes if n.address.lower() == address.lower()), None)
