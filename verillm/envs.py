"""Every environment variable VeriLLM reads, in one place (as vLLM's `envs.py`).

Code reads the environment only through these functions, so this file is the complete list of
what a deployment can set outside its config file:

| variable                    | read by                   | meaning |
|-----------------------------|---------------------------|---------|
| VERILLM_CACHE_DIR           | engine/checkpoints.py     | where converted weights go (default ~/.cache/verillm) |
| VERILLM_ARTIFACTS_DIR       | chain/artifacts.py        | extra folders with compiled contract artifacts (os.pathsep-separated) |
| VERILLM_ANVIL               | chain/anvil.py            | the anvil binary to run (default: the npm package's) |
| VERILLM_BN254_BACKEND       | chain/bn254.py            | py_ecc or pyrevm: the VRF's curve arithmetic (default pyrevm when importable) |
| VERILLM_FAULT_POINT         | node/faults.py            | NAME[@N]: SIGKILL the node the Nth time it reaches NAME (crash tests) |
| VERILLM_NODE_PROFILE        | bench/profiling.py        | a path: SIGUSR1 toggles the event-loop profiler, which writes there |
| VERILLM_NODE_<SECTION>_<FIELD> | node/config.py         | any node config field (`verillm node config` lists them) |
| (named by identity.password_env) | node/keys.py, cli/    | the password of an encrypted key file |
"""

import os
from collections.abc import Mapping
from pathlib import Path

CACHE_DIR = "VERILLM_CACHE_DIR"
ARTIFACTS_DIR = "VERILLM_ARTIFACTS_DIR"
ANVIL = "VERILLM_ANVIL"
BN254_BACKEND = "VERILLM_BN254_BACKEND"
FAULT_POINT = "VERILLM_FAULT_POINT"
NODE_PROFILE = "VERILLM_NODE_PROFILE"
NODE_CONFIG_PREFIX = "VERILLM_NODE_"
OFFLINE_DEFAULTS = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def get_cache_dir() -> Path:
    """The directory for converted weights."""
    return Path(os.environ.get(CACHE_DIR, Path.home() / ".cache" / "verillm"))


def get_artifacts_dirs() -> tuple[Path, ...]:
    """Extra folders searched for contract artifacts, in order."""
    return tuple(Path(p) for p in os.environ.get(ARTIFACTS_DIR, "").split(os.pathsep) if p)


def get_anvil_path() -> str | None:
    """The anvil binary the operator named, if any."""
    return os.environ.get(ANVIL) or None


def get_bn254_backend() -> str | None:
    """The BN254 backend the operator named, if any."""
    return os.environ.get(BN254_BACKEND) or None


def get_fault_point() -> str | None:
    """NAME[@N] of the crash-test fault point, if set."""
    return os.environ.get(FAULT_POINT) or None


def get_node_profile_path() -> str | None:
    """Where the event-loop profiler writes, if profiling is enabled."""
    return os.environ.get(NODE_PROFILE) or None


def get_environ() -> Mapping[str, str]:
    """The whole environment, for the node config's VERILLM_NODE_* overrides."""
    return os.environ


def get_secret(name: str | None) -> str | None:
    """The value of the variable ``name`` (a key file's password), None when unset or unnamed."""
    return os.environ.get(name) if name else None


def set_offline_defaults() -> None:
    """Never reach the Hugging Face hub unless the caller asked to (HF_HUB_OFFLINE=1 by default)."""
    for name, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(name, value)


def compute_child_environ(**extra: str) -> dict[str, str]:
    """The environment for a child process: this one's, offline, plus ``extra``."""
    return {**os.environ, **OFFLINE_DEFAULTS, **extra}
