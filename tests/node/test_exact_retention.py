"""Exact mode keeps only tokens: no trace bytes are stored, an opening re-runs the job's prefill,
and the rebuilt leaves verify under the committed root and equal those of full retention."""

import asyncio

import numpy as np
import pytest

from verillm.engine.models import load_model
from verillm.engine.torch_engine import TorchEngine
from verillm.node.appkeys import APP_STORE
from verillm.node.dispatcher.peer import PeerClient
from verillm.node.worker.commit import compute_rebuilt_trace
from verillm.node.worker.engines import ServedModel
from verillm.spec.challenge import compute_challenge
from verillm.spec.commitment import verify_opening
from verillm.spec.types import Job, SamplingParams
from helpers.nodes import make_local_config


@pytest.fixture(scope="module")
def exact_engine():
    model, tokenizer, manifest = load_model("tiny", "bfloat16")
    return TorchEngine(model, tokenizer, manifest, max_batch_size=4)


def make_jobs(engine, prompts) -> list[Job]:
    samplings = (SamplingParams(), SamplingParams(temperature_milli=800, top_k=40, seed=9))
    return [Job(engine.model_id, tuple(p), samplings[i % 2], 7 + 3 * i, bytes([i + 1]) * 32) for i, p in enumerate(prompts)]


def test_a_trace_rebuilt_from_tokens_equals_the_decode_trace(exact_engine, tiny_prompts):
    jobs = make_jobs(exact_engine, tiny_prompts)
    for job, trace in zip(jobs, exact_engine.run(jobs)):  # one batch: decode with left padding
        rebuilt = compute_rebuilt_trace(exact_engine, job, trace.output_tokens)
        assert rebuilt.output_tokens == trace.output_tokens
        assert np.array_equal(rebuilt.fingerprints.view(np.uint32), trace.fingerprints.view(np.uint32))
        assert np.array_equal(rebuilt.flags, trace.flags)


async def test_token_retention_stores_no_trace_and_opens_under_the_committed_root(start, http, exact_engine, tiny_prompts, tmp_path, dispatcher_key):
    nodes = {
        retention: await start(make_local_config(tmp_path / retention, auth={"allowed_senders": [dispatcher_key.address_hex]}), ServedModel(alias="tiny", engine=exact_engine, tokenizer=exact_engine.tokenizer, retention=retention))
        for retention in ("tokens", "full")
    }
    jobs = make_jobs(exact_engine, tiny_prompts)
    layers = exact_engine.manifest.committed_layers
    openings = {}
    for retention, node in nodes.items():
        peer = PeerClient(node.url, dispatcher_key, http)  # the operator's named dispatcher (admission)
        replies = await asyncio.gather(*(peer.submit_job(job) for job in jobs))
        store = node.app[APP_STORE]
        blobs = [store.get_trace_blob(reply.job_hash) for reply in replies]
        assert all(blob == b"" for blob in blobs) if retention == "tokens" else all(len(blob) > 0 for blob in blobs)
        openings[retention] = []
        for job, reply in zip(jobs, replies):
            challenge = compute_challenge(reply.job_hash, len(job.input_tokens), len(reply.output_tokens), layers, 4)
            opening = await peer.request_opening(reply.job_hash, challenge=challenge)
            leaves = verify_opening(opening, reply.receipt.commitment_root, layers, reply.receipt.num_positions)
            openings[retention].append(({cell: (leaf.fingerprint, leaf.flags) for cell, leaf in leaves.items()}, reply.receipt.commitment_root))
    assert openings["tokens"] == openings["full"]  # same roots, same leaves


def test_tolerance_mode_always_keeps_the_trace(tiny_engine):
    served = ServedModel(alias="tiny", engine=tiny_engine, tokenizer=tiny_engine.tokenizer, retention="tokens")
    assert not served.rebuilds_traces  # fp32 decode and prefill differ in the last bits: nothing to rebuild from
