"""The layer table of docs/architecture.md, enforced: every import in the source tree, parsed with
`ast` (relative ones resolved against the module's package), must point to a layer its own layer
may use, and every third-party package it imports must be one its layer lists. A new arrow or a
new dependency fails here with the file, the line and the rule it breaks; change the tables (here
and in the doc) only on purpose.

Also: `verillm.spec` does no I/O (only the standard library's pure modules and the listed
arithmetic packages), and its `compute_`/`is_` functions are pure (no `await`, no clock, no
randomness).
"""

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = {"verillm": "verillm", "node": "verillm.node", "verifier": "verillm.verifier"}

BASE = {"verillm.errors", "verillm.jsonsafe", "verillm.envs", "verillm.ndjson"}
# node/ (verillm.node), bottom to top. The bare package is the node's base (config, keys, envelope,
# faults, metrics, profiling, dispatcher_config; a new file in node/ lands there until it is placed):
# store → worker → dispatcher → appkeys (the app's typed keys, above every role they name) → api
# (the HTTP handlers) → the app modules (dispatcher_role, middlewares, routes, then app; __main__ is
# an entry point). Each may import the ones before it, never one after.
NODE_BASE = {"verillm.node"}
NODE_STORE = NODE_BASE | {"verillm.node.store"}
NODE_WORKER = NODE_STORE | {"verillm.node.worker"}
NODE_DISPATCHER = NODE_WORKER | {"verillm.node.dispatcher"}
NODE_API = NODE_DISPATCHER | {"verillm.node.appkeys", "verillm.node.api"}
NODE_APP = {"verillm.node.dispatcher_role", "verillm.node.middlewares", "verillm.node.routes", "verillm.node.app"}
NODE = NODE_API | NODE_APP
# layer -> the layers it may import (besides itself), most specific layer wins. Order of the table =
# bottom to top: a layer may only name layers above it here (test_the_table_is_an_order).
ALLOWED = {
    "verillm.errors": set(),
    "verillm.jsonsafe": {"verillm.errors"},
    "verillm.envs": set(),
    "verillm.ndjson": set(),
    "verillm.spec": {"verillm.errors"},
    "verillm.wire": {"verillm.errors", "verillm.jsonsafe", "verillm.spec"},
    "verillm.engine": BASE | {"verillm.spec"},
    "verillm.chain": BASE | {"verillm.spec"},
    "verillm.sim": BASE | {"verillm.spec", "verillm.chain"},
    "verillm.client": BASE | {"verillm.spec", "verillm.wire", "verillm.chain"},
    "verillm.node": BASE | {"verillm.spec", "verillm.wire"},
    "verillm.node.store": BASE | {"verillm.spec", "verillm.wire"} | NODE_BASE,
    "verillm.node.worker": BASE | {"verillm.spec", "verillm.wire", "verillm.engine"} | NODE_STORE,
    "verillm.node.dispatcher": BASE | {"verillm.spec", "verillm.wire", "verillm.chain"} | NODE_WORKER,
    "verillm.node.appkeys": BASE | {"verillm.spec"} | NODE_DISPATCHER,
    "verillm.node.api": BASE | {"verillm.spec", "verillm.wire", "verillm.engine", "verillm.chain"} | NODE_DISPATCHER | {"verillm.node.appkeys"},
    "verillm.node.dispatcher_role": BASE | {"verillm.spec", "verillm.wire", "verillm.chain"} | NODE_API,
    "verillm.node.middlewares": BASE | {"verillm.wire"} | NODE_API,
    "verillm.node.routes": NODE_API,
    "verillm.node.app": BASE | {"verillm.spec", "verillm.wire", "verillm.engine", "verillm.chain"} | NODE_API | NODE_APP - {"verillm.node.app"},
    "verillm.verifier": BASE | {"verillm.spec", "verillm.wire", "verillm.engine", "verillm.chain", "verillm.client", "verillm.node.store"},
    "verillm.bench": BASE | {"verillm.spec", "verillm.wire", "verillm.engine", "verillm.chain", "verillm.client", "verillm.verifier"} | NODE,
    "verillm.devnet": BASE | {"verillm.spec", "verillm.wire", "verillm.engine", "verillm.chain", "verillm.client", "verillm.bench"} | NODE,
    "verillm.cli": {"*"},
}
ENTRY_POINTS = ("__main__",)  # `python -m verillm.node` is a composition root, like the CLI

