"""The native API between nodes: signed jobs, status, openings; one path for every job kind."""

import asyncio
import dataclasses

import pytest

from verillm.errors import InvalidSignature, NotFound
from verillm.node.appkeys import APP_DOMAIN, APP_KEY, APP_STORE
from verillm.node.worker.engines import ServedModel
from verillm.node.keys import new_node_key
from verillm.node.dispatcher.peer import PeerClient
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.commitment import verify_opening
from verillm.spec.job import compute_job_hash, compute_verification_job
from verillm.spec.receipt import verify_receipt_signature
from verillm.spec.types import Job, SamplingParams


def make_job(served, tokens, max_new_tokens=6, nonce=b"\x01" * 32, sampling=SamplingParams()) -> Job:
    return Job(model_id=served.model_id, input_tokens=tuple(tokens), sampling=sampling, max_new_tokens=max_new_tokens, nonce=nonce)


async def test_job_round_trip_with_opening(peer, node, served_tiny, tiny_prompts):
    job = make_job(served_tiny, tiny_prompts[0])
    reply = await peer.submit_job(job)
    assert reply.job_hash == compute_job_hash(job) == reply.receipt.job_hash
    assert reply.receipt.worker == node.app[APP_KEY].address
    assert len(reply.output_tokens) == 6
    status = await peer.get_job(reply.job_hash)
    assert status["status"] == "done" and status["output_tokens"] == list(reply.output_tokens)
    assert status["receipt"]["encoded"] and status["attempts"] == 1
    layers = served_tiny.manifest.committed_layers
    cells = [(0, layers[0]), (3, layers[-1]), (reply.receipt.num_positions - 1, layers[1])]
    opening = await peer.request_opening(reply.job_hash, cells=cells)
    leaves = verify_opening(opening, reply.receipt.commitment_root, layers, reply.receipt.num_positions)
    assert sorted(leaves) == sorted(cells)


async def test_opening_for_a_challenge(peer, served_tiny, tiny_prompts):
    prompt = tiny_prompts[1]
    reply = await peer.submit_job(make_job(served_tiny, prompt, max_new_tokens=10))
    layers = served_tiny.manifest.committed_layers
    challenge = compute_challenge(b"\x07" * 32, len(prompt), len(reply.output_tokens), layers, count=4)
    opening = await peer.request_opening(reply.job_hash, challenge=challenge)
    leaves = verify_opening(opening, reply.receipt.commitment_root, layers, reply.receipt.num_positions)
    assert sorted(leaves) == compute_opened_cells(challenge, reply.receipt.num_positions)


async def test_resubmitting_a_job_returns_the_same_receipt(peer, node, served_tiny, tiny_prompts):
    job = make_job(served_tiny, tiny_prompts[2])
    first, second = await asyncio.gather(peer.submit_job(job), peer.submit_job(job))
    third = await peer.submit_job(job)
    assert first.receipt == second.receipt == third.receipt
    assert node.app[APP_STORE].get_job_counts()["done"] == 1
    assert node.app[APP_STORE].get_job(first.job_hash).attempts == 1


async def test_enqueue_without_waiting_then_poll(peer, served_tiny, tiny_prompts):
    job_hash = await peer.enqueue_job(make_job(served_tiny, tiny_prompts[3], max_new_tokens=4))
    for _ in range(200):
        status = await peer.get_job(job_hash)
        if status["status"] == "done":
            break
        await asyncio.sleep(0.05)
    assert status["status"] == "done" and len(status["output_tokens"]) == 4


async def test_only_the_submitter_gets_openings(peer, node, http, served_tiny, tiny_prompts):
    reply = await peer.submit_job(make_job(served_tiny, tiny_prompts[0], max_new_tokens=3))
    stranger = PeerClient(node.url, new_node_key(), http)
    with pytest.raises(InvalidSignature, match="only its submitter"):
        await stranger.request_opening(reply.job_hash, cells=[(0, 1)])
    with pytest.raises(NotFound):
        await peer.request_opening(b"\x09" * 32, cells=[(0, 1)])


class RecordingEngine:
    """The real tiny engine, recording every batch of jobs that reaches it."""

    def __init__(self, engine):
        self.inner = engine
        self.manifest, self.model_id, self.max_batch_size = engine.manifest, engine.model_id, engine.max_batch_size
        self.batches: list[list[Job]] = []

    def run(self, jobs):
        self.batches.append(list(jobs))
        return self.inner.run(jobs)


async def test_inference_and_verification_jobs_take_the_same_path(start, http, dispatcher_key, served_tiny, tiny_prompts):
    """What reaches the engine (and the store) for an audit is shaped exactly like an inference."""
    recording = RecordingEngine(served_tiny.engine)
    node = await start(served=ServedModel(alias="tiny", engine=recording, tokenizer=served_tiny.tokenizer))
    peer = PeerClient(node.url, dispatcher_key, http)
    inference = make_job(served_tiny, tiny_prompts[0], max_new_tokens=5, nonce=b"\x02" * 32)
    reply = await peer.submit_job(inference)
    audit = compute_verification_job(inference, reply.output_tokens, nonce=b"\x03" * 32)
    audit_reply = await peer.submit_job(audit)
    (ran_inference,), (ran_audit,) = recording.batches
    assert (ran_inference, ran_audit) == (inference, audit)
    assert type(ran_inference) is type(ran_audit) is Job
    assert [f.name for f in dataclasses.fields(ran_inference)] == [f.name for f in dataclasses.fields(ran_audit)]
    store = node.app[APP_STORE]
    rows = [store.db.execute("SELECT * FROM jobs WHERE job_hash = ?", [h.hex()]).fetchone() for h in (reply.job_hash, audit_reply.job_hash)]
    columns = [d[0] for d in store.db.execute("SELECT * FROM jobs LIMIT 0").description]
    differing = {c for c, a, b in zip(columns, *rows) if a != b}
    assert differing <= {"job_hash", "job", "num_input_tokens", "output_tokens", "received_at", "updated_at"}
    verify_receipt_signature(audit_reply.receipt, node.app[APP_DOMAIN])
    assert audit_reply.receipt.num_positions == len(audit.input_tokens)
