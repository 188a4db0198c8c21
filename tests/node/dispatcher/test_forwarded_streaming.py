"""Streaming from whichever worker runs the job (issue 23): a gateway relays another worker's tokens
as that worker samples them, the receipt in the last chunk, exactly as for a job it runs itself.

A real gateway node routes through `NetworkDispatcher` (no chain: its Registry view is set by the
test) to a real worker node whose tiny engine samples one token per 40 ms (`ThrottledEngine`),
driven by the unmodified `openai` client. Before this, a job another worker ran arrived in one
chunk at the end: its time to first token was its whole generation time.

Spread, as measured here: ``(last content chunk − first content chunk) / (last chunk − request
sent)``, each time the client's arrival clock; ≥ 0.5 means the text arrived over at least half
of the time the client waited, not in a burst at the end (a burst gives ~0).

Failover stays sane for a stream: a worker that fails before its first token is skipped like any
failed worker; one that fails after some tokens went out ends the stream with an error event
(`worker_failed_mid_stream`), and no other worker's text is ever appended to it.
"""

import json
import time

import aiohttp
import pytest
from aiohttp import web
from openai import APIStatusError, AsyncOpenAI

from verillm.node.api.streaming import compute_line
from verillm.node.appkeys import APP_DISPATCHER, APP_DOMAIN, APP_KEY, APP_MODEL, APP_STORE, APP_WORKER
from verillm.node.dispatcher.router import NetworkDispatcher, NoWorkers, RegistryView, WorkerEntry
from verillm.node.keys import new_node_key, read_key_file
from verillm.node.envelope import decode_envelope_json
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.worker.stream_signer import PrefixSigner
from verillm.spec.encoding import decode
from verillm.spec.job import compute_job_hash
from verillm.spec.receipt import SigningDomain
from verillm.spec.types import Job
from verillm.wire import stream_chunk_to_json
from verillm.node.worker.engines import ServedModel
from verillm.spec.params import MINIMAL
from helpers.nodes import make_local_config
from helpers.throttled import ThrottledEngine

MAX_TOKENS = 16


def compute_spread(sent_at: float, arrivals: list[tuple[float, str]]) -> float:
    """(last content chunk − first content chunk) / (last chunk − request sent): see the module doc."""
    content = [t for t, text in arrivals if text]
    return (content[-1] - content[0]) / (arrivals[-1][0] - sent_at)


async def _gateway(start, tmp_path, workers: list[WorkerEntry], session, committee_size: int = 1):
    gateway = await start(make_local_config(tmp_path / "gateway"))
    app = gateway.app
    view = RegistryView(None, app[APP_WORKER].served.model_id, refresh_s=1e9)
    view.workers = workers
    app[APP_DISPATCHER] = NetworkDispatcher(app[APP_WORKER], app[APP_STORE], DispatcherTables(app[APP_STORE].db), view, app[APP_KEY],
                                            app[APP_DOMAIN], session, committee_size=committee_size,
                                            max_transcript_tokens=MINIMAL.MAX_TRANSCRIPT_TOKENS)
    return gateway


async def _slow_worker(start, served_tiny, tmp_path):
    make_local_config(tmp_path / "gateway")  # the gateway's key, which the worker's operator names
    gateway_address = read_key_file(tmp_path / "gateway" / "node-key.json").address_hex
    engine = ThrottledEngine(served_tiny.engine)
    worker = await start(make_local_config(tmp_path / "worker", auth={"allowed_senders": [gateway_address]}),
                         served=ServedModel(served_tiny.alias, engine, served_tiny.tokenizer))
    return worker, engine, WorkerEntry(worker.app[APP_KEY].address, worker.url, 10**18)


async def _stream(url: str, chat: bool, prompt: str = "The quick brown fox"):
    """Stream one greedy job with the openai client; return (sent_at, [(arrival, text)], chunks)."""
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    kwargs = dict(model="tiny", max_tokens=MAX_TOKENS, temperature=0, stream=True)
    sent_at, arrivals, chunks = time.monotonic(), [], []
    try:
        if chat:
            stream = await client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **kwargs)
        else:
            stream = await client.completions.create(prompt=prompt, **kwargs)
        async for chunk in stream:
            text = (chunk.choices[0].delta.content if chat else chunk.choices[0].text) if chunk.choices else None
            arrivals.append((time.monotonic(), text or ""))
            chunks.append(chunk)
    finally:
        await client.close()
    return sent_at, arrivals, chunks


