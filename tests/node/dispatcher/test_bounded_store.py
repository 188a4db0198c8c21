"""The store stays bounded (issue 35, finding 5): every table loses its rows once nothing can ask for
them, judged by the head of a real anvil (blocks mined, never a clock), and rows still needed survive.

A real SQLite file through the node's own writers (Store, DispatcherTables), MINIMAL's horizons and
the dispatcher's `StorePruner` reading the chain's head as the service runs it.
"""

import json
import os

import pytest

from verillm.spec.hashing import keccak256
from verillm.spec.params import MINIMAL, compute_timeline
from verillm.spec.receipt import SigningDomain, compute_receipt, sign_receipt
from verillm.spec.types import Job, SamplingParams

from verillm.node.dispatcher.pruner import StorePruner
from verillm.node.keys import compute_node_key
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.store.retention import compute_audit_horizon_blocks, compute_horizons, count_rows
from verillm.node.store.store import open_store
from verillm.node.worker.commit import JobOutput

from one_node_chain import one_node_deployment

MODEL_ID = keccak256(b"bounded store model")
KEEP_BLOCKS = 10
TABLES = ("dispatch_jobs", "batch_promises", "dispatch_batches", "dispatch_audits", "committee_jobs", "proven_openings", "dispatched",
          "jobs", "receipts", "traces", "party_duties", "chain_events", "chain_event_parties", "chain_txs")
SPAN = compute_timeline(MINIMAL).audit_span


@pytest.fixture(scope="module")
def deployed(anvil_installed):
    with one_node_deployment(MODEL_ID) as world:
        yield world


class World:
    """The node's store and the chain whose head decides what it keeps."""

    def __init__(self, deployed, tmp_path):
        _, self.protocol, node, _ = deployed
        self.chain = self.protocol.chain
        self.key = compute_node_key(bytes(node.key))
        self.store = open_store(tmp_path / "node.sqlite")
        self.tables = DispatcherTables(self.store.db)
        self.pruner = StorePruner(self.store.db, compute_horizons(MINIMAL, KEEP_BLOCKS), self.chain.get_block_number, 30.0, 3600.0)
        self.n = 0

    def receipt(self, until: int | None = None):
        self.n += 1
        job = Job(MODEL_ID, (1, 2, self.n), SamplingParams(), 4, os.urandom(32))
        until = until or self.chain.get_block_number() + MINIMAL.RECEIPT_HORIZON_BLOCKS  # what an honest worker signs
        return job, sign_receipt(compute_receipt(job, (5, 6), b"\x09" * 32, self.key.address, until), self.key.private_key, SigningDomain())

    def dispatch(self, promise: bool = True, until: int | None = None) -> bytes:
        job, receipt = self.receipt(until)
        self.tables.insert_dispatched_job(receipt.job_hash, job, self.key.address, "http://w", (5, 6), receipt, False)
        self.store.insert_dispatched(receipt.job_hash, self.key.address, "http://w", False)
        if promise:
            self.tables.insert_promise(receipt.job_hash, b"\x01" * 32, self.chain.get_block_number() + MINIMAL.BATCH_BY_BLOCKS, b"\x02" * 65)
        return receipt.job_hash

    def batch(self, job_hashes: list[bytes], audit_id: int, audit_status: str) -> int:
        row = self.tables.insert_batch(b"\x0a" * 32, job_hashes)
        self.tables.update_batch(row, status="started", batch_id=row, posted_block=self.chain.get_block_number())
        self.tables.insert_audit(audit_id, job_hashes[0], row, 0, requested=False)
        self.tables.update_audit(audit_id, status=audit_status)
        self.store.db.conn.execute("INSERT INTO committee_jobs VALUES (?, 0, 0, 'aa', x'00', 'bb', NULL, NULL, 'answered', NULL, 0, 0)", (audit_id,))
        self.store.db.conn.execute("INSERT INTO proven_openings VALUES (?, 0, 0, 'cc', ?, 0)", (audit_id, b"\x00" * 8192))
        self.event("Jobs", "AuditStarted", audit_id)
        return row

    def worker_job(self, failed: bool = False) -> bytes:
        job, receipt = self.receipt()
        self.store.insert_job(receipt.job_hash, job, None)
        if failed:
            self.store.fail_job(receipt.job_hash, "engine error")
        else:
            self.store.complete_job(receipt.job_hash, JobOutput(receipt, (5, 6), b"trace"))
        return receipt.job_hash

    def event(self, contract: str, name: str, audit_id: int | None = None) -> None:
        block = self.chain.get_block_number()
        self.tables.record_events("protocol", [{
            "block_number": block, "log_index": self.n, "contract": contract, "name": name, "audit_id": audit_id, "batch_id": None,
            "contest_id": None, "args": json.dumps({"node": "0x" + "ab" * 20}), "tx_hash": os.urandom(32).hex()}], block + 1)
        self.n += 1
        self.tables.record_tx(os.urandom(32), f"Jobs.{name}", 21_000, block, audit_id)

    def mine_to(self, block: int) -> None:
        self.chain.mine(block - self.chain.get_block_number())

    def has(self, table: str, job_hash: bytes) -> bool:
        return self.store.db.execute(f"SELECT COUNT(*) FROM {table} WHERE job_hash = ?", [job_hash.hex()]).fetchone()[0] > 0


