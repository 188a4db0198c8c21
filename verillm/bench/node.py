"""`verillm bench node`: what the daemon costs on top of the engine, on this machine.

Two paths run the same R jobs (random prompts of fixed length, greedy, fixed output length,
so every job does the same work), C at a time:

- in-process: one `engine.run` over C jobs, then commit + sign each (the node's own
  `BatchRunner`, the work any worker must do), in a worker thread as in the daemon;
- daemon: a real `verillm node` process on loopback; C concurrent HTTP requests to
  `/v1/completions` with token-id prompts (tokenization excluded on both sides), which the
  daemon's batcher runs as one batch of C.

The paths alternate batch by batch (ABBA order), so a shared machine's drifting load hits
both alike. Overhead = 1 − daemon throughput / in-process throughput (goal ≤ 3%); a job's latency runs
from submission to its receipt. On a shared machine wall-clock throughput drifts with other
load, so the CPU time each path spends per job is reported too (the daemon's from /proc,
the in-process path's from process_time around its batches); with ``--threads 1`` it is
exact and barely moved by other load. Prints a table and writes JSON.
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

import aiohttp
import click
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from verillm import envs
from verillm.spec.receipt import SigningDomain
from verillm.spec.types import Job, SamplingParams

from verillm.bench.node_profile import (
    compute_thread_split,
    format_profile,
    format_thread_split,
    get_thread_cpu_s,
    measure_loop_profile,
    scrape_batches,
)
from verillm.bench.ttft import format_ttft, measure_ttft
from verillm.node.worker.commit import BatchRunner
from verillm.node.config import EngineConfig
from verillm.node.keys import new_node_key, write_key_file
from verillm.node.metrics import NodeMetrics
from verillm.node.profiling import PROFILE_ENV


@dataclass
class PathTally:
    """What one path has measured so far."""

    path: str
    latencies_s: list[float]
    busy_s: float = 0.0
    cpu_s: float = 0.0
    engine_s: float = 0.0
    commit_s: float = 0.0
    output_tokens: int = 0
    errors: int = 0
    client_cpu_s: float = 0.0


@dataclass(frozen=True)
class PathResult:
    """One path's summary."""

    path: str
    requests: int
    errors: int
    output_tokens: int
    busy_s: float
    cpu_s: float
    cpu_ms_per_job: float
    engine_s: float
    commit_s: float
    tokens_per_s: float
    jobs_per_s: float
    p50_latency_ms: float
    p99_latency_ms: float


def compute_percentile(values: list[float], fraction: float) -> float:
    """Return the nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def compute_path_result(tally: PathTally) -> PathResult:
    """Summarise a path: throughput over the time it was busy, latency percentiles."""
    latencies = tally.latencies_s or [float("nan")]
    return PathResult(
        path=tally.path,
        requests=len(tally.latencies_s) + tally.errors,
        errors=tally.errors,
        output_tokens=tally.output_tokens,
        busy_s=round(tally.busy_s, 4),
        cpu_s=round(tally.cpu_s, 4),
        cpu_ms_per_job=round(1000 * tally.cpu_s / max(1, len(tally.latencies_s)), 3),
        engine_s=round(tally.engine_s, 4),
        commit_s=round(tally.commit_s, 4),
        tokens_per_s=round(tally.output_tokens / tally.busy_s, 2),
        jobs_per_s=round(len(tally.latencies_s) / tally.busy_s, 3),
        p50_latency_ms=round(1000 * statistics.median(latencies), 2),
        p99_latency_ms=round(1000 * compute_percentile(latencies, 0.99), 2),
    )


def make_prompts(count: int, length: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Return ``count`` random prompts of ``length`` token ids (reproducible from ``seed``)."""
    rng = random.Random(seed)
    return [[rng.randrange(4, vocab_size) for _ in range(length)] for _ in range(count)]


class InProcessPath:
    """Engine + commit + sign in this process, in one persistent worker thread."""

    def __init__(self, served, max_new_tokens: int):
        self.served = served
        self.max_new_tokens = max_new_tokens
        self.metrics = NodeMetrics()
        self.runner = BatchRunner(served.engine, new_node_key(), SigningDomain(), self.metrics)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verillm-engine")
        self.tally = PathTally("in-process (engine + commit)", [])

    def run_batch(self, prompts: list[list[int]], first_nonce: int) -> None:
        """Run one batch and add it to the tally."""
        jobs = [Job(self.served.model_id, tuple(p), SamplingParams(), self.max_new_tokens, (first_nonce + i).to_bytes(32, "big")) for i, p in enumerate(prompts)]
        started, cpu_started = time.perf_counter(), time.process_time()
        outputs = self.executor.submit(self.runner, jobs).result()
        elapsed = time.perf_counter() - started
        self.tally.busy_s += elapsed
        self.tally.cpu_s += time.process_time() - cpu_started
        self.tally.engine_s, self.tally.commit_s = get_engine_and_commit_s(generate_latest(self.metrics.registry).decode())
        for output in outputs:
            if isinstance(output, Exception):
                self.tally.errors += 1
                continue
            self.tally.latencies_s.append(elapsed)
            self.tally.output_tokens += len(output.output_tokens)


