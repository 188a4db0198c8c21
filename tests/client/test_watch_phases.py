"""Watching a job to `final`, phase by phase (verillm/client/phases.py), on a real network: anvil, the
contracts (MINIMAL with an audit rate of 0, so a job is never selected and becomes final once its
batch's start window closes), and a real node with the dispatcher role. The test mines the blocks each
phase waits for — two after the batch is posted (the draw's seed block), the start window after the
draw — and nothing waits on a clock: `Client.watch` and `verillm complete --wait` must each show every
phase in order and end at `final`. Exit codes of `--wait` for a slashed worker, an undecided audit and
a timeout are checked against a dispatcher status route on loopback that walks a job there."""

import asyncio
import threading
import time
from pathlib import Path

import httpx2 as httpx
import pytest
from aiohttp import web
from click.testing import CliRunner

from verillm.cli.complete import EXIT_SLASHED, EXIT_STILL_PENDING, EXIT_UNDECIDED, complete as complete_cli, wait_for_final
from eth_utils import keccak
from web3.exceptions import ContractCustomError, ContractLogicError

from verillm.client import Client, Completion, compute_phase
from verillm.client.outcome import verify_final_on_chain
from verillm.errors import InvalidProof, StillPending
from verillm.spec.params import MINIMAL
from helpers.networked_node import networked_node

UNSAMPLED = MINIMAL.replace(AUDIT_RATE_BPS=0)
EXPECTED = ["served", "batched", "drawn", "final"]


@pytest.fixture(scope="module")
def network(anvil_installed, served_tiny, tmp_path_factory):
    with networked_node(tmp_path_factory.mktemp("net"), served_tiny, UNSAMPLED) as (anvil, protocol, node):
        yield protocol, node


def drive_to_final(protocol, url: str, job) -> list:
    """Follow ``job`` and mine what each phase waits for; return the phases seen. Each phase's deadline
    is checked against the contracts: the draw's by Batches.slashMissedDraw (refused TooEarly until the
    window closes: its revert names the block), the start window's by mining to its last block, where the
    job is still open, and one more, where it is final."""
    chain, seen = protocol.chain, []
    with Client(url) as client:
        for phase in client.watch(job, timeout_s=120, poll_s=0.05):
            seen.append(phase)
            if phase.name == "batched":
                assert phase.deadline == "draw_by" and phase.phase_ends_block + 1 == _too_early(protocol, "slashMissedDraw", phase.status["batch"]["batch_id"])
                page = httpx.get(f"{url}/v1/verillm/explorer/jobs/{phase.status['job_hash']}", timeout=60).json()  # the explorer's job page body
                assert (page["phase_deadline"], page["phase_ends_block"], page["final_by_block"]) == ("draw_by", phase.phase_ends_block, phase.final_by_block)
                chain.mine(2)  # the draw's seed block (posted + AUDIT_DRAW_DELAY_BLOCKS), then one past it
            elif phase.name == "drawn":
                on_chain = protocol.get_batch(phase.status["batch"]["batch_id"])
                assert phase.deadline == "start_by" and phase.phase_ends_block == on_chain["drawn_block"] + UNSAMPLED.START_WINDOW_BLOCKS
                chain.mine(phase.phase_ends_block - chain.get_block_number())  # the start window's last block: an audit may still start
                assert _status_at(url, phase.status["job_hash"], phase.phase_ends_block)["status"] == "committed"
                chain.mine(1)  # no audit started: final once the start window closes
            elif phase.name == "served":
                assert phase.deadline == "batch_by" and (not isinstance(job, Completion) or phase.phase_ends_block == job.promise.promise.batch_by_block)
            elif phase.name != "final":
                raise AssertionError(f"unexpected phase {phase.line()}")
    for phase in seen[:-1]:  # the time left, estimated from the node's measured block interval
        assert phase.seconds_per_block is not None and phase.seconds_left == phase.blocks_left * phase.seconds_per_block
        assert phase.blocks_left == max(0, phase.phase_ends_block - phase.head) and f"s left (block {phase.phase_ends_block})" in phase.line()
    bounds = [p.final_by_block for p in seen[:-1]]
    assert None not in bounds and bounds == sorted(bounds, reverse=True), bounds  # the latest final block only comes nearer
    assert seen[-1].final_by_block is None and seen[-1].phase_ends_block is None and seen[-1].seconds_left is None
    return seen


