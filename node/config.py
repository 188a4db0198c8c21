"""Node configuration: one typed dataclass per concern, composed into `NodeConfig`.

Every field has a default and an attribute docstring (the string under it; `get_field_docs`
reads them for `verillm node config` and the tests check none is missing). Values come, in
increasing precedence, from:

1. the dataclass defaults,
2. a TOML file (`--config node.toml`), one table per concern: ``[server] port = 8000``,
3. environment variables ``VERILLM_<SECTION>_<FIELD>``, e.g. ``VERILLM_SERVER_PORT=8000``,
4. command-line flags (``--set server.port=8000`` and the shortcuts of `verillm node run`).

A bad value anywhere raises `ConfigError` naming the source and the field.
"""

import ast
import dataclasses
import inspect
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path

from verillm import envs
from verillm.errors import ConfigError
from verillm.jsonsafe import compute_json_depth
from verillm.node.dispatcher_config import DispatcherConfig  # the [dispatcher] section (its own file: config.py stays under 400 lines)

ENV_PREFIX = "VERILLM_"
MAX_CONFIG_DEPTH = 16
"""Deepest nesting of arrays and inline tables a config file may have (every field is flat)."""


@dataclass(frozen=True)
class IdentityConfig:
    """Who this node is: the secp256k1 key that signs receipts and node-to-node requests."""

    key_file: str = "key.json"
    """Path of the key written by `verillm keys new` (plain JSON with 0600 perms, or an eth-account keystore)."""
    password_env: str = "VERILLM_KEY_PASSWORD"
    """Environment variable holding the keystore password (only read for encrypted keystores)."""


@dataclass(frozen=True)
class ServerConfig:
    """The HTTP listener."""

    host: str = "127.0.0.1"
    """Address to bind; 0.0.0.0 exposes the node on every interface."""
    port: int = 8000
    """TCP port; 0 picks a free port (printed at startup)."""
    public_url: str = ""
    """URL other parties reach this node at (status URLs use it); empty = http://host:port."""


@dataclass(frozen=True)
class EngineConfig:
    """Which engine runs which model."""

    kind: str = "torch"
    """Engine implementation: "torch" (the reference engine, CPU or GPU)."""
    model: str = "tiny"
    """Model to serve: "tiny" (seeded test Llama), "smollm2" (SmolLM2-135M-Instruct), a local Hugging Face directory or a GGUF file."""
    dtype: str = "float32"
    """Compute dtype, part of the model id: "float32" or "bfloat16"."""
    preset: str = "mainnet"
    """Protocol preset the manifest is built with ("mainnet" or "minimal")."""
    threads: int = 0
    """torch intra-op threads for the engine; 0 = torch's default (one per core)."""
    profile_dir: str = "profiles"
    """Where `verillm calibrate --model …` writes tolerance profiles (<model id>-<dtype>.json); a tolerance-mode model without one is refused."""
    kernel_class: str = ""
    """Exact mode: the kernel class the network's manifest names; the node measures its own at start and refuses to serve if it differs. Empty = serve what this machine measures (the per-machine kernels). A `canon…` class selects the canonical kernels, whose class is the same on every machine (docs/protocol.md §9)."""
    retention: str = "tokens"
    """Exact mode: "tokens" keeps only each job's tokens and receipt and rebuilds the trace when an opening is asked (0 trace bytes); "full" keeps the trace blob. Tolerance mode always keeps it."""


@dataclass(frozen=True)
class QueueConfig:
    """The one engine queue every job goes through."""

    max_queued_jobs: int = 256
    """Jobs waiting for the engine before new ones are refused with 503 queue_full."""
    reserved_for_peers: int = 32
    """Queue slots only node-to-node (signed) jobs may take: OpenAI clients get 503 queue_full first, so a flood of them cannot crowd out a peer's job."""
    reserved_for_committee: int = 8
    """Queue slots, apart from max_queued_jobs, that only verification jobs of audits this node is drawn into (proven from the chain) may take; they run before every other queued job."""
    batch_wait_ms: float = 2.0
    """How long the batcher waits for more jobs after the first before running a batch."""
    max_batch_size: int = 0
    """Upper bound on jobs per engine call; 0 = the engine's own max_batch_size."""


