"""`Client.stream` (issue 23): text deltas as they arrive, then the verified `Completion`, whose text
the deltas must concatenate to. A node that streams one text and signs another, streams no receipt,
or sends a receipt for another job is refused at the end of the stream, as `complete` refuses the
same answer whole (verillm/client/stream.py)."""

import json

import aiohttp
import pytest
from aiohttp import web

from verillm.client import AsyncClient, Client, Completion
from verillm.errors import BadResponse, InvalidProof, InvalidSignature, UnknownModel
from verillm.node.appkeys import APP_DOMAIN
from helpers.hostile_node import HostileNode


def _pinned(url: str, node, served_tiny) -> Client:
    return Client(url, model_id=served_tiny.model_id, domain=node.app[APP_DOMAIN], tokenizer=served_tiny.tokenizer)


@pytest.mark.parametrize("chat", [False, True])
def test_deltas_concatenate_to_the_verified_text(threaded_node, served_tiny, chat):
    with _pinned(threaded_node.url, threaded_node, served_tiny) as client:
        ask = dict(messages=[{"role": "user", "content": "Count"}]) if chat else dict(prompt="The quick brown fox")
        items = list(client.stream(**ask, max_tokens=12, temperature=0))
        deltas, completion = items[:-1], items[-1]
        assert isinstance(completion, Completion) and all(isinstance(d, str) and d for d in deltas)
        assert len(deltas) >= 2 and "".join(deltas) == completion.text
        assert completion.text == served_tiny.tokenizer.decode(list(completion.tokens), skip_special_tokens=True)
        assert completion.verification.not_checked == ("signer's registration and stake (no chain: use --rpc-url / protocol=)",)
        whole = client.chat(ask["messages"], max_tokens=12, temperature=0) if chat else client.complete(ask["prompt"], max_tokens=12, temperature=0)
        assert whole.tokens == completion.tokens  # greedy: the streamed job and the whole one agree


