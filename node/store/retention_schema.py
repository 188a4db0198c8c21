"""Horizons in blocks for pruning: migration 8 of the node store (`node/store/migrations.py` lists it).

The store is pruned by the chain's head, not the clock (node/store/retention.py), so each row an
audit may ask for names its receipt's horizon: `receipts.auditable_until_block` (the worker's own
jobs) and `dispatch_jobs.auditable_until_block` (the jobs this dispatcher routed), read from the
signed receipt (`ReceiptData.auditableUntilBlock`), backfilled here for rows written before. The
gas of transactions pruned from `chain_txs` is folded into `chain_gas_totals`, so the node's gas
figures keep counting every transaction it ever sent.
"""

from sqlite_utils import Database

from verillm.spec.encoding import decode
from verillm.spec.types import Receipt

from verillm.node.store.sql import run_script

RETENTION_COLUMNS = """
ALTER TABLE receipts ADD COLUMN auditable_until_block INTEGER NOT NULL DEFAULT 0;
ALTER TABLE dispatch_jobs ADD COLUMN auditable_until_block INTEGER NOT NULL DEFAULT 0;
CREATE INDEX receipts_by_horizon ON receipts (auditable_until_block);
CREATE INDEX dispatch_jobs_by_horizon ON dispatch_jobs (batch_row, auditable_until_block);
CREATE INDEX dispatch_audits_by_status ON dispatch_audits (status, batch_row);
CREATE INDEX party_duties_by_job ON party_duties (job_hash, status);
CREATE INDEX chain_txs_by_block ON chain_txs (block_number);
CREATE INDEX chain_events_by_block_contract ON chain_events (contract, block_number);
CREATE INDEX chain_event_parties_by_event ON chain_event_parties (block_number, log_index);

CREATE TABLE chain_gas_totals (
    function TEXT PRIMARY KEY,            -- e.g. Jobs.postBatch
    txs INTEGER NOT NULL,                 -- transactions pruned from chain_txs
    gas_used INTEGER NOT NULL             -- their gas, summed
);
"""


def _backfill(db: Database, table: str) -> None:
    rows = db.conn.execute(f"SELECT job_hash, receipt FROM {table}").fetchall()
    db.conn.executemany(f"UPDATE {table} SET auditable_until_block = ? WHERE job_hash = ?",
                        [(decode(Receipt, blob).auditable_until_block, job_hash) for job_hash, blob in rows])


def migrate_8_horizon_columns(db: Database) -> None:
    """Each receipt's horizon as a column (worker and dispatcher tables), and the pruned transactions' gas totals."""
    run_script(db, RETENTION_COLUMNS)  # inside process_migrations' transaction
    for table in ("receipts", "dispatch_jobs"):
        _backfill(db, table)
