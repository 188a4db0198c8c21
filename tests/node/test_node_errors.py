"""Every refusal path: the right status and OpenAI error body, and nothing half-written."""

import asyncio
import json
import time

import pytest

from verillm.node.appkeys import APP_KEY, APP_STORE
from verillm.node.envelope import encode_envelope_json, sign_envelope
from verillm.node.keys import new_node_key
from helpers.nodes import make_local_config
from verillm.spec.encoding import encode
from verillm.spec.types import Job, SamplingParams

JOBS = "/v1/verillm/jobs"


def make_job(served, tokens=(5, 6, 7), max_new_tokens=3, nonce=b"\x01" * 32, model_id=None) -> Job:
    return Job(model_id=model_id or served.model_id, input_tokens=tuple(tokens), sampling=SamplingParams(), max_new_tokens=max_new_tokens, nonce=nonce)


async def post(http, url, body) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with http.post(url, data=data, headers={"Content-Type": "application/json"}) as response:
        return response.status, await response.json(content_type=None)


def expect(status_body, status: int, code: str, mentions: str = "") -> None:
    status_got, body = status_body
    assert status_got == status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code, body
    assert mentions in body["error"]["message"], body


def check_store_consistent(store, done: int, nonces: int, dispatched: int = 0) -> None:
    """Only accepted jobs are stored; every done job has receipt and trace; dispatched ones a dispatched row."""
    counts = store.get_job_counts()
    assert counts == {"received": 0, "running": 0, "done": done, "failed": 0}
    q = lambda sql: store.db.execute(sql).fetchone()[0]  # noqa: E731
    assert q("SELECT COUNT(*) FROM receipts") == q("SELECT COUNT(*) FROM traces") == done
    assert q("SELECT COUNT(*) FROM dispatched d JOIN receipts r USING (job_hash)") == dispatched == q("SELECT COUNT(*) FROM dispatched")
    assert q("SELECT COUNT(*) FROM receipts r JOIN jobs j USING (job_hash) WHERE j.status = 'done'") == done
    assert q("SELECT COUNT(*) FROM seen_nonces") == nonces


async def test_signed_envelope_refusals(node, http, served_tiny, dispatcher_key):
    url, key, ME = node.url + JOBS, dispatcher_key, node.app[APP_KEY].address
    payload = encode(make_job(served_tiny))
    # wrong signature: signed by another key than the claimed sender
    forged = sign_envelope(JOBS, payload, new_node_key().private_key, ME)
    body = json.loads(encode_envelope_json(forged))
    body["sender"] = key.address_hex
    expect(await post(http, url, body), 401, "invalid_signature", "not its sender")
    # signature over another payload
    body = json.loads(encode_envelope_json(sign_envelope(JOBS, payload, key.private_key, ME)))
    body["payload"] = "0x" + encode(make_job(served_tiny, nonce=b"\x02" * 32)).hex()
    expect(await post(http, url, body), 401, "invalid_signature")
    # envelope signed for another endpoint
    elsewhere = sign_envelope(f"{JOBS}/0x{'00' * 32}/openings", payload, key.private_key, ME)
    expect(await post(http, url, encode_envelope_json(elsewhere)), 401, "invalid_signature")
    # stale timestamp
    stale = sign_envelope(JOBS, payload, key.private_key, ME, timestamp_s=int(time.time()) - 3600)
    expect(await post(http, url, encode_envelope_json(stale)), 409, "replayed", "from this node's clock")
    # replayed nonce: the first one runs, the copy is refused
    envelope = encode_envelope_json(sign_envelope(JOBS, payload, key.private_key, ME))
    status, _ = await post(http, url, envelope)
    assert status == 200
    expect(await post(http, url, envelope), 409, "replayed", "already used")
    check_store_consistent(node.app[APP_STORE], done=1, nonces=1)


async def test_an_envelope_for_one_node_is_refused_by_another(start, http, served_tiny, tmp_path, dispatcher_key):
    """Cross-node replay within the clock window: node B never saw the nonce, but the envelope names A."""
    auth = {"allowed_senders": [dispatcher_key.address_hex]}  # both operators name the dispatcher
    a, b = await start(make_local_config(tmp_path / "a", auth=auth)), await start(make_local_config(tmp_path / "b", auth=auth))
    assert a.app[APP_KEY].address != b.app[APP_KEY].address
    envelope = encode_envelope_json(sign_envelope(JOBS, encode(make_job(served_tiny)), dispatcher_key.private_key, a.app[APP_KEY].address))
    expect(await post(http, b.url + JOBS, envelope), 401, "invalid_signature", "addressed to")
    status, _ = await post(http, a.url + JOBS, envelope)
    assert status == 200
    check_store_consistent(b.app[APP_STORE], done=0, nonces=0)


async def test_malformed_envelopes_and_payloads(node, http, served_tiny, dispatcher_key):
    url, key, ME = node.url + JOBS, dispatcher_key, node.app[APP_KEY].address
    expect(await post(http, url, b"{not json"), 400, "invalid_input", "body")
    good = json.loads(encode_envelope_json(sign_envelope(JOBS, encode(make_job(served_tiny)), key.private_key, ME)))
    for field, value in [("nonce", None), ("sender", "0x1234"), ("recipient", None), ("signature", "zz"), ("timestamp_s", "now"), ("payload", "0xzz")]:
        broken = {**good, field: value}
        expect(await post(http, url, broken), 400, "invalid_input", field)
    not_a_job = sign_envelope(JOBS, b"\x00\x01garbage", key.private_key, ME)
    expect(await post(http, url, encode_envelope_json(not_a_job)), 400, "invalid_encoding")
    unknown = sign_envelope(JOBS, encode(make_job(served_tiny, model_id=b"\x05" * 32)), key.private_key, ME)
    expect(await post(http, url, encode_envelope_json(unknown)), 404, "unknown_model")
    check_store_consistent(node.app[APP_STORE], done=0, nonces=0)


