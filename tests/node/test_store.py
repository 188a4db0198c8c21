"""The SQLite store: migrations, WAL, the job lifecycle, nonces, chain actions."""

import sqlite3

import pytest
from sqlite_utils import Database

from verillm.errors import NotFound, ReplayedMessage
from verillm.node.worker.commit import JobOutput
from verillm.node.store.migrations import MIGRATIONS, get_schema_version, process_migrations
from verillm.node.store.store import open_store
from verillm.spec.receipt import EMPTY_SIGNATURE
from verillm.spec.types import Job, Receipt, SamplingParams

JOB = Job(model_id=b"\x01" * 32, input_tokens=(1, 2, 3), sampling=SamplingParams(), max_new_tokens=4, nonce=b"\x02" * 32)
RECEIPT = Receipt(b"\x03" * 32, b"\x01" * 32, b"\x04" * 32, b"\x05" * 32, SamplingParams(), 4, b"\x06" * 32, 5, b"\x07" * 20, EMPTY_SIGNATURE)


def test_fresh_store_is_migrated_and_in_wal_mode(tmp_path):
    store = open_store(tmp_path / "s.sqlite")
    assert get_schema_version(store.db) == len(MIGRATIONS) >= 2
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert {"jobs", "receipts", "traces", "seen_nonces", "dispatched", "schema_version"} <= set(store.db.table_names())
    assert "chain_actions" not in store.db.table_names()  # migration 6 drops the write-only queue
    names = [row[0] for row in store.db.execute("SELECT name FROM schema_version ORDER BY version")]
    assert names == [m.__name__ for m in MIGRATIONS]
    assert names[:2] == ["migrate_1_worker_tables", "migrate_2_dispatcher_tables"]


def test_migrating_an_old_store_keeps_its_rows(tmp_path):
    path = tmp_path / "old.sqlite"
    db = Database(sqlite3.connect(path, isolation_level=None))
    assert process_migrations(db, MIGRATIONS[:1]) == 1
    assert "dispatched" not in db.table_names()
    db.conn.close()
    store = open_store(path)
    store.insert_job(b"\x03" * 32, JOB, None)
    store.db.conn.close()
    reopened = open_store(path)  # a second open applies nothing
    assert get_schema_version(reopened.db) == len(MIGRATIONS)
    assert reopened.get_job(b"\x03" * 32).job == JOB
    assert reopened.db.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == len(MIGRATIONS)


def test_a_failing_migration_leaves_the_previous_version(tmp_path):
    def migrate_broken(db):
        db.conn.execute("CREATE TABLE half_done (x INTEGER)")
        raise RuntimeError("boom")

    store = open_store(tmp_path / "s.sqlite")
    with pytest.raises(RuntimeError):
        process_migrations(store.db, MIGRATIONS + (migrate_broken,))
    assert get_schema_version(store.db) == len(MIGRATIONS)
    assert "half_done" not in store.db.table_names()


def test_job_lifecycle(tmp_path):
    store = open_store(tmp_path / "s.sqlite")
    job_hash = b"\x03" * 32
    assert store.insert_job(job_hash, JOB, b"\x09" * 20)
    assert not store.insert_job(job_hash, JOB, None)  # known already
    store.mark_running([job_hash])
    record = store.get_job(job_hash)
    assert (record.status, record.attempts, record.sender) == ("running", 1, b"\x09" * 20)
    assert [r.job_hash for r in store.get_unfinished_jobs()] == [job_hash]
    with pytest.raises(NotFound):
        store.get_receipt(job_hash)
    store.fail_job(job_hash, "engine failed: boom")
    assert store.get_job(job_hash).error == "engine failed: boom"
    assert store.reset_failed_job(job_hash) and store.get_job(job_hash).status == "received"
    store.insert_dispatched(job_hash, None, "", audit_requested=True)  # this node dispatched it: it posts the receipt
    store.complete_job(job_hash, JobOutput(RECEIPT, (7, 8, 9), b"blob"))
    record = store.get_job(job_hash)
    assert (record.status, record.output_tokens, record.error) == ("done", (7, 8, 9), None)
    assert store.get_receipt(job_hash) == RECEIPT and store.get_trace_blob(job_hash) == b"blob"
    assert store.get_unfinished_jobs() == []
    assert store.get_job_counts() == {"received": 0, "running": 0, "done": 1, "failed": 0}
    assert store.get_dispatched(job_hash)["audit_requested"] == 1
    store.insert_job(b"\x0a" * 32, JOB, b"\x09" * 20)  # another dispatcher's job: it posts, not us
    store.complete_job(b"\x0a" * 32, JobOutput(RECEIPT, (7,), b"blob"))
    assert store.get_dispatched(b"\x0a" * 32) is None


def test_nonces_are_single_use_and_forgotten_after_the_window(tmp_path):
    store = open_store(tmp_path / "s.sqlite")
    sender, nonce = b"\x01" * 20, b"\x02" * 32
    store.process_nonce(sender, nonce, 1000, forget_before_s=0)
    with pytest.raises(ReplayedMessage):
        store.process_nonce(sender, nonce, 1000, forget_before_s=0)
    store.process_nonce(b"\x03" * 20, nonce, 1000, forget_before_s=0)  # per sender
    store.process_nonce(sender, b"\x04" * 32, 5000, forget_before_s=2000)  # prunes the old ones
    assert store.db.execute("SELECT COUNT(*) FROM seen_nonces").fetchone()[0] == 1


def test_each_thread_writes_through_a_connection_of_its_own(tmp_path):
    """The chain watcher's thread and the main loop's write the same store at once (node/store/connections.py):
    each thread has its own connection, the opening thread keeps the first, and no write is lost."""
    import threading

    from verillm.node.store.dispatcher_tables import DispatcherTables

    store = open_store(tmp_path / "node.sqlite")
    first = store.db.get_database()
    tables = DispatcherTables(store.db)
    seen, errors = {}, []

    def write(name: str) -> None:
        try:
            seen[name] = store.db.get_database()
            for block in range(200):  # each a transaction (BEGIN IMMEDIATE), interleaved with the other thread's
                tables.record_events(name, [], block + 1)
            store.db.close_this_thread()
        except Exception as exc:  # reported below, with the thread's name
            errors.append((name, exc))

    threads = [threading.Thread(target=write, args=(f"cursor-{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for block in range(200):
        tables.record_events("main", [], block + 1)
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert len({id(first), *(id(db) for db in seen.values())}) == 3  # three threads, three connections
    assert store.db.get_database() is first
    assert [tables.get_cursor(name, 0) for name in ("main", "cursor-0", "cursor-1")] == [200, 200, 200]
    with pytest.raises(sqlite3.ProgrammingError):  # a closed thread's connection is closed, not reused
        seen["cursor-0"].execute("SELECT 1")
