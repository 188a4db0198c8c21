"""Reads and writes of the dispatcher role's tables (`schema.py`); each write is one transaction.

Runs on the event-loop thread only, on the node store's connection (as `node/store/store.py` does).
"""

import json
import time
from dataclasses import dataclass

from sqlite_utils import Database

from verillm.spec.encoding import decode, encode
from verillm.spec.receipt import compute_receipt_hash
from verillm.spec.types import Job, Opening, Receipt

from verillm.node.store.migrations import transaction

FULL = 2
"""SQLite's PRAGMA synchronous value for FULL (0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA)."""


@dataclass(frozen=True)
class DispatchedJob:
    """A client job this dispatcher routed, with the worker's checked answer."""

    job_hash: bytes
    job: Job
    worker: bytes
    worker_url: str
    output_tokens: tuple[int, ...]
    receipt: Receipt
    audit_requested: bool
    batch_row: int | None
    batch_index: int | None


@dataclass(frozen=True)
class CommitteeJob:
    audit_id: int
    round: int
    slot: int
    member: bytes
    job: Job
    job_hash: bytes
    output_tokens: tuple[int, ...] | None
    receipt: Receipt | None
    status: str
    error: str | None


@dataclass(frozen=True)
class Duty:
    """A seat this node holds in an audit (slot 0: it is the worker; i: member i − 1)."""

    audit_id: int
    round: int
    slot: int
    job_hash: bytes
    status: str
    vote: int | None


def _job_row(r: dict) -> DispatchedJob:
    return DispatchedJob(
        job_hash=bytes.fromhex(r["job_hash"]), job=decode(Job, r["job"]), worker=bytes.fromhex(r["worker"]),
        worker_url=r["worker_url"], output_tokens=tuple(json.loads(r["output_tokens"])), receipt=decode(Receipt, r["receipt"]),
        audit_requested=bool(r["audit_requested"]), batch_row=r["batch_row"], batch_index=r["batch_index"],
    )


def _committee_row(r: dict) -> CommitteeJob:
    return CommitteeJob(
        audit_id=r["audit_id"], round=r["round"], slot=r["slot"], member=bytes.fromhex(r["member"]), job=decode(Job, r["job"]),
        job_hash=bytes.fromhex(r["job_hash"]), output_tokens=tuple(json.loads(r["output_tokens"])) if r["output_tokens"] else None,
        receipt=decode(Receipt, r["receipt"]) if r["receipt"] else None, status=r["status"], error=r["error"],
    )


