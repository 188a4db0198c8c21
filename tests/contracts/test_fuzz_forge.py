"""The Foundry invariant campaign of the generic adversary (issue 34; contracts/fuzz,
docs/protocol.md §13 "Generic adversary under forge").

Default suite: the campaign's committed world (contracts/fuzz/world/) is the one the Python
deployer builds today from the committed artifacts — a contract changed without
`contracts/fuzz/make_world.py` being rerun would otherwise be fuzzed as it was. Slow: forge
builds the campaign (solc-js: minutes) and runs a short campaign (1 seed × 4 runs × 500 calls)
and the smoke sequence; no violation. `make test-fuzz-forge` runs the issue's 1,000,000 calls.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORLD = ROOT / "contracts" / "fuzz" / "world"
FORGE = ROOT / "contracts" / "node_modules" / ".bin" / "forge"


def _make_world():
    spec = importlib.util.spec_from_file_location("make_world", ROOT / "contracts" / "fuzz" / "make_world.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_world_is_what_the_artifacts_deploy(anvil_installed, tmp_path):
    _make_world().main(tmp_path)
    committed = json.loads((WORLD / "allocs.json").read_text())
    fresh = json.loads((tmp_path / "allocs.json").read_text())
    stale = sorted(a for a in fresh if fresh[a].get("code") != committed.get(a, {}).get("code"))
    assert not stale, f"contracts/fuzz/world is stale for {stale}: run .venv/bin/python contracts/fuzz/make_world.py"
    meta, fresh_meta = (json.loads((d / "world.json").read_text()) for d in (WORLD, tmp_path))
    for key in ("registry", "jobs", "batches", "disputes", "delivery", "coverage", "blockNumber", "nodes", "traces", "params"):
        assert meta[key] == fresh_meta[key], f"world.json's {key} differs from a fresh build: rerun contracts/fuzz/make_world.py"


@pytest.mark.slow
def test_forge_short_campaign_and_smoke_hold(tmp_path):
    if not FORGE.exists():
        pytest.skip("forge not installed (make install: contracts/package.json has @foundry-rs/forge)")
    out = tmp_path / "forge.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "forge_fuzz.py"), "--seeds", "1", "--runs", "4", "--depth", "500",
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["total_calls"] == 2000 and report["violations"] == 0, report
    smoke = subprocess.run([str(FORGE), "test", "--mc", "SmokeTest"], capture_output=True, text=True, cwd=ROOT / "contracts" / "fuzz")
    assert smoke.returncode == 0 and "[PASS] test_actors_work_and_the_ledger_holds" in smoke.stdout, smoke.stdout + smoke.stderr
