"""A whole VeriLLM network on this machine, a few requests, their audits (`verillm devnet`).

Starts a chain (anvil when `make install` put it under contracts/node_modules, else the embedded
eth-tester chain behind a loopback JSON-RPC endpoint), deploys the contracts with the
`minimal` preset (every job audited, short windows), starts N node processes — one of them
dishonest with ``--cheater`` — registers and stakes them, sends requests through the SDK to
node 0, and follows every job: receipt, batch, audit, committee, votes, verdict, slashing.
Ends with a summary and the gas of every step, read back from the chain.

Exit code 0 when every job settled and the outcome is the protocol's: no honest node slashed,
and the cheater (if any) slashed. Ctrl-C stops every child process by PID. ``--keep`` leaves
the network up afterwards (verillm/devnet/keep.py) until Ctrl-C or SIGTERM.
"""

import concurrent.futures
import sys
import time
import urllib.error

import click

from verillm.bench.workloads import DEVNET_PROMPTS
from verillm.devnet.progress import StallWatch
from verillm.devnet.network import LocalNetwork, NodeSpec, get_json
from verillm.spec.params import MINIMAL

CHEATERS = {"int8": NodeSpec(attack="int8"), "model": NodeSpec(attack="other_model"),
            "truncate": NodeSpec(attack="truncate"), "kv_int8": NodeSpec(attack="kv_int8"), "lazy": NodeSpec(lazy=True), "tamper": NodeSpec(tamper_opening=True),
            # streams injected text under a signature over other tokens (issue 35): nothing signed covers
            # it, so it is not slashable; the gateway relays none of it and fails the job over
            "inject": NodeSpec(hostile_stream="forged")}
PROMPTS = DEVNET_PROMPTS  # calibrated on: `verillm/bench/workloads.py`
TERMINAL = ("final", "slashed", "tie", "abandoned")


class Clock:
    """Prints lines stamped with the seconds since the devnet started."""

    def __init__(self):
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def __call__(self, line: str) -> None:
        click.echo(f"[{self.elapsed():6.1f}s] {line}")


def _amount(wei: int | None) -> str:
    return f"{wei / 1e18:g} ETH" if wei else "nothing left to take: already slashed"


def _short(address: str) -> str:
    return address[:8] + "…"