class DispatcherTables:
    """The dispatcher role's view of the node store."""

    def __init__(self, db: Database):
        self.db = db

    def _write(self, sql: str, params: tuple) -> int:
        with transaction(self.db):
            return self.db.conn.execute(sql, params).rowcount

    def _write_durable(self, sql: str, params: tuple) -> int:
        """`_write` at synchronous = FULL at least (the WAL fsynced before COMMIT returns), whatever the
        connection's own mode: for what this node signs and hands out, whose loss costs its stake."""
        previous = self.db.execute("PRAGMA synchronous").fetchone()[0]
        self.db.conn.execute(f"PRAGMA synchronous = {max(previous, FULL)}")
        try:
            return self._write(sql, params)
        finally:
            self.db.conn.execute(f"PRAGMA synchronous = {previous}")

    def _rows(self, sql: str, params: list | tuple = ()) -> list[dict]:
        return list(self.db.query(sql, params))

    # --- dispatched jobs ------------------------------------------------------------------

    def insert_dispatched_job(self, job_hash: bytes, job: Job, worker: bytes, worker_url: str, output_tokens, receipt: Receipt, audit_requested: bool) -> None:
        """Keep a worker's answer before it is returned with a batching promise: durable (`_write_durable`),
        since the receipt must reach a batch by the promised block."""
        self._write_durable(
            "INSERT OR IGNORE INTO dispatch_jobs (job_hash, job, worker, worker_url, output_tokens, receipt, receipt_hash, audit_requested,"
            " created_at, auditable_until_block) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (job_hash.hex(), encode(job), worker.hex(), worker_url, json.dumps(list(output_tokens)), encode(receipt),
             compute_receipt_hash(receipt).hex(), int(audit_requested), time.time(), receipt.auditable_until_block),
        )

    def get_dispatched_job(self, job_hash: bytes) -> DispatchedJob | None:
        rows = self._rows("SELECT * FROM dispatch_jobs WHERE job_hash = ?", [job_hash.hex()])
        return _job_row(rows[0]) if rows else None

    def get_unbatched_jobs(self, limit: int) -> list[DispatchedJob]:
        return [_job_row(r) for r in self._rows("SELECT * FROM dispatch_jobs WHERE batch_row IS NULL ORDER BY created_at, job_hash LIMIT ?", [limit])]

    def count_unbatched_jobs(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM dispatch_jobs WHERE batch_row IS NULL").fetchone()[0]

    def get_oldest_unbatched_at(self) -> float | None:
        return self.db.execute("SELECT MIN(created_at) FROM dispatch_jobs WHERE batch_row IS NULL").fetchone()[0]

    def get_batch_jobs(self, batch_row: int) -> list[DispatchedJob]:
        return [_job_row(r) for r in self._rows("SELECT * FROM dispatch_jobs WHERE batch_row = ? ORDER BY batch_index", [batch_row])]

    # --- batching promises (verillm.spec.promise) --------------------------------------------

    def insert_promise(self, job_hash: bytes, receipt_hash: bytes, batch_by_block: int, signature: bytes) -> None:
        """Store a signed batching promise before it is returned: durable against a power cut (a lost
        promise the client holds is an omission this node cannot answer: its stake)."""
        self._write_durable("INSERT OR IGNORE INTO batch_promises (job_hash, receipt_hash, batch_by_block, signature, created_at) VALUES (?, ?, ?, ?, ?)",
                    (job_hash.hex(), receipt_hash.hex(), batch_by_block, signature.hex(), time.time()))

    def get_promise(self, job_hash: bytes) -> tuple[int, bytes] | None:
        """Return (batch_by_block, signature) of the promise made with ``job_hash``."""
        rows = self._rows("SELECT batch_by_block, signature FROM batch_promises WHERE job_hash = ?", [job_hash.hex()])
        return (rows[0]["batch_by_block"], bytes.fromhex(rows[0]["signature"])) if rows else None

    def get_earliest_unbatched_promise(self) -> int | None:
        """Return the earliest batch_by_block among promised jobs not batched yet."""
        return self.db.execute("SELECT MIN(p.batch_by_block) FROM batch_promises p JOIN dispatch_jobs j ON j.job_hash = p.job_hash"
                               " WHERE j.batch_row IS NULL").fetchone()[0]

    def get_promise_by_receipt_hash(self, receipt_hash: bytes) -> int | None:
        """Return the batch_by_block this node promised for ``receipt_hash``, None if it never did."""
        rows = self._rows("SELECT p.batch_by_block FROM batch_promises p JOIN dispatch_jobs j ON j.job_hash = p.job_hash"
                          " WHERE j.receipt_hash = ? ORDER BY p.batch_by_block LIMIT 1", [receipt_hash.hex()])
        return rows[0]["batch_by_block"] if rows else None

    def get_job_by_receipt_hash(self, receipt_hash: bytes) -> DispatchedJob | None:
        rows = self._rows("SELECT * FROM dispatch_jobs WHERE receipt_hash = ?", [receipt_hash.hex()])
        return _job_row(rows[0]) if rows else None

    # --- leaving (`verillm node unbond`) ----------------------------------------------------

    def set_leaving(self, head: int) -> None:
        """Record that the operator is leaving: no new promise from now, every promised receipt posted."""
        self._write_durable("INSERT OR IGNORE INTO node_leaving (id, since_block, created_at) VALUES (1, ?, ?)", (head, time.time()))

    def get_leaving_since(self) -> int | None:
        """The chain head when the operator decided to leave, None while it has not."""
        rows = self._rows("SELECT since_block FROM node_leaving WHERE id = 1")
        return rows[0]["since_block"] if rows else None

    def count_unposted_promises(self) -> int:
        """Promised receipts not yet in a batch posted on-chain (unbatched, or in a batch still 'posting')."""
        return self.db.execute("SELECT COUNT(*) FROM batch_promises p JOIN dispatch_jobs j ON j.job_hash = p.job_hash"
                               " LEFT JOIN dispatch_batches b ON b.id = j.batch_row"
                               " WHERE j.batch_row IS NULL OR b.status = 'posting'").fetchone()[0]

    # --- batches ------------------------------------------------------------------------------

    def insert_batch(self, root: bytes, job_hashes: list[bytes]) -> int:
        """Create a batch in 'posting' and give its jobs their leaf indices, atomically."""
        now = time.time()
        with transaction(self.db):
            c = self.db.conn
            row = c.execute(
                "INSERT INTO dispatch_batches (root, count, status, created_at, updated_at) VALUES (?, ?, 'posting', ?, ?)",
                (root.hex(), len(job_hashes), now, now),
            ).lastrowid
            c.executemany("UPDATE dispatch_jobs SET batch_row = ?, batch_index = ? WHERE job_hash = ?",
                          [(row, i, h.hex()) for i, h in enumerate(job_hashes)])
        return row

    def update_batch(self, row: int, **fields) -> None:
        names = ", ".join(f"{k} = ?" for k in fields)
        self._write(f"UPDATE dispatch_batches SET {names}, updated_at = ? WHERE id = ?", (*fields.values(), time.time(), row))

    def mark_batch_sending(self, row: int, head: int) -> None:
        """Record the head before a batch's first post is sent, fsynced: a later attempt (after a crash
        or a failure past the send) must know to look on chain for the post before sending again."""
        self._write_durable("UPDATE dispatch_batches SET sent_from_block = ?, updated_at = ? WHERE id = ?", (head, time.time(), row))

    def get_batches(self, statuses: tuple[str, ...]) -> list[dict]:
        marks = ", ".join("?" * len(statuses))
        return self._rows(f"SELECT * FROM dispatch_batches WHERE status IN ({marks}) ORDER BY id", statuses)

    def get_batch(self, row: int) -> dict | None:
        rows = self._rows("SELECT * FROM dispatch_batches WHERE id = ?", [row])
        return rows[0] if rows else None

    # --- audits ---------------------------------------------------------------------------------

    def insert_audit(self, audit_id: int, job_hash: bytes, batch_row: int, batch_index: int, requested: bool) -> None:
        now = time.time()
        self._write(
            "INSERT OR IGNORE INTO dispatch_audits (audit_id, job_hash, batch_row, batch_index, requested, status, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, 'open', ?, ?)",
            (audit_id, job_hash.hex(), batch_row, batch_index, int(requested), now, now),
        )

    def get_audit_rows(self, status: str | None = None) -> list[dict]:
        if status is None:
            return self._rows("SELECT * FROM dispatch_audits ORDER BY audit_id")
        return self._rows("SELECT * FROM dispatch_audits WHERE status = ? ORDER BY audit_id", [status])

    def get_undrawn_private_audits(self) -> list[int]:
        """This dispatcher's open drawn (not requested) audits whose first round no event says is drawn,
        missed or abandoned yet: each may still owe its private draw's reveal."""
        rows = self.db.execute(
            "SELECT a.audit_id FROM dispatch_audits a WHERE a.status = 'open' AND a.requested = 0 AND NOT EXISTS ("
            " SELECT 1 FROM chain_events e WHERE e.audit_id = a.audit_id"
            " AND e.name IN ('CommitteeDrawn', 'PrivateDrawRevealed', 'PrivateDrawMissed', 'AuditAbandoned')) ORDER BY a.audit_id").fetchall()
        return [row[0] for row in rows]

    def get_audit_row(self, audit_id: int) -> dict | None:
        rows = self._rows("SELECT * FROM dispatch_audits WHERE audit_id = ?", [audit_id])
        return rows[0] if rows else None

    def get_audit_for_leaf(self, batch_row: int, batch_index: int) -> dict | None:
        rows = self._rows("SELECT * FROM dispatch_audits WHERE batch_row = ? AND batch_index = ?", [batch_row, batch_index])
        return rows[0] if rows else None

    def update_audit(self, audit_id: int, **fields) -> None:
        names = ", ".join(f"{k} = ?" for k in fields)
        self._write(f"UPDATE dispatch_audits SET {names}, updated_at = ? WHERE audit_id = ?", (*fields.values(), time.time(), audit_id))

    def close_audit(self, audit_id: int, status: str, **fields) -> bool:
        """Move an open audit to ``status`` ("settled", "abandoned"); False when it was no longer open.
        Whatever is done once per audit (its verdict counted, its end logged) is done by the one caller
        that closed it: two steps of one audit can overlap, since the watcher lists the open audits on its
        own thread and the step runs later on the main loop."""
        names = "".join(f", {k} = ?" for k in fields)
        changed = self._write(f"UPDATE dispatch_audits SET status = ?{names}, updated_at = ? WHERE audit_id = ? AND status = 'open'",
                              (status, *fields.values(), time.time(), audit_id))
        return changed == 1

    def get_checks(self, audit_id: int) -> dict:
        row = self.get_audit_row(audit_id)
        return json.loads(row["checks"]) if row else {}

    def record_check(self, audit_id: int, round_index: int, slot: int, outcome: dict) -> None:
        """Remember what checking party ``slot``'s opening found (so it is checked once)."""
        checks = self.get_checks(audit_id)
        checks[f"{round_index}:{slot}"] = outcome
        self.update_audit(audit_id, checks=json.dumps(checks, sort_keys=True))

    def insert_proven_opening(self, audit_id: int, round_index: int, slot: int, challenge_seed: bytes, opening) -> None:
        self._write("INSERT OR REPLACE INTO proven_openings VALUES (?, ?, ?, ?, ?, ?)",
                    (audit_id, round_index, slot, challenge_seed.hex(), encode(opening), time.time()))

    def get_proven_openings(self, audit_id: int) -> list[tuple[int, int, bytes, Opening]]:
        """Return (round, slot, challenge seed, opening) of every opening this dispatcher proved."""
        rows = self._rows("SELECT * FROM proven_openings WHERE audit_id = ? ORDER BY round, slot", [audit_id])
        return [(r["round"], r["slot"], bytes.fromhex(r["challenge_seed"]), decode(Opening, r["opening"])) for r in rows]

    # --- committee jobs -------------------------------------------------------------------------

    def insert_committee_job(self, audit_id: int, round_index: int, slot: int, member: bytes, job: Job, job_hash: bytes) -> None:
        now = time.time()
        self._write(
            "INSERT OR IGNORE INTO committee_jobs (audit_id, round, slot, member, job, job_hash, status, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, 'sending', ?, ?)",
            (audit_id, round_index, slot, member.hex(), encode(job), job_hash.hex(), now, now),
        )

    def get_committee_job(self, audit_id: int, round_index: int, slot: int, member: bytes) -> CommitteeJob | None:
        rows = self._rows("SELECT * FROM committee_jobs WHERE audit_id = ? AND round = ? AND slot = ? AND member = ?",
                          [audit_id, round_index, slot, member.hex()])
        return _committee_row(rows[0]) if rows else None

    def get_committee_jobs(self, audit_id: int) -> list[CommitteeJob]:
        return [_committee_row(r) for r in self._rows("SELECT * FROM committee_jobs WHERE audit_id = ? ORDER BY round, slot, created_at", [audit_id])]

    def update_committee_job(self, job: CommitteeJob, **fields) -> None:
        if "receipt" in fields and fields["receipt"] is not None:
            fields["receipt"] = encode(fields["receipt"])
        if "output_tokens" in fields and fields["output_tokens"] is not None:
            fields["output_tokens"] = json.dumps(list(fields["output_tokens"]))
        names = ", ".join(f"{k} = ?" for k in fields)
        self._write(f"UPDATE committee_jobs SET {names}, updated_at = ? WHERE audit_id = ? AND round = ? AND slot = ? AND member = ?",
                    (*fields.values(), time.time(), job.audit_id, job.round, job.slot, job.member.hex()))

    # --- duties ---------------------------------------------------------------------------------

    def insert_duty(self, audit_id: int, round_index: int, slot: int, job_hash: bytes) -> bool:
        now = time.time()
        return self._write(
            "INSERT OR IGNORE INTO party_duties (audit_id, round, slot, job_hash, status, created_at, updated_at) VALUES (?, ?, ?, ?, 'waiting', ?, ?)",
            (audit_id, round_index, slot, job_hash.hex(), now, now),
        ) == 1

    def get_duties(self, statuses: tuple[str, ...] = ("waiting", "opened")) -> list[Duty]:
        marks = ", ".join("?" * len(statuses))
        rows = self._rows(f"SELECT * FROM party_duties WHERE status IN ({marks}) ORDER BY audit_id, round, slot", statuses)
        return [_duty_of(r) for r in rows]

    def get_seat_of_job(self, job_hash: bytes) -> tuple[int, int] | None:
        """The (audit, round) of the latest seat this node holds, as worker or member, with its own job
        ``job_hash``; None when the job holds none (the table holds live seats only: it is pruned)."""
        row = self.db.execute("SELECT audit_id, round FROM party_duties WHERE job_hash = ? ORDER BY audit_id DESC, round DESC LIMIT 1",
                              [job_hash.hex()]).fetchone()
        return None if row is None else (row[0], row[1])

    def get_duty(self, audit_id: int, round_index: int, slot: int) -> Duty | None:
        rows = self._rows("SELECT * FROM party_duties WHERE audit_id = ? AND round = ? AND slot = ?", [audit_id, round_index, slot])
        return _duty_of(rows[0]) if rows else None

    def update_duty(self, duty: Duty, **fields) -> None:
        names = ", ".join(f"{k} = ?" for k in fields)
        self._write(f"UPDATE party_duties SET {names}, updated_at = ? WHERE audit_id = ? AND round = ? AND slot = ?",
                    (*fields.values(), time.time(), duty.audit_id, duty.round, duty.slot))

    # --- events, cursor, transactions ----------------------------------------------------------

    def get_cursor(self, name: str, default: int) -> int:
        row = self.db.execute("SELECT next_block FROM chain_cursor WHERE name = ?", [name]).fetchone()
        return default if row is None else row[0]

    def record_events(self, name: str, events: list[dict], next_block: int) -> None:
        """Store decoded events and move the cursor past them, in one transaction."""
        with transaction(self.db):
            c = self.db.conn
            c.executemany(
                "INSERT OR IGNORE INTO chain_events VALUES (:block_number, :log_index, :contract, :name, :audit_id, :batch_id, :contest_id, :args, :tx_hash)",
                events,
            )
            c.execute("INSERT OR REPLACE INTO chain_cursor VALUES (?, ?)", (name, next_block))

    def get_events(self, name: str, audit_id: int | None = None) -> list[dict]:
        """Return recorded events called ``name`` (of one audit), in chain order, args decoded."""
        if audit_id is None:
            rows = self._rows("SELECT * FROM chain_events WHERE name = ? ORDER BY block_number, log_index", [name])
        else:
            rows = self._rows("SELECT * FROM chain_events WHERE name = ? AND audit_id = ? ORDER BY block_number, log_index", [name, audit_id])
        return [{**r, "args": json.loads(r["args"])} for r in rows]

    def get_events_since(self, name: str, block_number: int) -> list[dict]:
        """Return recorded events called ``name`` from ``block_number`` on, in chain order, args decoded."""
        rows = self._rows("SELECT * FROM chain_events WHERE name = ? AND block_number >= ? ORDER BY block_number, log_index",
                          [name, block_number])
        return [{**r, "args": json.loads(r["args"])} for r in rows]

    def record_tx(self, tx_hash: bytes, function: str, gas_used: int, block_number: int, audit_id: int | None = None, batch_id: int | None = None) -> None:
        self._write("INSERT OR IGNORE INTO chain_txs VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (tx_hash.hex(), function, audit_id, batch_id, gas_used, block_number, time.time()))

    def get_gas_by_function(self) -> dict[str, tuple[int, int]]:
        """Return function -> (transactions, total gas) over every transaction this node sent (those pruned
        from `chain_txs` counted in `chain_gas_totals`, node/store/retention.py)."""
        rows = self.db.execute("SELECT function, SUM(n), SUM(g) FROM (SELECT function, COUNT(*) AS n, SUM(gas_used) AS g FROM chain_txs GROUP BY function"
                               " UNION ALL SELECT function, txs, gas_used FROM chain_gas_totals) GROUP BY function").fetchall()
        return {f: (n, g) for f, n, g in rows}


def _duty_of(row: dict) -> Duty:
    return Duty(row["audit_id"], row["round"], row["slot"], bytes.fromhex(row["job_hash"]), row["status"], row["vote"])