@dataclass(frozen=True)
class StoreConfig:
    """The durable store (SQLite, WAL)."""

    path: str = "node.sqlite"
    """SQLite file holding jobs, receipts, retained traces and pending chain actions."""
    synchronous: str = "NORMAL"
    """SQLite synchronous mode: NORMAL survives process crashes (SIGKILL); FULL also power loss, at one fsync per commit."""
    receipts_synchronous: str = "FULL"
    """Synchronous mode of the one commit per batch that stores receipts and traces before any is returned: FULL makes a returned receipt survive power loss (one fsync per batch)."""
    retention_s: float = 14 * 24 * 3600.0
    """Without a chain: how long finished jobs, their receipts and traces are kept. With one (the dispatcher role), only failed jobs (no receipt) are pruned by this clock; everything else by blocks (retention_blocks)."""
    retention_blocks: int = 7200
    """With a chain: blocks every row is kept after the last block anything can ask for it (a receipt's auditableUntilBlock + the audit span, a promise's claim windows, an audit's final state; node/store/retention.py), for auditors' replays and the explorer; 0 = prune as soon as the protocol allows."""
    prune_interval_s: float = 30.0
    """With a chain: how often the dispatcher's pruner compares every table with the chain's head (node/dispatcher/pruner.py)."""


@dataclass(frozen=True)
class ChainConfig:
    """Where receipts settle. Optional until the node posts on-chain itself."""

    rpc_url: str = ""
    """JSON-RPC endpoint of the chain; empty = no chain (receipts are kept as pending actions)."""
    chain_id: int = 31337
    """Chain id in the receipts' EIP-712 domain."""
    jobs_address: str = "0x0000000000000000000000000000000000000000"
    """Jobs contract address: the EIP-712 verifying contract of every receipt."""
    registry_address: str = "0x0000000000000000000000000000000000000000"
    """Registry contract address (stake, keys, endpoints)."""
    public_rpc_url: str = ""
    """The JSON-RPC URL /v1/verillm/info names for clients (`verillm complete` checks the signer's stake there unless pinned); empty = rpc_url."""


@dataclass(frozen=True)
class LimitsConfig:
    """What a single request may ask for."""

    max_prompt_tokens: int = 4096
    """Longest input a job may carry, in tokens (413 above it)."""
    max_new_tokens: int = 1024
    """Most tokens a job may generate (400 above it)."""
    max_request_bytes: int = 4 * 1024 * 1024
    """Largest HTTP request body, in bytes (413 above it)."""
    max_opened_cells: int = 65536
    """Most (position, layer) cells one opening request may ask for, duplicates included (400 above it); the cells opened are the distinct ones."""
    max_jobs_per_sender: int = 16
    """Native jobs one sender may have queued or running (429 above it): a staked peer fills its own share, not the queue."""
    max_openings_per_sender: int = 2
    """Opening requests one sender may have in flight (429 above it)."""
    max_concurrent_openings: int = 2
    """Openings this node computes at once, all senders together (others wait): openings never starve the event loop or the engine."""
    duty_openings: int = 2
    """Openings this node computes at once for its own slashable duties (its cells as a worker or member, a contest's answer, its dispatcher's checks of its own worker), on slots and threads of their own: no sender's quota (max_openings_per_sender) or slot (max_concurrent_openings) ever applies to them."""
    max_inflight_per_client: int = 16
    """Generation requests one OpenAI client (its API key, else its IP address) may have in flight (429 above it)."""
    body_timeout_s: float = 30.0
    """Longest a request body may take to arrive, in seconds (408 after it): slow clients cannot hold handlers."""
    header_timeout_s: float = 30.0
    """Seconds from a connection's start (or previous response) to complete headers, then closed (slowloris); also the idle keep-alive time (keep above clients' 15 s)."""


@dataclass(frozen=True)
class AuthConfig:
    """How node-to-node requests (signed envelopes) are checked."""

    max_clock_skew_s: int = 60
    """Envelopes with a timestamp further than this from the node's clock are stale (409)."""
    allowed_senders: tuple[str, ...] = ()
    """Addresses admitted to the native job route besides the staked peers (the operator's own tools, a gateway it runs)."""
    admit_staked_peers: bool = True
    """Admit native jobs from nodes the Registry shows active and staked for this node's model (the dispatcher role's view of the chain; a node without it admits only allowed_senders)."""
    api_keys: tuple[str, ...] = ()
    """Bearer keys accepted on the OpenAI routes (Authorization: Bearer <key>); empty = open to anyone who can reach the node."""


