"""What a power cut or a full disk leaves, on a real SQLite file (issue 11).

Power cut: the store's WAL is cut at every frame boundary and inside frames (what a machine
that lost power mid-write can leave of un-fsynced commits); every cut must open, pass
`integrity_check`, and hold whole batches only: a job is done iff its receipt and trace are
there, and the jobs done are a prefix of the order they were completed in. The receipts'
commit runs at `store.receipts_synchronous` (FULL: the WAL is fsynced before COMMIT returns,
so the prefix a power cut leaves always includes every receipt already returned).

Full disk: a real daemon whose store lives on a 3 MiB tmpfs (needs root to mount; skipped
with the reason otherwise) answers 503 storage_error while the disk is full, acknowledges
nothing it did not store, and serves the same job normally once space is back.
"""

import asyncio
import os
import shutil
import sqlite3
import subprocess

import aiohttp
import pytest
from node_process import NodeProcess

from verillm.errors import StorageError
from verillm.node.worker.commit import compute_job_output
from verillm.node.keys import new_node_key
from verillm.node.dispatcher.peer import PeerClient
from verillm.node.store.store import open_store
from verillm.spec.job import compute_job_hash
from verillm.spec.receipt import SigningDomain
from verillm.spec.types import Job, SamplingParams

DOMAIN = SigningDomain(chain_id=31337, verifying_contract=b"\x00" * 20)


def make_job(engine, seed: int) -> Job:
    return Job(engine.model_id, (3, 9, 200 + seed), SamplingParams(), 4, seed.to_bytes(32, "big"))


def complete_jobs(store, engine, key, count: int) -> list[bytes]:
    """Run ``count`` jobs through the store's real write path (received → running → done); return their hashes in order."""
    hashes = []
    for seed in range(count):
        job = make_job(engine, seed)
        job_hash = compute_job_hash(job)
        store.insert_job(job_hash, job, None)
        store.mark_running([job_hash])
        store.record_outcomes([(job_hash, compute_job_output(job, engine.run([job])[0], engine.manifest.committed_layers, key, DOMAIN))])
        hashes.append(job_hash)
    return hashes


def test_the_receipts_commit_runs_at_full_synchronous(tmp_path, tiny_engine):
    store = open_store(tmp_path / "s.sqlite", "NORMAL", "FULL")
    statements = []
    store.db.conn.set_trace_callback(statements.append)
    complete_jobs(store, tiny_engine, new_node_key(), 1)
    pragmas = [s for s in statements if "synchronous" in s or s in ("BEGIN IMMEDIATE", "COMMIT")]
    # insert_job and mark_running commit at NORMAL; the outcomes' transaction is wrapped in FULL
    assert pragmas == ["BEGIN IMMEDIATE", "COMMIT", "BEGIN IMMEDIATE", "COMMIT",
                       "PRAGMA synchronous = FULL", "BEGIN IMMEDIATE", "COMMIT", "PRAGMA synchronous = NORMAL"]
    assert store.db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL again


def test_every_power_cut_of_the_wal_leaves_whole_batches(tmp_path, tiny_engine):
    path = tmp_path / "live.sqlite"
    store = open_store(path)
    store.db.conn.execute("PRAGMA wal_autocheckpoint = 0")  # keep every commit in the WAL, as between checkpoints
    order = complete_jobs(store, tiny_engine, new_node_key(), 5)
    main, wal = path.read_bytes(), (tmp_path / "live.sqlite-wal").read_bytes()
    page = int.from_bytes(wal[8:12], "big")
    frame = 24 + page
    cuts = sorted({32 + k * frame + d for k in range((len(wal) - 32) // frame + 1) for d in (0, 24, frame // 2)} | {len(wal)})
    seen_done = set()
    for cut in cuts:
        copy = tmp_path / f"cut-{cut}"
        copy.mkdir()
        (copy / "s.sqlite").write_bytes(main)
        (copy / "s.sqlite-wal").write_bytes(wal[:cut])
        reopened = open_store(copy / "s.sqlite")
        db = reopened.db
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        done = [bytes.fromhex(r[0]) for r in db.execute("SELECT job_hash FROM jobs WHERE status = 'done'")]
        assert set(done) == set(order[: len(done)]), f"cut at {cut}: done jobs are not a prefix of the commit order"
        for job_hash in order:
            has_receipt = db.execute("SELECT COUNT(*) FROM receipts WHERE job_hash = ?", [job_hash.hex()]).fetchone()[0]
            has_trace = db.execute("SELECT COUNT(*) FROM traces WHERE job_hash = ?", [job_hash.hex()]).fetchone()[0]
            assert has_receipt == has_trace == int(job_hash in done)
            if job_hash in done:
                assert reopened.get_receipt(job_hash).job_hash == job_hash
        seen_done.add(len(done))
        reopened.db.conn.close()
    assert seen_done == set(range(6))  # every prefix occurs among the cuts


def _mount_tmpfs(where, size: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    where.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True).returncode == 0


def _fill(where) -> None:
    with open(where / "filler", "wb") as filler:
        try:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        except OSError:
            pass


async def test_a_full_disk_gets_503_and_acknowledges_nothing_unstored(tmp_path, tiny_engine):
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "3m"):
        pytest.skip("mounting a size-limited tmpfs needs root; the full-disk path is not exercised here")
    dispatcher = new_node_key()
    node = NodeProcess(disk, dispatcher=dispatcher)
    try:
        url = node.start()
        async with aiohttp.ClientSession() as http:
            peer = PeerClient(url, dispatcher, http)
            await peer.submit_job(make_job(tiny_engine, 100))
            _fill(disk)
            refused = 0
            for seed in range(101, 106):
                try:
                    await peer.submit_job(make_job(tiny_engine, seed))
                except StorageError:
                    refused += 1
            assert refused > 0, "the disk never filled"
            assert node.alive()
            (disk / "filler").unlink()
            for seed in range(101, 106):  # the retries succeed, with the receipt an uncrashed node signs
                job = make_job(tiny_engine, seed)
                reply = await peer.submit_job(job)
                expected = compute_job_output(job, tiny_engine.run([job])[0], tiny_engine.manifest.committed_layers, node.key, DOMAIN)
                assert reply.receipt == expected.receipt
        assert node.stop() == 0
        with sqlite3.connect(node.store_path) as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert db.execute("SELECT COUNT(*) FROM jobs WHERE status = 'done'").fetchone()[0] == 6
            assert db.execute("SELECT COUNT(*) FROM receipts").fetchone()[0] == db.execute("SELECT COUNT(*) FROM traces").fetchone()[0] == 6
    finally:
        node.kill()
        await asyncio.sleep(0.1)
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