class JobTracker:
    """Follows each job's status at the gateway and prints what changed."""

    def __init__(self, net: LocalNetwork, say: Clock):
        self.net, self.say = net, say
        self.jobs: list[dict] = []  # {"n", "completion", "status", "body"}
        self.slow_polls = 0  # status requests the gateway did not answer within get_json's timeout

    def name(self, address: str) -> str:
        node = self.net.node_of(address)
        return f"node {node.index}" if node else _short(address)

    def add(self, n: int, completion) -> None:
        self.jobs.append({"n": n, "completion": completion, "status": None, "body": {}, "settled": False})
        worker = self.name("0x" + completion.receipt.worker.hex())
        self.say(f"job {n}: {len(completion.tokens)} tokens from {worker}, receipt root 0x{completion.receipt.commitment_root.hex()[:12]}…  "
                 f"{(completion.text or '').strip()[:48]!r}")  # None: the SDK holds no tokenizer here
        self.say(f"job {n}: job hash 0x{completion.job_hash.hex()}")  # whole: what audit replay and the explorer take

    def poll(self) -> None:
        for job in self.jobs:
            try:
                body = get_json(f"{self.net.gateway_url}/v1/verillm/audits/0x{job['completion'].job_hash.hex()}")
            except (TimeoutError, urllib.error.URLError) as exc:  # a loaded machine: say so, poll again next time
                self.slow_polls += 1
                self.say(f"the gateway did not answer a status request in time ({exc}); {self.slow_polls} so far")
                return
            self._report(job, body)

    def _report(self, job: dict, body: dict) -> None:
        audit = body.get("audit") or {}
        settled = audit.get("status") in ("settled", "abandoned")
        lies = sum(v["lie"] for v in (audit.get("chain_outcome") or {}).get("votes", []))
        change = (body["status"], settled, bool(audit.get("committee")), lies, len(audit.get("slashed", [])))
        if change != job.get("change"):
            job["change"], job["status"], job["settled"] = change, body["status"], settled
            self.say(f"job {job['n']}: {self._describe(body)}")
        job["body"] = body

    def _describe(self, body: dict) -> str:
        audit, status = body.get("audit") or {}, body["status"]
        if status == "dispatched":
            return "dispatched: the receipt waits for a batch"
        if status == "committed":
            return f"committed: receipt in batch {body['batch']['batch_id']} (leaf {body['batch']['index']})"
        if status == "audited":
            committee = ", ".join(self.name(m) for m in audit["committee"]) or "being drawn"
            return f"audited: audit #{audit['audit_id']}, committee {committee}"
        votes = (audit.get("chain_outcome") or {}).get("votes", [])
        counted = [v for v in votes if v["counted"]]
        lies = [f"{self.name(v['node'])}'s {'agree' if v['vote'] == 1 else 'disagree'}" for v in votes if v["lie"]]
        text = (f"{status}: {sum(v['vote'] == 1 for v in counted)}/{len(counted)} counted votes agree"
                + (f" ({', '.join(lies)} proven a lie: not counted)" if lies else "") + (" (settled)" if audit.get("status") == "settled" else ""))
        slashes = [f"{self.name(s['node'])} ({s['reason']}, {_amount(s['amount_wei'])})" for s in audit.get("slashed", [])]
        return text + ("; slashed " + "; ".join(slashes) if slashes else "")

    def is_done(self) -> bool:
        return all(j["settled"] or (j["status"] == "final" and not j["body"].get("audit")) for j in self.jobs)

    def progress(self) -> str:
        counts: dict[str, int] = {}
        for job in self.jobs:
            counts[job["status"] or "dispatched"] = counts.get(job["status"] or "dispatched", 0) + 1
        return "  ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def send_jobs(net: LocalNetwork, tracker: JobTracker, count: int, max_tokens: int) -> None:
    """Send ``count`` chat requests through the SDK to the gateway, four at a time."""
    from verillm.client import Client

    client = Client(net.gateway_url)

    def one(n: int):
        messages = [{"role": "user", "content": PROMPTS[(n - 1) % len(PROMPTS)]}]
        return n, retry_no_workers(lambda: client.chat(messages, max_tokens=max_tokens, temperature=0, audit=n == 1))

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for n, completion in pool.map(one, range(1, count + 1)):
            tracker.add(n, completion)


def retry_no_workers(request, timeout_s: float = 60.0):
    """Run ``request``, retrying while the gateway has not yet seen enough registered workers."""
    from verillm.node.dispatcher.router import NoWorkers

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return request()
        except NoWorkers:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def compute_gas_table(net: LocalNetwork, from_block: int) -> list[tuple[str, int, int]]:
    """Return (contract.function, transactions, total gas) of every protocol transaction since ``from_block``."""
    chain, protocol = net.protocol.chain, net.protocol
    handles = {h.address.lower(): h for h in (protocol.registry, protocol.jobs, protocol.batches, protocol.disputes, protocol.delivery,
                                                      protocol.coverage)}
    totals: dict[str, list[int]] = {}
    for number in range(from_block, chain.get_block_number() + 1):
        block = chain.rpc("eth_getBlockByNumber", lambda n=number: chain.w3.eth.get_block(n, full_transactions=True))
        for tx in block["transactions"]:
            handle = handles.get((tx.get("to") or "").lower())
            if handle is None:
                continue
            function, _ = handle.web3.decode_function_input(tx.get("input", tx.get("data")))  # eth-tester says "data"
            receipt = chain.rpc("eth_getTransactionReceipt", lambda h=tx["hash"]: chain.w3.eth.get_transaction_receipt(h))
            entry = totals.setdefault(f"{handle.name}.{function.fn_name}", [0, 0])
            entry[0] += 1
            entry[1] += receipt["gasUsed"]
    return sorted(((name, n, gas) for name, (n, gas) in totals.items()), key=lambda r: -r[2])


