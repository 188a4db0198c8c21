"""The crash matrix: a real daemon SIGKILLed at each durable step of the worker role, then
restarted on the same store (issue 11).

A kill point is named by `VERILLM_FAULT_POINT` (node/faults.py): the daemon kills itself
(SIGKILL, exit -9) the first time it reaches the step. After the restart every check is
against what an uncrashed node signs for the same job (the tiny model in this process, the
node's key): the receipt, output tokens and commitment root must be identical, never a
second, different signature. Also checked each time: the SQLite file passes
`integrity_check`; each job has one row, one receipt and one trace; a done job's opening verifies under its receipt's root; an envelope nonce
accepted before the kill is still refused after it.

The default suite runs two points (receipt_written, after the receipt was returned); the whole matrix and kills at random moments under
load are `slow`.
"""

import asyncio
import random
import sqlite3

import aiohttp
import pytest
from node_process import NodeProcess

from verillm.errors import ReplayedMessage
from verillm.node.worker.commit import compute_job_output
from verillm.node.envelope import encode_envelope_json, sign_envelope
from verillm.node.store.migrations import MIGRATIONS
from verillm.node.dispatcher.peer import JOBS_PATH, PeerClient
from verillm.wire import receipt_from_json
from verillm.spec.commitment import verify_opening
from verillm.spec.encoding import encode
from verillm.spec.receipt import SigningDomain
from verillm.spec.types import Job, SamplingParams

DOMAIN = SigningDomain(chain_id=31337, verifying_contract=b"\x00" * 20)  # the default config's
SERVER_GONE = (aiohttp.ClientConnectionError, aiohttp.ServerDisconnectedError, asyncio.TimeoutError)


def make_job(engine, seed: int, max_new_tokens: int = 6) -> Job:
    return Job(engine.model_id, (5, 17, 300 + seed, 42, 7), SamplingParams(), max_new_tokens, seed.to_bytes(32, "big"))


def expected_receipt(engine, job: Job, key):
    """What an uncrashed node with ``key`` signs for ``job``."""
    trace = engine.run([job])[0]
    return compute_job_output(job, trace, engine.manifest.committed_layers, key, DOMAIN)


