"""Crash safety: a real daemon process killed with SIGKILL mid-job loses nothing.

The node runs as `python -m verillm.node run --config node.toml`; the test submits jobs as a
dispatcher would, kills the process while one is running and one is queued, restarts it on
the same store, and checks every job completes, the receipt finished before the kill is
unchanged, and openings verify against the receipts' roots.
"""

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys

import aiohttp
import pytest

from verillm.node.keys import new_node_key, write_key_file
from verillm.node.dispatcher.peer import PeerClient
from verillm.wire import receipt_from_json
from verillm.spec.commitment import verify_opening
from verillm.spec.types import Job, SamplingParams

STARTUP_TIMEOUT_S = 120


def write_config(tmp_path, dispatcher=None) -> str:
    write_key_file(new_node_key(), tmp_path / "key.json")
    config = tmp_path / "node.toml"
    config.write_text(
        f'[identity]\nkey_file = "{tmp_path / "key.json"}"\n'
        f'[server]\nport = 0\n'
        f'[store]\npath = "{tmp_path / "node.sqlite"}"\n'
        f'[queue]\nmax_batch_size = 1\n'
        + (f'[auth]\nallowed_senders = ["{dispatcher.address_hex}"]\n' if dispatcher is not None else "")
    )
    return str(config)


async def start_daemon(config: str, log_path) -> tuple[subprocess.Popen, str]:
    """Start the daemon with its output in ``log_path``; return the process and its URL once it listens."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "verillm.node", "run", "--config", config], stdout=log, stderr=subprocess.STDOUT, env=env)
    for _ in range(STARTUP_TIMEOUT_S * 20):
        for line in log_path.read_text().splitlines():
            if line.startswith("verillm node listening on "):
                return process, line.rsplit(" ", 1)[1]
        if process.poll() is not None:
            pytest.fail(f"the node exited with {process.returncode}:\n{log_path.read_text()}")
        await asyncio.sleep(0.05)
    pytest.fail(f"the node did not start:\n{log_path.read_text()}")


def kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(10)


def get_status(store_path, job_hash: bytes) -> tuple[str, int]:
    with sqlite3.connect(store_path) as db:
        return db.execute("SELECT status, attempts FROM jobs WHERE job_hash = ?", [job_hash.hex()]).fetchone()


async def wait_for(peer, job_hash, status, timeout_s=60.0) -> dict:
    for _ in range(int(timeout_s / 0.02)):
        body = await peer.get_job(job_hash)
        if body["status"] == status:
            return body
        await asyncio.sleep(0.02)
    pytest.fail(f"job never reached {status}: {body}")


async def test_sigkill_mid_job_then_restart(tmp_path, tiny_engine):
    dispatcher = new_node_key()
    config = write_config(tmp_path, dispatcher)
    store_path = tmp_path / "node.sqlite"
    make = lambda n, nonce: Job(tiny_engine.model_id, (5, 17, 300, 42, 7), SamplingParams(), n, bytes([nonce]) * 32)  # noqa: E731
    finished, long_job, queued = make(4, 1), make(80, 2), make(6, 3)
    log_path = tmp_path / "node-first.log"
    process, url = await start_daemon(config, log_path)
    try:
        async with aiohttp.ClientSession() as http:
            peer = PeerClient(url, dispatcher, http)
            before = await peer.submit_job(finished)
            long_hash = await peer.enqueue_job(long_job)
            queued_hash = await peer.enqueue_job(queued)
            await wait_for(peer, long_hash, "running")
            kill(process)
        assert get_status(store_path, long_hash) == ("running", 1)
        assert get_status(store_path, queued_hash) == ("received", 0)

        log_path = tmp_path / "node-restarted.log"
        process, url = await start_daemon(config, log_path)
        async with aiohttp.ClientSession() as http:
            peer = PeerClient(url, dispatcher, http)
            assert receipt_from_json((await wait_for(peer, before.job_hash, "done"))["receipt"]) == before.receipt
            long_done = await wait_for(peer, long_hash, "done")
            queued_done = await wait_for(peer, queued_hash, "done")
            assert long_done["attempts"] == 2 and queued_done["attempts"] == 1
            # the re-run reproduces the outputs (greedy, same model): compare with an in-process run
            expected = tiny_engine.run([long_job, queued])
            assert long_done["output_tokens"] == list(expected[0].output_tokens)
            assert queued_done["output_tokens"] == list(expected[1].output_tokens)
            for job_hash, status in ((before.job_hash, None), (long_hash, long_done)):
                receipt = before.receipt if status is None else receipt_from_json(status["receipt"])
                cells = [(0, layer) for layer in tiny_engine.manifest.committed_layers] + [(receipt.num_positions - 1, 4)]
                opening = await peer.request_opening(job_hash, cells=cells)
                verify_opening(opening, receipt.commitment_root, tiny_engine.manifest.committed_layers, receipt.num_positions)
    except BaseException:
        print(log_path.read_text())
        raise
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0

