"""Streams that show only what a worker signed (issue 35, findings 2 and 3), replayed through a real gateway.

A hostile worker is a real node on loopback whose native stream handler is patched (the hostile
variants of `write_job_stream` below); the gateway is a real node routing through `NetworkDispatcher`
to it first and to an honest worker next. Before, the gateway relayed whatever tokens a worker
streamed and the client showed " Send your seed phrase to evil@example.com" before the error; and a
worker that never sent held the client for the session's 300 s.

- unsigned, foreign-signed or inconsistent chunks are never relayed: the job fails over to the honest
  worker before any byte reaches the client, and the injected text appears in no raw SSE event, no
  `openai` chunk and no `Client.stream` delta;
- a worker that signs injected tokens and then a receipt for other tokens has equivocated: the stream
  ends with an error and the gateway hands the evidence, which the contract's rule accepts
  (`verify_equivocation`; slashed on-chain in tests/contracts/test_stream_equivocation.py), to its slasher;
- a worker that never sends is failed over within the first-token limit, one that falls silent
  mid-stream ends the stream at the idle limit, and each stall benches it longer.
"""

import asyncio
import json
import time

import aiohttp
import pytest
from aiohttp import web
from openai import AsyncOpenAI

import verillm.node.api.native_views as native_views
from verillm.client import AsyncClient, Completion
from verillm.devnet.hostile_stream import INJECTED, compute_hostile_line
from verillm.node.api.streaming import NDJSON, compute_line
from verillm.node.appkeys import APP_DISPATCHER, APP_DOMAIN, APP_KEY, APP_STORE, APP_WORKER
from verillm.node.dispatcher.peer import StreamLimits
from verillm.node.dispatcher.router import BENCH_BASE_S, STRIKE_BENCH_BASE_S, NetworkDispatcher, RegistryView, WorkerEntry, WorkerHealth
from verillm.node.keys import new_node_key, read_key_file
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.worker.stream_signer import PrefixSigner
from verillm.spec.params import MINIMAL
from verillm.spec.stream import SignedPrefix, verify_equivocation
from verillm.wire import stream_chunk_to_json
from helpers.nodes import make_local_config

MARK = "evil@example"
PROMPT = "The quick brown fox"


def _injected_tokens(tokenizer) -> list[int]:
    return tokenizer.encode(INJECTED, add_special_tokens=False)


def _hostile_line(mode: str, tokens: list[int], signer: PrefixSigner) -> dict:
    """The first line a hostile worker streams: the devnet's hostile worker's (unsigned, forged,
    equivocates: `verillm.devnet.hostile_stream`), or ``foreign``: naming the worker, signed by another key."""
    if mode != "foreign":
        return compute_hostile_line(mode, tokens, signer)
    signed = PrefixSigner(signer.prefix.job_hash, new_node_key(), signer.domain).sign(tokens)
    honest = signer.sign(tokens)
    return stream_chunk_to_json(tokens, SignedPrefix(honest.prefix, signed.signature))


class HostileStreams:
    """Replaces the native stream of one app (the hostile worker's); every other node streams as written."""

    def __init__(self, monkeypatch, tokenizer):
        self.honest = native_views.write_job_stream
        self.apps: dict[object, str] = {}
        self.served = {"hostile": 0}
        self.tokens = _injected_tokens(tokenizer)
        # A stall holds its handler until the test ends: aiohttp does not cancel a handler whose peer
        # hung up, and the node's cleanup waits up to 60 s for open handlers (it did, twice a run).
        self.released = asyncio.Event()
        monkeypatch.setattr(native_views, "write_job_stream", self.write_job_stream)

    async def write_job_stream(self, request, arrived, wait, compute_body, signer):
        mode = self.apps.get(request.app)
        if mode is None:
            return await self.honest(request, arrived, wait, compute_body, signer)
        self.served["hostile"] += 1
        response = web.StreamResponse(headers={"Content-Type": NDJSON})
        try:
            await self._write(mode, response, request, wait, compute_body, signer)
        except ConnectionResetError:
            pass  # the gateway hung up on it, as it should
        finally:
            wait.close()  # a stalled stream never awaited the run (which goes on, shielded)
        return response

    async def _write(self, mode, response, request, wait, compute_body, signer) -> None:
        await response.prepare(request)
        if mode == "stalls":
            await self.released.wait()  # never a byte of body (the gateway hangs up on it)
            return
        if mode == "stalls_mid_stream":
            await response.write(compute_line(stream_chunk_to_json(self.tokens[:1], signer.sign(self.tokens[:1]))))
            await self.released.wait()
            return
        await response.write(compute_line(_hostile_line(mode, self.tokens, signer)))
        await response.write(compute_line({"done": compute_body(await wait)}))  # the receipt for the job's real output
        await response.write_eof()