@dataclass(frozen=True)
class NodeConfig:
    """Everything a node needs to start."""

    identity: IdentityConfig = field(default_factory=IdentityConfig)
    """Signing key."""
    server: ServerConfig = field(default_factory=ServerConfig)
    """HTTP listener."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Engine and model."""
    queue: QueueConfig = field(default_factory=QueueConfig)
    """Engine queue and batching."""
    store: StoreConfig = field(default_factory=StoreConfig)
    """Durable store."""
    chain: ChainConfig = field(default_factory=ChainConfig)
    """Chain endpoint and contract addresses."""
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    """Per-request limits."""
    auth: AuthConfig = field(default_factory=AuthConfig)
    """Node-to-node authentication."""
    dispatcher: DispatcherConfig = field(default_factory=DispatcherConfig)
    """Routing dispatcher, audit scheduler and chain watcher (node/dispatcher/)."""


SECTIONS = {f.name: f.default_factory for f in dataclasses.fields(NodeConfig)}


def get_field_docs(cls: type) -> dict[str, str]:
    """Return each field's attribute docstring (the string literal right under it)."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    docs = {}
    for node, after in zip(body, body[1:]):
        is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)
        if isinstance(node, ast.AnnAssign) and is_doc:
            docs[node.target.id] = after.value.value
    return docs


def _coerce(value, hint, where: str):
    """Return ``value`` converted to the field type ``hint``; strings are parsed (env, flags)."""
    if hint is bool:
        return _coerce_bool(value, where)
    if typing.get_origin(hint) is tuple:
        items = [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(v, str) for v in items):
            raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
        return tuple(items)
    if hint in (int, float):
        return _coerce_number(value, hint, where)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def _coerce_number(value, hint, where: str):
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}")
    if isinstance(value, str):
        try:
            return hint(value)
        except ValueError:
            raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}") from None
    if isinstance(value, int) or (hint is float and isinstance(value, float)):
        return hint(value)
    raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}")


def _coerce_bool(value, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return value.lower() in ("1", "true", "yes", "on")
    raise ConfigError(f"{where}: expected true or false, got {value!r}")


def _apply(config: NodeConfig, section: str, name: str, raw, where: str) -> NodeConfig:
    """Return ``config`` with ``section.name`` set to ``raw`` (coerced); unknown names raise."""
    if section not in SECTIONS:
        raise ConfigError(f"{where}: unknown section [{section}]; known: {sorted(SECTIONS)}")
    part = getattr(config, section)
    hints = typing.get_type_hints(type(part))
    if name not in hints:
        raise ConfigError(f"{where}: unknown field {section}.{name}; known: {sorted(hints)}")
    value = _coerce(raw, hints[name], where)
    return dataclasses.replace(config, **{section: dataclasses.replace(part, **{name: value})})


def apply_toml(config: NodeConfig, path: str | Path) -> NodeConfig:
    """Return ``config`` updated from the TOML file at ``path``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read as UTF-8 text: {exc}") from None
    # tomllib recurses per nesting level, and py_ecc raises the recursion limit to 100,000:
    # a deeply nested value would overflow the C stack instead of raising (as JSON did).
    if compute_json_depth(text, MAX_CONFIG_DEPTH) > MAX_CONFIG_DEPTH:
        raise ConfigError(f"config file {path} nests arrays or tables deeper than {MAX_CONFIG_DEPTH} levels")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: top-level key {section!r} must be a [table]")
        for name, raw in values.items():
            config = _apply(config, section, name, raw, f"{path} [{section}] {name}")
    return config


def apply_env(config: NodeConfig, environ: typing.Mapping[str, str]) -> NodeConfig:
    """Return ``config`` updated from every ``VERILLM_<SECTION>_<FIELD>`` variable."""
    for section in SECTIONS:
        for name in typing.get_type_hints(type(getattr(config, section))):
            variable = f"{ENV_PREFIX}{section.upper()}_{name.upper()}"
            if variable in environ:
                config = _apply(config, section, name, environ[variable], f"environment {variable}")
    return config


