"""`verillm bench devnet-load`: the devnet with a cheater under load, several runs in a row (issue 11).

Each run is a fresh `verillm devnet --cheater int8 --jobs 24` network (anvil with timed
blocks, the `minimal` preset: every job audited) with, at the same time, extra chat requests
from a second client and CPU hogs (busy-looping processes, one per ``--hogs``) competing for
the cores. A run passes when every job settled as the protocol says: every honest job
verified, the cheater slashed, no honest node slashed. A run that merely ran out of time
says so (``timeout``) with what the network was doing then, so slowness of the machine is
not mistaken for a protocol failure, nor the other way round.

Printed: one row per run; written (``--json``): every run's counts, problems and the
gateway's view at the end.
"""

import concurrent.futures
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from verillm.bench.tables import format_table, write_json

HOG_CODE = "while True: pass"
LOG_MARKERS = {"too_late": "TooLate", "errors": " ERROR ", "tracebacks": "Traceback"}


def start_hogs(count: int) -> list[subprocess.Popen]:
    """Start ``count`` busy-looping Python processes (stopped by `stop_hogs`, or dying with this one)."""
    from verillm.devnet.network import _die_with_parent

    return [subprocess.Popen([sys.executable, "-c", HOG_CODE], stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent) for _ in range(count)]


