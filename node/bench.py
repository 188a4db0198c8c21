"""`verillm bench node`: what the daemon costs on top of the engine, on this machine.

Two paths run the same R jobs (random prompts of fixed length, greedy, fixed output length,
so every job does the same work) under the same concurrency C:

- in-process: `engine.run` on batches of C jobs, then commit + sign each (the node's own
  `BatchRunner`, the work any worker must do), one batch after the other;
- daemon: a real `verillm node` process on loopback, C closed-loop HTTP clients posting
  `/v1/completions` with token-id prompts (tokenization excluded on both sides).

Overhead = 1 − daemon throughput / in-process throughput (goal ≤ 3%); latencies are per
job, from submission to receipt. Prints a table and writes JSON.
"""

import asyncio
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from verillm.spec.receipt import SigningDomain
from verillm.spec.types import Job, SamplingParams

from verillm.node.commit import BatchRunner
from verillm.node.config import EngineConfig
from verillm.node.keys import new_node_key, write_key_file
from verillm.node.metrics import NodeMetrics


@dataclass(frozen=True)
class PathResult:
    """One path's measurements."""

    path: str
    latencies_s: tuple[float, ...]
    requests: int
    errors: int
    output_tokens: int
    wall_s: float
    tokens_per_s: float
    jobs_per_s: float
    p50_latency_ms: float
    p99_latency_ms: float


def compute_percentile(values: list[float], fraction: float) -> float:
    """Return the nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def compute_path_result(path: str, latencies_s: list[float], errors: int, output_tokens: int, wall_s: float) -> PathResult:
    """Summarise one path's per-job latencies and totals."""
    return PathResult(
        path=path,
        latencies_s=tuple(round(v, 6) for v in latencies_s),
        requests=len(latencies_s) + errors,
        errors=errors,
        output_tokens=output_tokens,
        wall_s=round(wall_s, 4),
        tokens_per_s=round(output_tokens / wall_s, 2),
        jobs_per_s=round(len(latencies_s) / wall_s, 3),
        p50_latency_ms=round(1000 * statistics.median(latencies_s), 2) if latencies_s else float("nan"),
        p99_latency_ms=round(1000 * compute_percentile(latencies_s, 0.99), 2) if latencies_s else float("nan"),
    )


def compute_pooled(rounds: list[PathResult]) -> PathResult:
    """Pool rounds of one path: all latencies, total tokens over total wall time."""
    latencies = [v for r in rounds for v in r.latencies_s]
    return compute_path_result(rounds[0].path, latencies, sum(r.errors for r in rounds), sum(r.output_tokens for r in rounds), sum(r.wall_s for r in rounds))


def compute_summary(result: PathResult) -> dict:
    """Return a result as JSON without its per-job latencies."""
    return {name: value for name, value in asdict(result).items() if name != "latencies_s"}


def make_prompts(count: int, length: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Return ``count`` random prompts of ``length`` token ids (reproducible from ``seed``)."""
    rng = random.Random(seed)
    return [[rng.randrange(4, vocab_size) for _ in range(length)] for _ in range(count)]


def run_in_process(served, prompts: list[list[int]], max_new_tokens: int, concurrency: int) -> PathResult:
    """Run the prompts through engine + commit + sign in batches of ``concurrency``, in a worker thread as the daemon does."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="verillm-engine") as executor:
        return executor.submit(_run_in_process, served, prompts, max_new_tokens, concurrency).result()


def _run_in_process(served, prompts: list[list[int]], max_new_tokens: int, concurrency: int) -> PathResult:
    runner = BatchRunner(served.engine, new_node_key(), SigningDomain(), NodeMetrics())
    jobs = [Job(served.model_id, tuple(p), SamplingParams(), max_new_tokens, i.to_bytes(32, "big")) for i, p in enumerate(prompts)]
    latencies, tokens, errors = [], 0, 0
    started = time.perf_counter()
    for start in range(0, len(jobs), concurrency):
        batch_started = time.perf_counter()
        outputs = runner(jobs[start : start + concurrency])
        elapsed = time.perf_counter() - batch_started
        for output in outputs:
            if isinstance(output, Exception):
                errors += 1
                continue
            latencies.append(elapsed)
            tokens += len(output.output_tokens)
    return compute_path_result("in-process (engine + commit)", latencies, errors, tokens, time.perf_counter() - started)


async def run_through_daemon(url: str, model: str, prompts: list[list[int]], max_new_tokens: int, concurrency: int) -> PathResult:
    """Send the prompts to the daemon from ``concurrency`` closed-loop clients."""
    import aiohttp

    pending = list(enumerate(prompts))
    latencies, counts = [], {"tokens": 0, "errors": 0}

    async def client(session):
        while pending:
            _, prompt = pending.pop(0)
            body = {"model": model, "prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0}
            sent = time.perf_counter()
            async with session.post(url + "/v1/completions", json=body) as response:
                data = await response.json()
            if response.status != 200:
                counts["errors"] += 1
                continue
            latencies.append(time.perf_counter() - sent)
            counts["tokens"] += len(data["verillm"]["output_tokens"])

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=3600)) as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return compute_path_result("daemon (HTTP /v1/completions)", latencies, counts["errors"], counts["tokens"], wall)


