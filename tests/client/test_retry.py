"""The SDK sends a refused request again when the node says to come back (429/503 with `Retry-After`:
a full queue, the per-client quota, a node shedding client work for its own duty), as OpenAI clients
do, and raises every other refusal at once. CI's streaming devnet saw the SDK give up on a gateway
that shed one request for its reveal while the OpenAI client beside it retried.

The node in front of the real one (tests/helpers/hostile_node.py) refuses the first requests exactly
as a node does (status, `Retry-After`, error body), then forwards: the same body each time.
"""

import json

import aiohttp
import pytest
from aiohttp import web

from verillm.client import Client
from verillm.client.http import MAX_RETRY_WAIT_S, compute_retry_wait
from verillm.errors import InvalidInput, QueueFull, TooManyRequests
from verillm.node.dispatcher.deadlines import SheddingForDuty

from helpers.hostile_node import HostileNode

SHED = (503, "shedding_for_duty", "this node's reveal_round is due by block 273 (head 269): it takes no new client work until that lands")
QUOTA = (429, "rate_limited", "this client already has 1 requests in flight (limits.max_inflight_per_client); retry when one ends")
BAD = (400, "invalid_request", "max_tokens must be positive")


class RefusingNode:
    """Refuses the first ``refusals`` POSTs of ``path`` with ``refusal`` (status, code, message) and
    ``Retry-After: retry_after``, then forwards to the real node; records every body it got."""

    def __init__(self, real_url: str, path: str, refusal: tuple, refusals: int, retry_after: str = "1"):
        self.real_url, self.refusal, self.refusals, self.retry_after = real_url, refusal, refusals, retry_after
        self.bodies: list[dict] = []
        self.node = HostileNode(real_url, raw={path: self._handle})
        self.url = self.node.url

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        self.bodies.append(body)
        if len(self.bodies) <= self.refusals:
            status, code, message = self.refusal
            error = {"error": {"message": message, "type": "verillm_error", "param": None, "code": code}}
            return web.json_response(error, status=status, headers={"Retry-After": self.retry_after})
        async with aiohttp.ClientSession() as session:
            async with session.post(self.real_url + request.path_qs, json=body) as answer:
                raw, status, kind = await answer.read(), answer.status, answer.headers.get("Content-Type", "application/json")
        return web.Response(body=raw, status=status, headers={"Content-Type": kind})

    def stop(self) -> None:
        self.node.stop()


@pytest.fixture
def refusing(threaded_node):
    nodes = []

    def make(path: str, refusal: tuple, refusals: int, retry_after: str = "1") -> RefusingNode:
        nodes.append(RefusingNode(threaded_node.url, path, refusal, refusals, retry_after))
        return nodes[-1]

    yield make
    for node in nodes:
        node.stop()


def test_a_shed_completion_is_sent_again_unchanged_and_verified(refusing, served_tiny):
    node = refusing("/v1/completions", SHED, refusals=2)
    completion = Client(node.url, tokenizer=served_tiny.tokenizer).complete("The quick brown fox", max_tokens=4, temperature=0)
    assert len(completion.tokens) == 4
    assert len(node.bodies) == 3 and node.bodies[0] == node.bodies[1] == node.bodies[2]  # one job: the same nonce each time
    assert completion.job.nonce.hex() == node.bodies[0]["verillm"]["nonce"].removeprefix("0x")


def test_a_stream_refused_by_the_quota_is_opened_again_before_any_delta(refusing, served_tiny):
    node = refusing("/v1/completions", QUOTA, refusals=1)
    *deltas, completion = Client(node.url, tokenizer=served_tiny.tokenizer).stream("The quick brown fox", max_tokens=6, temperature=0)
    assert "".join(deltas) == completion.text and len(completion.tokens) == 6
    assert len(node.bodies) == 2 and node.bodies[0] == node.bodies[1]


def test_max_retries_bounds_the_attempts_and_the_refusal_is_raised(refusing):
    node = refusing("/v1/completions", SHED, refusals=10)
    with pytest.raises(SheddingForDuty, match="reveal_round is due"):
        Client(node.url, max_retries=0).complete("Hi", max_tokens=2, temperature=0)
    assert len(node.bodies) == 1
    with pytest.raises(SheddingForDuty):
        Client(node.url, max_retries=2).complete("Hi", max_tokens=2, temperature=0)
    assert len(node.bodies) == 1 + 3


def test_a_wait_past_the_deadline_or_the_cap_is_not_waited_for(refusing):
    node = refusing("/v1/completions", SHED, refusals=10, retry_after="20")
    with pytest.raises(SheddingForDuty):  # 20 s to wait, 5 s left: raised at once
        Client(node.url, timeout_s=5.0).complete("Hi", max_tokens=2, temperature=0)
    assert len(node.bodies) == 1


def test_a_refusal_that_does_not_say_come_back_is_never_sent_again(refusing):
    node = refusing("/v1/completions", BAD, refusals=10)
    with pytest.raises(InvalidInput, match="max_tokens must be positive"):
        Client(node.url).complete("Hi", max_tokens=2, temperature=0)
    assert len(node.bodies) == 1


def test_the_wait_is_the_nodes_retry_after_within_bounds():
    shed, quota = SheddingForDuty("x"), TooManyRequests("x")
    assert compute_retry_wait(shed, "3", 0, 4, 100.0) == 3.0
    assert compute_retry_wait(shed, None, 0, 4, 100.0) == QueueFull.retry_after_s  # no header: the class's own
    assert compute_retry_wait(quota, "soon", 1, 4, 100.0) == TooManyRequests.retry_after_s  # not seconds: the class's own
    assert compute_retry_wait(shed, "3", 4, 4, 100.0) is None  # attempts used up
    assert compute_retry_wait(shed, "3", 0, 4, 3.0) is None  # it would end at or past the deadline
    assert compute_retry_wait(shed, str(int(MAX_RETRY_WAIT_S) + 1), 0, 4, 1000.0) is None
    assert compute_retry_wait(InvalidInput("x"), "1", 0, 4, 100.0) is None


def test_max_retries_must_not_be_negative():
    with pytest.raises(InvalidInput, match="max_retries"):
        Client("http://127.0.0.1:9", max_retries=-1)
