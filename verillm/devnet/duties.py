"""`verillm bench duties`: the slack of every slashable duty while the gateway runs at its full admitted client load (issue 35).

A devnet as `verillm devnet` runs it (anvil with 1 s blocks, the `minimal` preset with timed
windows and ``--audit-rate-bps`` of the jobs audited), five honest nodes, node 0 the gateway,
every batch's dispatcher and, one job in five, the audited worker. ``--clients`` clients, each
from its own loopback address (the gateway tells clients apart by address without API keys), each
keep `limits.max_inflight_per_client` completions in flight for ``--load-s`` seconds: the most the
gateway admits them (a refused request — 429, 503 — is retried at once, and counted). Meanwhile
the node's own duties run: its batches (a promise falls due on each), its private draws' reveals,
its openings as the audited worker. Then ``--drain-s`` more seconds for the duties already due.

Each node measures its own duties (node/dispatcher/deadlines.py): a duty's transaction landing in
block b with deadline d has d − b blocks of slack (0: the last block in time). The figures come
from the nodes' /metrics (`verillm_node_duty_*`); misses are counted there and, independently, as
`TooLate` lines in every node's log and as stake node 0 lost. 0 missed duties is the bar; the
worst slack is the figure. Prints a table and writes JSON.
"""

import asyncio
import re
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
import click

from verillm.bench.tables import format_table, write_json

PROMPT = "The river {n} runs past the mill and"
DUTY_METRIC = re.compile(r'^verillm_node_(duty_slack_blocks_count|duty_worst_slack_blocks|duties_missed_total)\{kind="(\w+)"\} ([0-9.e+-]+)$')


class ClientLoad:
    """``clients`` clients, each from its own loopback address, each keeping ``per_client`` completions in flight."""

    def __init__(self, url: str, clients: int, per_client: int, max_tokens: int):
        self.url, self.clients, self.per_client, self.max_tokens = url, clients, per_client, max_tokens
        self.statuses: Counter[str] = Counter()
        self.in_flight = 0
        self.most_in_flight = 0
        self._n = 0

    async def run(self, seconds: float) -> None:
        stop_at = time.monotonic() + seconds
        sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(f"127.0.0.{10 + i}", 0), limit=0),
                                          timeout=aiohttp.ClientTimeout(total=600)) for i in range(self.clients)]
        try:
            await asyncio.gather(*(self._lane(s, stop_at) for s in sessions for _ in range(self.per_client)))
        finally:
            for session in sessions:
                await session.close()

    async def _lane(self, session: aiohttp.ClientSession, stop_at: float) -> None:
        while time.monotonic() < stop_at:
            self._n += 1
            body = {"model": "tiny", "prompt": PROMPT.format(n=self._n), "max_tokens": self.max_tokens, "temperature": 0}
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            response_status = 0
            try:
                async with session.post(self.url + "/v1/completions", json=body) as response:
                    response_status = response.status
                    data = await response.json(content_type=None)
                    code = "ok" if response.status == 200 else (data.get("error") or {}).get("code", "?")
                    self.statuses[f"{response.status} {code}"] += 1
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                self.statuses[type(exc).__name__] += 1
            finally:
                self.in_flight -= 1
            if response_status != 200 and time.monotonic() < stop_at:
                await asyncio.sleep(0.1)  # refused (no_workers before it serves, shedding_for_duty): retry soon, not in a spin


def read_duty_metrics(url: str) -> dict[str, dict]:
    """Landed count, worst slack and misses per duty kind, from a node's /metrics."""
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    kinds: dict[str, dict] = {}
    for line in text.splitlines():
        match = DUTY_METRIC.match(line)
        if match is None:
            continue
        name, kind, value = match.group(1), match.group(2), float(match.group(3))
        row = kinds.setdefault(kind, {"landed": 0, "missed": 0, "worst_slack_blocks": None})
        if name == "duty_slack_blocks_count":
            row["landed"] = int(value)
        elif name == "duties_missed_total":
            row["missed"] = int(value)
        else:
            row["worst_slack_blocks"] = int(value)
    return {kind: row for kind, row in kinds.items() if row["landed"] or row["missed"]}