async def test_rows_go_once_past_their_horizon_by_the_chain_s_head_and_rows_still_needed_stay(deployed, tmp_path):
    world = World(deployed, tmp_path)
    start = world.chain.get_block_number()  # every row below is written at this head
    settled = [world.dispatch() for _ in range(2)] + [world.dispatch(until=2**40)]  # a hostile worker's far horizon
    world.batch(settled, audit_id=1, audit_status="settled")
    still_open = world.dispatch()
    world.batch([still_open], audit_id=2, audit_status="open")
    never_batched = world.dispatch()
    done, held_by_duty, failed = world.worker_job(), world.worker_job(), world.worker_job(failed=True)
    world.store.db.conn.execute("INSERT INTO party_duties VALUES (9, 0, 0, ?, 'opened', NULL, NULL, 0, 0)", (held_by_duty.hex(),))
    world.event("Registry", "Registered")
    world.event("Jobs", "BatchPosted")
    assert world.chain.get_block_number() == start
    timeline = compute_timeline(MINIMAL)
    promises_end = start + MINIMAL.BATCH_BY_BLOCKS + MINIMAL.OMISSION_CLAIM_WINDOW_BLOCKS + MINIMAL.PROOF_WINDOW_BLOCKS + KEEP_BLOCKS
    batches_end = start + timeline.start_span + SPAN + KEEP_BLOCKS  # the last audit start of a batch posted at start, settled
    receipts_end = start + MINIMAL.RECEIPT_HORIZON_BLOCKS + SPAN + KEEP_BLOCKS
    assert promises_end < batches_end < receipts_end == start + compute_audit_horizon_blocks(MINIMAL) + KEEP_BLOCKS
    before = count_rows(world.store.db, TABLES)
    gas_before = world.tables.get_gas_by_function()

    # At each rule's last block nothing it covers goes (the clock plays no part); one block later it does.
    world.mine_to(promises_end)
    await world.pruner.prune()
    assert count_rows(world.store.db, TABLES) == before
    world.mine_to(promises_end + 1)
    await world.pruner.prune()
    assert not any(world.has(t, never_batched) for t in ("dispatch_jobs", "batch_promises", "dispatched"))
    assert all(world.has("dispatch_jobs", h) for h in settled + [still_open])

    world.mine_to(batches_end)
    await world.pruner.prune()
    assert all(world.has("dispatch_jobs", h) for h in settled)
    world.mine_to(batches_end + 1)
    await world.pruner.prune()
    for job_hash in settled:  # the far horizon keeps nothing: no audit of the batch can start any more
        assert not any(world.has(t, job_hash) for t in ("dispatch_jobs", "batch_promises", "dispatched"))
    # Needed still: the batch of an audit still open (its tree proves the leaf).
    assert world.has("dispatch_jobs", still_open) and world.has("batch_promises", still_open)
    after = count_rows(world.store.db, TABLES)
    assert after["dispatch_batches"] == after["dispatch_audits"] == after["committee_jobs"] == after["proven_openings"] == 1
    assert world.has("jobs", done) and after["chain_events"] == before["chain_events"]  # the worker's own receipts: their horizon

    world.mine_to(receipts_end)
    await world.pruner.prune()
    assert world.has("jobs", done) and count_rows(world.store.db, ("chain_events",))["chain_events"] == before["chain_events"]
    world.mine_to(receipts_end + 1)
    await world.pruner.prune()
    assert not any(world.has(t, done) for t in ("jobs", "receipts", "traces"))
    # Needed still: the job an open duty holds, the open audit's events, the Registry's (the roster).
    assert world.has("jobs", held_by_duty) and world.has("traces", held_by_duty) and world.has("jobs", failed)
    names = [r[0] for r in world.store.db.execute("SELECT name FROM chain_events ORDER BY name")]
    assert names == ["AuditStarted", "Registered"]
    assert count_rows(world.store.db, ("chain_txs",))["chain_txs"] == 0 and world.tables.get_gas_by_function() == gas_before

    # The audit settles and the duty closes: the rest goes at the next pass.
    world.tables.update_audit(2, status="settled")
    world.store.db.conn.execute("UPDATE party_duties SET status = 'closed'")
    await world.pruner.prune()
    final = count_rows(world.store.db, TABLES)
    assert final["chain_events"] == final["chain_event_parties"] == 1  # Registered, and its party row
    assert {t: n for t, n in final.items() if t not in ("chain_events", "chain_event_parties", "jobs")} == dict.fromkeys(
        [t for t in TABLES if t not in ("chain_events", "chain_event_parties", "jobs")], 0)
    assert final["jobs"] == 1 and world.has("jobs", failed)  # no receipt: its clock retention (store.retention_s)
    world.pruner.failed_retention_s = 0.0
    await world.pruner.prune()
    assert count_rows(world.store.db, ("jobs",)) == {"jobs": 0}


