"""How long a node keeps each row: until nothing can ask for it, by the chain's head, in blocks.

A receipt can be touched by an audit until its own horizon has passed and the longest audit
after it: no audit of it starts after the auditableUntilBlock it carries (the worker signed its
head + RECEIPT_HORIZON_BLOCKS; `Jobs.openAudit` skips or refuses a later start, whoever holds the
receipt), and an audit started then settles within the timeline's audit span
(`verillm.spec.params.compute_timeline`, the one place the windows are composed):
`verillm.spec.receipt.compute_receipt_duties_end_block` for one receipt. A batching promise can be
claimed until its batchByBlock + the omission claim and proof windows. Past both, nothing can open
the job's cells, ask for its receipt or its inclusion: the rows may go.

Every rule below is a block comparison against the head the dispatcher's watcher last read (the
periodic `StorePruner`, node/dispatcher/pruner.py), never a clock or a block interval measured
once: a chain that mines faster or slower moves the horizons with it. After the protocol's last
use, rows are kept ``store.retention_blocks`` more blocks for auditors and the explorer (replays of
settled audits, the explorer's pages), then deleted ``PRUNE_BATCH`` at a time:

- a **batch** (`dispatch_batches`) with its jobs (`dispatch_jobs`, `batch_promises`, `dispatched`),
  its audits (`dispatch_audits`, `committee_jobs`, `proven_openings`): once it is final (started or
  missed), past the last block an audit of any of its leaves can start (`Batches._admit`: its
  posted block + the timeline's start span) + the audit span, every promise in it past its claim
  windows, and every audit of it SETTLED or ABANDONED (an audit still open keeps the whole batch:
  its Merkle tree proves the audited leaf). Judged by the batch, not by its receipts' horizons: a
  worker signs its own, and one signing a horizon far in the future must not keep a gateway's
  batch for ever;
- a **job never batched**: once its promise is past its claim windows (the batcher batches every
  job it promised long before; with no promise, a crash between the two writes, it is batched too,
  or goes when its receipt is past its duties);
- a **worker job** (`jobs`, `receipts`, `traces`, its closed `party_duties`): once its receipt is
  past its duties' end and no duty of this node for it is still open; a failed job (no receipt,
  nothing can ask for it) after ``store.retention_s`` seconds;
- **chain events** (`chain_events`, `chain_event_parties`) older than the audit horizon
  (`compute_audit_horizon_blocks`) + the retention, except the Registry's (the roster of nodes,
  their stake and slashes: what the explorer lists nodes from) and those of an audit still open
  here; **transactions** (`chain_txs`) as old, their gas folded into `chain_gas_totals`; the
  explorer's block times as old.
"""

from dataclasses import dataclass

from sqlite_utils import Database

from verillm.spec.params import Preset, compute_timeline

from verillm.node.store.migrations import transaction

PRUNE_BATCH = 500
"""Rows (or batches) one pruning step deletes, so one step never holds the event loop long."""

KEPT_CONTRACTS = ("Registry",)
"""Contracts whose events are never pruned: registrations, stake and slashes, bounded by what each costs on-chain."""


def compute_audit_horizon_blocks(preset: Preset) -> int:
    """Blocks after a job is served past which no audit or omission claim can involve its receipt."""
    t = compute_timeline(preset)
    omission = preset.BATCH_BY_BLOCKS + preset.OMISSION_CLAIM_WINDOW_BLOCKS + preset.PROOF_WINDOW_BLOCKS
    return max(t.receipt_duty_span, omission)


@dataclass(frozen=True)
class Horizons:
    """How many blocks after each anchor a row can still be asked for, and what the operator keeps beyond."""

    audit_span_blocks: int
    """After a receipt's auditableUntilBlock, or an audit's start: every audit of it has settled."""
    start_span_blocks: int
    """After a batch is posted: the last block an audit of one of its leaves can start in."""
    omission_span_blocks: int
    """After a promise's batchByBlock: the last omission claim has been answered or slashed."""
    horizon_blocks: int
    """After a job is served: nothing can involve it (`compute_audit_horizon_blocks`)."""
    keep_blocks: int
    """``store.retention_blocks``: kept this much longer for auditors and the explorer."""

    def get_receipt_cutoff(self, head: int) -> int:
        """Receipts with auditableUntilBlock below this are past their duties and the retention."""
        return head - self.audit_span_blocks - self.keep_blocks

    def get_batch_cutoff(self, head: int) -> int:
        """Batches posted below this block are past their last audit's start and settlement, and the retention."""
        return head - self.start_span_blocks - self.audit_span_blocks - self.keep_blocks

    def get_promise_cutoff(self, head: int) -> int:
        """Promises with batchByBlock below this are past their claim windows and the retention."""
        return head - self.omission_span_blocks - self.keep_blocks

    def get_event_cutoff(self, head: int) -> int:
        """Events, transactions and block times in blocks below this are past the horizon and the retention."""
        return head - self.horizon_blocks - self.keep_blocks