def _too_early(protocol, function: str, *args) -> int:
    """The first block Batches.``function(*args)`` is accepted in, from its TooEarly(block) revert in the next block."""
    batches = protocol.batches
    data = batches.web3.encode_abi(function, args=list(args))
    try:
        protocol.chain.w3.eth.call({"to": batches.address, "data": data}, "pending")
    except (ContractCustomError, ContractLogicError) as exc:
        raw = str(exc.data if isinstance(exc.data, str) else exc.args[0])
        assert raw.startswith("0x" + keccak(text="TooEarly(uint256)")[:4].hex()), raw
        return int(raw[10:], 16)
    raise AssertionError(f"{function}{args} was accepted")


def _status_at(url: str, job_hash: str, head: int) -> dict:
    """The status body once the node has read ``head`` (a condition on the node's view, not a delay)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        body = httpx.get(f"{url}/v1/verillm/audits/{job_hash}", timeout=60).json()
        if body["head"] >= head:
            return body
        time.sleep(0.05)
    raise AssertionError(f"the node never read block {head}")


def test_watch_shows_every_phase_in_order_until_final(network):
    protocol, node = network
    with Client(node.url) as client:
        completion = client.complete("The quick brown fox", max_tokens=3, temperature=0)
    seen = drive_to_final(protocol, node.url, completion)
    assert [p.name for p in seen] == EXPECTED, [p.line() for p in seen]
    assert seen[0].status["worker_url"] == node.url  # it ran the job itself: its own URL, not '' (issue 36)
    assert [p.final for p in seen] == [False, False, False, True]
    heads = [p.head for p in seen]
    assert heads == sorted(heads) and heads[-1] <= protocol.chain.get_block_number()
    batch_id = seen[1].status["batch"]["batch_id"]
    assert protocol.get_batch(batch_id)["count"] >= 1  # the batch the phase names is on the chain
    assert "never selected for audit" in seen[-1].detail
    # the end checked on the contracts, not taken from the dispatcher: and a dispatcher's lie refused
    final = seen[-1].status
    assert verify_final_on_chain(final, completion, protocol, node.url).startswith("passed: leaf 0 of")
    with pytest.raises(InvalidProof, match="the dispatcher says the job slashed, the chain says passed"):
        verify_final_on_chain(final | {"status": "slashed"}, completion, protocol, node.url)
    with pytest.raises(InvalidProof, match="the status names batch"):
        verify_final_on_chain(final | {"batch": final["batch"] | {"index": 1}}, completion, protocol, node.url)
    with pytest.raises(InvalidProof, match="not this job"):  # an audit of another job (none exists: id 0 is empty)
        verify_final_on_chain(final | {"audit": {"audit_id": 0}}, completion, protocol, node.url)
    with Client(node.url) as client:
        fresh = client.complete("A job that is only batched", max_tokens=2, temperature=0)
        batched = next(p for p in client.watch(fresh, timeout_s=120, poll_s=0.05) if p.name == "batched")  # no block mined: no draw
    with pytest.raises(InvalidProof, match="was never drawn on-chain"):  # called final before its batch is even drawn
        verify_final_on_chain(batched.status | {"status": "final"}, fresh, protocol, node.url)
    phases = []
    with Client(node.url) as client:  # once final, the waits return at once and report the phase
        assert client.wait_final(completion, timeout_s=10, poll_s=0.05, on_phase=phases.append)["status"] == "final"
    assert [p.name for p in phases] == ["final"]


def test_complete_wait_prints_each_phase_and_exits_0_at_final(network):
    protocol, node = network
    known = {j["job_hash"] for j in httpx.get(f"{node.url}/v1/verillm/explorer/jobs?limit=200", timeout=60).json()["jobs"]}
    outcome = {}
    cli = threading.Thread(target=lambda: outcome.update(result=CliRunner().invoke(
        complete_cli, ["--url", node.url, "--max-tokens", "3", "--wait", "--poll-s", "0.05", "--wait-timeout-s", "300", "Hello there"])))
    cli.start()
    job = _new_job(node.url, known, cli)
    drive_to_final(protocol, node.url, job)
    cli.join(300)
    result = outcome["result"]
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("[phase: ")]
    assert [line.split("] ", 1)[1].split(":")[0].split(" ")[0] for line in lines] == EXPECTED, result.output
    assert lines[-1].endswith("start window has closed]")
    assert all(" s left (block " in line and "at the latest" in line for line in lines[:-1]), result.output  # each open phase: its deadline and time left
    assert "[outcome: checked on chain passed: leaf " in result.output  # the chain the node names, read by the CLI itself


def _new_job(url: str, known: set, cli: threading.Thread) -> str:
    """The job the CLI sent, once the gateway lists it (a condition, not a delay)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and cli.is_alive():
        jobs = {j["job_hash"] for j in httpx.get(f"{url}/v1/verillm/explorer/jobs?limit=200", timeout=60).json()["jobs"]} - known
        if jobs:
            return jobs.pop()
        time.sleep(0.05)
    raise AssertionError("the CLI's job never reached the gateway")