def print_summary(net: LocalNetwork, tracker: JobTracker, gas_rows: list, wall_s: float) -> list[str]:
    """Print the per-job table, totals and gas; return the problems found (empty = as expected).

    ``slashed``: convictions (a worker that failed its audit, a member whose vote contradicted its
    own data or who could not prove its opening); ``penalised``: members that lost a small share
    for a minority vote or a missed opening, which an honest job's audit may well have."""
    click.echo("\n  job  worker   status    committee votes      slashed          penalised")
    verified, slashed, lies, problems = 0, 0, 0, []
    for job in tracker.jobs:
        body, audit = job["body"], job["body"].get("audit") or {}
        worker = tracker.name(body["worker"])
        votes = compute_vote_cell((audit.get("chain_outcome") or {}).get("votes", []))
        lies += "(lie)" in votes
        convicted, penalised = compute_slash_columns(tracker.name, audit.get("slashed", []))
        click.echo(f"  {job['n']:>3}  {worker:<8} {body['status']:<9} {votes:<16} {convicted:<16} {penalised}")
        verified += body["status"] == "final" and bool(audit)
        slashed += body["status"] == "slashed"
        problems += _check_outcome(net, tracker, job)
    problems += _check_cheaters_caught(net, tracker)
    if lies:
        click.echo("  ✓(lie): a vote proven a lie (adjudicated, or a lost contest); it did not count")
    click.echo(f"\njobs {len(tracker.jobs)}  verified {verified}  worker slashed {slashed}  wall time {wall_s:.1f} s")
    click.echo("\n  gas per step (every protocol transaction on the chain)")
    click.echo(f"  {'step':<32} {'txs':>4} {'total gas':>11} {'gas/tx':>9}")
    for name, count, gas in gas_rows:
        click.echo(f"  {name:<32} {count:>4} {gas:>11,} {gas // count:>9,}")
    audited = sum(g for name, _, g in gas_rows if not name.startswith("Registry."))
    if tracker.jobs:
        click.echo(f"  {'per job (all audited, MINIMAL)':<32} {'':>4} {audited // len(tracker.jobs):>11,}")
    return problems


def compute_vote_cell(votes: list[dict]) -> str:
    """The summary's votes cell of an audit's outcome votes (`chain_outcome`, spec.outcome): ✓ agree, ✗
    disagree, and a vote proven a lie marked as one, "✓(lie)", not as an ordinary vote."""
    return "".join(("✓" if v["vote"] == 1 else "✗") + ("(lie)" if v["lie"] else "") for v in votes) or "-"


def compute_slash_columns(name, slashes: list[dict]) -> tuple[str, str]:
    """Return the summary's (slashed, penalised) cells of a job's slashes (its status body's), each
    node named by ``name(address)``: convictions apart from member penalties."""
    def names(rows):
        return ", ".join(sorted({name(s["node"]) + (f" ({s['reason'].split(':')[0]})" if s.get("penalty") else "") for s in rows})) or "-"

    return names([s for s in slashes if not s.get("penalty")]), names([s for s in slashes if s.get("penalty")])


def print_replay_commands(net: LocalNetwork, tracker: JobTracker) -> None:
    """Print how to replay each job: its read token (only the requester has it: the token= of its status_url)."""
    click.echo(f"\n  replay a job's audit here, beside what the chain decided (the read token is the requester's, from its status_url):")
    click.echo(f"    verillm audit replay JOB_HASH --node {net.gateway_url} --token TOKEN --addresses {net.deployment_file} --rpc-url {net.rpc_url}")
    for job in tracker.jobs:
        click.echo(f"    job {job['n']:>2}  0x{job['completion'].job_hash.hex()}  token {compute_read_token(job['completion'])}")