async def test_a_job_is_kept_while_its_promise_can_still_be_claimed(deployed, tmp_path):
    """A receipt past its audits whose promise's claim windows are still open stays: the omission answer needs it."""
    world = World(deployed, tmp_path)
    job_hash = world.dispatch(promise=False)
    receipt = world.tables.get_dispatched_job(job_hash).receipt
    late_promise = receipt.auditable_until_block + SPAN  # a promise due later than the receipt's audits end
    world.tables.insert_promise(job_hash, b"\x01" * 32, late_promise, b"\x02" * 65)
    claims_end = late_promise + MINIMAL.OMISSION_CLAIM_WINDOW_BLOCKS + MINIMAL.PROOF_WINDOW_BLOCKS + KEEP_BLOCKS
    world.mine_to(claims_end)
    await world.pruner.prune()
    assert world.has("dispatch_jobs", job_hash) and world.has("batch_promises", job_hash)
    world.mine_to(claims_end + 1)
    await world.pruner.prune()
    assert not world.has("dispatch_jobs", job_hash) and not world.has("batch_promises", job_hash)


def test_migration_8_reads_each_stored_receipt_s_horizon(tmp_path):
    """Rows written before the horizon columns get them from their signed receipts, so they can be pruned too."""
    import sqlite3

    from sqlite_utils import Database

    from verillm.spec.encoding import encode
    from verillm.node.store.migrations import MIGRATIONS, process_migrations

    db = Database(sqlite3.connect(str(tmp_path / "old.sqlite"), isolation_level=None))
    assert process_migrations(db, MIGRATIONS[:7]) == 7
    job = Job(MODEL_ID, (1, 2, 3), SamplingParams(), 4, b"\x05" * 32)
    key = compute_node_key(b"\x07" * 32)
    receipt = sign_receipt(compute_receipt(job, (5, 6), b"\x09" * 32, key.address, 4242), key.private_key, SigningDomain())
    key = receipt.job_hash.hex()
    db.conn.execute("INSERT INTO jobs (job_hash, job, model_id, sender, status, num_input_tokens, received_at, updated_at)"
                    " VALUES (?, ?, ?, '', 'done', 3, 0, 0)", (key, encode(job), MODEL_ID.hex()))
    db.conn.execute("INSERT INTO receipts VALUES (?, ?, 'aa', 'bb', 0)", (key, encode(receipt)))
    db.conn.execute("INSERT INTO dispatch_jobs (job_hash, job, worker, worker_url, output_tokens, receipt, receipt_hash, audit_requested, created_at)"
                    " VALUES (?, ?, 'aa', '', '[5, 6]', ?, 'cc', 0, 0)", (key, encode(job), encode(receipt)))
    assert process_migrations(db) == len(MIGRATIONS) == 10  # 8 adds the horizons; 9 the leaving flag; 10 a batch's first send
    for table in ("receipts", "dispatch_jobs"):
        assert db.execute(f"SELECT auditable_until_block FROM {table}").fetchall() == [(4242,)]