class DaemonPath:
    """C concurrent /v1/completions requests to a node process."""

    def __init__(self, url: str, model: str, max_new_tokens: int, session: aiohttp.ClientSession):
        self.url, self.model, self.max_new_tokens, self.session = url, model, max_new_tokens, session
        self.tally = PathTally("daemon (HTTP /v1/completions)", [])

    async def run_batch(self, prompts: list[list[int]]) -> None:
        """Send one request per prompt at once and add them to the tally."""
        started, cpu_started = time.perf_counter(), time.process_time()
        await asyncio.gather(*(self._request(prompt, started) for prompt in prompts))
        self.tally.busy_s += time.perf_counter() - started
        self.tally.client_cpu_s += time.process_time() - cpu_started  # this process: the HTTP client's own work

    async def _request(self, prompt: list[int], started: float) -> None:
        body = {"model": self.model, "prompt": prompt, "max_tokens": self.max_new_tokens, "temperature": 0}
        async with self.session.post(self.url + "/v1/completions", json=body) as response:
            data = await response.json()
        if response.status != 200:
            self.tally.errors += 1
            return
        self.tally.latencies_s.append(time.perf_counter() - started)
        self.tally.output_tokens += len(data["verillm"]["output_tokens"])


async def run_interleaved(in_process: InProcessPath, daemon: DaemonPath, prompts: list[list[int]], concurrency: int) -> None:
    """Run every batch on both paths, alternating which goes first (ABBA)."""
    for step, start in enumerate(range(0, len(prompts), concurrency)):
        batch = prompts[start : start + concurrency]
        if step % 2 == 0:
            await asyncio.to_thread(in_process.run_batch, batch, start)
            await daemon.run_batch(batch)
        else:
            await daemon.run_batch(batch)
            await asyncio.to_thread(in_process.run_batch, batch, start)


def get_engine_and_commit_s(metrics_text: str) -> tuple[float, float]:
    """Return the summed engine.run and commit seconds in a node's /metrics text."""
    sums = {s.name: s.value for f in text_string_to_metric_families(metrics_text) for s in f.samples if s.name.endswith("_seconds_sum")}
    return sums.get("verillm_node_generation_seconds_sum", 0.0), sums.get("verillm_node_commit_seconds_sum", 0.0)


