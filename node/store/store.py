"""The node's durable state: one SQLite file (WAL) through sqlite-utils.

Every write that a response depends on is committed before the response is sent: a job is
`received` before it is queued, and `done` (receipt, retained trace, output tokens) in one transaction before
its receipt is returned. After a SIGKILL at any
point the file holds every accepted job, every receipt returned, and the trace blob needed
to answer an opening for it; `get_unfinished_jobs` lists the jobs to re-run.

Each thread has a connection of its own (node/store/connections.py): the event loop's, and the
chain watcher's on its own thread (sqlite3's default thread check stays on for each).
"""

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from sqlite_utils import Database

from verillm.errors import ConfigError, NotFound, ReplayedMessage
from verillm.spec.encoding import decode, encode
from verillm.spec.receipt import compute_receipt_hash
from verillm.spec.types import Job, Receipt

from verillm.node import faults
from verillm.node.store.connections import BUSY_TIMEOUT_MS, share_across_threads
from verillm.node.store.migrations import process_migrations, transaction
from verillm.node.store.outputs import JobOutput

JOB_STATUSES = ("received", "running", "done", "failed")


@dataclass(frozen=True)
class JobRecord:
    """A job as the store holds it."""

    job_hash: bytes
    job: Job
    sender: bytes | None
    status: str
    error: str | None
    output_tokens: tuple[int, ...] | None
    attempts: int
    received_at: float
    updated_at: float


def _hex(value: bytes | None) -> str:
    return value.hex() if value else ""


def _row_to_job(row: dict) -> JobRecord:
    return JobRecord(
        job_hash=bytes.fromhex(row["job_hash"]),
        job=decode(Job, row["job"]),
        sender=bytes.fromhex(row["sender"]) if row["sender"] else None,
        status=row["status"],
        error=row["error"],
        output_tokens=tuple(json.loads(row["output_tokens"])) if row["output_tokens"] else None,
        attempts=row["attempts"],
        received_at=row["received_at"],
        updated_at=row["updated_at"],
    )