@pytest.mark.parametrize("chat", [False, True])
async def test_a_job_another_worker_runs_streams_through_the_gateway(start, served_tiny, tmp_path, chat):
    worker, engine, entry = await _slow_worker(start, served_tiny, tmp_path)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        gateway = await _gateway(start, tmp_path, [entry, entry], session)  # listed twice: committee_size 1 needs 2 workers
        sent_at, arrivals, chunks = await _stream(gateway.url, chat)
    verillm = chunks[-1].model_extra["verillm"]
    assert verillm["receipt"]["worker"] == worker.app[APP_KEY].address_hex  # another worker ran it
    assert chunks[-1].choices[0].finish_reason in ("length", "stop") and len(verillm["output_tokens"]) == len(engine.sampled_at)
    assert len(engine.sampled_at) >= 8, f"the tiny model stopped after {len(engine.sampled_at)} tokens: too short to measure"
    early = [t for t, text in arrivals if text and t < engine.sampled_at[-1]]
    assert len(early) >= len(engine.sampled_at) // 2, f"{len(early)} text chunks arrived before the worker's last token"
    spread = compute_spread(sent_at, arrivals)
    assert spread >= 0.5, f"content chunks spread over {spread:.0%} of the wait; arrivals {[round(t - sent_at, 3) for t, _ in arrivals]}"
    text = "".join(text for _, text in arrivals)
    assert text == gateway.app[APP_MODEL].tokenizer.decode(verillm["output_tokens"], skip_special_tokens=True)


class BadWorkers:
    """Workers on loopback that fail a streamed job: ``refuses`` before its first token (an error
    line), ``breaks`` after three tokens (the connection ends without a result), ``floods`` by
    streaming more tokens than the job may have. What they stream they sign, as a worker must
    (issue 35: the gateway relays nothing unsigned; tests/node/dispatcher/test_signed_streams.py)."""

    def __init__(self):
        self.hits = {"refuses": 0, "breaks": 0, "floods": 0}
        self.runners = []
        self.keys = {}

    async def _signer(self, request: web.Request) -> PrefixSigner:
        """Sign for the job the request carries, with this worker's key, for the tests' default deployment."""
        job = decode(Job, decode_envelope_json(json.loads(await request.read())).payload)
        return PrefixSigner(compute_job_hash(job), self.keys[request.app], SigningDomain())

    async def refuses(self, request: web.Request) -> web.StreamResponse:
        self.hits["refuses"] += 1
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(b'{"error": {"code": "queue_full", "message": "busy", "type": "server_error"}}\n')
        await response.write_eof()
        return response

    async def breaks(self, request: web.Request) -> web.StreamResponse:
        self.hits["breaks"] += 1
        signer = await self._signer(request)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        for token in (450, 3681, 17354):
            await response.write(compute_line(stream_chunk_to_json([token], signer.sign([token]))))
        await response.write_eof()  # and no result
        return response

    async def floods(self, request: web.Request) -> web.StreamResponse:
        """Streams tokens without end: the gateway must stop at the job's max_new_tokens, not decode them all."""
        self.hits["floods"] += 1
        signer = await self._signer(request)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        # Signed up front: the gateway stops at the third chunk, and signing in this loop would hold
        # the test's one event loop (gateway and workers share it) between writes.
        lines = [compute_line(stream_chunk_to_json([450] * 4, signer.sign([450] * 4))) for _ in range(4)]
        try:
            for i in range(100_000):
                await response.write(lines[min(i, 3)])
        except (ConnectionResetError, aiohttp.ClientConnectionError):
            pass  # the gateway hung up
        return response

    async def start(self, names: list[str]) -> list[WorkerEntry]:
        entries = []
        for name in names:
            app = web.Application()
            app.router.add_post("/v1/verillm/jobs", getattr(self, name))
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            self.runners.append(runner)
            self.keys[app] = new_node_key()
            entries.append(WorkerEntry(self.keys[app].address, f"http://127.0.0.1:{runner.addresses[0][1]}", 10**18))
        return entries


@pytest.fixture
async def bad_workers():
    workers = BadWorkers()
    yield workers
    for runner in workers.runners:
        await runner.cleanup()


async def test_a_worker_failing_before_its_first_token_is_skipped(start, served_tiny, tmp_path, bad_workers):
    worker, engine, entry = await _slow_worker(start, served_tiny, tmp_path)
    refuses = await bad_workers.start(["refuses"])
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        gateway = await _gateway(start, tmp_path, refuses + [entry], session)
        sent_at, arrivals, chunks = await _stream(gateway.url, chat=False)
    assert bad_workers.hits == {"refuses": 1, "breaks": 0, "floods": 0}
    assert chunks[-1].model_extra["verillm"]["receipt"]["worker"] == worker.app[APP_KEY].address_hex
    assert compute_spread(sent_at, arrivals) >= 0.5