async def test_openai_refusals(start, http):
    node = await start(limits={"max_prompt_tokens": 8, "max_new_tokens": 32, "max_request_bytes": 4096})
    url = node.url + "/v1/completions"
    expect(await post(http, url, {"model": "gpt-4", "prompt": "hi"}), 404, "unknown_model", "gpt-4")
    long_prompt = "The quick brown fox jumps over the lazy dog while the farmer watches"
    expect(await post(http, url, {"model": "tiny", "prompt": long_prompt}), 413, "prompt_too_long", "limit of 8")
    expect(await post(http, url, {"model": "tiny", "prompt": "x" * 8000}), 413, "request_too_large")
    expect(await post(http, url, {"model": "tiny", "prompt": "hi", "max_tokens": 33}), 400, "invalid_input", "max_new_tokens")
    expect(await post(http, url, {"model": "tiny", "prompt": "hi", "temperature": "hot"}), 400, "invalid_input", "temperature")
    expect(await post(http, url, {"model": "tiny", "prompt": "hi", "n": 2}), 400, "invalid_input", "n:")
    expect(await post(http, url, {"model": "tiny", "prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}), 400, "invalid_input", "stop")  # up to 4 stop strings (cut after the fact: test_stop_strings.py)
    expect(await post(http, url, {"model": "tiny", "prompt": [1, -2]}), 400, "invalid_input", "prompt")
    expect(await post(http, url, {"model": "tiny"}), 400, "invalid_input", "prompt")
    expect(await post(http, url, [1, 2]), 400, "invalid_input", "body")
    chat = node.url + "/v1/chat/completions"
    expect(await post(http, chat, {"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}), 400, "invalid_input", "messages[0].role")
    expect(await post(http, chat, {"model": "tiny", "messages": [{"role": "user", "content": 5}]}), 400, "invalid_input", "messages[0].content")
    async with http.get(url) as response:
        assert response.status == 405 and (await response.json())["error"]["code"] == "method_not_allowed"
    async with http.get(node.url + "/v1/nothing") as response:
        assert response.status == 404 and (await response.json())["error"]["code"] == "not_found"
    async with http.get(f"{node.url}{JOBS}/0x{'ab' * 32}") as response:
        assert response.status == 404 and (await response.json())["error"]["code"] == "not_found"
    async with http.get(f"{node.url}{JOBS}/xyz") as response:
        assert response.status == 400
    check_store_consistent(node.app[APP_STORE], done=0, nonces=0)
    assert node.app[APP_STORE].db.execute("SELECT COUNT(*) FROM dispatched").fetchone()[0] == 0


async def test_queue_full_is_503_and_leaves_no_trace(start, http, served_tiny, dispatcher_key):
    from verillm.node.dispatcher.peer import PeerClient

    node = await start(queue={"max_queued_jobs": 1, "batch_wait_ms": 0, "reserved_for_peers": 0})
    peer, ME = PeerClient(node.url, dispatcher_key, http), node.app[APP_KEY].address
    running = await peer.enqueue_job(make_job(served_tiny, max_new_tokens=120, nonce=b"\x0a" * 32))
    for _ in range(400):
        if (await peer.get_job(running))["status"] == "running":
            break
        await asyncio.sleep(0.01)
    queued = await peer.enqueue_job(make_job(served_tiny, nonce=b"\x0b" * 32))
    refused = sign_envelope(JOBS, encode(make_job(served_tiny, nonce=b"\x0c" * 32)), dispatcher_key.private_key, ME)
    expect(await post(http, node.url + JOBS, encode_envelope_json(refused)), 503, "queue_full", "limit 1")
    async with http.post(node.url + "/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 2}) as response:
        status, body = response.status, await response.json(content_type=None)
        assert response.headers.get("Retry-After") == "2"  # a full queue is worth coming back to: OpenAI clients wait this long
    assert status == 503 and body["error"]["code"] == "queue_full"
    store = node.app[APP_STORE]
    assert store.get_job(running).status == "running" and store.get_job(queued).status == "received"
    assert store.get_job_counts()["received"] + store.get_job_counts()["running"] == 2
    await _wait_done(peer, queued)
    check_store_consistent(store, done=2, nonces=2)


async def _wait_done(peer, job_hash):
    for _ in range(1000):
        if (await peer.get_job(job_hash))["status"] == "done":
            return
        await asyncio.sleep(0.02)
    pytest.fail("job did not finish")


@pytest.mark.parametrize("message, param", [
    ("top_p: must be greater than 0", "top_p"),
    ("messages[2].role: expected system, user, assistant or developer", "messages[2].role"),
    ("stream_options.include_usage: expected true or false", "stream_options.include_usage"),
    ("this node is not active in the Registry", None),
    ("body: expected a JSON object", "body"),
])
def test_an_error_body_names_the_field_its_message_names(message, param):
    """Issue 36: OpenAI error bodies carried `param: null` though the message named the field."""
    from verillm.wire import compute_error_body

    assert compute_error_body(400, "invalid_input", message)["error"]["param"] == param
    assert compute_error_body(500, "internal_error", message)["error"]["param"] is None
