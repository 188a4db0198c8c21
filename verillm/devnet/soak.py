"""`verillm devnet --soak --minutes N`: steady load on a whole devnet, memory and open files watched.

For N minutes the soak sends one chat request through node 0 every ``interval_s`` seconds
(at most ``concurrency`` in flight), samples every node process's resident memory and open
file descriptors (and anvil's) from /proc every ``sample_s`` seconds, then waits for every
audit to settle. The verdict: every job settled as the protocol says, zero request errors,
every node still alive, no ERROR or Traceback line in any node log, and the growth of RSS
and fds from the first to the last quarter of the run, printed as a table and written as JSON.

Growth is reported, not judged against a threshold: a Python process's RSS creeps while
its allocator warms up, and the operator reads the figure (docs/operators.md has a 30-minute
run's). Linux only (/proc).
"""

import concurrent.futures
import json
import os
import threading
import time
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path

import click

from verillm.bench.tables import format_table
from verillm.devnet.progress import StallWatch

LOG_PROBLEMS = ("ERROR", "Traceback")


@dataclass
class Sample:
    """One reading of one process."""

    t_s: float
    rss_kib: int
    fds: int


@dataclass
class ProcessSeries:
    """The samples of one process, by label."""

    label: str
    pid: int
    samples: list[Sample] = field(default_factory=list)


def read_process(pid: int) -> tuple[int, int] | None:
    """Return (VmRSS in KiB, open fds) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        return None


def quarter_means(values: list[float]) -> tuple[float, float]:
    """Mean of the first and of the last quarter of ``values`` (at least one value each)."""
    if not values:
        raise ValueError("no samples")
    size = max(1, len(values) // 4)
    return sum(values[:size]) / size, sum(values[-size:]) / size


def summarize_series(series: ProcessSeries) -> dict:
    """RSS (MiB) and fds: first-quarter mean, last-quarter mean, growth, peak."""
    rss = [s.rss_kib / 1024 for s in series.samples]
    fds = [float(s.fds) for s in series.samples]
    rss_first, rss_last = quarter_means(rss)
    fd_first, fd_last = quarter_means(fds)
    return {"process": series.label, "pid": series.pid, "samples": len(series.samples),
            "rss_first_quarter_mib": round(rss_first, 1), "rss_last_quarter_mib": round(rss_last, 1),
            "rss_growth_pct": round(100 * (rss_last - rss_first) / rss_first, 2), "rss_peak_mib": round(max(rss), 1),
            "fds_first_quarter": round(fd_first, 1), "fds_last_quarter": round(fd_last, 1), "fds_peak": int(max(fds))}


class Sampler:
    """Samples a fixed set of processes in a background thread."""

    def __init__(self, processes: list[tuple[str, int]], interval_s: float):
        self.series = [ProcessSeries(label, pid) for label, pid in processes]
        self.interval_s = interval_s
        self.start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def sample_once(self) -> None:
        now = time.monotonic() - self.start
        for series in self.series:
            reading = read_process(series.pid)
            if reading is not None:
                series.samples.append(Sample(round(now, 1), *reading))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self.interval_s)


def list_processes(net) -> list[tuple[str, int]]:
    """(label, pid) of every node process and of anvil when the devnet started one."""
    processes = [(f"node {n.index}", n.process.pid) for n in net.nodes if n.process is not None]
    anvil = getattr(net, "anvil", None)
    if anvil is not None and anvil.process is not None:
        processes.append(("anvil", anvil.process.pid))
    return processes


def count_log_problems(net) -> dict[str, int]:
    """Lines with ERROR or a Traceback in each node's log."""
    counts = {}
    for node in net.nodes:
        text = Path(node.log_file).read_text(errors="replace")
        counts[f"node {node.index}"] = sum(1 for line in text.splitlines() if any(p in line for p in LOG_PROBLEMS))
    return counts


def send_steadily(net, tracker, minutes: float, interval_s: float, concurrency: int, max_tokens: int, prompts, retry) -> list[str]:
    """Send one request every ``interval_s`` for ``minutes``; follow the tracker meanwhile; return the errors."""
    from verillm.client import Client

    client = Client(net.gateway_url)
    errors: list[str] = []
    lock = threading.Lock()

    def one(n: int) -> None:
        messages = [{"role": "user", "content": prompts[(n - 1) % len(prompts)]}]
        try:
            completion = retry(lambda: client.chat(messages, max_tokens=max_tokens, temperature=0))
        except Exception as exc:  # noqa: BLE001 (every failure is counted and reported, not hidden)
            with lock:
                errors.append(f"request {n}: {type(exc).__name__}: {exc}")
            return
        with lock:
            tracker.add(n, completion)

    deadline = time.monotonic() + minutes * 60
    stalls = StallWatch(net, tracker.say, 120.0)
    n = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        pending: set[concurrent.futures.Future] = set()
        next_send = time.monotonic()
        while time.monotonic() < deadline:
            pending = {f for f in pending if not f.done()}
            if time.monotonic() >= next_send and len(pending) < concurrency:
                n += 1
                pending.add(pool.submit(one, n))
                next_send += interval_s
            with lock:
                poll_unsettled(tracker)
                stalls.check([job.get("change") for job in tracker.jobs])
            time.sleep(1.0)
    return errors