@pytest.mark.parametrize("bad", ["breaks", "floods"])
async def test_a_worker_failing_mid_stream_ends_it_with_an_error_never_another_workers_text(start, served_tiny, tmp_path, bad_workers, http, bad):
    worker, engine, entry = await _slow_worker(start, served_tiny, tmp_path)
    breaks = await bad_workers.start([bad])
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        gateway = await _gateway(start, tmp_path, breaks + [entry], session)
        body = {"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0, "stream": True}
        async with http.post(gateway.url + "/v1/completions", json=body) as response:
            assert response.status == 200
            events = [line[6:] for line in (await response.text()).splitlines() if line.startswith("data: ")]
    assert bad_workers.hits[bad] == 1
    assert events[-1] == "[DONE]" and '"worker_failed_mid_stream"' in events[-2], events
    texts = [json.loads(e)["choices"][0]["text"] for e in events[:-2]]
    assert texts and all('"verillm"' not in e for e in events[:-2])  # the bad worker's signed tokens, no receipt
    assert all("verillm_stream" in json.loads(e) for e in events[:-2])  # each with the worker's signature
    assert len(texts) <= 8  # at most the job's max_tokens were relayed
    assert engine.sampled_at == [] and worker.app[APP_STORE].get_job_counts().get("done", 0) == 0  # the honest worker never ran it


async def test_every_worker_failing_before_a_token_is_an_http_error_not_a_stream(start, tmp_path, bad_workers):
    refuses = await bad_workers.start(["refuses", "refuses"])
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        gateway = await _gateway(start, tmp_path, refuses, session)
        with pytest.raises(APIStatusError) as raised:
            await _stream(gateway.url, chat=True)
    assert raised.value.status_code == 503 and raised.value.response.json()["error"]["code"] == "no_worker_completed"


@pytest.mark.parametrize("change, status, code", [
    ({"model": "gpt-4"}, 404, "unknown_model"),
    ({"prompt": "word " * 5000}, 413, "prompt_too_long"),
])
async def test_a_bad_streamed_request_is_an_error_before_any_chunk(start, served_tiny, tmp_path, http, change, status, code):
    worker, engine, entry = await _slow_worker(start, served_tiny, tmp_path)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        gateway = await _gateway(start, tmp_path, [entry, entry], session)
        body = {"model": "tiny", "prompt": "Hello", "max_tokens": 4, "stream": True} | change
        async with http.post(gateway.url + "/v1/completions", json=body) as response:
            assert response.status == status and response.content_type == "application/json"
            assert (await response.json())["error"]["code"] == code
    assert engine.sampled_at == []


async def test_the_router_admits_by_the_readiness_rule(start, tmp_path, make_job, http):
    """Issue 23: the router admitted at committee + 1 workers by its own arithmetic, while readiness
    (`compute_needed_workers`) counts the dispatcher too when it is one of the workers: the contract
    excludes the job's worker AND its dispatcher from the committee. With the gateway and one other
    worker and a committee of 1, a job the other worker ran had nobody to audit it."""
    async with aiohttp.ClientSession() as session:
        gateway = await _gateway(start, tmp_path, [], session)
        router, job_worker = gateway.app[APP_DISPATCHER], gateway.app[APP_WORKER]
        me = WorkerEntry(gateway.app[APP_KEY].address, gateway.url, 10**18)
        others = [WorkerEntry(new_node_key().address, "http://127.0.0.1:9", 10**18) for _ in range(2)]
        job = make_job(job_worker.served.engine, [1, 2, 3], 2)
        router.view.workers = [me, others[0]]
        with pytest.raises(NoWorkers, match="needs 3"):
            router.verify_admission(job)
        body = {"model": "tiny", "prompt": "Hello", "max_tokens": 4, "stream": True}
        async with http.post(gateway.url + "/v1/completions", json=body) as response:  # a stream too: refused before any chunk
            assert response.status == 503 and (await response.json())["error"]["code"] == "no_workers"
        router.view.workers = [me, *others]
        router.verify_admission(job)
        router.view.workers = others  # a gateway that serves no weight itself: worker + committee
        router.verify_admission(job)
        router.view.workers = others[:1]
        with pytest.raises(NoWorkers, match="needs 2"):
            router.verify_admission(job)
