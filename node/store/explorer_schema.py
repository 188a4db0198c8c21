"""The explorer's indexes: migration 7 of the node store (`node/store/migrations.py` lists it).

The explorer reads the dispatcher's tables and the chain events the watcher records; these
indexes let it page, filter and search them without scanning every row: jobs by time,
worker and model; events by batch and by transaction; every address an event names (kept by
a trigger, so it is complete by construction: a row enters `chain_events` only with its
parties); and the timestamps of blocks the explorer has shown (read once from the chain).
"""

from sqlite_utils import Database

from verillm.node.store.sql import run_script

# Event arguments that name a node (an address): what a node's page lists. `by` (the contract
# that slashed) and `to`/`from` of payments are left out: they name contracts or are not protocol steps.
PARTY_ARGUMENTS = ("node", "worker", "member", "party", "dispatcher", "escalator", "challenger")

EXPLORER_INDEXES = f"""
CREATE INDEX dispatch_jobs_by_created ON dispatch_jobs (created_at);
CREATE INDEX dispatch_jobs_by_worker ON dispatch_jobs (worker, created_at);
-- encode(Job) starts with its model id (32 bytes, verillm.spec.types.Job's first field)
CREATE INDEX dispatch_jobs_by_model ON dispatch_jobs (substr(job, 1, 32), created_at);
CREATE INDEX chain_events_by_batch ON chain_events (batch_id, name);
CREATE INDEX chain_events_by_tx ON chain_events (tx_hash);

CREATE TABLE chain_event_parties (
    address TEXT NOT NULL,                -- lowercase 0x-hex, as the explorer's routes take it
    block_number INTEGER NOT NULL,        -- the chain_events row
    log_index INTEGER NOT NULL,
    role TEXT NOT NULL,                   -- the argument that names it (node, worker, members, party, ...)
    PRIMARY KEY (address, block_number, log_index, role)
) WITHOUT ROWID;

CREATE TRIGGER chain_event_parties_on_insert AFTER INSERT ON chain_events BEGIN
    INSERT OR IGNORE INTO chain_event_parties
        SELECT lower(value), NEW.block_number, NEW.log_index, key FROM json_each(NEW.args)
        WHERE key IN ({", ".join(f"'{name}'" for name in PARTY_ARGUMENTS)}) AND type = 'text';
    INSERT OR IGNORE INTO chain_event_parties
        SELECT lower(value), NEW.block_number, NEW.log_index, 'members' FROM json_each(NEW.args, '$.members');
END;

CREATE TABLE chain_block_times (
    block_number INTEGER PRIMARY KEY,
    timestamp INTEGER NOT NULL            -- the block header's timestamp (seconds)
);
"""

# The events recorded before this migration: their parties, as the trigger would have added them.
BACKFILL = f"""
INSERT OR IGNORE INTO chain_event_parties
    SELECT lower(j.value), e.block_number, e.log_index, j.key FROM chain_events e, json_each(e.args) j
    WHERE j.key IN ({", ".join(f"'{name}'" for name in PARTY_ARGUMENTS)}) AND j.type = 'text';
INSERT OR IGNORE INTO chain_event_parties
    SELECT lower(j.value), e.block_number, e.log_index, 'members' FROM chain_events e, json_each(e.args, '$.members') j;
"""


def migrate_7_explorer_indexes(db: Database) -> None:
    """Indexes for the explorer's pages, filters and search; the parties of every event; block times."""
    run_script(db, EXPLORER_INDEXES + BACKFILL)  # inside process_migrations' transaction