def apply_overrides(config: NodeConfig, overrides: typing.Iterable[str]) -> NodeConfig:
    """Return ``config`` updated from ``section.field=value`` strings (the --set flags)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise ConfigError(f"flag --set {item!r}: expected section.field=value")
        config = _apply(config, section, name, raw.strip(), f"flag --set {key.strip()}")
    return config


def load_config(path: str | Path | None = None, environ: typing.Mapping[str, str] | None = None, overrides: typing.Iterable[str] = ()) -> NodeConfig:
    """Return the node config: defaults, then the TOML file, then the environment, then flags."""
    config = NodeConfig()
    if path is not None:
        config = apply_toml(config, path)
    config = apply_env(config, envs.get_environ() if environ is None else environ)
    config = apply_overrides(config, overrides)
    verify_config(config)
    return config


def verify_config(config: NodeConfig) -> None:
    """Check values that parse but make no sense; raise ConfigError naming the field."""
    positive = {
        "queue.max_queued_jobs": config.queue.max_queued_jobs,
        "limits.max_prompt_tokens": config.limits.max_prompt_tokens,
        "limits.max_new_tokens": config.limits.max_new_tokens,
        "limits.max_request_bytes": config.limits.max_request_bytes,
        "limits.max_opened_cells": config.limits.max_opened_cells,
        "limits.max_jobs_per_sender": config.limits.max_jobs_per_sender,
        "limits.max_openings_per_sender": config.limits.max_openings_per_sender,
        "limits.max_concurrent_openings": config.limits.max_concurrent_openings,
        "limits.duty_openings": config.limits.duty_openings,
        "queue.reserved_for_committee": config.queue.reserved_for_committee,
        "store.retention_s": config.store.retention_s,
        "auth.max_clock_skew_s": config.auth.max_clock_skew_s,
        "limits.max_inflight_per_client": config.limits.max_inflight_per_client,
        "limits.body_timeout_s": config.limits.body_timeout_s,
        "limits.header_timeout_s": config.limits.header_timeout_s,
        "dispatcher.client_jobs_per_worker": config.dispatcher.client_jobs_per_worker,
    }
    for name, value in positive.items():
        if value < 1:
            raise ConfigError(f"{name} must be at least 1, got {value}")
    if config.store.retention_blocks < 0 or config.store.prune_interval_s <= 0:
        raise ConfigError(f"store.retention_blocks must be at least 0 and store.prune_interval_s above 0, got "
                          f"{config.store.retention_blocks} and {config.store.prune_interval_s}")
    if not 0 <= config.server.port < 65536:
        raise ConfigError(f"server.port must be in 0..65535, got {config.server.port}")
    if not 0 <= config.queue.reserved_for_peers < config.queue.max_queued_jobs:
        raise ConfigError(f"queue.reserved_for_peers must be in 0..max_queued_jobs-1, got {config.queue.reserved_for_peers}")
    if config.dispatcher.shed_at_slack_blocks < 0:
        raise ConfigError(f"dispatcher.shed_at_slack_blocks must not be negative, got {config.dispatcher.shed_at_slack_blocks}")
    if config.queue.batch_wait_ms < 0 or config.queue.max_batch_size < 0 or config.engine.threads < 0:
        raise ConfigError("queue.batch_wait_ms, queue.max_batch_size and engine.threads must not be negative")
    for name in ("synchronous", "receipts_synchronous"):
        if getattr(config.store, name).upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise ConfigError(f"store.{name} must be FULL, NORMAL or EXTRA, got {getattr(config.store, name)!r}")
    for name in ("jobs_address", "registry_address"):
        _check_address(f"chain.{name}", getattr(config.chain, name))
    for sender in config.auth.allowed_senders:
        _check_address("auth.allowed_senders", sender)


def _check_address(where: str, value: str) -> None:
    digits = value[2:] if value.startswith("0x") else ""
    if len(digits) != 40 or any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise ConfigError(f"{where}: {value!r} is not a 0x-prefixed 20-byte hex address")


def get_public_url(config: NodeConfig, bound_port: int) -> str:
    """Return the URL status links point at: public_url, else http://host:bound_port."""
    if config.server.public_url:
        return config.server.public_url.rstrip("/")
    return f"http://{config.server.host}:{bound_port}"