# layer -> the third-party packages (top-level import names) its modules may import, most specific
# layer wins; what the code imports today. A package of the engine's or the chain's stack (OWNERS)
# may only be listed for a layer that may import that layer (test_a_stack_package_only_above_its_owner).
SPEC_THIRD_PARTY = {"numpy", "py_ecc", "eth_keys", "blake3", "Crypto"}
THIRD_PARTY = {
    "verillm.errors": set(), "verillm.jsonsafe": set(), "verillm.envs": set(), "verillm.ndjson": set(),
    "verillm.spec": SPEC_THIRD_PARTY,
    "verillm.wire": set(),
    "verillm.engine": {"torch", "transformers", "vllm", "tokenizers", "jinja2", "numpy", "blake3"},
    "verillm.chain": {"web3", "eth_account", "eth_abi", "eth_utils", "eth_tester", "requests", "pyrevm"},
    "verillm.sim": {"numpy", "matplotlib", "eth_account"},
    "verillm.client": {"httpx2", "eth_utils", "blake3"},
    "verillm.node": {"eth_account", "eth_keys", "prometheus_client"},  # keys, envelope, metrics
    "verillm.node.store": {"sqlite_utils"},
    "verillm.node.worker": {"numpy"},  # trace_blob; the engine's stack stays behind verillm.engine
    "verillm.node.dispatcher": {"aiohttp", "web3", "eth_account", "numpy", "sqlite_utils"},  # peer/router/driver are HTTP clients
    "verillm.node.appkeys": {"aiohttp"},
    "verillm.node.api": {"aiohttp", "prometheus_client", "web3"},
    "verillm.node.dispatcher_role": {"aiohttp"},
    "verillm.node.middlewares": {"aiohttp"},
    "verillm.node.routes": {"aiohttp"},
    "verillm.node.app": {"aiohttp"},
    "verillm.verifier": {"eth_keys", "sqlite_utils"},
    "verillm.bench": {"aiohttp", "click", "numpy", "prometheus_client", "torch", "transformers", "eth_keys"},
    "verillm.devnet": {"aiohttp", "click", "hexbytes", "numpy", "web3", "eth_account"},
    "verillm.cli": {"*"},
}
OWNERS = {"torch": "verillm.engine", "transformers": "verillm.engine", "vllm": "verillm.engine", "tokenizers": "verillm.engine",
          "web3": "verillm.chain", "eth_abi": "verillm.chain", "eth_utils": "verillm.chain", "eth_tester": "verillm.chain",
          "pyrevm": "verillm.chain", "hexbytes": "verillm.chain"}

SPEC_STDLIB = {"dataclasses", "collections", "typing", "struct", "hashlib", "math", "json", "re", "functools", "enum", "itertools", "bisect", "operator", "abc"}
IMPURE_CALLS = {"time", "secrets", "random", "os", "datetime"}


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    path: str
    line: int


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = [SOURCE_DIRS[relative.parts[0]], *relative.parts[1:]]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def get_layer(module: str) -> str:
    """The most specific layer of the table that ``module`` belongs to."""
    matches = [layer for layer in ALLOWED if module == layer or module.startswith(layer + ".")]
    return max(matches, key=len) if matches else module


def iter_source_files():
    for folder in SOURCE_DIRS:
        yield from sorted((ROOT / folder).rglob("*.py"))


MODULES = {module_name(path) for path in iter_source_files()}


def resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module ``from <level dots><name> import ...`` names in ``module``."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 >= len(package):
        raise ValueError(f"{module}: a relative import {level} levels up leaves the package")
    base = ".".join(package[:len(package) - (level - 1)])
    return f"{base}.{name}" if name else base


def get_imports_in(text: str, module: str, is_package: bool = False) -> list[tuple[str, int]]:
    """Every module an import in ``text`` (the source of ``module``) names, relative ones resolved:
    `from x import y` names x.y when that is a module of the tree (`from verillm.node import faults`
    is verillm.node.faults, not the package), else x."""
    found = []
    for node in ast.walk(ast.parse(text, module)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = resolve_relative(module, is_package, node.level, node.module) if node.level else node.module
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.append((submodule if submodule in MODULES else source, node.lineno))
    return found


def get_imports(path: Path) -> list[tuple[str, int]]:
    return get_imports_in(path.read_text(), module_name(path), path.name == "__init__.py")


def is_allowed(source_layer: str, target: str) -> bool:
    allowed = ALLOWED.get(source_layer, set())
    return "*" in allowed or get_layer(target) in allowed | {source_layer}


def is_third_party(target: str) -> bool:
    top = target.split(".")[0]
    return top not in sys.stdlib_module_names and top not in ("verillm", "__future__")


def is_package_allowed(source_layer: str, target: str) -> bool:
    allowed = THIRD_PARTY.get(source_layer, set())
    return "*" in allowed or target.split(".")[0] in allowed


def compute_forbidden_in(module: str, imports: list[tuple[str, int]], path: str) -> list[Arrow]:
    """The imports of ``module`` that its layer may not make: verillm layers and third-party packages."""
    layer = get_layer(module)
    return [Arrow(module, target, path, line) for target, line in imports
            if target.startswith("verillm.") and not is_allowed(layer, target)
            or is_third_party(target) and not is_package_allowed(layer, target)]


def compute_forbidden_arrows() -> list[Arrow]:
    arrows = []
    for path in iter_source_files():
        source = module_name(path)
        if source.rsplit(".", 1)[-1] in ENTRY_POINTS:
            continue
        arrows += compute_forbidden_in(source, get_imports(path), str(path.relative_to(ROOT)))
    return _dedupe(arrows)


def _dedupe(arrows: list[Arrow]) -> list[Arrow]:
    # `from verillm.x import y, z` names x twice: keep one arrow per line
    seen, kept = set(), []
    for arrow in arrows:
        if (arrow.path, arrow.line) not in seen:
            seen.add((arrow.path, arrow.line))
            kept.append(arrow)
    return kept


def test_every_import_follows_the_layer_table():
    arrows = compute_forbidden_arrows()
    assert not arrows, "imports the layer tables forbid (ALLOWED, THIRD_PARTY: tests/test_layers.py, docs/architecture.md):\n" + "\n".join(
        f"  {a.path}:{a.line}  {get_layer(a.source)} -> {a.target}" for a in arrows)


def test_every_source_module_belongs_to_a_layer():
    orphans = sorted({module_name(p) for p in iter_source_files()} - {m for m in map(module_name, iter_source_files()) if get_layer(m) in ALLOWED}
                     - {"verillm"})
    assert not orphans, f"modules in no layer of the table: {orphans}"


def test_the_spec_does_no_io():
    offenders = []
    for path in sorted((ROOT / "verillm" / "spec").rglob("*.py")):
        for target, line in get_imports(path):
            top = target.split(".")[0]
            if top in ("verillm", "__future__") or top in SPEC_STDLIB or top in SPEC_THIRD_PARTY:
                continue
            if target.rsplit(".", 1)[0] in {"typing", "collections.abc", "dataclasses", "functools"}:
                continue
            offenders.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not offenders, "verillm/spec must stay pure:\n  " + "\n  ".join(sorted(set(offenders)))


def test_spec_compute_and_is_functions_are_pure():
    """consensus-specs' prefixes: compute_ and is_ are pure; nothing awaits, reads a clock or draws randomness."""
    offenders = []
    for path in sorted((ROOT / "verillm" / "spec").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(("compute_", "is_")):
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {why}" for why in _impurities(node)]
    assert not offenders, "\n".join(offenders)


def _impurities(function) -> list[str]:
    found = ["is async"] if isinstance(function, ast.AsyncFunctionDef) else []
    for node in ast.walk(function):
        if isinstance(node, ast.Await):
            found.append("awaits")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in IMPURE_CALLS:
            found.append(f"calls {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("source, target, allowed", [
    ("verillm.spec.audit", "verillm.chain.protocol", False),
    ("verillm.node.api.openai_views", "verillm.client", False),
    ("verillm.client", "verillm.node.store.store", False),
    ("verillm.verifier.replay", "verillm.node.dispatcher.router", False),
    ("verillm.verifier.replay", "verillm.node.store.evidence", True),
    ("verillm.devnet.run", "verillm.cli.devnet", False),
    ("verillm.cli.node", "verillm.node.app", True),
    ("verillm.node.worker.commit", "verillm.spec.commitment", True),
    # node/'s own order: base → store → worker → dispatcher → appkeys → api → dispatcher_role, middlewares, routes → app
    ("verillm.node.dispatcher.peer", "verillm.node.api.access", False),
    ("verillm.node.dispatcher.peer", "verillm.node.api.streaming", False),
    ("verillm.node.dispatcher.service", "verillm.node.appkeys", False),
    ("verillm.node.store.store", "verillm.node.worker.commit", False),
    ("verillm.node.config", "verillm.node.dispatcher.router", False),
    ("verillm.node.keys", "verillm.node.store.store", False),
    ("verillm.node.a_new_module", "verillm.node.store.store", False),  # unplaced: the strictest node layer
    ("verillm.node.worker.worker", "verillm.node.dispatcher.local", False),
    ("verillm.node.dispatcher.router", "verillm.engine.torch_engine", False),
    ("verillm.node.appkeys", "verillm.node.api.http", False),
    ("verillm.node.api.streaming", "verillm.node.middlewares", False),
    ("verillm.node.routes", "verillm.node.app", False),
    ("verillm.node.api.access", "verillm.node.envelope", True),
    ("verillm.node.api.openai_views", "verillm.node.appkeys", True),
    ("verillm.node.dispatcher.peer", "verillm.node.envelope", True),
    ("verillm.node.worker.worker", "verillm.node.store.store", True),
    ("verillm.node.dispatcher.router", "verillm.node.worker.worker", True),
    ("verillm.node.dispatcher_role", "verillm.node.dispatcher.service", True),
    ("verillm.node.app", "verillm.node.middlewares", True),
    ("verillm.bench.node", "verillm.node.api.http", True),
    ("verillm.verifier.replay", "verillm.node.api.access", False),
])
def test_the_table_itself(source, target, allowed):
    """The checker's own rules, so a loosened table shows up here too."""
    assert is_allowed(get_layer(source), target) is allowed


def test_the_table_is_an_order():
    """Each layer names only layers before it in the table: no loop can hide in it (node/ had an 11-file one)."""
    layers = list(ALLOWED)
    offenders = [f"{layer} -> {other}" for i, layer in enumerate(layers) for other in ALLOWED[layer] - {"*"}
                 if other not in layers[:i]]
    assert not offenders, "the table names a layer after (or outside) the one that imports it:\n  " + "\n  ".join(offenders)


def test_every_layer_lists_its_third_party_packages():
    assert set(THIRD_PARTY) == set(ALLOWED)


def test_a_stack_package_only_above_its_owner():
    """torch and its kin only where verillm.engine may be imported; web3 and its kin only where verillm.chain may."""
    offenders = [f"{layer} lists {package} but may not import {OWNERS[package]}" for layer, packages in THIRD_PARTY.items()
                 for package in packages & set(OWNERS) if layer != OWNERS[package] and not is_allowed(layer, OWNERS[package])]
    assert not offenders, "\n".join(offenders)


def test_every_listed_package_is_imported():
    """No slack: a package a layer stopped using leaves its list, so the table stays what the code does."""
    used = {layer: set() for layer in THIRD_PARTY}
    for path in iter_source_files():
        module = module_name(path)
        if module.rsplit(".", 1)[-1] in ENTRY_POINTS or get_layer(module) not in used:
            continue
        used[get_layer(module)] |= {target.split(".")[0] for target, _ in get_imports(path) if is_third_party(target)}
    slack = {layer: sorted(THIRD_PARTY[layer] - used[layer]) for layer in THIRD_PARTY if THIRD_PARTY[layer] - used[layer] - {"*"}}
    assert not slack, f"listed but imported nowhere in the layer: {slack}"


@pytest.mark.parametrize("source, package, allowed", [
    ("verillm.engine.torch_engine", "torch", True),
    ("verillm.node.worker.worker", "torch", False),
    ("verillm.node.dispatcher.router", "transformers", False),
    ("verillm.node.store.store", "sqlite_utils", True),
    ("verillm.node.store.store", "aiohttp", False),
    ("verillm.node.worker.engine_queue", "aiohttp", False),
    ("verillm.node.dispatcher.peer", "aiohttp", True),
    ("verillm.node.api.http", "aiohttp", True),
    ("verillm.node.keys", "web3", False),
    ("verillm.node.api.explorer_views", "web3", True),
    ("verillm.spec.types", "web3", False),
    ("verillm.wire", "aiohttp", False),
    ("verillm.client.http", "aiohttp", False),
    ("verillm.cli.node", "click", True),
])
def test_the_third_party_table_itself(source, package, allowed):
    assert is_package_allowed(get_layer(source), package) is allowed


@pytest.mark.parametrize("module, is_package, level, name, expected", [
    ("verillm.node.dispatcher.peer", False, 1, "router", "verillm.node.dispatcher.router"),
    ("verillm.node.dispatcher.peer", False, 1, None, "verillm.node.dispatcher"),
    ("verillm.node.dispatcher.peer", False, 2, "api.access", "verillm.node.api.access"),
    ("verillm.node.dispatcher", True, 1, "peer", "verillm.node.dispatcher.peer"),
    ("verillm.node.dispatcher", True, 2, None, "verillm.node"),
])
def test_relative_imports_resolve_against_the_package(module, is_package, level, name, expected):
    assert resolve_relative(module, is_package, level, name) == expected


def test_a_relative_import_leaving_the_tree_is_an_error():
    with pytest.raises(ValueError, match="leaves the package"):
        resolve_relative("verillm.wire", False, 2, "x")


@pytest.mark.parametrize("source, module, is_package, refused", [
    ("from ..api.access import verify_reader\n", "verillm.node.dispatcher.peer", False, ["verillm.node.api.access"]),
    ("from ..api import streaming\n", "verillm.node.dispatcher.peer", False, ["verillm.node.api.streaming"]),
    ("from .. import appkeys\n", "verillm.node.dispatcher.service", False, ["verillm.node.appkeys"]),
    ("from . import faults, config\n", "verillm.node", True, []),
    ("from .. import faults\nfrom .router import NetworkDispatcher\n", "verillm.node.dispatcher.peer", False, []),
    ("import torch\nfrom aiohttp import web\n", "verillm.node.worker.worker", False, ["torch", "aiohttp"]),
])
def test_the_checker_sees_relative_and_third_party_imports(source, module, is_package, refused):
    """The same source files checked as the tree is: a relative import is its absolute module's arrow."""
    arrows = compute_forbidden_in(module, get_imports_in(source, module, is_package), "<test>")
    assert [arrow.target for arrow in arrows] == refused