def test_complete_wait_exits_6_when_not_final_in_time(network):
    """No block is mined: the job cannot pass its batch's start window, whatever the clock says."""
    protocol, node = network
    result = CliRunner().invoke(complete_cli, ["--url", node.url, "--max-tokens", "2", "--wait", "--poll-s", "0.05", "--wait-timeout-s", "0.5", "Hi"])
    assert result.exit_code == EXIT_STILL_PENDING, result.output
    assert "not final after 0.5 s" in result.output and "[phase: " in result.output


def test_complete_stream_prints_the_checked_deltas_then_the_receipt(network):
    """`verillm complete --stream`: the text arrives delta by delta (each checked against the worker's
    signed prefix by `Client.stream`), is the verified completion's text, and the receipt follows."""
    protocol, node = network
    args = ["--url", node.url, "--max-tokens", "6", "The quick brown fox"]
    whole = CliRunner().invoke(complete_cli, args)  # greedy: the same text, printed at once
    streamed = CliRunner().invoke(complete_cli, ["--stream"] + args)
    assert whole.exit_code == streamed.exit_code and streamed.exit_code in (0, 3), streamed.output  # 3: nothing pins the signer here
    assert streamed.stdout == whole.stdout and streamed.stdout.strip() and "[receipt: job 0x" in streamed.stderr, streamed.output


AUDIT = {"audit_id": 7, "status": "open", "requested": False, "committee": ["0x" + "11" * 20] * 3, "votes": {}, "round_verdict": None,
         "verdict": None, "escalated": False, "slashed": []}


@pytest.mark.parametrize("end, code", [
    ({"status": "slashed", "audit": AUDIT | {"status": "settled", "verdict": "fail", "round_verdict": 2}}, EXIT_SLASHED),
    ({"status": "tie", "audit": AUDIT | {"status": "settled", "verdict": "tie", "round_verdict": 3}}, EXIT_UNDECIDED),
    ({"status": "abandoned", "audit": AUDIT | {"status": "abandoned"}}, EXIT_UNDECIDED),
    ({"status": "final", "audit": AUDIT | {"status": "settled", "verdict": "pass", "round_verdict": 1}}, 0),
])
def test_the_wait_ends_with_the_exit_code_of_its_outcome(end, code):
    """A dispatcher's status route on loopback walks a job through an audit to ``end``, one step per read."""
    steps = [{"status": "dispatched"}, {"status": "committed", "batch": {"batch_id": 3, "index": 0, "posted_block": 40, "status": "posted"}},
             {"status": "audited", "audit": AUDIT}, {"status": "audited", "audit": AUDIT | {"votes": {"0x" + "11" * 20: 1}}},
             {"status": "verified" if code == 0 else end["status"], "audit": end["audit"] | {"status": "open"}}, end]
    with _status_server(steps) as url:
        waited = wait_for_final(url, "0x" + "ab" * 32, timeout_s=30, wait_timeout_s=30, poll_s=0.01)
    assert waited["exit_code"] == code
    names = [p["phase"] for p in waited["phases"]]
    assert names[:4] == ["served", "batched", "committee", "voting"] and names[-1] == end["status"] and waited["phases"][-1]["final"]


def test_a_phase_is_new_when_its_name_or_detail_changes_not_its_head():
    body = {"status": "committed", "batch": {"batch_id": 3, "index": 0, "posted_block": 40, "status": "posted"}}
    assert compute_phase(body | {"head": 41}) == compute_phase(body | {"head": 45})
    assert compute_phase(body) != compute_phase(body | {"batch": body["batch"] | {"status": "drawn"}})


