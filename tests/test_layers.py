"""The layer table of docs/architecture.md, enforced: every import in the source tree, parsed with
`ast`, must point to a layer its own layer may use. A new arrow fails here with the file, the
line and the rule it breaks; change the table (here and in the doc) only on purpose.

Also: `verillm.spec` does no I/O (only the standard library's pure modules and the listed
arithmetic packages), and its `compute_`/`is_` functions are pure (no `await`, no clock, no
randomness).
"""

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = {"verillm": "verillm", "node": "verillm.node", "verifier": "verillm.verifier"}

BASE = {"verillm.errors", "verillm.jsonsafe", "verillm.envs", "verillm.ndjson"}
# layer -> the layers it may import (besides itself). Order of the table = bottom to top.
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
    "verillm.node": BASE | {"verillm.spec", "verillm.wire", "verillm.engine", "verillm.chain"},
    "verillm.verifier": BASE | {"verillm.spec", "verillm.wire", "verillm.engine", "verillm.chain", "verillm.client", "verillm.node.store"},
    "verillm.bench": BASE | {"verillm.spec", "verillm.wire", "verillm.engine", "verillm.chain", "verillm.client", "verillm.node", "verillm.verifier"},
    "verillm.devnet": BASE | {"verillm.spec", "verillm.wire", "verillm.engine", "verillm.chain", "verillm.client", "verillm.node", "verillm.bench"},
    "verillm.cli": {"*"},
}
ENTRY_POINTS = ("__main__",)  # `python -m verillm.node` is a composition root, like the CLI

SPEC_STDLIB = {"dataclasses", "collections", "typing", "struct", "hashlib", "math", "json", "re", "functools", "enum", "itertools", "bisect", "operator", "abc"}
SPEC_THIRD_PARTY = {"numpy", "py_ecc", "eth_keys", "blake3", "Crypto"}
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


def get_imports(path: Path) -> list[tuple[str, int]]:
    """Every absolute module an import in ``path`` names (`from x import y` names x and x.y)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def is_allowed(source_layer: str, target: str) -> bool:
    allowed = ALLOWED.get(source_layer, set())
    if "*" in allowed or get_layer(target) == source_layer:
        return True
    return any(target == layer or target.startswith(layer + ".") for layer in allowed)


def compute_forbidden_arrows() -> list[Arrow]:
    arrows = []
    for path in iter_source_files():
        source = module_name(path)
        if source.rsplit(".", 1)[-1] in ENTRY_POINTS:
            continue
        for target, line in get_imports(path):
            if target.startswith("verillm.") and not is_allowed(get_layer(source), target):
                arrows.append(Arrow(source, target, str(path.relative_to(ROOT)), line))
    return _dedupe(arrows)


def _dedupe(arrows: list[Arrow]) -> list[Arrow]:
    # `from verillm.x import y` names x and x.y: keep one arrow per line
    seen, kept = set(), []
    for arrow in arrows:
        if (arrow.path, arrow.line) not in seen:
            seen.add((arrow.path, arrow.line))
            kept.append(arrow)
    return kept


def test_every_import_follows_the_layer_table():
    arrows = compute_forbidden_arrows()
    assert not arrows, "imports the layer table forbids (tests/test_layers.py, docs/architecture.md):\n" + "\n".join(
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
])
def test_the_table_itself(source, target, allowed):
    """The checker's own rules, so a loosened table shows up here too."""
    assert is_allowed(get_layer(source), target) is allowed