def compute_horizons(preset: Preset, keep_blocks: int) -> Horizons:
    """Return the horizons of ``preset`` with ``keep_blocks`` of retention."""
    omission = preset.OMISSION_CLAIM_WINDOW_BLOCKS + preset.PROOF_WINDOW_BLOCKS
    timeline = compute_timeline(preset)
    return Horizons(timeline.audit_span, timeline.start_span, omission, compute_audit_horizon_blocks(preset), keep_blocks)


PRUNABLE_BATCHES = """
SELECT b.id, b.count FROM dispatch_batches b
WHERE b.status IN ('started', 'missed') AND b.posted_block < :batches
  AND NOT EXISTS (SELECT 1 FROM dispatch_jobs j JOIN batch_promises p ON p.job_hash = j.job_hash
                  WHERE j.batch_row = b.id AND p.batch_by_block >= :promises)
  AND NOT EXISTS (SELECT 1 FROM dispatch_audits a WHERE a.batch_row = b.id AND a.status = 'open')
ORDER BY b.id LIMIT :limit
"""

DELETE_BATCH = (
    "DELETE FROM proven_openings WHERE audit_id IN (SELECT audit_id FROM dispatch_audits WHERE batch_row = :row)",
    "DELETE FROM committee_jobs WHERE audit_id IN (SELECT audit_id FROM dispatch_audits WHERE batch_row = :row)",
    "DELETE FROM dispatch_audits WHERE batch_row = :row",
    "DELETE FROM batch_promises WHERE job_hash IN (SELECT job_hash FROM dispatch_jobs WHERE batch_row = :row)",
    "DELETE FROM dispatched WHERE job_hash IN (SELECT job_hash FROM dispatch_jobs WHERE batch_row = :row)",
    "DELETE FROM dispatch_jobs WHERE batch_row = :row",
    "DELETE FROM dispatch_batches WHERE id = :row",
)

PRUNABLE_UNBATCHED = """
SELECT j.job_hash FROM dispatch_jobs j
WHERE j.batch_row IS NULL
  AND CASE WHEN EXISTS (SELECT 1 FROM batch_promises p WHERE p.job_hash = j.job_hash)
           THEN NOT EXISTS (SELECT 1 FROM batch_promises p WHERE p.job_hash = j.job_hash AND p.batch_by_block >= :promises)
           ELSE j.auditable_until_block < :receipts END
LIMIT :limit
"""

PRUNABLE_WORKER_JOBS = """
SELECT j.job_hash FROM jobs j JOIN receipts r ON r.job_hash = j.job_hash
WHERE j.status = 'done' AND r.auditable_until_block < :receipts
  AND NOT EXISTS (SELECT 1 FROM party_duties d WHERE d.job_hash = j.job_hash AND d.status != 'closed')
LIMIT :limit
"""

DELETE_JOB = tuple(f"DELETE FROM {table} WHERE job_hash = :job" for table in ("traces", "receipts", "dispatched", "party_duties", "jobs"))

PRUNABLE_EVENTS = f"""
SELECT e.block_number, e.log_index FROM chain_events e
WHERE e.block_number < :events AND e.contract NOT IN ({", ".join(f"'{name}'" for name in KEPT_CONTRACTS)})
  AND (e.audit_id IS NULL OR (
       NOT EXISTS (SELECT 1 FROM dispatch_audits a WHERE a.audit_id = e.audit_id AND a.status = 'open')
       AND NOT EXISTS (SELECT 1 FROM party_duties d WHERE d.audit_id = e.audit_id AND d.status != 'closed')))
ORDER BY e.block_number, e.log_index LIMIT :limit
"""


def _select(db: Database, sql: str, params: dict) -> list[tuple]:
    return db.conn.execute(sql, params).fetchall()


