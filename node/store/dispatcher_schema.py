"""The dispatcher role's tables: migration 3 of the node store (`node/store/migrations.py` lists it).

What this node dispatched and where it stands on-chain, every pending chain action, the
contract events it has seen, and the gas of every transaction it sent. Like the worker
tables: hashes and addresses as lowercase hex without 0x, records in canonical encoding.

Pending work is a row whose status is not final; the chain holds the progress. After a
restart the watcher reads each row's on-chain state and takes the next step from there.
"""



from sqlite_utils import Database

from verillm.node.store.sql import run_script

DISPATCHER_AUDIT_TABLES = """
CREATE TABLE dispatch_jobs (
    job_hash TEXT PRIMARY KEY,            -- a client job this node's dispatcher routed
    job BLOB NOT NULL,                    -- encode(Job)
    worker TEXT NOT NULL,                 -- the worker's address
    worker_url TEXT NOT NULL,             -- its endpoint; '' = this node's own worker
    output_tokens TEXT NOT NULL,          -- JSON list of token ids
    receipt BLOB NOT NULL,                -- encode(Receipt), signed by the worker, checked
    receipt_hash TEXT NOT NULL,           -- EIP-712 struct hash: the batch leaf
    audit_requested INTEGER NOT NULL,     -- the client paid for an audit (the worker never knows)
    batch_row INTEGER,                    -- dispatch_batches.id once batched
    batch_index INTEGER,                  -- its leaf index in that batch
    created_at REAL NOT NULL
);
CREATE INDEX dispatch_jobs_by_batch ON dispatch_jobs (batch_row, batch_index);

CREATE TABLE dispatch_batches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    root TEXT NOT NULL,                   -- Merkle root over the receipt hashes, in batch_index order
    count INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('posting', 'posted', 'drawn', 'started', 'missed')),
    batch_id INTEGER,                     -- Jobs batch id, once posted
    posted_block INTEGER,
    beta TEXT,                            -- the VRF output, once drawn
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);

CREATE TABLE dispatch_audits (
    audit_id INTEGER PRIMARY KEY,         -- Jobs audit id
    job_hash TEXT NOT NULL,               -- the audited dispatch_jobs row
    batch_row INTEGER NOT NULL,
    batch_index INTEGER NOT NULL,
    requested INTEGER NOT NULL,           -- started on the client's request, not by the draw
    status TEXT NOT NULL CHECK (status IN ('open', 'settled', 'abandoned')),
    verdict INTEGER,                      -- settlement code once settled (1 pass, 2 fail, 3 tie, 4 worker default)
    escalated INTEGER NOT NULL DEFAULT 0, -- 0 not decided yet, 1 escalated, -1 not warranted
    checks TEXT NOT NULL DEFAULT '{}',    -- JSON: "round:slot" -> what checking that party's opening found
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE UNIQUE INDEX dispatch_audits_by_leaf ON dispatch_audits (batch_row, batch_index);

CREATE TABLE committee_jobs (
    audit_id INTEGER NOT NULL,
    round INTEGER NOT NULL,
    slot INTEGER NOT NULL,                -- member slot, 0-based (party slot − 1)
    member TEXT NOT NULL,                 -- drawn member's address
    job BLOB NOT NULL,                    -- the verification job; resending it is idempotent
    job_hash TEXT NOT NULL,
    output_tokens TEXT,                   -- the member's answer (JSON)
    receipt BLOB,                         -- its signed receipt, checked
    status TEXT NOT NULL CHECK (status IN ('sending', 'answered', 'posted')),
    error TEXT,                           -- last failure to reach the member or post its receipt
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (audit_id, round, slot, member)
);

CREATE TABLE party_duties (
    audit_id INTEGER NOT NULL,
    round INTEGER NOT NULL,
    slot INTEGER NOT NULL,                -- the contracts' party slot: 0 worker, i member i − 1
    job_hash TEXT NOT NULL,               -- this node's own job whose receipt holds the seat
    status TEXT NOT NULL CHECK (status IN ('waiting', 'opened', 'closed')),
    vote INTEGER,                         -- a member's vote (1 agree, 2 disagree)
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (audit_id, round, slot)
);

CREATE TABLE proven_openings (
    audit_id INTEGER NOT NULL,
    round INTEGER NOT NULL,
    slot INTEGER NOT NULL,                -- party slot: 0 worker, i member i − 1
    challenge_seed TEXT NOT NULL,
    opening BLOB NOT NULL,                -- encode(Opening): leaves with Merkle proofs, as the party served them
    created_at REAL NOT NULL,
    PRIMARY KEY (audit_id, round, slot)   -- kept for replays (`verillm audit replay`) and adjudication
);

CREATE TABLE chain_events (
    block_number INTEGER NOT NULL,
    log_index INTEGER NOT NULL,
    contract TEXT NOT NULL,
    name TEXT NOT NULL,
    audit_id INTEGER,
    batch_id INTEGER,
    contest_id INTEGER,
    args TEXT NOT NULL,                   -- JSON; bytes as 0x-hex
    tx_hash TEXT NOT NULL,
    PRIMARY KEY (block_number, log_index)
);
CREATE INDEX chain_events_by_audit ON chain_events (audit_id, name);
CREATE INDEX chain_events_by_name ON chain_events (name, block_number);

CREATE TABLE chain_cursor (
    name TEXT PRIMARY KEY,
    next_block INTEGER NOT NULL           -- first block whose events are not recorded yet
);

CREATE TABLE chain_txs (
    tx_hash TEXT PRIMARY KEY,
    function TEXT NOT NULL,               -- e.g. Jobs.postBatch
    audit_id INTEGER,
    batch_id INTEGER,
    gas_used INTEGER NOT NULL,
    block_number INTEGER NOT NULL,
    created_at REAL NOT NULL
);
"""