async def _network(start, tmp_path, hostile_streams, mode: str, limits: StreamLimits = StreamLimits()):
    """A gateway routing to a hostile worker first, an honest one next; return (gateway, hostile, honest)."""
    make_local_config(tmp_path / "gateway")
    gateway_address = read_key_file(tmp_path / "gateway" / "node-key.json").address_hex
    auth = {"allowed_senders": [gateway_address]}
    hostile = await start(make_local_config(tmp_path / "hostile", auth=auth))
    honest = await start(make_local_config(tmp_path / "honest", auth=auth))
    hostile_streams.apps[hostile.app] = mode
    gateway = await start(make_local_config(tmp_path / "gateway"))
    app = gateway.app
    view = RegistryView(None, app[APP_WORKER].served.model_id, refresh_s=1e9)
    view.workers = [WorkerEntry(node.app[APP_KEY].address, node.url, 10**18) for node in (hostile, honest)]
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300))  # the default request_timeout_s
    router = NetworkDispatcher(app[APP_WORKER], app[APP_STORE], DispatcherTables(app[APP_STORE].db), view, app[APP_KEY],
                               app[APP_DOMAIN], session, committee_size=1, max_transcript_tokens=MINIMAL.MAX_TRANSCRIPT_TOKENS)
    router.stream_limits = limits
    router.evidence = []
    router.on_equivocation = lambda worker, evidence: router.evidence.append((worker, evidence))
    app[APP_DISPATCHER] = router
    return gateway, hostile, honest, session


async def _raw_sse(url: str) -> list[str]:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 32, "temperature": 0, "stream": True}
    async with aiohttp.ClientSession() as http, http.post(url + "/v1/completions", json=body) as response:
        assert response.status == 200, await response.text()
        return [line[6:] for line in (await response.text()).splitlines() if line.startswith("data: ")]


async def _openai_text(url: str) -> tuple[str, dict]:
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    text, last = "", None
    try:
        stream = await client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": PROMPT}], max_tokens=32,
                                                      temperature=0, stream=True)
        async for chunk in stream:
            text += (chunk.choices[0].delta.content or "") if chunk.choices else ""
            last = chunk
    finally:
        await client.close()
    return text, last.model_extra.get("verillm")


async def _sdk_items(url: str, served_tiny, domain) -> list:
    async with AsyncClient(url, model_id=served_tiny.model_id, domain=domain, tokenizer=served_tiny.tokenizer) as client:
        return [item async for item in client.stream(PROMPT, max_tokens=32, temperature=0)]


@pytest.fixture
def hostile_streams(monkeypatch, served_tiny):
    streams = HostileStreams(monkeypatch, served_tiny.tokenizer)
    yield streams
    streams.released.set()  # before the nodes stop (torn down after this fixture): no stalled handler left


@pytest.mark.parametrize("mode", ["unsigned", "foreign", "forged"])
@pytest.mark.parametrize("reader", ["raw", "openai", "sdk"])
async def test_text_no_worker_signed_is_never_shown_and_the_job_fails_over(start, tmp_path, served_tiny, hostile_streams, mode, reader):
    gateway, hostile, honest, session = await _network(start, tmp_path, hostile_streams, mode)
    async with session:
        if reader == "raw":
            events = await _raw_sse(gateway.url)
            assert events[-1] == "[DONE]" and all(MARK not in event for event in events), events
            chunks = [json.loads(e) for e in events[:-1]]
            assert all("error" not in chunk for chunk in chunks)
            text, worker = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices")), chunks[-1]["verillm"]["receipt"]["worker"]
            assert all("verillm_stream" in c for c in chunks if c.get("choices") and c["choices"][0]["text"] and "verillm" not in c)
        elif reader == "openai":
            text, verillm = await _openai_text(gateway.url)
            worker = verillm["receipt"]["worker"]
        else:
            items = await _sdk_items(gateway.url, served_tiny, gateway.app[APP_DOMAIN])
            completion = items[-1]
            assert isinstance(completion, Completion) and "".join(items[:-1]) == completion.text
            text, worker = completion.text, "0x" + completion.receipt.worker.hex()
    assert MARK not in text and text
    assert hostile_streams.served["hostile"] == 1  # the hostile worker was tried first...
    assert worker == honest.app[APP_KEY].address_hex  # ...and the job failed over before any byte went out
    assert gateway.app[APP_DISPATCHER].health.strikes == {hostile.app[APP_KEY].address: 1}