def prune_batches(db: Database, head: int, horizons: Horizons, limit: int = PRUNE_BATCH) -> int:
    """Delete final batches nothing can ask about any more, with their jobs and audits, about ``limit`` jobs' worth
    (at least one batch); return how many batches."""
    params = {"batches": horizons.get_batch_cutoff(head), "promises": horizons.get_promise_cutoff(head), "limit": limit}
    with transaction(db):
        rows = _take_jobs_worth(_select(db, PRUNABLE_BATCHES, params), limit)
        for statement in DELETE_BATCH:
            db.conn.executemany(statement, [{"row": row} for row in rows])
    return len(rows)


def _take_jobs_worth(batches: list[tuple[int, int]], limit: int) -> list[int]:
    """The ids of the first ``batches`` (id, jobs) holding at most ``limit`` jobs together, at least the first."""
    taken, jobs = [], 0
    for row, count in batches:
        if taken and jobs + count > limit:
            break
        taken.append(row)
        jobs += count
    return taken


def prune_unbatched_jobs(db: Database, head: int, horizons: Horizons, limit: int = PRUNE_BATCH) -> int:
    """Delete up to ``limit`` dispatched jobs never batched whose promise (else receipt) nothing can use any more; return how many."""
    params = {"receipts": horizons.get_receipt_cutoff(head), "promises": horizons.get_promise_cutoff(head), "limit": limit}
    with transaction(db):
        jobs = [{"job": job} for (job,) in _select(db, PRUNABLE_UNBATCHED, params)]
        for table in ("batch_promises", "dispatched", "dispatch_jobs"):
            db.conn.executemany(f"DELETE FROM {table} WHERE job_hash = :job", jobs)
    return len(jobs)


def prune_worker_jobs(db: Database, head: int, horizons: Horizons, limit: int = PRUNE_BATCH) -> int:
    """Delete up to ``limit`` done jobs of this node's worker past their receipt's duties (traces, receipts,
    closed duties); return how many."""
    params = {"receipts": horizons.get_receipt_cutoff(head), "limit": limit}
    with transaction(db):
        jobs = [{"job": job} for (job,) in _select(db, PRUNABLE_WORKER_JOBS, params)]
        for statement in DELETE_JOB:
            db.conn.executemany(statement, jobs)
    return len(jobs)


def prune_failed_jobs(db: Database, before_s: float, limit: int = PRUNE_BATCH) -> int:
    """Delete up to ``limit`` failed jobs last touched before ``before_s`` (no receipt: nothing can ask for them); return how many."""
    with transaction(db):
        jobs = [{"job": job} for (job,) in _select(db, "SELECT job_hash FROM jobs WHERE status = 'failed' AND updated_at < :before LIMIT :limit",
                                                 {"before": before_s, "limit": limit})]
        for statement in DELETE_JOB:
            db.conn.executemany(statement, jobs)
    return len(jobs)


def prune_chain_records(db: Database, head: int, horizons: Horizons, limit: int = PRUNE_BATCH) -> int:
    """Delete up to ``limit`` events and ``limit`` transactions older than the horizon and the retention
    (folding the transactions' gas into `chain_gas_totals`), and the block times as old; return how many rows."""
    cutoff = horizons.get_event_cutoff(head)
    with transaction(db):
        events = [{"block": b, "index": i} for b, i in _select(db, PRUNABLE_EVENTS, {"events": cutoff, "limit": limit})]
        db.conn.executemany("DELETE FROM chain_event_parties WHERE block_number = :block AND log_index = :index", events)
        db.conn.executemany("DELETE FROM chain_events WHERE block_number = :block AND log_index = :index", events)
        txs = _select(db, "SELECT tx_hash, function, gas_used FROM chain_txs WHERE block_number < :cutoff LIMIT :limit", {"cutoff": cutoff, "limit": limit})
        db.conn.executemany("INSERT INTO chain_gas_totals VALUES (:function, 1, :gas) ON CONFLICT (function) DO UPDATE"
                            " SET txs = txs + 1, gas_used = gas_used + excluded.gas_used", [{"function": f, "gas": g} for _, f, g in txs])
        db.conn.executemany("DELETE FROM chain_txs WHERE tx_hash = ?", [(tx,) for tx, _, _ in txs])
        times = db.conn.execute("DELETE FROM chain_block_times WHERE block_number < ?", (cutoff,)).rowcount
    return len(events) + len(txs) + times


def count_rows(db: Database, tables: tuple[str, ...]) -> dict[str, int]:
    """Return the number of rows in each of ``tables`` (tests, `verillm node status`)."""
    return {table: db.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in tables}