def compute_read_token(completion) -> str:
    """Return the read token in a completion's status_url (node/api/access.py)."""
    return completion.status_url.partition("?token=")[2]


def _check_outcome(net: LocalNetwork, tracker: JobTracker, job: dict) -> list[str]:
    body, audit = job["body"], job["body"].get("audit") or {}
    problems = []
    worker = net.node_of(body["worker"])
    if not audit or audit.get("status") != "settled":
        problems.append(f"job {job['n']} did not settle (status {body['status']})")
    elif worker.spec.cheats_as_worker != (body["status"] == "slashed"):
        problems.append(f"job {job['n']}: worker node {worker.index} ({worker.spec.label}) ended {body['status']}")
    for slash in audit.get("slashed", []):
        node = net.node_of(slash["node"])
        if node is not None and node.spec.is_honest:
            problems.append(f"job {job['n']}: honest node {node.index} was slashed ({slash['reason']})")
    return problems


def _check_cheaters_caught(net: LocalNetwork, tracker: JobTracker) -> list[str]:
    audits = [j["body"].get("audit") or {} for j in tracker.jobs]
    slashed = {s["node"].lower() for a in audits for s in a.get("slashed", [])}
    seats = [m.lower() for a in audits for m in a.get("committee", [])]
    slashable = [n for n in net.nodes if not n.spec.is_honest and n.spec.hostile_stream in (None, "equivocates")]  # unsigned text is not evidence
    return [f"node {n.index} ({n.spec.label}) was never slashed (it sat on {seats.count(n.address.lower())} committees)"
            for n in slashable if n.address.lower() not in slashed]


def follow(tracker: JobTracker, timeout_s: float, stall_s: float = 60.0) -> None:
    """Poll until every job has settled (or ``timeout_s`` passes), showing a progress line on a terminal
    and saying why when nothing moves for ``stall_s``."""
    deadline = time.monotonic() + timeout_s
    tty = sys.stdout.isatty()
    stalls = StallWatch(tracker.net, tracker.say, stall_s)
    while not tracker.is_done() and time.monotonic() < deadline:
        tracker.poll()
        stalls.check([job.get("change") for job in tracker.jobs])
        if tty:
            click.echo(f"\r  … {tracker.progress()}   ", nl=False)
        time.sleep(1.0)
    if tty:
        click.echo("\r" + " " * 80 + "\r", nl=False)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _node_specs(nodes: int | None, cheaters: str | tuple[str, ...] | None) -> list[NodeSpec]:
    """Return the node specs: honest nodes, then one dishonest node per name in ``cheaters``, last."""
    # A committee of 3 is drawn without the worker and without the dispatcher (node 0, the gateway:
    # Jobs._drawMembers excludes both), so a job served by node k > 0 needs 5 active nodes; with
    # cheaters, one more each: once they are slashed, 5 remain. Fewer, and such audits end abandoned.
    cheaters = (cheaters,) if isinstance(cheaters, str) else tuple(cheaters or ())
    minimum = 5 + len(cheaters)
    # Two faulty members can tie a committee on an honest job (one's vote voided as a proven lie,
    # the other's against the honest member's): a TIE goes to an appeal (docs/protocol.md §12,
    # "Honest work gets verified"), whose committee is drawn apart from the worker, the dispatcher
    # and round 0's seats. By default the devnet is large enough to hear it; fewer (--nodes), and
    # such an audit ends abandoned, unheard.
    appeal = 2 + MINIMAL.COMMITTEE_SIZE + MINIMAL.ESCALATION_COMMITTEE_SIZE if len(cheaters) > 1 else 0
    count = nodes or max(minimum, appeal)
    if count < minimum:
        raise click.UsageError(f"--nodes {count}: need at least {minimum} (a worker, the dispatcher and a committee of 3 "
                               f"drawn from the others{', after the cheaters are slashed' if cheaters else ''})")
    specs = [NodeSpec() for _ in range(count)]
    for offset, name in enumerate(cheaters):
        specs[count - len(cheaters) + offset] = CHEATERS[name]
    return specs