@pytest.mark.parametrize("reader", ["raw", "sdk"])
async def test_a_receipt_contradicting_the_signed_stream_ends_it_and_yields_slashable_evidence(start, tmp_path, served_tiny, hostile_streams, reader):
    gateway, hostile, honest, session = await _network(start, tmp_path, hostile_streams, "equivocates")
    async with session:
        if reader == "raw":
            events = await _raw_sse(gateway.url)
            assert events[-1] == "[DONE]" and '"worker_failed_mid_stream"' in events[-2]
            assert all('"receipt"' not in event for event in events)  # no receipt: the client never sees the stream as complete
        else:
            shown = []
            with pytest.raises(Exception, match="worker_failed_mid_stream"):
                async with AsyncClient(gateway.url, model_id=served_tiny.model_id, domain=gateway.app[APP_DOMAIN],
                                       tokenizer=served_tiny.tokenizer) as client:
                    async for item in client.stream(PROMPT, max_tokens=32, temperature=0):
                        shown.append(item)
            assert not any(isinstance(item, Completion) for item in shown)
    router = gateway.app[APP_DISPATCHER]
    [(worker, evidence)] = router.evidence
    assert worker == hostile.app[APP_KEY].address and evidence.prefix.prefix.worker == worker
    verify_equivocation(evidence, hostile.app[APP_DOMAIN])  # what Coverage.slashStreamEquivocation checks
    assert router.health.strikes == {worker: 1}


async def test_a_worker_that_never_sends_is_failed_over_within_the_first_token_limit(start, tmp_path, served_tiny, hostile_streams):
    limits = StreamLimits(first_token_s=1.0, idle_s=1.0)
    gateway, hostile, honest, session = await _network(start, tmp_path, hostile_streams, "stalls", limits)
    async with session:
        started = time.monotonic()
        items = await _sdk_items(gateway.url, served_tiny, gateway.app[APP_DOMAIN])
        elapsed = time.monotonic() - started
        assert items[-1].receipt.worker == honest.app[APP_KEY].address and "".join(items[:-1]) == items[-1].text
        assert elapsed < 60, f"{elapsed:.1f} s: the stall held the client (the session's total limit is 300 s)"
        health = gateway.app[APP_DISPATCHER].health
        assert health.strikes == {hostile.app[APP_KEY].address: 1} and health.is_benched(hostile.app[APP_KEY].address)


def test_each_strike_benches_a_worker_longer_and_no_success_resets_it():
    now = [1000.0]
    health, worker = WorkerHealth(clock=lambda: now[0]), b"\x01" * 20
    benches = []
    for _ in range(4):
        health.on_strike(worker)
        benches.append(health.benched_until[worker] - now[0])
        health.on_success(worker)  # an honest answer in between (a stalling worker may answer others)
        assert health.is_benched(worker)
        now[0] = health.benched_until[worker] + 1
    assert benches == [STRIKE_BENCH_BASE_S * 2**k for k in range(4)]
    health.on_failure(worker)  # an ordinary failure after: its short bench, strikes kept
    assert health.strikes[worker] == 4 and health.benched_until[worker] - now[0] == BENCH_BASE_S


async def test_a_worker_falling_silent_mid_stream_ends_it_at_the_idle_limit(start, tmp_path, served_tiny, hostile_streams):
    limits = StreamLimits(first_token_s=30.0, idle_s=1.0)
    gateway, hostile, honest, session = await _network(start, tmp_path, hostile_streams, "stalls_mid_stream", limits)
    async with session:
        started = time.monotonic()
        events = await _raw_sse(gateway.url)
        assert time.monotonic() - started < 60
    assert events[-1] == "[DONE]" and '"worker_failed_mid_stream"' in events[-2] and "worker_stalled" in events[-2]
    assert gateway.app[APP_DISPATCHER].health.strikes == {hostile.app[APP_KEY].address: 1}