def poll_unsettled(tracker) -> None:
    """Like `JobTracker.poll`, but only for jobs not yet settled (hundreds of jobs in a soak)."""
    from verillm.devnet.network import get_json

    for job in tracker.jobs:
        if not job["settled"]:
            try:
                body = get_json(f"{tracker.net.gateway_url}/v1/verillm/audits/0x{job['completion'].job_hash.hex()}")
            except (TimeoutError, urllib.error.URLError) as exc:  # counted and reported: slowness, not a lost job
                tracker.slow_polls += 1
                tracker.say(f"the gateway did not answer a status request in time ({exc}); {tracker.slow_polls} so far")
                return
            tracker._report(job, body)


def follow_unsettled(tracker, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not tracker.is_done() and time.monotonic() < deadline:
        poll_unsettled(tracker)
        time.sleep(2.0)


def run_soak(net, tracker, minutes: float, interval_s: float, concurrency: int, max_tokens: int, settle_timeout_s: float,
             sample_s: float, json_path: str | None, prompts, retry) -> tuple[dict, list[str]]:
    """Run the soak; return (the JSON report, the problems found besides the per-job outcome)."""
    started = time.monotonic()
    tracker.say(f"soak: one request every {interval_s:g} s for {minutes:g} min ({concurrency} in flight at most); "
                f"sampling RSS and open fds every {sample_s:g} s")
    with Sampler(list_processes(net), sample_s) as sampler:
        errors = send_steadily(net, tracker, minutes, interval_s, concurrency, max_tokens, prompts, retry)
        tracker.say(f"soak: load over ({len(tracker.jobs)} jobs served, {len(errors)} errors); waiting for every audit to settle")
        follow_unsettled(tracker, settle_timeout_s)
        sampler.sample_once()
    processes = [summarize_series(s) for s in sampler.series if s.samples]
    dead = [f"node {n.index} exited with code {n.process.returncode}" for n in net.nodes if n.process.poll() is not None]
    log_problems = count_log_problems(net)
    unsettled = [job["n"] for job in tracker.jobs if not job["settled"]]
    report = {"minutes": minutes, "interval_s": interval_s, "concurrency": concurrency, "max_tokens": max_tokens,
              "model": net.model, "jobs": len(tracker.jobs), "settled": len(tracker.jobs) - len(unsettled),
              "request_errors": errors, "slow_status_polls": tracker.slow_polls, "dead_nodes": dead, "log_error_lines": log_problems,
              "wall_s": round(time.monotonic() - started, 1), "processes": processes,
              "series": {s.label: [[x.t_s, x.rss_kib, x.fds] for x in s.samples] for s in sampler.series}}
    print_soak_table(report)
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(report, indent=1) + "\n")
        click.echo(f"soak report written to {json_path}")
    problems = errors + dead + [f"{label}: {n} ERROR/Traceback log lines" for label, n in log_problems.items() if n]
    problems += [f"soak: {len(unsettled)} jobs unsettled after {settle_timeout_s:g} s: {unsettled[:10]}"] if unsettled else []
    return report, problems


def print_soak_table(report: dict) -> None:
    headers = ["process", "samples", "RSS first¼ MiB", "RSS last¼ MiB", "RSS growth %", "RSS peak MiB", "fds first¼", "fds last¼", "fds peak"]
    rows = [[p["process"], p["samples"], f"{p['rss_first_quarter_mib']:.1f}", f"{p['rss_last_quarter_mib']:.1f}", f"{p['rss_growth_pct']:+.2f}",
             f"{p['rss_peak_mib']:.1f}", f"{p['fds_first_quarter']:.1f}", f"{p['fds_last_quarter']:.1f}", p["fds_peak"]] for p in report["processes"]]
    click.echo(f"\nsoak: {report['minutes']:g} min, {report['jobs']} jobs, {report['settled']} settled, "
               f"{len(report['request_errors'])} request errors, {len(report['dead_nodes'])} dead nodes, "
               f"{sum(report['log_error_lines'].values())} ERROR log lines, wall {report['wall_s']:.0f} s")
    click.echo(format_table(headers, rows))