def get_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_bench(workdir: Path, clients: int, per_client: int, max_tokens: int, load_s: float, drain_s: float, window_s: float,
              audit_rate_bps: int, say) -> dict:
    from verillm.devnet.network import LocalNetwork, NodeSpec
    from verillm.devnet.windows import compute_timed_preset
    from verillm.spec.params import MINIMAL

    preset = compute_timed_preset(MINIMAL, 1.0, window_s).replace(AUDIT_RATE_BPS=audit_rate_bps)
    net = LocalNetwork(workdir, [NodeSpec() for _ in range(5)], preset=preset, chain="anvil", block_time_s=1.0, log=say)
    try:
        net.start()
        net.wait_gateway_sees_all()
        gateway = net.nodes[0]
        from web3 import Web3

        stake_before = net.protocol.registry.call("getStake", Web3.to_checksum_address(gateway.address))
        start_block = net.protocol.chain.get_block_number()
        say(f"load: {clients} clients x {per_client} completions in flight for {load_s:g} s (max_tokens {max_tokens})")
        load = ClientLoad(net.gateway_url, clients, per_client, max_tokens)
        asyncio.run(load.run(load_s))
        say(f"load done ({sum(load.statuses.values())} requests); draining the duties for {drain_s:g} s")
        time.sleep(drain_s)
        by_node = [read_duty_metrics(node.url) for node in net.nodes]
        cpu_s = sum(get_cpu_s(node.process.pid) for node in net.nodes if node.process is not None and node.process.poll() is None)
        too_late = sum(Path(node.log_file).read_text(errors="replace").count("TooLate") for node in net.nodes)
        stake_after = net.protocol.registry.call("getStake", Web3.to_checksum_address(gateway.address))
        blocks = net.protocol.chain.get_block_number() - start_block
    finally:
        net.stop()
    landed = [row for node in by_node for row in node.values() if row["landed"]]
    return {
        "load": {"clients": clients, "per_client_in_flight": per_client, "most_in_flight": load.most_in_flight, "seconds": load_s,
                 "max_tokens": max_tokens, "answers": dict(load.statuses)},
        "preset": {"window_s": window_s, "audit_rate_bps": audit_rate_bps, "open_window_blocks": preset.OPEN_WINDOW_BLOCKS,
                   "draw_window_blocks": preset.DRAW_WINDOW_BLOCKS, "batch_by_blocks": preset.BATCH_BY_BLOCKS},
        "blocks": blocks,
        "duties_by_node": {f"node {i}": kinds for i, kinds in enumerate(by_node)},
        "landed": sum(row["landed"] for node in by_node for row in node.values()),
        "missed": sum(row["missed"] for node in by_node for row in node.values()),
        "too_late_log_lines": too_late,
        "gateway_stake_lost_wei": stake_before - stake_after,
        "worst_slack_blocks": min((row["worst_slack_blocks"] for row in landed), default=None),
        "nodes_cpu_s": round(cpu_s, 1),
    }


@click.command("duties")
@click.option("--clients", type=int, default=6, show_default=True, help="Clients, each from its own loopback address.")
@click.option("--per-client", type=int, default=16, show_default=True, help="Completions each keeps in flight (the node's default limits.max_inflight_per_client).")
@click.option("--max-tokens", type=int, default=8, show_default=True)
@click.option("--load-s", type=float, default=120.0, show_default=True, help="How long the client load runs.")
@click.option("--drain-s", type=float, default=60.0, show_default=True, help="How long after it the duties already due may land.")
@click.option("--window-s", type=float, default=60.0, show_default=True, help="Commit, open and proof windows in seconds (1 s blocks).")
@click.option("--audit-rate-bps", type=int, default=2500, show_default=True, help="Share of jobs audited, in basis points.")
@click.option("--workdir", type=click.Path(file_okay=False), default=None, help="Keep the network's stores and logs here.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def duties_bench(clients, per_client, max_tokens, load_s, drain_s, window_s, audit_rate_bps, workdir, json_path):
    """The slack of every slashable duty of a devnet's nodes while the gateway runs at its full admitted client load."""
    directory = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="verillm-bench-duties-"))
    started = time.monotonic()
    say = lambda line: click.echo(f"[{time.monotonic() - started:6.1f} s] {line}")  # noqa: E731
    try:
        result = run_bench(directory, clients, per_client, max_tokens, load_s, drain_s, window_s, audit_rate_bps, say)
    finally:
        if workdir is None:
            shutil.rmtree(directory, ignore_errors=True)
    rows = [[node, kind, row["landed"], row["missed"], row["worst_slack_blocks"]]
            for node, kinds in result["duties_by_node"].items() for kind, row in sorted(kinds.items())]
    click.echo("\n" + format_table(["node", "duty", "landed", "missed", "worst slack (blocks)"], rows))
    click.echo(f"\nload: {result['load']['most_in_flight']} completions in flight at most; answers {result['load']['answers']}")
    click.echo(f"duties landed {result['landed']}, missed {result['missed']} (TooLate log lines {result['too_late_log_lines']}, "
               f"gateway stake lost {result['gateway_stake_lost_wei']} wei); worst slack {result['worst_slack_blocks']} blocks; "
               f"{result['blocks']} blocks; nodes' CPU {result['nodes_cpu_s']} s")
    write_json(json_path, result)