def test_watch_raises_still_pending_at_its_timeout():
    with _status_server([{"status": "dispatched"}]) as url, Client(url) as client:
        with pytest.raises(StillPending, match="still dispatched"):
            list(client.watch("0x" + "ab" * 32, timeout_s=0.2, poll_s=0.01))


class _status_server:
    """``with _status_server(bodies) as url``: GET /v1/verillm/audits/{job} answers the next body each read, then the last."""

    def __init__(self, bodies: list[dict]):
        self.bodies, self.reads = bodies, 0

    async def _status(self, request: web.Request) -> web.Response:
        body = self.bodies[min(self.reads, len(self.bodies) - 1)]
        self.reads += 1
        return web.json_response({"job_hash": request.match_info["job"], "head": 40 + self.reads} | body)

    def __enter__(self) -> str:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

        async def serve():
            app = web.Application()
            app.router.add_get("/v1/verillm/audits/{job}", self._status)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            return runner

        self.runner = asyncio.run_coroutine_threadsafe(serve(), self.loop).result(30)
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)


CHROMIUM = "/usr/bin/chromium"


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium (Playwright never downloads a browser)")
def test_the_explorer_shows_a_steps_deadline_and_an_unbonding_nodes_end_in_a_real_browser(network):
    """The explorer's job page (Chromium) shows the deadline the job's step waits on and the latest final
    block, the status body's; a node that unbonded shows the block it may withdraw from, the Registry's."""
    from playwright.sync_api import sync_playwright

    from verillm.node.dispatcher.chainio import compute_vrf_secret_key
    from verillm.node.keys import compute_node_key

    protocol, node = network
    leaver = protocol.chain.dev_accounts[7]  # a newcomer that leaves at once: the fixture's five stay in the pool
    registered = protocol.register(leaver, compute_vrf_secret_key(compute_node_key(bytes(leaver.key))), "http://127.0.0.1:7", [served_model_id(node)],
                                   UNSAMPLED.MIN_STAKE_WEI).receipt["blockNumber"]
    left = protocol.deregister(leaver).receipt["blockNumber"]
    end = protocol.get_node(leaver.address)["unbonding_end_block"]
    with Client(node.url) as client:  # then no transaction: no block is mined, the job stays batched while the page is read
        completion = client.complete("A job to look at", max_tokens=2, temperature=0)
        batched = next(p for p in client.watch(completion, timeout_s=120, poll_s=0.05) if p.name == "batched")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"], headless=True)
        try:
            page = browser.new_page()
            page.goto(f"{node.url}/explorer#/job/0x{completion.job_hash.hex()}")
            page.wait_for_selector("#phase-ends[data-block]", timeout=30_000)
            ends = page.locator("#phase-ends")
            assert (ends.get_attribute("data-deadline"), int(ends.get_attribute("data-block"))) == ("draw_by", batched.phase_ends_block)
            assert f"draw by: block {batched.phase_ends_block}" in ends.inner_text(), ends.inner_text()
            assert int(page.get_attribute("#final-by", "data-block")) == batched.final_by_block
            assert page.get_attribute("#view", "aria-busy") is None  # drawn: no longer marked busy
            # a click marks the page busy at once (before its data comes back from the node), until it is drawn
            busy = page.evaluate(f"""async () => {{ location.hash = "#/node/{leaver.address.lower()}";
                                     await new Promise((done) => setTimeout(done, 0)); return document.getElementById("view").getAttribute("aria-busy"); }}""")
            assert busy == "true"
            page.wait_for_selector("#unbonding-end", timeout=30_000)
            assert page.get_attribute("#view", "aria-busy") is None
            assert f"may withdraw from block {end}" in page.locator("#unbonding-end").inner_text()
            for number, event, says in ((registered, "Registered", "registered with 0.01 ETH at http://127.0.0.1:7, serving 1 model"),
                                        (left, "Deregistered", f"unbonds: it may withdraw from block {end}")):
                page.goto(f"{node.url}/explorer#/block/{number}")  # the Registry's events in words, not raw JSON
                page.wait_for_selector(f'li[data-event="{event}"]', timeout=30_000)
                text = page.locator(f'li[data-event="{event}"]').inner_text()
                assert says in text and "{" not in text, text
        finally:
            browser.close()


def served_model_id(node) -> bytes:
    """The model id the node serves (its /v1/verillm/info)."""
    return bytes.fromhex(httpx.get(f"{node.url}/v1/verillm/info", timeout=60).json()["model"]["model_id"][2:])
