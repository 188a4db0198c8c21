"""Where the daemon's CPU per job goes (`verillm bench node`'s thread split and ``--profile``).

Thread split (every run): the daemon's CPU over the measured run, per thread, from
``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds on CPU): the event-loop thread (the main
thread: HTTP, JSON, SQLite, batching, responses) against every other thread (the engine
thread: engine + commit + sign, the work the in-process path does too).

Profile (``--profile``): after the measured run, one more pass of the same jobs through the
daemon with its loop-thread profiler on (node/profiling.py, toggled by SIGUSR1): the loop
thread's CPU by component. The profiler's own time is left out of each interval but its
cache effects are not, so the profiled total is printed beside the unprofiled loop-thread
CPU, and each component's cost is also given scaled to it.
"""

import asyncio
import json
import signal
import subprocess
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families


def get_thread_cpu_s(pid: int) -> dict[int, float]:
    """Return {thread id: seconds on CPU} for every thread of process ``pid`` (ns-precise schedstat)."""
    seconds = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            seconds[int(task.name)] = int((task / "schedstat").read_text().split()[0]) / 1e9
        except FileNotFoundError:  # the thread ended between the listing and the read
            continue
    return seconds


def compute_thread_split(pid: int, before: dict[int, float], after: dict[int, float], jobs: int) -> dict:
    """Return the CPU ms per job of the main (event-loop) thread and of all other threads between two readings."""
    used = {tid: seconds - before.get(tid, 0.0) for tid, seconds in after.items()}
    loop_s = used.pop(pid, 0.0)
    other_s = sum(used.values())
    return {
        "loop_thread_cpu_ms_per_job": round(1000 * loop_s / jobs, 3),
        "other_threads_cpu_ms_per_job": round(1000 * other_s / jobs, 3),
        "threads_seen": len(after),
        "busy_threads_cpu_ms_per_job": sorted((round(1000 * v / jobs, 3) for v in used.values() if v * 1000 / jobs >= 0.01), reverse=True),
    }


def get_mean_batch_size(metrics_text: str) -> tuple[float, float]:
    """Return (jobs, batches) summed in a node's batch-size histogram."""
    samples = {s.name: s.value for f in text_string_to_metric_families(metrics_text) for s in f.samples}
    return samples.get("verillm_node_batch_size_jobs_sum", 0.0), samples.get("verillm_node_batch_size_jobs_count", 0.0)


async def scrape_batches(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    """Return a running node's (jobs, batches) so far."""
    async with session.get(url + "/metrics") as response:
        return get_mean_batch_size(await response.text())


async def _wait_for_file(path: Path, process: subprocess.Popen, what: str) -> None:
    for _ in range(600):
        if path.exists():
            return
        if process.poll() is not None:
            raise RuntimeError(f"the node exited while waiting for its {what}")
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the node did not write its {what} within 30 s (was it started with VERILLM_NODE_PROFILE?)")


async def measure_loop_profile(process: subprocess.Popen, profile_path: Path, daemon, prompts: list[list[int]], concurrency: int) -> dict:
    """Run ``prompts`` through ``daemon`` (a `DaemonPath`) with the loop-thread profiler on; return its report per job."""
    started = Path(str(profile_path) + ".started")
    process.send_signal(signal.SIGUSR1)
    await _wait_for_file(started, process, "profiler start")
    for start in range(0, len(prompts), concurrency):
        await daemon.run_batch(prompts[start : start + concurrency])
    process.send_signal(signal.SIGUSR1)
    await _wait_for_file(profile_path, process, "profile")
    report = json.loads(profile_path.read_text())
    jobs = len(daemon.tally.latencies_s)
    if daemon.tally.errors or not jobs:
        raise RuntimeError(f"the profiled pass had {daemon.tally.errors} failed requests of {len(prompts)}")
    return {
        "jobs": jobs,
        "profiled_loop_cpu_ms_per_job": round(1000 * report["thread_cpu_s"] / jobs, 3),
        "charged_cpu_ms_per_job": round(1000 * report["charged_cpu_s"] / jobs, 3),
        "corrected_cpu_ms_per_job": round(1000 * report["corrected_cpu_s"] / jobs, 3),
        "profiler_event_bias_us": round(1e6 * report["event_bias_s"], 3),
        "profiler_events_per_job": round(report["events"] / jobs, 1),
        "components_ms_per_job": {k: round(1000 * v / jobs, 4) for k, v in report["components"].items()},
        "top_functions_ms_per_job": {k: round(1000 * v / jobs, 4) for k, v in list(report["functions"].items())[:20]},
    }


def format_thread_split(split: dict, in_process_cpu_ms: float, batches: tuple[float, float], client_cpu_ms: float) -> str:
    """Return the thread-split lines of the bench's output."""
    jobs, count = batches
    return (
        f"daemon CPU per job by thread: event loop {split['loop_thread_cpu_ms_per_job']:.2f} ms, "
        f"engine + other threads {split['other_threads_cpu_ms_per_job']:.2f} ms (in-process path: {in_process_cpu_ms:.2f} ms); "
        f"daemon batches: {count:.0f}, mean size {jobs / max(count, 1):.2f}\n"
        f"the bench's HTTP client (its own process, not the daemon's CPU): {client_cpu_ms:.2f} ms of CPU per job"
    )


def format_profile(profile: dict, loop_cpu_ms: float) -> str:
    """Return the loop thread's components as a table: profiled ms/job, share, and scaled to the unprofiled loop CPU."""
    charged = profile["corrected_cpu_ms_per_job"]
    scale = loop_cpu_ms / charged if charged else float("nan")
    lines = [
        f"event-loop thread by component ({profile['jobs']} jobs, profiled: {profile['profiler_events_per_job']:.0f} events per job, "
        f"{profile['profiler_event_bias_us']:.2f} µs bias each removed; profiled total {charged:.3f} ms/job "
        f"(uncorrected {profile['charged_cpu_ms_per_job']:.3f}), unprofiled {loop_cpu_ms:.3f} ms/job):",
        f"{'component':48} {'ms/job':>8} {'share':>7} {'scaled ms/job':>14}",
    ]
    for name, ms in profile["components_ms_per_job"].items():
        lines.append(f"{name:48} {ms:>8.3f} {100 * ms / charged:>6.1f}% {ms * scale:>14.3f}")
    lines.append("top functions by self time (ms/job, profiled):")
    lines += [f"  {ms:8.4f}  {name}" for name, ms in list(profile["top_functions_ms_per_job"].items())[:12]]
    return "\n".join(lines)
