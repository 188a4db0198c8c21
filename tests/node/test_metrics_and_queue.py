"""/metrics scrape, /healthz, batching of concurrent jobs, and one failing job failing alone."""

import asyncio

import pytest

from prometheus_client.parser import text_string_to_metric_families

from verillm.errors import EngineError
from verillm.node.appkeys import APP_STORE
from verillm.node.worker.engines import ServedModel
from verillm.node.store.migrations import MIGRATIONS
from verillm.node.dispatcher.peer import PeerClient
from verillm.spec.types import Job, SamplingParams


def make_job(served, nonce: int, tokens=(5, 6, 7, 8), max_new_tokens=4) -> Job:
    return Job(served.model_id, tuple(tokens), SamplingParams(), max_new_tokens, bytes([nonce]) * 32)


async def scrape(http, url) -> dict[str, float]:
    async with http.get(url + "/metrics") as response:
        assert response.status == 200 and response.content_type == "text/plain"
        text = await response.text()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


async def test_metrics_count_jobs_tokens_and_latency(node, peer, http, served_tiny):
    before = await scrape(http, node.url)
    assert before["verillm_node_jobs_total{outcome=done}"] == 0
    assert before["verillm_dispatcher_verdicts_total{verdict=verified}"] == 0
    assert "verillm_node_stake_wei{}" in before
    await asyncio.gather(*(peer.submit_job(make_job(served_tiny, n)) for n in range(3)))
    after = await scrape(http, node.url)
    assert after["verillm_node_jobs_total{outcome=done}"] == 3
    assert after["verillm_node_output_tokens_total{outcome=done}"] == 12
    assert after["verillm_node_input_tokens_total{outcome=done}"] == 12
    assert after["verillm_node_commit_seconds_count{}"] == 3
    assert after["verillm_node_job_seconds_count{}"] == 3
    assert after["verillm_node_generation_seconds_count{}"] >= 1
    assert after["verillm_node_queue_depth_jobs{}"] == 0
    async with http.get(node.url + "/healthz") as response:
        health = await response.json()
    assert health["status"] == "ok" and health["jobs"]["done"] == 3 and health["schema_version"] == len(MIGRATIONS)


async def test_concurrent_jobs_are_batched(start, http, served_tiny, dispatcher_key):
    node = await start(queue={"batch_wait_ms": 50})
    peer = PeerClient(node.url, dispatcher_key, http)
    await asyncio.gather(*(peer.submit_job(make_job(served_tiny, n)) for n in range(4)))
    samples = await scrape(http, node.url)
    assert samples["verillm_node_batch_size_jobs_count{}"] < 4  # fewer engine calls than jobs
    assert samples["verillm_node_batch_size_jobs_sum{}"] == 4


class PoisonEngine:
    """The real tiny engine, except that it raises on any job whose prompt contains token 13."""

    def __init__(self, engine):
        self.inner = engine
        self.manifest, self.model_id, self.max_batch_size = engine.manifest, engine.model_id, engine.max_batch_size

    def run(self, jobs):
        if any(13 in job.input_tokens for job in jobs):
            raise RuntimeError("poisoned batch")
        return self.inner.run(jobs)


async def test_a_failing_job_fails_alone_and_can_be_resubmitted(start, http, served_tiny, dispatcher_key):
    served = ServedModel(alias="tiny", engine=PoisonEngine(served_tiny.engine), tokenizer=served_tiny.tokenizer)
    node = await start(served=served, queue={"batch_wait_ms": 50})
    peer = PeerClient(node.url, dispatcher_key, http)
    poisoned = make_job(served_tiny, 1, tokens=(5, 13, 7))
    results = await asyncio.gather(peer.submit_job(make_job(served_tiny, 2)), peer.submit_job(poisoned), return_exceptions=True)
    assert not isinstance(results[0], Exception)
    assert isinstance(results[1], EngineError) and "poisoned batch" in str(results[1])
    store = node.app[APP_STORE]
    assert store.get_job_counts() == {"received": 0, "running": 0, "done": 1, "failed": 1}
    status = await peer.get_job(results[0].job_hash)
    assert status["status"] == "done"
    samples = await scrape(http, node.url)
    assert samples["verillm_node_jobs_total{outcome=failed}"] == 1
    with pytest.raises(EngineError):
        await peer.submit_job(poisoned)  # a failed job submitted again runs again (and fails again here)
    assert list(store.db.query("SELECT status, attempts FROM jobs WHERE status = 'failed'")) == [{"status": "failed", "attempts": 2}]