def start_daemon(directory: Path, engine: EngineConfig, concurrency: int, batch_wait_ms: float) -> tuple[subprocess.Popen, str]:
    """Start a node process for the bench; return it and its URL."""
    write_key_file(new_node_key(), directory / "key.json")
    (directory / "node.toml").write_text(
        f'[identity]\nkey_file = "{directory / "key.json"}"\n[server]\nport = 0\n[store]\npath = "{directory / "node.sqlite"}"\n'
        f'[engine]\nmodel = "{engine.model}"\ndtype = "{engine.dtype}"\n'
        f"[queue]\nmax_batch_size = {concurrency}\nbatch_wait_ms = {batch_wait_ms}\nmax_queued_jobs = {max(256, 2 * concurrency)}\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = open(directory / "node.log", "w")
    process = subprocess.Popen([sys.executable, "-m", "verillm.node", "run", "--config", str(directory / "node.toml"), "--log-level", "WARNING"],
                               stdout=log, stderr=subprocess.STDOUT, env=env)
    for _ in range(6000):
        for line in (directory / "node.log").read_text().splitlines():
            if line.startswith("verillm node listening on "):
                return process, line.rsplit(" ", 1)[1]
        if process.poll() is not None:
            raise click.ClickException(f"the node exited:\n{(directory / 'node.log').read_text()}")
        time.sleep(0.05)
    raise click.ClickException("the node did not start within 5 minutes")


def stop_daemon(process: subprocess.Popen) -> None:
    """Stop the bench's node process."""
    process.send_signal(signal.SIGTERM)
    process.wait(60)


def format_table(results: list[PathResult]) -> str:
    """Return the results as a fixed-width table."""
    header = f"{'path':32} {'requests':>8} {'errors':>6} {'tokens/s':>10} {'jobs/s':>8} {'p50 ms':>9} {'p99 ms':>9}"
    rows = [f"{r.path:32} {r.requests:>8} {r.errors:>6} {r.tokens_per_s:>10.1f} {r.jobs_per_s:>8.2f} {r.p50_latency_ms:>9.1f} {r.p99_latency_ms:>9.1f}" for r in results]
    return "\n".join([header, *rows])


@click.command("node")
@click.option("--model", default="tiny", show_default=True, help="Model: tiny or smollm2.")
@click.option("--dtype", default="float32", show_default=True)
@click.option("--concurrency", "-c", type=int, default=4, show_default=True, help="Concurrent clients = batch size.")
@click.option("--requests", "-r", type=int, default=32, show_default=True, help="Jobs per path.")
@click.option("--prompt-tokens", type=int, default=32, show_default=True)
@click.option("--max-new-tokens", type=int, default=32, show_default=True)
@click.option("--batch-wait-ms", type=float, default=5.0, show_default=True, help="Daemon batching wait.")
@click.option("--rounds", type=int, default=3, show_default=True, help="Alternating rounds of both paths.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the results here.")
def node_bench(model, dtype, concurrency, requests, prompt_tokens, max_new_tokens, batch_wait_ms, rounds, json_path):
    """Throughput and p50/p99 latency through the daemon vs in-process, and the daemon's overhead."""
    from verillm.node.engines import build_served_model

    engine_config = EngineConfig(model=model, dtype=dtype)
    served = build_served_model(engine_config)
    prompts = make_prompts(requests, prompt_tokens, served.manifest.vocab_size)
    # One path at a time, alternating per round: on a shared machine the load drifts, and
    # alternating gives both paths the same conditions on average.
    run_in_process(served, prompts[:concurrency], max_new_tokens, concurrency)  # warm-up
    bare_rounds, daemon_rounds = [], []
    with tempfile.TemporaryDirectory(prefix="verillm-bench-") as directory:
        process, url = start_daemon(Path(directory), engine_config, concurrency, batch_wait_ms)
        try:
            asyncio.run(run_through_daemon(url, model, prompts[:concurrency], max_new_tokens, concurrency))  # warm-up
            for _ in range(rounds):
                bare_rounds.append(run_in_process(served, prompts, max_new_tokens, concurrency))
                daemon_rounds.append(asyncio.run(run_through_daemon(url, model, prompts, max_new_tokens, concurrency)))
        finally:
            stop_daemon(process)
    bare, daemon = compute_pooled(bare_rounds), compute_pooled(daemon_rounds)
    overhead = 1 - daemon.tokens_per_s / bare.tokens_per_s
    per_round = [round(1 - d.tokens_per_s / b.tokens_per_s, 4) for b, d in zip(bare_rounds, daemon_rounds)]
    click.echo(format_table([bare, daemon]))
    click.echo(f"daemon overhead: {100 * overhead:+.2f}% throughput (goal ≤ 3%; per round {[f'{100 * r:+.1f}%' for r in per_round]}), "
               f"p50 latency ×{daemon.p50_latency_ms / bare.p50_latency_ms:.3f}")
    report = {
        "model": served.name, "dtype": dtype, "concurrency": concurrency, "requests": requests,
        "prompt_tokens": prompt_tokens, "max_new_tokens": max_new_tokens, "batch_wait_ms": batch_wait_ms,
        "rounds": rounds, "in_process": compute_summary(bare), "daemon": compute_summary(daemon), "overhead_throughput_ratio": round(overhead, 4),
        "overhead_throughput_ratio_per_round": per_round, "overhead_throughput_ratio_median": statistics.median(per_round),
        "rounds_detail": {"in_process": [asdict(r) for r in bare_rounds], "daemon": [asdict(r) for r in daemon_rounds]},
        "p50_latency_ratio": round(daemon.p50_latency_ms / bare.p50_latency_ms, 4),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
    }
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
    if bare.errors or daemon.errors:
        raise click.ClickException(f"{bare.errors + daemon.errors} requests failed")