async def scrape_engine_and_commit_s(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    """Return a running node's summed engine.run and commit seconds."""
    async with session.get(url + "/metrics") as response:
        return get_engine_and_commit_s(await response.text())


def get_process_cpu_s(pid: int) -> float:
    """Return the CPU seconds (user + system, all threads) a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_daemon(directory: Path, engine: EngineConfig, concurrency: int, batch_wait_ms: float, profile: bool = False,
                 receipts_synchronous: str = "FULL") -> tuple[subprocess.Popen, str]:
    """Start a node process for the bench (``profile``: with its loop-thread profiler armed); return it and its URL."""
    write_key_file(new_node_key(), directory / "key.json")
    (directory / "node.toml").write_text(
        f'[identity]\nkey_file = "{directory / "key.json"}"\n[server]\nport = 0\n[store]\npath = "{directory / "node.sqlite"}"\nreceipts_synchronous = "{receipts_synchronous}"\n'
        f'[engine]\nmodel = "{engine.model}"\ndtype = "{engine.dtype}"\nthreads = {engine.threads}\n'
        f"[queue]\nmax_batch_size = {concurrency}\nbatch_wait_ms = {batch_wait_ms}\nmax_queued_jobs = {max(256, 2 * concurrency)}\n"
        f"[limits]\nmax_inflight_per_client = {max(16, concurrency)}\n"  # one bench client: its share is the whole run
    )
    env = envs.compute_child_environ()
    env.pop(PROFILE_ENV, None)
    if profile:
        env[PROFILE_ENV] = str(directory / "profile.json")
    log_path = directory / "node.log"
    with open(log_path, "w") as log:
        command = [sys.executable, "-m", "verillm.node", "run", "--config", str(directory / "node.toml"), "--log-level", "WARNING"]
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    for _ in range(6000):
        for line in log_path.read_text().splitlines():
            if line.startswith("verillm node listening on "):
                return process, line.rsplit(" ", 1)[1]
        if process.poll() is not None:
            raise click.ClickException(f"the node exited:\n{log_path.read_text()}")
        time.sleep(0.05)
    raise click.ClickException("the node did not start within 5 minutes")


def stop_daemon(process: subprocess.Popen) -> None:
    """Stop the bench's node process."""
    process.send_signal(signal.SIGTERM)
    process.wait(60)


def format_table(results: list[PathResult]) -> str:
    """Return the results as a fixed-width table."""
    header = f"{'path':32} {'requests':>8} {'errors':>6} {'tokens/s':>10} {'jobs/s':>8} {'p50 ms':>9} {'p99 ms':>9} {'CPU ms/job':>10} {'engine s':>9} {'commit s':>9}"
    rows = [
        f"{r.path:32} {r.requests:>8} {r.errors:>6} {r.tokens_per_s:>10.1f} {r.jobs_per_s:>8.2f} {r.p50_latency_ms:>9.1f} "
        f"{r.p99_latency_ms:>9.1f} {r.cpu_ms_per_job:>10.2f} {r.engine_s:>9.2f} {r.commit_s:>9.2f}"
        for r in results
    ]
    return "\n".join([header, *rows])


async def measure(served, engine_config: EngineConfig, prompts, concurrency: int, max_new_tokens: int, batch_wait_ms: float,
                  ttft: dict | None = None, where: dict | None = None, profile: bool = False,
                  receipts_synchronous: str = "FULL") -> tuple[PathResult, PathResult]:
    """Start the daemon, warm both paths up, run the interleaved measurement (then, given ``ttft``, fill it: streaming TTFT).

    ``where`` (if given) gets the daemon's CPU split by thread and its batch sizes over the measured run and, with
    ``profile``, the loop-thread profile of one more daemon-only pass over ``prompts``.
    """
    where = {} if where is None else where
    in_process = InProcessPath(served, max_new_tokens)
    with tempfile.TemporaryDirectory(prefix="verillm-bench-") as directory:
        click.echo(f"starting a node daemon ({engine_config.model}; loading the model takes a while)…", err=True)
        process, url = await asyncio.to_thread(start_daemon, Path(directory), engine_config, concurrency, batch_wait_ms, profile, receipts_synchronous)
        click.echo(f"daemon at {url}; {len(prompts)} jobs per path, {concurrency} at a time, then streaming for time to first token…", err=True)
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as session:
                warm_daemon = DaemonPath(url, engine_config.model, max_new_tokens, session)
                await run_interleaved(InProcessPath(served, max_new_tokens), warm_daemon, prompts[:concurrency], concurrency)
                daemon = DaemonPath(url, engine_config.model, max_new_tokens, session)
                cpu_started = get_process_cpu_s(process.pid)  # the daemon idles while the in-process path runs
                engine_started, commit_started = await scrape_engine_and_commit_s(session, url)
                batches_started, threads_started = await scrape_batches(session, url), get_thread_cpu_s(process.pid)
                in_process.tally.engine_s, in_process.tally.commit_s = 0.0, 0.0
                await run_interleaved(in_process, daemon, prompts, concurrency)
                daemon.tally.cpu_s = get_process_cpu_s(process.pid) - cpu_started
                where["threads"] = compute_thread_split(process.pid, threads_started, get_thread_cpu_s(process.pid), len(prompts))
                batches = await scrape_batches(session, url)
                where["batches"] = (batches[0] - batches_started[0], batches[1] - batches_started[1])
                where["client_cpu_ms_per_job"] = round(1000 * daemon.tally.client_cpu_s / len(prompts), 3)
                engine_s, commit_s = await scrape_engine_and_commit_s(session, url)
                daemon.tally.engine_s, daemon.tally.commit_s = engine_s - engine_started, commit_s - commit_started
                if profile:
                    profiled = DaemonPath(url, engine_config.model, max_new_tokens, session)
                    where["profile"] = await measure_loop_profile(process, Path(directory) / "profile.json", profiled, prompts, concurrency)
                if ttft is not None:
                    ttft.update(await measure_ttft(session, url, engine_config.model, prompts, concurrency, max_new_tokens))
        finally:
            stop_daemon(process)
    return compute_path_result(in_process.tally), compute_path_result(daemon.tally)


@click.command("node")
@click.option("--model", default="tiny", show_default=True, help="Model: tiny or smollm2.")
@click.option("--dtype", default="float32", show_default=True)
@click.option("--concurrency", "-c", type=int, default=4, show_default=True, help="Concurrent requests = batch size.")
@click.option("--requests", "-r", type=int, default=64, show_default=True, help="Jobs per path.")
@click.option("--prompt-tokens", type=int, default=32, show_default=True)
@click.option("--max-new-tokens", type=int, default=32, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads on both paths (0 = torch default); 1 makes CPU times exact.")
@click.option("--batch-wait-ms", type=float, default=5.0, show_default=True, help="Daemon batching wait (ends early once the batch is full).")
@click.option("--receipts-synchronous", type=click.Choice(["FULL", "NORMAL"]), default="FULL", show_default=True,
              help="The daemon's store.receipts_synchronous; NORMAL only to measure what FULL's fsync costs.")
@click.option("--profile", is_flag=True, help="Then one more daemon pass with its event-loop thread profiled: CPU per job by component.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the results here.")
def node_bench(model, dtype, concurrency, requests, prompt_tokens, max_new_tokens, threads, batch_wait_ms, receipts_synchronous, profile, json_path):
    """Throughput and p50/p99 latency through the daemon vs in-process, and the daemon's overhead."""
    from verillm.node.worker.engines import build_served_model

    engine_config = EngineConfig(model=model, dtype=dtype, threads=threads)
    served = build_served_model(engine_config)
    prompts = make_prompts(requests, prompt_tokens, served.manifest.vocab_size)
    ttft: dict = {}
    where: dict = {}
    bare, daemon = asyncio.run(measure(served, engine_config, prompts, concurrency, max_new_tokens, batch_wait_ms, ttft, where, profile, receipts_synchronous))
    overhead = 1 - daemon.tokens_per_s / bare.tokens_per_s
    cpu_overhead = daemon.cpu_s / bare.cpu_s - 1
    latency_ratio = daemon.p50_latency_ms / bare.p50_latency_ms
    click.echo(format_table([bare, daemon]))
    click.echo(f"daemon overhead: {100 * overhead:+.2f}% throughput (goal ≤ 3%), {100 * cpu_overhead:+.2f}% CPU per job, p50 latency ×{latency_ratio:.3f}")
    click.echo(format_thread_split(where["threads"], bare.cpu_ms_per_job, where["batches"], where["client_cpu_ms_per_job"]))
    if profile:
        click.echo(format_profile(where["profile"], where["threads"]["loop_thread_cpu_ms_per_job"]))
    click.echo(format_ttft(ttft))
    report = {
        "model": served.name, "dtype": dtype, "concurrency": concurrency, "requests": requests,
        "prompt_tokens": prompt_tokens, "max_new_tokens": max_new_tokens, "batch_wait_ms": batch_wait_ms,
        "receipts_synchronous": receipts_synchronous, "client_cpu_ms_per_job": where["client_cpu_ms_per_job"],
        "in_process": asdict(bare), "daemon": asdict(daemon),
        "threads": threads, "overhead_throughput_ratio": round(overhead, 4), "overhead_cpu_ratio": round(cpu_overhead, 4),
        "p50_latency_ratio": round(latency_ratio, 4), "streaming": ttft,
        "daemon_threads": where["threads"], "daemon_batches": {"jobs": where["batches"][0], "batches": where["batches"][1]},
        "loop_profile": where.get("profile"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(), "loadavg": os.getloadavg()},
    }
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
    if bare.errors or daemon.errors:
        raise click.ClickException(f"{bare.errors + daemon.errors} requests failed")


@click.command("store-sync")
@click.option("--commits", type=int, default=200, show_default=True, help="Commits per mode.")
@click.option("--blob-bytes", type=int, default=40_000, show_default=True, help="Bytes written per commit (a retained trace blob).")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None, help="Where the SQLite files go (the disk to measure); default a temp dir.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def store_sync_bench(commits, blob_bytes, directory, json_path):
    """What each SQLite synchronous mode costs per commit on this disk (WAL, one blob per commit)."""
    import sqlite3

    results = []
    with tempfile.TemporaryDirectory(prefix="verillm-sync-", dir=directory) as where:
        for mode in ("NORMAL", "FULL", "EXTRA"):
            connection = sqlite3.connect(Path(where) / f"{mode}.sqlite", isolation_level=None)
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute(f"PRAGMA synchronous = {mode}")
            connection.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, blob BLOB)")
            blob, started = os.urandom(blob_bytes), time.perf_counter()
            for i in range(commits):
                connection.execute("BEGIN IMMEDIATE")
                connection.execute("INSERT INTO t VALUES (?, ?)", (i, blob))
                connection.execute("COMMIT")
            results.append({"synchronous": mode, "ms_per_commit": round(1000 * (time.perf_counter() - started) / commits, 3)})
            connection.close()
    click.echo(f"{'synchronous':12} {'ms/commit':>10}")
    for row in results:
        click.echo(f"{row['synchronous']:12} {row['ms_per_commit']:>10.3f}")
    if json_path:
        Path(json_path).write_text(json.dumps({"commits": commits, "blob_bytes": blob_bytes, "results": results, "loadavg": os.getloadavg()}, indent=2) + "\n")