def migrate_3_dispatcher_audit_tables(db: Database) -> None:
    """Dispatched jobs with receipts, batches, audits, committee jobs, party duties, events, txs."""
    run_script(db, DISPATCHER_AUDIT_TABLES)  # inside process_migrations' transaction


BATCH_PROMISES_TABLE = """
CREATE TABLE batch_promises (
    job_hash TEXT PRIMARY KEY,            -- a dispatch_jobs row this node promised to batch
    receipt_hash TEXT NOT NULL,           -- the promised batch leaf
    batch_by_block INTEGER NOT NULL,      -- the last block its batch may be posted in
    signature TEXT NOT NULL,              -- this node's EIP-712 signature (verillm.spec.promise)
    created_at REAL NOT NULL
)
"""


def migrate_4_batch_promises(db: Database) -> None:
    """Batching promises returned with client jobs (docs/protocol.md §12 "Batching promises")."""
    db.conn.execute(BATCH_PROMISES_TABLE)


def migrate_5_receipt_hash_index(db: Database) -> None:
    """Receipts looked up by hash: the public inclusion route (`GET /v1/verillm/receipts/{hash}/inclusion`)
    and omission answers must not scan every job this node ever dispatched."""
    db.conn.execute("CREATE INDEX dispatch_jobs_by_receipt_hash ON dispatch_jobs (receipt_hash)")


def migrate_6_drop_chain_actions(db: Database) -> None:
    """Drop the `chain_actions` queue: it was written for every dispatched job and never read (the
    dispatcher posts receipts from `dispatch_jobs`), so its pending-actions gauge only grew."""
    db.conn.execute("DROP INDEX IF EXISTS chain_actions_by_status")
    db.conn.execute("DROP TABLE IF EXISTS chain_actions")


NODE_LEAVING_TABLE = """
CREATE TABLE node_leaving (
    id INTEGER PRIMARY KEY CHECK (id = 1),  -- one row: the operator ran `verillm node unbond`
    since_block INTEGER NOT NULL,          -- the chain head when it did
    created_at REAL NOT NULL
)
"""


def migrate_9_node_leaving(db: Database) -> None:
    """The operator's decision to leave (`verillm node unbond`): from then the dispatcher makes no
    new batching promise and posts every promised receipt at once, before the CLI deregisters
    (docs/protocol.md §12 "Stake locks and unbonding", Keepability)."""
    db.conn.execute(NODE_LEAVING_TABLE)


def migrate_10_batch_sent_from_block(db: Database) -> None:
    """The chain head when this node first sent a batch's post: a later attempt (a retry after the
    post landed but its bookkeeping failed, a restart) looks on chain from there for its own post
    before sending again, since the contract takes the same root twice and the second batch, never
    drawn, would cost the dispatcher a missed draw (`BatchScheduler.post_batch`)."""
    db.conn.execute("ALTER TABLE dispatch_batches ADD COLUMN sent_from_block INTEGER")