def stop_hogs(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        hog.kill()
        hog.wait(timeout=10)


def count_log_markers(net) -> dict[str, int]:
    """How many log lines of all nodes carry each marker (a missed window, an error, a traceback)."""
    counts = dict.fromkeys(LOG_MARKERS, 0)
    for node in net.nodes:
        for line in Path(node.log_file).read_text(errors="replace").splitlines():
            for name, marker in LOG_MARKERS.items():
                counts[name] += marker in line
    return counts


def send_load(net, tracker, job_count: int, extra: int, max_tokens: int) -> None:
    """The devnet's ``job_count`` requests (4 at a time) and ``extra`` more from a second client, at once."""
    from verillm.client import Client
    from verillm.devnet.run import PROMPTS, retry_no_workers, send_jobs

    second = Client(net.gateway_url)

    def one_extra(n: int):
        messages = [{"role": "user", "content": "Extra request " + PROMPTS[n % len(PROMPTS)]}]
        return n, retry_no_workers(lambda: second.chat(messages, max_tokens=max_tokens, temperature=0))

    with concurrent.futures.ThreadPoolExecutor(max_workers=1 + 4) as pool:
        main = pool.submit(send_jobs, net, tracker, job_count, max_tokens)
        extras = [pool.submit(one_extra, job_count + i) for i in range(1, extra + 1)]
        main.result()
        for future in extras:
            n, completion = future.result()
            tracker.add(n, completion)


def summarize_run(net, tracker, problems: list[str], wall_s: float, timed_out: bool, explain: str) -> dict:
    """One run's counts, from the gateway's view of every job."""
    verified = honest_slashed = 0
    cheaters = {n.address.lower() for n in net.nodes if not n.spec.is_honest}
    cheater_slashed = False
    for job in tracker.jobs:
        body, audit = job["body"], job["body"].get("audit") or {}
        verified += body.get("status") == "final" and audit.get("status") == "settled"
        for slash in audit.get("slashed", []):
            cheater_slashed |= slash["node"].lower() in cheaters
            node = net.node_of(slash["node"])
            honest_slashed += node is not None and node.spec.is_honest
    unsettled = sum(1 for job in tracker.jobs if not job["settled"])
    result = "ok" if not problems else ("timeout" if timed_out and unsettled else "FAIL")
    return {"result": result, "wall_s": round(wall_s, 1), "jobs": len(tracker.jobs), "verified": verified,
            "cheater_jobs": sum(1 for j in tracker.jobs if (j["body"].get("worker") or "").lower() in cheaters),
            "cheater_slashed": cheater_slashed, "honest_slashes": honest_slashed, "unsettled": unsettled,
            "slow_status_polls": tracker.slow_polls, "log": count_log_markers(net), "problems": problems, "network_at_end": explain}


def run_once(index: int, model: str, cheater: str, job_count: int, extra: int, hogs: int, max_tokens: int, timeout_s: float, keep_dir: Path | None,
             window_s: float) -> dict:
    """One fresh network under load; return its summary."""
    from verillm.devnet.run import Clock, JobTracker, _node_specs, compute_gas_table, follow, print_summary
    from verillm.devnet.progress import StallWatch, prepare_model
    from verillm.devnet.windows import compute_timed_preset
    from verillm.devnet.network import LocalNetwork
    from verillm.spec.params import MINIMAL

    say = Clock()
    directory = keep_dir / f"run{index}" if keep_dir else Path(tempfile.mkdtemp(prefix="verillm-devnet-load-"))
    preset = compute_timed_preset(MINIMAL, 1.0, window_s) if window_s else MINIMAL
    net = LocalNetwork(directory, _node_specs(None, cheater), model=model, preset=preset, block_time_s=1.0, log=say)
    hog_processes: list[subprocess.Popen] = []
    try:
        prepare_model(model, say)
        net.start()
        net.wait_gateway_sees_all()
        hog_processes = start_hogs(hogs)
        say(f"run {index}: {hogs} CPU hog(s) busy; sending {job_count} requests and {extra} extra ones at once")
        tracker = JobTracker(net, say)
        started = time.monotonic()
        send_load(net, tracker, job_count, extra, max_tokens)
        follow(tracker, timeout_s, 60.0)
        timed_out = not tracker.is_done()
        explain = StallWatch(net, say).explain()
        problems = print_summary(net, tracker, compute_gas_table(net, net.protocol.deployment.start_block), say.elapsed())
        return summarize_run(net, tracker, problems, time.monotonic() - started, timed_out, explain)
    finally:
        stop_hogs(hog_processes)
        net.stop()
        if keep_dir is None:
            shutil.rmtree(directory, ignore_errors=True)


@click.command("devnet-load")
@click.option("--runs", type=int, default=5, show_default=True, help="Fresh networks, one after the other.")
@click.option("--model", default="tiny", show_default=True, help="tiny or smollm2 (as `verillm devnet --model`).")
@click.option("--cheater", type=click.Choice(["int8", "model", "truncate", "kv_int8", "lazy", "tamper"]), default="int8", show_default=True)
@click.option("--jobs", "job_count", type=int, default=24, show_default=True, help="The devnet's requests (4 at a time).")
@click.option("--extra", type=int, default=8, show_default=True, help="Extra requests from a second client, at the same time.")
@click.option("--hogs", type=int, default=1, show_default=True, help="Busy-looping processes competing for the CPU during each run.")
@click.option("--max-tokens", type=int, default=16, show_default=True)
@click.option("--timeout", "timeout_s", type=float, default=900.0, show_default=True, help="Per run: give up following jobs after this long.")
@click.option("--workdir", type=click.Path(file_okay=False), default=None, help="Keep each run's stores and logs under WORKDIR/runN.")
@click.option("--window-s", "window_s", type=float, default=120.0, show_default=True, help="As `verillm devnet --window-s` (1 s blocks); 0: MINIMAL's block windows.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def devnet_load_bench(runs, model, cheater, job_count, extra, hogs, max_tokens, timeout_s, workdir, window_s, json_path):
    """Devnet with a cheater, extra requests and CPU hogs, RUNS times: every honest job verified, the cheater slashed, no honest node slashed."""
    from verillm.devnet.run import _raise_interrupt

    for signum in (signal.SIGINT, signal.SIGTERM):  # stop every child by PID, also as a background job
        signal.signal(signum, _raise_interrupt)
    results = []
    for index in range(1, runs + 1):
        click.echo(f"\n=== run {index}/{runs}: devnet --cheater {cheater} --jobs {job_count} --model {model} --window-s {window_s:g}, +{extra} requests, {hogs} hog(s)")
        results.append(run_once(index, model, cheater, job_count, extra, hogs, max_tokens, timeout_s, Path(workdir) if workdir else None, window_s))
        write_json(json_path, {"runs": results, "model": model, "cheater": cheater, "jobs": job_count, "extra": extra, "hogs": hogs, "window_s": window_s})
    headers = ["run", "result", "wall s", "jobs", "verified", "cheater jobs", "cheater slashed", "honest slashes", "unsettled", "TooLate lines",
               "ERROR lines", "slow polls"]
    rows = [[i, r["result"], f"{r['wall_s']:.0f}", r["jobs"], r["verified"], r["cheater_jobs"], r["cheater_slashed"], r["honest_slashes"],
             r["unsettled"], r["log"]["too_late"], r["log"]["errors"], r["slow_status_polls"]] for i, r in enumerate(results, 1)]
    click.echo("\n" + format_table(headers, rows))
    for i, r in enumerate(results, 1):
        for problem in r["problems"]:
            click.echo(f"  run {i}: {problem}")
        if r["result"] == "timeout":
            click.echo(f"  run {i} timed out; the network then: {r['network_at_end']}")
    if any(r["result"] != "ok" for r in results):
        sys.exit(1)
