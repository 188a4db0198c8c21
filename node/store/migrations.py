"""The store's schema, as numbered migrations applied in order at startup.

`schema_version` holds one row per applied migration. A migration is never edited once
released: a schema change is a new entry at the end of `MIGRATIONS`. Each runs in its own
transaction together with its schema_version row, so a crash mid-migration leaves the
previous version intact.

Hashes and addresses are stored as lowercase hex without 0x (readable with the
`sqlite-utils` CLI); records are stored in their canonical encoding (`verillm.spec.encoding`).
"""

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlite_utils import Database

from verillm.errors import StorageError
from verillm.node import faults
from verillm.node.store.sql import run_script

WORKER_TABLES = """
CREATE TABLE jobs (
    job_hash TEXT PRIMARY KEY,            -- keccak job hash (compute_job_hash)
    job BLOB NOT NULL,                    -- encode(Job)
    model_id TEXT NOT NULL,
    sender TEXT NOT NULL,                 -- envelope sender address, '' when submitted through this node's own API
    status TEXT NOT NULL CHECK (status IN ('received', 'running', 'done', 'failed')),
    error TEXT,                           -- why it failed (status = failed)
    num_input_tokens INTEGER NOT NULL,
    output_tokens TEXT,                   -- JSON list of token ids (status = done)
    attempts INTEGER NOT NULL DEFAULT 0,  -- engine runs started; > 1 after a restart re-ran it
    received_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX jobs_by_status ON jobs (status, received_at);

CREATE TABLE receipts (
    job_hash TEXT PRIMARY KEY REFERENCES jobs (job_hash),
    receipt BLOB NOT NULL,                -- encode(Receipt), signed
    receipt_hash TEXT NOT NULL,           -- EIP-712 struct hash: the leaf of on-chain receipt batches
    commitment_root TEXT NOT NULL,
    created_at REAL NOT NULL
);

CREATE TABLE traces (
    job_hash TEXT PRIMARY KEY REFERENCES jobs (job_hash),
    blob BLOB NOT NULL,                   -- encode_trace_blob(trace): rebuilds the tree for openings
    num_positions INTEGER NOT NULL,
    created_at REAL NOT NULL
);

CREATE TABLE chain_actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,                   -- e.g. 'post_receipt'
    job_hash TEXT,
    payload BLOB NOT NULL,                -- what the action needs (post_receipt: encode(Receipt))
    status TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'confirmed', 'failed')),
    tx_hash TEXT,
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX chain_actions_by_status ON chain_actions (status, id);

CREATE TABLE seen_nonces (
    sender TEXT NOT NULL,
    nonce TEXT NOT NULL,
    timestamp_s INTEGER NOT NULL,
    PRIMARY KEY (sender, nonce)
);
CREATE INDEX seen_nonces_by_time ON seen_nonces (timestamp_s);
"""

DISPATCHER_TABLES = """
CREATE TABLE dispatched (
    job_hash TEXT PRIMARY KEY,            -- the job this node's dispatcher role routed
    worker TEXT NOT NULL,                 -- worker address ('' = this node)
    worker_url TEXT NOT NULL,
    audit_requested INTEGER NOT NULL,     -- the client asked for an audit (paid); the worker never sees it
    created_at REAL NOT NULL
);
"""


def migrate_1_worker_tables(db: Database) -> None:
    """Jobs, receipts, retained traces, pending chain actions, accepted envelope nonces."""
    run_script(db, WORKER_TABLES)


def migrate_2_dispatcher_tables(db: Database) -> None:
    """Jobs this node dispatched, and whether the client asked for an audit."""
    run_script(db, DISPATCHER_TABLES)


@contextmanager
def transaction(db: Database) -> Iterator[None]:
    """Run the block as one SQLite transaction (the connection is in autocommit mode).

    A full disk or an I/O error becomes `StorageError` (503): the write did not happen, and
    nothing that depends on it may be acknowledged.
    """
    try:
        db.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if db.conn.in_transaction:  # SQLite may already have rolled back (SQLITE_FULL)
                db.conn.execute("ROLLBACK")
            raise
        db.conn.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        if "full" in str(exc) or "disk I/O" in str(exc):
            raise StorageError(f"the node's store cannot be written: {exc}") from None
        raise


# Migration 3 belongs to the dispatcher role's audit scheduler and chain watcher (node/store/dispatcher_schema.py).
from verillm.node.store.dispatcher_schema import (migrate_3_dispatcher_audit_tables, migrate_4_batch_promises,  # noqa: E402
                                                   migrate_5_receipt_hash_index, migrate_6_drop_chain_actions,
                                                   migrate_9_node_leaving, migrate_10_batch_sent_from_block)
from verillm.node.store.explorer_schema import migrate_7_explorer_indexes  # noqa: E402  (the explorer's reads)
from verillm.node.store.retention_schema import migrate_8_horizon_columns  # noqa: E402  (pruning by block: retention.py)

MIGRATIONS = (migrate_1_worker_tables, migrate_2_dispatcher_tables, migrate_3_dispatcher_audit_tables, migrate_4_batch_promises,
              migrate_5_receipt_hash_index, migrate_6_drop_chain_actions, migrate_7_explorer_indexes, migrate_8_horizon_columns,
              migrate_9_node_leaving, migrate_10_batch_sent_from_block)


def get_schema_version(db: Database) -> int:
    """Return the number of migrations applied to ``db`` (0 for a new file)."""
    if "schema_version" not in db.table_names():
        return 0
    row = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return row[0] or 0


def process_migrations(db: Database, migrations=MIGRATIONS) -> int:
    """Apply every migration ``db`` lacks, each in its own transaction; return the new version."""
    with transaction(db):
        db.conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)")
    version = get_schema_version(db)
    for number, migration in enumerate(migrations, start=1):
        if number <= version:
            continue
        with transaction(db):
            migration(db)
            faults.reach(f"migration_{number}")
            db.conn.execute("INSERT INTO schema_version VALUES (?, ?, ?)", (number, migration.__name__, time.time()))
    return get_schema_version(db)
