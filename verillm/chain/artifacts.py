"""Compiled contract artifacts: `{contractName, abi, bytecode, deployedBytecode}` JSON files.

`node contracts/compile.js` writes them to `contracts/artifacts/`. The package is installed
editable, so that folder is found relative to this file; `VERILLM_ARTIFACTS_DIR` (a
path-separated list) puts other folders first, e.g. test-only contracts.
"""

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from verillm import envs
from verillm.chain.errors import ErrorDecoder
from verillm.errors import ConfigError

REPO_CONTRACTS_DIR = Path(__file__).resolve().parents[2] / "contracts"
PACKAGED_ARTIFACTS_DIR = Path(__file__).resolve().parent / "artifacts"


@dataclass(frozen=True)
class Artifact:
    """One compiled contract."""

    name: str
    abi: list
    bytecode: str
    deployed_bytecode: str


def get_artifact_dirs(extra: tuple[Path, ...] = ()) -> tuple[Path, ...]:
    """Return the folders searched for artifacts, first match wins."""
    from_env = envs.get_artifacts_dirs()
    candidates = (*extra, *from_env, REPO_CONTRACTS_DIR / "artifacts", PACKAGED_ARTIFACTS_DIR)
    return tuple(d for d in candidates if d.is_dir())


class ArtifactStore:
    """Loads artifacts by contract name from an ordered list of folders."""

    def __init__(self, extra_dirs: tuple[Path | str, ...] = ()):
        self.dirs = get_artifact_dirs(tuple(Path(d) for d in extra_dirs))

    def get(self, name: str) -> Artifact:
        """Return the artifact for contract ``name``; raise ConfigError if none is compiled."""
        for folder in self.dirs:
            path = folder / f"{name}.json"
            if path.is_file():
                return _load(path, path.stat().st_mtime_ns)
        searched = ", ".join(str(d) for d in self.dirs) or "(no artifact folder exists)"
        raise ConfigError(f"no compiled artifact for contract {name!r} in {searched}; run `node contracts/compile.js`")

    def names(self) -> list[str]:
        """Return every contract name that has an artifact."""
        return sorted({p.stem for d in self.dirs for p in d.glob("*.json")})

    def error_decoder(self) -> ErrorDecoder:
        """Return a decoder for the custom errors of every known contract."""
        return ErrorDecoder([self.get(n).abi for n in self.names()])


@lru_cache(maxsize=256)
def _load(path: Path, mtime_ns: int) -> Artifact:  # mtime in the key: a recompile is seen
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    if "abi" not in raw:
        raise ConfigError(f"{path} is not a contract artifact (no 'abi')")
    return Artifact(
        name=raw.get("contractName", path.stem),
        abi=raw["abi"],
        bytecode=raw.get("bytecode", "0x"),
        deployed_bytecode=raw.get("deployedBytecode", "0x"),
    )
