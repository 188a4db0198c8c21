"""A job's status is served to its requester (read token) and its parties (signed read) only."""

import time

from verillm.node.api.access import compute_read_token, compute_evidence_parties
from verillm.node.appkeys import APP_KEY
from verillm.node.envelope import compute_read_headers, encode_envelope_json, sign_envelope
from verillm.node.keys import new_node_key
from verillm.node.dispatcher.peer import JOBS_PATH, PeerClient
from verillm.spec.types import Job, SamplingParams


async def get(http, url, headers=None):
    async with http.get(url, headers=headers or {}) as response:
        return response.status, await response.json(content_type=None)


async def test_the_openai_requester_reads_by_token_and_nobody_else(node, http):
    async with http.post(node.url + "/v1/completions", json={"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 2}) as response:
        status_url = (await response.json())["verillm"]["status_url"]
    status, body = await get(http, status_url)
    assert status == 200 and body["status"] == "done"
    bare = status_url.split("?")[0]
    for url in (bare, bare + "?token=" + "00" * 16, bare + "?token="):
        status, body = await get(http, url)
        assert (status, body["error"]["code"]) == (401, "invalid_signature"), url
    stranger = compute_read_headers(bare.removeprefix(node.url), new_node_key(), node.app[APP_KEY].address)
    assert (await get(http, bare, stranger))[0] == 401
    me = node.app[APP_KEY]  # the node itself is always a party
    assert (await get(http, bare, compute_read_headers(bare.removeprefix(node.url), me, me.address)))[0] == 200


async def test_the_submitter_reads_by_signature_fresh_and_addressed_to_this_node(node, http, served_tiny, dispatcher_key):
    job = Job(served_tiny.model_id, (5, 6, 7), SamplingParams(), 2, b"\x09" * 32)
    peer = PeerClient(node.url, dispatcher_key, http)
    reply = await peer.submit_job(job)
    assert (await peer.get_job(reply.job_hash))["status"] == "done"  # PeerClient signs its reads
    path = f"{JOBS_PATH}/0x{reply.job_hash.hex()}"
    me = node.app[APP_KEY].address
    for envelope, expected in (
        (sign_envelope(path, b"", dispatcher_key.private_key, b"\x01" * 20), 401),                       # for another node
        (sign_envelope(path, b"", dispatcher_key.private_key, me, timestamp_s=int(time.time()) - 3600), 409),  # stale
        (sign_envelope(path + "/openings", b"", dispatcher_key.private_key, me), 401),                   # another path
        (sign_envelope(path, b"x", dispatcher_key.private_key, me), 401),                                 # not a read
    ):
        status, body = await get(http, node.url + path, {"X-Verillm-Envelope": encode_envelope_json(envelope).decode()})
        assert status == expected, body
    status, body = await get(http, node.url + path, {"X-Verillm-Envelope": "[" * 8000})
    assert status == 400
    assert compute_read_token(node.app[APP_KEY], reply.job_hash) in reply.status_url


def test_evidence_parties_are_the_worker_and_the_members():
    worker, member = "0x" + "11" * 20, "0x" + "22" * 20
    evidence = {"receipt": {"worker": worker}, "audits": [{"members": {"1": {"address": member}}}, {"members": {}}]}
    assert compute_evidence_parties(evidence) == {b"\x11" * 20, b"\x22" * 20}