def store_rows(node: NodeProcess, job_hash: bytes) -> dict:
    with sqlite3.connect(node.store_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        key = job_hash.hex()
        count = lambda table, extra="": db.execute(f"SELECT COUNT(*) FROM {table} WHERE job_hash = ?{extra}", [key]).fetchone()[0]  # noqa: E731
        job = db.execute("SELECT status, attempts FROM jobs WHERE job_hash = ?", [key]).fetchone()
        return {"job": job, "receipts": count("receipts"), "traces": count("traces")}


async def wait_done(peer: PeerClient, job_hash: bytes, timeout_s: float = 60) -> dict:
    body = {}
    for _ in range(int(timeout_s / 0.05)):
        body = await peer.get_job(job_hash)
        if body["status"] == "done":
            return body
        await asyncio.sleep(0.05)
    pytest.fail(f"job 0x{job_hash.hex()} never finished after the restart: {body}")


async def check_after_restart(node: NodeProcess, engine, dispatcher, job: Job, expected_attempts: int | None, resubmit: bool = False) -> None:
    """Restart ``node`` without a fault; the job ends done (by itself unless ``resubmit``) with the receipt an uncrashed node signs."""
    url = node.start()
    expected = expected_receipt(engine, job, node.key)
    async with aiohttp.ClientSession() as http:
        peer = PeerClient(url, dispatcher, http)
        if resubmit:
            await peer.submit_job(job)
        body = await wait_done(peer, expected.receipt.job_hash)
        assert receipt_from_json(body["receipt"]) == expected.receipt, "re-signed differently after the crash"
        assert tuple(body["output_tokens"]) == expected.output_tokens
        again = await peer.submit_job(job)  # the dispatcher's retry: the stored receipt, not a new run
        assert again.receipt == expected.receipt
        receipt = expected.receipt
        cells = [(0, layer) for layer in engine.manifest.committed_layers] + [(receipt.num_positions - 1, engine.manifest.committed_layers[-1])]
        opening = await peer.request_opening(receipt.job_hash, cells=cells)
        verify_opening(opening, receipt.commitment_root, engine.manifest.committed_layers, receipt.num_positions)
    rows = store_rows(node, receipt.job_hash)
    assert rows["job"][0] == "done" and rows["receipts"] == 1 and rows["traces"] == 1
    if expected_attempts is not None:
        assert rows["job"][1] == expected_attempts


async def crash_at(tmp_path, point: str, job: Job, dispatcher, wait: bool = True) -> NodeProcess:
    """Start a daemon that dies at ``point``, submit ``job`` (the kill ends the request), reap it."""
    node = NodeProcess(tmp_path, dispatcher=dispatcher)
    url = node.start({"VERILLM_FAULT_POINT": point})
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        with pytest.raises(SERVER_GONE):
            await (PeerClient(url, dispatcher, http).submit_job(job) if wait else PeerClient(url, dispatcher, http).enqueue_job(job))
    assert node.wait_exit() == -9, node.log_path.read_text()
    return node


# point -> (status left in the store, attempts after the restart's run)
WORKER_POINTS = {
    "nonce_recorded": (None, 1),         # never accepted: the retry (a new envelope) runs it
    "job_accepted": ("received", 1),
    "engine_returned": ("running", 2),   # signed in memory, never stored nor returned: re-run
    "receipt_written": ("running", 2),   # the batch's transaction rolled back with the process
    "outcomes_recorded": ("done", 1),    # durable before anyone saw it: not re-run
}
DEFAULT_POINTS = ("receipt_written",)


@pytest.mark.parametrize("point", [p if p in DEFAULT_POINTS else pytest.param(p, marks=pytest.mark.slow) for p in WORKER_POINTS])
async def test_sigkill_at_a_worker_step_loses_and_re_signs_nothing(tmp_path, tiny_engine, dispatcher_key, point):
    job = make_job(tiny_engine, 1)
    node = await crash_at(tmp_path, point, job, dispatcher_key)
    left, attempts = WORKER_POINTS[point]
    with sqlite3.connect(node.store_path) as db:
        row = db.execute("SELECT status FROM jobs WHERE job_hash = ?", [expected_receipt(tiny_engine, job, node.key).receipt.job_hash.hex()]).fetchone()
    assert (row[0] if row else None) == left
    try:
        await check_after_restart(node, tiny_engine, dispatcher_key, job, attempts, resubmit=left is None)
    finally:
        assert node.stop() == 0


async def test_sigkill_after_the_receipt_was_returned_keeps_it(tmp_path, tiny_engine, dispatcher_key):
    node = NodeProcess(tmp_path, dispatcher=dispatcher_key)
    job = make_job(tiny_engine, 2)
    async with aiohttp.ClientSession() as http:
        peer = PeerClient(node.start(), dispatcher_key, http)
        reply = await peer.submit_job(job)
        envelope = encode_envelope_json(sign_envelope(JOBS_PATH, encode(job), dispatcher_key.private_key, node.key.address))
        async with http.post(peer.base_url + JOBS_PATH, data=envelope) as response:
            assert response.status == 200
    node.kill()
    try:
        await check_after_restart(node, tiny_engine, dispatcher_key, job, expected_attempts=1)
        async with aiohttp.ClientSession() as http:  # the nonce accepted before the kill is still refused
            async with http.post(node.url + JOBS_PATH, data=envelope) as response:
                assert response.status == ReplayedMessage.http_status
        assert reply.receipt == expected_receipt(tiny_engine, job, node.key).receipt
    finally:
        assert node.stop() == 0


@pytest.mark.slow
async def test_sigkill_while_an_opening_is_served(tmp_path, tiny_engine, dispatcher_key):
    node = NodeProcess(tmp_path, dispatcher=dispatcher_key)
    job = make_job(tiny_engine, 3)
    async with aiohttp.ClientSession() as http:
        node.kill()
        url = node.start({"VERILLM_FAULT_POINT": "opening_served"})
        peer = PeerClient(url, dispatcher_key, http)
        reply = await peer.submit_job(job)
        with pytest.raises(SERVER_GONE):
            await peer.request_opening(reply.job_hash, cells=[(0, tiny_engine.manifest.committed_layers[0])])
    assert node.wait_exit() == -9
    try:
        await check_after_restart(node, tiny_engine, dispatcher_key, job, expected_attempts=1)
    finally:
        assert node.stop() == 0


@pytest.mark.parametrize("number", [pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
async def test_sigkill_during_a_schema_migration(tmp_path, tiny_engine, dispatcher_key, number):
    node = NodeProcess(tmp_path, dispatcher=dispatcher_key)
    assert node.start({"VERILLM_FAULT_POINT": f"migration_{number}"}) == ""
    assert node.wait_exit() == -9
    with sqlite3.connect(node.store_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0] == number - 1
    try:
        await check_after_restart_fresh(node, tiny_engine, dispatcher_key)
        with sqlite3.connect(node.store_path) as db:
            assert [r[0] for r in db.execute("SELECT version FROM schema_version ORDER BY version")] == list(range(1, len(MIGRATIONS) + 1))
    finally:
        assert node.stop() == 0


async def check_after_restart_fresh(node: NodeProcess, engine, dispatcher) -> None:
    url = node.start()
    job = make_job(engine, 4)
    async with aiohttp.ClientSession() as http:
        reply = await PeerClient(url, dispatcher, http).submit_job(job)
    assert reply.receipt == expected_receipt(engine, job, node.key).receipt


@pytest.mark.slow
async def test_sigkill_at_random_moments_under_load(tmp_path, tiny_engine, dispatcher_key):
    """Eight jobs queued at once, killed at a random moment, three rounds: every job ends done, signed as an uncrashed node would."""
    rng = random.Random(11)
    node = NodeProcess(tmp_path, dispatcher=dispatcher_key)
    jobs = [make_job(tiny_engine, 10 + i, max_new_tokens=rng.randint(4, 24)) for i in range(8)]
    for round_ in range(3):
        url = node.start()
        async with aiohttp.ClientSession() as http:
            peer = PeerClient(url, dispatcher_key, http)
            for job in jobs:
                await peer.enqueue_job(job)
            await asyncio.sleep(rng.uniform(0.0, 1.5))
        node.kill()
    url = node.start()
    try:
        async with aiohttp.ClientSession() as http:
            peer = PeerClient(url, dispatcher_key, http)
            for job in jobs:
                body = await wait_done(peer, expected_receipt(tiny_engine, job, node.key).receipt.job_hash, timeout_s=120)
                assert receipt_from_json(body["receipt"]) == expected_receipt(tiny_engine, job, node.key).receipt
        for job in jobs:
            rows = store_rows(node, expected_receipt(tiny_engine, job, node.key).receipt.job_hash)
            assert rows["receipts"] == rows["traces"] == 1
    finally:
        assert node.stop() == 0
