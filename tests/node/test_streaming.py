"""Real token streaming: text chunks leave the node while the engine is still sampling, the
receipt comes in the last chunk. Driven by the unmodified `openai` package.

The engine is the reference TorchEngine on the tiny model, throttled to 40 ms per token (a
model of SmolLM2's speed on this CPU) so that "before the last token" is a real interval."""

import asyncio
import threading
import time

import pytest
from openai import AsyncOpenAI

from verillm.node.appkeys import APP_MODEL
from verillm.node.worker.engines import ServedModel

TOKEN_DELAY_S = 0.04


class ThrottledEngine:
    """The tiny TorchEngine, sampling one token per TOKEN_DELAY_S; records when each token was sampled."""

    def __init__(self, inner):
        self.inner, self.manifest, self.model_id, self.max_batch_size = inner, inner.manifest, inner.model_id, inner.max_batch_size
        self.sampled_at: list[float] = []
        self.lock = threading.Lock()

    def run(self, jobs, on_token=None):
        def slow(index: int, token: int) -> None:
            time.sleep(TOKEN_DELAY_S)
            with self.lock:
                self.sampled_at.append(time.monotonic())
            if on_token is not None:
                on_token(index, token)

        return self.inner.run(jobs, on_token=slow)


@pytest.fixture
async def slow_node(start, served_tiny):
    engine = ThrottledEngine(served_tiny.engine)
    node = await start(served=ServedModel(served_tiny.alias, engine, served_tiny.tokenizer))
    return node, engine


@pytest.mark.parametrize("chat", [False, True])
async def test_chunks_arrive_while_the_engine_samples(slow_node, chat):
    node, engine = slow_node
    client = AsyncOpenAI(base_url=f"{node.url}/v1", api_key="unused", max_retries=0)
    kwargs = dict(model="tiny", max_tokens=12, temperature=0, stream=True)
    if chat:
        stream = await client.chat.completions.create(messages=[{"role": "user", "content": "Count"}], **kwargs)
    else:
        stream = await client.completions.create(prompt="The quick brown fox", **kwargs)
    started, arrivals = time.monotonic(), []
    async for chunk in stream:
        text = (chunk.choices[0].delta.content if chat else chunk.choices[0].text) if chunk.choices else None
        arrivals.append((time.monotonic(), text or "", chunk))
    await client.close()
    last_token_at = engine.sampled_at[-1]
    early = [t for t, text, _ in arrivals if text and t < last_token_at]
    assert len(early) >= 2, f"{len(early)} text chunks before the last token; arrivals {[round(t - started, 3) for t, *_ in arrivals]}"
    first_text_at = next(t for t, text, _ in arrivals if text)
    assert first_text_at - started < (last_token_at - started) / 2  # time to first token: well before the end
    final = arrivals[-1][2]
    verillm = final.model_extra["verillm"]
    assert final.choices[0].finish_reason in ("length", "stop") and len(verillm["output_tokens"]) == len(engine.sampled_at)
    text = "".join(text for _, text, _ in arrivals)
    assert text == node.app[APP_MODEL].tokenizer.decode(verillm["output_tokens"], skip_special_tokens=True)


async def test_a_client_that_drops_a_stream_is_not_a_node_error(slow_node, http, caplog):
    """Issue 22 item 5: a client hanging up mid-stream was logged at ERROR and counted internal_error,
    so any client could set off the operator's alerts. It is the client's choice: INFO, its own code."""
    from verillm.node.appkeys import APP_STORE

    node, _ = slow_node
    body = {"model": "tiny", "prompt": "The river", "max_tokens": 40, "temperature": 0, "stream": True}
    with caplog.at_level("INFO"):
        async with http.post(node.url + "/v1/completions", json=body) as response:
            await response.content.readline()  # the first chunk is on its way: the stream is open
            response.connection.transport.close()  # and the client hangs up
        store = node.app[APP_STORE]
        while store.get_job_counts()["done"] == 0:  # the job runs to its end on the engine
            await asyncio.sleep(0.05)
        await asyncio.sleep(0)
    async with http.get(node.url + "/metrics") as response:
        metrics = await response.text()
    assert 'verillm_node_http_errors_total{code="internal_error"} 0.0' in metrics
    assert 'verillm_node_http_errors_total{code="client_disconnected"} 1.0' in metrics
    assert not [r for r in caplog.records if r.levelname == "ERROR"], [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("dropped its stream" in r.getMessage() for r in caplog.records)
