"""Abuse on loopback (issue 11): API keys, one client's flood, slowloris headers and bodies, oversized bodies.

Real node, real sockets; every run is bounded in requests and time.
"""

import asyncio
import time

from verillm.node.appkeys import APP_INFLIGHT

BODY = {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 2}


async def post(http, url, body, headers=None):
    async with http.post(url, json=body, headers=headers or {}) as response:
        return response.status, await response.json(content_type=None)


async def test_api_keys_guard_the_openai_routes_only(start, http):
    node = await start(auth={"api_keys": ["k-one", "k-two"]})
    url = node.url + "/v1/completions"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "k-one"}, {"Authorization": "Basic k-one"}):
        status, body = await post(http, url, BODY, headers)
        assert (status, body["error"]["code"]) == (401, "invalid_api_key"), headers
    async with http.get(node.url + "/v1/models") as response:
        assert response.status == 401
    for key in ("k-one", "k-two"):
        status, body = await post(http, url, BODY, {"Authorization": f"Bearer {key}"})
        assert status == 200, body
    async with http.get(node.url + "/healthz") as response:  # operations and node-to-node routes are not OpenAI's
        assert response.status == 200


async def test_one_client_flooding_cannot_starve_another(start, http):
    node = await start(limits={"max_inflight_per_client": 3}, auth={"api_keys": ["flood", "polite"]}, queue={"max_queued_jobs": 8, "reserved_for_peers": 2})
    url = node.url + "/v1/completions"
    flood = {"Authorization": "Bearer flood"}
    slow = {**BODY, "max_tokens": 60}
    results = await asyncio.gather(*[post(http, url, slow, flood) for _ in range(12)], post(http, url, BODY, {"Authorization": "Bearer polite"}))
    statuses = [status for status, _ in results[:-1]]
    assert statuses.count(200) == 3 and statuses.count(429) == 9, statuses
    assert all(body["error"]["code"] == "rate_limited" for status, body in results[:-1] if status == 429)
    assert results[-1][0] == 200, results[-1]  # the other client got in while the flood was capped
    assert not node.app[APP_INFLIGHT]  # every slot was given back


async def test_slowloris_body_gets_408_and_others_are_served(start, http):
    node = await start(limits={"body_timeout_s": 1.0, "max_inflight_per_client": 32}, auth={"api_keys": ["slow", "honest"]})
    host, port = node.url.removeprefix("http://").split(":")
    started = time.monotonic()
    streams = []
    for _ in range(20):  # twenty clients that announce a body and send it one byte at a time, slowly
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer slow\r\nContent-Length: 1000\r\n\r\n{")
        await writer.drain()
        streams.append((reader, writer))
    status, body = await post(http, node.url + "/v1/completions", BODY, {"Authorization": "Bearer honest"})  # meanwhile
    assert status == 200, body
    for reader, writer in streams:
        head = await asyncio.wait_for(reader.readline(), 10)
        assert head.startswith(b"HTTP/1.1 408"), head
        writer.close()
    assert time.monotonic() - started < 15


async def test_slowloris_headers_are_cut_off_and_others_are_served(start, http):
    """Clients that send their headers a line at a time, never finishing, are disconnected after
    limits.header_timeout_s; an honest client is served meanwhile, and after."""
    node = await start(limits={"header_timeout_s": 1.0})
    host, port = node.url.removeprefix("http://").split(":")
    started = time.monotonic()
    streams = []
    for _ in range(20):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        await writer.drain()
        streams.append((reader, writer))

    async def trickle(writer):  # one more header line every 0.3 s: never the blank line that ends them
        for n in range(30):
            await asyncio.sleep(0.3)
            try:
                writer.write(b"X-Slow-%d: y\r\n" % n)
                await writer.drain()
            except ConnectionError:
                return

    trickling = [asyncio.create_task(trickle(writer)) for _, writer in streams]
    status, body = await post(http, node.url + "/v1/completions", BODY)  # meanwhile
    assert status == 200, body
    for reader, writer in streams:
        assert await asyncio.wait_for(reader.read(), 10) == b"", "a slow header stream got an answer instead of being closed"
        writer.close()
    elapsed = time.monotonic() - started
    assert 0.9 < elapsed < 6, elapsed  # cut at the timeout, not at the end of the trickle (9 s)
    for task in trickling:
        task.cancel()
    status, body = await post(http, node.url + "/v1/completions", BODY)  # and after
    assert status == 200, body


async def test_oversized_bodies_are_refused_before_they_are_read(start, http):
    node = await start(limits={"max_request_bytes": 65536})
    for path in ("/v1/completions", "/v1/verillm/jobs"):
        async with http.post(node.url + path, data=b"x" * 10_000_000) as response:
            assert response.status == 413
            assert (await response.json())["error"]["code"] == "request_too_large"


async def test_client_floods_leave_the_peers_reserved_slots(start, http, served_tiny, dispatcher_key):
    """OpenAI clients stop at max_queued_jobs - reserved_for_peers; a node's (e.g. a committee's) job still gets in."""
    from verillm.node.appkeys import APP_WORKER
    from verillm.node.dispatcher.peer import PeerClient
    from verillm.spec.types import Job, SamplingParams

    node = await start(queue={"max_queued_jobs": 4, "reserved_for_peers": 2, "max_batch_size": 1, "batch_wait_ms": 0})
    peer = PeerClient(node.url, dispatcher_key, http)
    make = lambda i, n: Job(served_tiny.model_id, (5, 6, 7 + i), SamplingParams(), n, bytes([i]) * 32)  # noqa: E731
    running = await peer.enqueue_job(make(1, 200))
    for _ in range(500):
        if (await peer.get_job(running))["status"] == "running":
            break
        await asyncio.sleep(0.01)
    for i in (2, 3):
        await peer.enqueue_job(make(i, 2))
    assert node.app[APP_WORKER].queue.depth == 2
    async with http.post(node.url + "/v1/completions", json=BODY) as response:
        body = await response.json()
        assert response.status == 503 and body["error"]["code"] == "queue_full" and "other nodes" in body["error"]["message"]
    await peer.enqueue_job(make(4, 2))  # a peer's job takes a reserved slot
    assert node.app[APP_WORKER].queue.depth == 3
