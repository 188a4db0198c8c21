"""Runs the Foundry invariant campaign of the generic adversary (contracts/fuzz, issue 34) over
several seeds and writes what it did: calls per seed, calls per second, the first violation with
its move (docs/results/fuzz-forge-issue34.json by default).

    .venv/bin/python scripts/forge_fuzz.py [--seeds 1,2,3,4] [--runs 500] [--depth 500] [--out FILE]

`make test-fuzz-forge` runs it with the issue's goal: 4 seeds × 500 runs × 500 calls = 1,000,000
calls. forge is contracts/node_modules/.bin/forge (`make install`), or $FORGE.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "contracts" / "fuzz"
CALLS = re.compile(r"invariant_ledger\(\) \(runs: (\d+), calls: (\d+), reverts: (\d+)\)")
FAILURE = re.compile(r"\[FAIL: (.*)\]")
DECIDERS = re.compile(r"deciders-(drawn|settled|abandoned) (\d+)")  # each run's line (GenericAdversaryInvariant.afterInvariant)


def forge() -> str:
    path = os.environ.get("FORGE") or str(ROOT / "contracts" / "node_modules" / ".bin" / "forge")
    if not Path(path).exists():
        sys.exit(f"forge not found at {path}: run `make install` (contracts/package.json has @foundry-rs/forge) or set FORGE")
    return path


def build(binary: str) -> None:
    done = subprocess.run([binary, "build"], cwd=PROJECT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"forge build failed:\n{done.stdout}\n{done.stderr}")


def run_seed(binary: str, seed: int, runs: int, depth: int, world: str | None) -> dict:
    env = dict(os.environ, FOUNDRY_INVARIANT_RUNS=str(runs), FOUNDRY_INVARIANT_DEPTH=str(depth))
    if world:
        env["FUZZ_WORLD"] = world
    failures = PROJECT / "cache" / "invariant"
    if failures.exists():  # a persisted failure would be replayed instead of searching
        subprocess.run(["rm", "-rf", str(failures)], check=True)
    started = time.monotonic()
    done = subprocess.run([binary, "test", "--mc", "GenericAdversaryInvariant", "--fuzz-seed", str(seed), "-vv"], cwd=PROJECT,
                          capture_output=True, text=True, env=env)
    elapsed = time.monotonic() - started
    out = done.stdout + done.stderr
    found = CALLS.findall(out)
    if not found:
        raise SystemExit(f"seed {seed}: forge printed no campaign summary (exit {done.returncode}):\n{out[-3000:]}")
    runs_done, calls, reverts = map(int, found[-1])
    failure = FAILURE.search(out)
    runs_log = [line.strip() for line in out.splitlines() if line.strip().startswith("run: ")]
    deciders = {"drawn": 0, "settled": 0, "abandoned": 0}
    for line in runs_log:
        for what, n in DECIDERS.findall(line):
            deciders[what] += int(n)
    return {"seed": seed, "runs": runs_done, "calls": calls, "handler_reverts": reverts, "seconds": round(elapsed, 1),
            "calls_per_second": round(calls / elapsed, 1), "passed": done.returncode == 0 and failure is None,
            "violation": failure.group(1) if failure else None, "deciders": deciders, "last_run": runs_log[-1] if runs_log else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3,4")
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--depth", type=int, default=500)
    parser.add_argument("--world", default=None, help="another world directory under contracts/fuzz (FUZZ_WORLD)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "results" / "fuzz-forge-issue34.json"))
    args = parser.parse_args()
    binary = forge()
    build(binary)
    seeds = [int(s) for s in args.seeds.split(",")]
    results = []
    for seed in seeds:
        result = run_seed(binary, seed, args.runs, args.depth, args.world)
        results.append(result)
        print(f"seed {seed}: {result['calls']:,} calls in {result['seconds']} s ({result['calls_per_second']} calls/s), "
              f"deciders {result['deciders']}, {'no violation' if result['passed'] else 'VIOLATION: ' + str(result['violation'])}", flush=True)
        total = sum(r["calls"] for r in results)
        seconds = sum(r["seconds"] for r in results)
        report = {"campaign": "contracts/fuzz GenericAdversaryInvariant (issue 34, generic adversary, Foundry invariant runner)",
                  "forge": subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.splitlines()[0],
                  "config": {"runs_per_seed": args.runs, "depth": args.depth, "world": args.world or "world"},
                  "seeds": results, "total_calls": total, "total_seconds": round(seconds, 1),
                  "calls_per_second": round(total / seconds, 1) if seconds else None,
                  "deciders": {k: sum(r["deciders"][k] for r in results) for k in ("drawn", "settled", "abandoned")},
                  "violations": sum(1 for r in results if not r["passed"])}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"total: {total:,} calls over {len(results)} seeds in {seconds:.0f} s ({total / seconds:.0f} calls/s); "
          f"{report['violations']} seed(s) with a violation; written to {args.out}")
    sys.exit(1 if report["violations"] else 0)


if __name__ == "__main__":
    main()