class Store:
    """Reads and writes of the node's tables; each public write is one transaction."""

    def __init__(self, db: Database, synchronous: str = "NORMAL", receipts_synchronous: str = "FULL"):
        self.db = db
        self.synchronous = synchronous.upper()
        self.receipts_synchronous = receipts_synchronous.upper()

    # --- jobs -------------------------------------------------------------------------------

    def insert_job(self, job_hash: bytes, job: Job, sender: bytes | None) -> bool:
        """Record a newly accepted job as `received`; False if the job hash is already known."""
        now = time.time()
        with transaction(self.db):
            cursor = self.db.conn.execute(
                "INSERT OR IGNORE INTO jobs (job_hash, job, model_id, sender, status, num_input_tokens, received_at, updated_at)"
                " VALUES (?, ?, ?, ?, 'received', ?, ?, ?)",
                (job_hash.hex(), encode(job), job.model_id.hex(), _hex(sender), len(job.input_tokens), now, now),
            )
        return cursor.rowcount == 1

    def reset_failed_job(self, job_hash: bytes) -> bool:
        """Put a failed job back to `received` (it was submitted again); False if it was not failed."""
        with transaction(self.db):
            cursor = self.db.conn.execute(
                "UPDATE jobs SET status = 'received', error = NULL, updated_at = ? WHERE job_hash = ? AND status = 'failed'",
                (time.time(), job_hash.hex()),
            )
        return cursor.rowcount == 1

    def mark_running(self, job_hashes: list[bytes]) -> None:
        """Record that the engine started these jobs."""
        now = time.time()
        with transaction(self.db):
            self.db.conn.executemany(
                "UPDATE jobs SET status = 'running', attempts = attempts + 1, updated_at = ? WHERE job_hash = ?",
                [(now, h.hex()) for h in job_hashes],
            )

    def record_outcomes(self, outcomes: list[tuple[bytes, JobOutput | Exception]]) -> None:
        """Record a batch's outcomes in one transaction: each job done (with its output) or failed.

        This commit backs every receipt of the batch, so it runs at ``receipts_synchronous``
        (FULL: the WAL is fsynced before COMMIT returns, so a receipt handed out survives a
        power cut, not only a SIGKILL); the connection's other commits stay at ``synchronous``.
        """
        self._set_synchronous(self.receipts_synchronous)
        try:
            with transaction(self.db):
                for job_hash, outcome in outcomes:
                    if isinstance(outcome, Exception):
                        self._fail(job_hash, str(outcome))
                    else:
                        self._complete(job_hash, outcome)
        finally:
            self._set_synchronous(self.synchronous)

    def _set_synchronous(self, mode: str) -> None:
        if self.receipts_synchronous != self.synchronous:
            self.db.conn.execute(f"PRAGMA synchronous = {mode}")

    def complete_job(self, job_hash: bytes, output: JobOutput) -> None:
        """Record a finished job: receipt, retained trace and status done, in one transaction."""
        self.record_outcomes([(job_hash, output)])

    def fail_job(self, job_hash: bytes, error: str) -> None:
        """Record that a job failed, and why."""
        with transaction(self.db):
            self._fail(job_hash, error)

    def _complete(self, job_hash: bytes, output: JobOutput) -> None:
        now, key, receipt = time.time(), job_hash.hex(), output.receipt
        encoded, c = encode(receipt), self.db.conn
        c.execute(
            "INSERT OR REPLACE INTO receipts (job_hash, receipt, receipt_hash, commitment_root, created_at, auditable_until_block)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (key, encoded, compute_receipt_hash(receipt).hex(), receipt.commitment_root.hex(), now, receipt.auditable_until_block),
        )
        c.execute("INSERT OR REPLACE INTO traces VALUES (?, ?, ?, ?)", (key, output.trace_blob, receipt.num_positions, now))
        faults.reach("receipt_written")
        c.execute(
            "UPDATE jobs SET status = 'done', error = NULL, output_tokens = ?, updated_at = ? WHERE job_hash = ?",
            (json.dumps(list(output.output_tokens)), now, key),
        )

    def _fail(self, job_hash: bytes, error: str) -> None:
        self.db.conn.execute(
            "UPDATE jobs SET status = 'failed', error = ?, updated_at = ? WHERE job_hash = ?",
            (error, time.time(), job_hash.hex()),
        )

    def get_job(self, job_hash: bytes) -> JobRecord | None:
        """Return the job with this hash, or None."""
        rows = list(self.db.query("SELECT * FROM jobs WHERE job_hash = ?", [job_hash.hex()]))
        return _row_to_job(rows[0]) if rows else None

    def get_unfinished_jobs(self) -> list[JobRecord]:
        """Return the jobs accepted but not finished (received or running), oldest first."""
        rows = self.db.query("SELECT * FROM jobs WHERE status IN ('received', 'running') ORDER BY received_at")
        return [_row_to_job(row) for row in rows]

    def get_job_counts(self) -> dict[str, int]:
        """Return how many jobs are in each status."""
        counts = dict.fromkeys(JOB_STATUSES, 0)
        counts.update({row["status"]: row["n"] for row in self.db.query("SELECT status, COUNT(*) AS n FROM jobs GROUP BY status")})
        return counts

    def prune_finished(self, before_s: float, limit: int = 500) -> int:
        """Delete up to ``limit`` done or failed jobs received before ``before_s``, with their receipts
        and traces, keeping any a party duty still needs (node/store/retention.py); return how many."""
        rows = self.db.execute(
            "SELECT job_hash FROM jobs WHERE status IN ('done', 'failed') AND received_at < ?"
            " AND job_hash NOT IN (SELECT job_hash FROM party_duties WHERE status != 'closed') LIMIT ?",
            (before_s, limit),
        ).fetchall()
        hashes = [(row[0],) for row in rows]
        with transaction(self.db):
            for table in ("traces", "receipts", "dispatched", "jobs"):
                self.db.conn.executemany(f"DELETE FROM {table} WHERE job_hash = ?", hashes)
        return len(hashes)

    # --- receipts and traces ----------------------------------------------------------------

    def get_receipt(self, job_hash: bytes) -> Receipt:
        """Return the signed receipt of a finished job; raise NotFound if there is none."""
        row = self.db.execute("SELECT receipt FROM receipts WHERE job_hash = ?", [job_hash.hex()]).fetchone()
        if row is None:
            raise NotFound(f"no receipt for job {job_hash.hex()}")
        return decode(Receipt, row[0])

    def get_trace_blob(self, job_hash: bytes) -> bytes:
        """Return the retained trace blob of a finished job; raise NotFound if there is none."""
        row = self.db.execute("SELECT blob FROM traces WHERE job_hash = ?", [job_hash.hex()]).fetchone()
        if row is None:
            raise NotFound(f"no retained trace for job {job_hash.hex()}")
        return row[0]

    # --- chain actions ----------------------------------------------------------------------

    def process_nonce(self, sender: bytes, nonce: bytes, timestamp_s: int, forget_before_s: float) -> None:
        """Remember an envelope's (sender, nonce); raise ReplayedMessage if it was seen before.

        Nonces older than ``forget_before_s`` are dropped: envelopes that old are refused as
        stale anyway, so the table stays as small as one clock-skew window of traffic.
        """
        try:
            with transaction(self.db):
                self.db.conn.execute("DELETE FROM seen_nonces WHERE timestamp_s < ?", (int(forget_before_s),))
                self.db.conn.execute("INSERT INTO seen_nonces VALUES (?, ?, ?)", (sender.hex(), nonce.hex(), timestamp_s))
        except sqlite3.IntegrityError:
            raise ReplayedMessage(f"nonce 0x{nonce.hex()} from 0x{sender.hex()} was already used") from None

    # --- dispatcher role --------------------------------------------------------------------

    def insert_dispatched(self, job_hash: bytes, worker: bytes | None, worker_url: str, audit_requested: bool) -> None:
        """Record that this node's dispatcher routed ``job_hash`` to ``worker``."""
        with transaction(self.db):
            self.db.conn.execute(
                "INSERT OR IGNORE INTO dispatched VALUES (?, ?, ?, ?, ?)",
                (job_hash.hex(), _hex(worker), worker_url, int(audit_requested), time.time()),
            )

    def get_dispatched(self, job_hash: bytes) -> dict | None:
        """Return the dispatch record of ``job_hash`` (worker, worker_url, audit_requested), or None."""
        rows = list(self.db.query("SELECT * FROM dispatched WHERE job_hash = ?", [job_hash.hex()]))
        return rows[0] if rows else None


def open_store(path: str | Path, synchronous: str = "NORMAL", receipts_synchronous: str = "FULL") -> Store:
    """Open (creating if needed) the store at ``path``, in WAL mode, migrated to the latest schema."""
    if str(path) != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    for name, mode in (("synchronous", synchronous), ("receipts_synchronous", receipts_synchronous)):
        if mode.upper() not in ("NORMAL", "FULL", "EXTRA"):
            raise ConfigError(f"store.{name} must be NORMAL, FULL or EXTRA, got {mode!r}")
    connection = sqlite3.connect(str(path), isolation_level=None)
    db = Database(connection)
    if str(path) != ":memory:":
        db.enable_wal()
    connection.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    connection.execute("PRAGMA foreign_keys = ON")
    connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    process_migrations(db)
    return Store(share_across_threads(db, str(path)), synchronous, receipts_synchronous)