def test_a_stop_string_cuts_the_stream_as_the_node_cuts_the_text(threaded_node, served_tiny):
    with _pinned(threaded_node.url, threaded_node, served_tiny) as client:
        full = client.complete("The quick brown fox", max_tokens=12, temperature=0)
        stop = full.text[len(full.text) // 2: len(full.text) // 2 + 2]
        *deltas, completion = client.stream("The quick brown fox", max_tokens=12, temperature=0, stop=stop)
        assert "".join(deltas) == completion.text == full.text[: full.text.find(stop)] and completion.finish_reason == "stop"


async def test_the_async_client_streams_and_errors_come_before_any_delta(threaded_node, served_tiny):
    async with AsyncClient(threaded_node.url, tokenizer=served_tiny.tokenizer) as client:
        items = [item async for item in client.stream("Hello", max_tokens=4, temperature=0)]
        assert isinstance(items[-1], Completion) and "".join(items[:-1]) == items[-1].text
        with pytest.raises(UnknownModel):
            async for _ in client.stream("Hello", model="gpt-4", max_tokens=4):
                pytest.fail("a delta before the error")


def _sse_rewriter(rewrite):
    """A raw handler that forwards a streamed request to the real node and rewrites each event with ``rewrite(event)``
    (an event to send, or None to drop it)."""

    async def handle(request: web.Request, real_url: list[str]) -> web.StreamResponse:
        body = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        async with aiohttp.ClientSession() as session:
            async with session.post(real_url[0] + request.path, json=body) as answer:
                async for line in answer.content:
                    if not line.startswith(b"data: {"):
                        await response.write(line)
                        continue
                    event = rewrite(json.loads(line[6:]))
                    if event is not None:
                        await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await response.write_eof()
        return response

    return handle


def _replace_text(event):
    choice = event["choices"][0] if event.get("choices") else {}
    if choice.get("text"):
        choice["text"] = choice["text"].upper() + "!"
    return event


def _drop_receipt(event):
    return None if "verillm" in event else event


def _other_job(stash):
    """Swap the final chunk's verillm field (receipt, job, tokens) for the one of an earlier job."""
    def rewrite(event):
        if "verillm" in event:
            if not stash:
                stash.append(event["verillm"])
            else:
                event["verillm"] = stash[0]
        return event
    return rewrite


def _corrupt_signature(event):
    if "verillm_stream" in event:
        signature = bytearray.fromhex(event["verillm_stream"]["signed"]["signature"][2:])
        signature[5] ^= 1
        event["verillm_stream"]["signed"]["signature"] = "0x" + signature.hex()
    return event


def _inject_signed_tokens(event):
    """Keep the worker's signature, claim other tokens under it (the running hash no longer extends)."""
    if "verillm_stream" in event:
        event["verillm_stream"]["tokens"] = [t + 1 for t in event["verillm_stream"]["tokens"]]
    return event


def _unsigned_then_signed():
    """Drop the signature of the first text chunk only: text no worker signed, then signed text."""
    seen = []

    def rewrite(event):
        if "verillm_stream" in event and not seen:
            seen.append(event.pop("verillm_stream"))
        return event
    return rewrite


@pytest.mark.parametrize("name, rewrite, error, match", [
    ("tampered text", lambda: _replace_text, InvalidProof, "not the text of the tokens the worker signed"),
    ("no receipt", lambda: _drop_receipt, BadResponse, "without the chunk that carries the receipt"),
    ("a corrupted signature", lambda: _corrupt_signature, InvalidSignature, "stream prefix"),
    ("tokens the signature does not cover", lambda: _inject_signed_tokens, InvalidProof, "running hash"),
    ("signed text after unsigned", _unsigned_then_signed, BadResponse, "signed text after text no worker signed"),
])
def test_a_tampered_stream_is_refused_before_the_delta_is_shown(threaded_node, served_tiny, name, rewrite, error, match):
    real, shown = [threaded_node.url], []
    handle = _sse_rewriter(rewrite())
    hostile = HostileNode(threaded_node.url, raw={"/v1/completions": lambda request: handle(request, real)})
    try:
        with _pinned(hostile.url, threaded_node, served_tiny) as client:
            with pytest.raises(error, match=match):
                for item in client.stream("The quick brown fox", max_tokens=8, temperature=0):
                    shown.append(item)
        if name != "no receipt":
            assert shown == [], f"{name}: {shown} shown before the check"
    finally:
        hostile.stop()


def test_text_no_worker_signed_is_held_until_the_receipt_verifies(threaded_node, served_tiny):
    """A relay that strips every signature: nothing is shown until the final receipt verifies, then the text at once."""
    real = [threaded_node.url]
    handle = _sse_rewriter(lambda event: {k: v for k, v in event.items() if k != "verillm_stream"})
    hostile = HostileNode(threaded_node.url, raw={"/v1/completions": lambda request: handle(request, real)})
    try:
        with _pinned(hostile.url, threaded_node, served_tiny) as client:
            *deltas, completion = client.stream("The quick brown fox", max_tokens=8, temperature=0)
        assert isinstance(completion, Completion) and deltas == [completion.text]
    finally:
        hostile.stop()


def test_a_receipt_for_another_request_is_refused(threaded_node, served_tiny):
    real, stash = [threaded_node.url], []
    handle = _sse_rewriter(_other_job(stash))
    hostile = HostileNode(threaded_node.url, raw={"/v1/completions": lambda request: handle(request, real)})
    try:
        with _pinned(hostile.url, threaded_node, served_tiny) as client:
            first = list(client.stream("The quick brown fox", max_tokens=8, temperature=0))
            assert isinstance(first[-1], Completion) and stash
            with pytest.raises(InvalidProof, match="input"):  # a genuine receipt, for the first request's job
                list(client.stream("The river runs past the mill", max_tokens=8, temperature=0))
    finally:
        hostile.stop()


def test_leaving_a_stream_early_leaves_the_client_usable(threaded_node, served_tiny):
    with _pinned(threaded_node.url, threaded_node, served_tiny) as client:
        for _ in client.stream("The quick brown fox", max_tokens=12, temperature=0):
            break
        assert isinstance(client.complete("Hello", max_tokens=2, temperature=0), Completion)
