"""The explorer's reads (migration 7 and node/store/explorer_tables.py) on a real SQLite file: the
job status it filters on is the status route's, its pages and filters use the indexes, and the
parties of every recorded event are indexed by construction (a trigger), old events included."""

import json
import os
import sqlite3

from eth_keys import keys
from sqlite_utils import Database

from verillm.node.dispatcher.status import compute_job_status
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.store.explorer_tables import ExplorerTables
from verillm.node.store.migrations import MIGRATIONS, get_schema_version, process_migrations
from verillm.node.store.store import open_store
from verillm.spec.encoding import encode
from verillm.spec.params import MINIMAL
from verillm.spec.receipt import SigningDomain, compute_receipt, sign_receipt
from verillm.spec.types import Job, SamplingParams

PRESET = MINIMAL.replace(START_WINDOW_BLOCKS=10)
KEYS = (b"\x07" * 32, b"\x08" * 32)
MODELS = (b"\x01" * 32, b"\x02" * 32)
STATUSES = ("dispatched", "committed", "audited", "verified", "final", "slashed", "tie", "abandoned")


def _dispatch(tables: DispatcherTables, n: int, key: bytes = KEYS[0], model: bytes = MODELS[0]):
    job = Job(model_id=model, input_tokens=(1, 2, n), sampling=SamplingParams(), max_new_tokens=2, nonce=bytes([n]) * 32)
    worker = keys.PrivateKey(key).public_key.to_canonical_address()
    receipt = sign_receipt(compute_receipt(job, (4, 5), b"\x09" * 32, worker, 1_000), key, SigningDomain())
    tables.insert_dispatched_job(receipt.job_hash, job, worker, "http://w", (4, 5), receipt, audit_requested=False)
    return receipt


def _event(block: int, name: str, audit_id=None, batch_id=None, log_index=0, **args) -> dict:
    return {"block_number": block, "log_index": log_index, "contract": "Jobs", "name": name, "audit_id": audit_id, "batch_id": batch_id,
            "contest_id": None, "args": json.dumps({"auditId": audit_id, "batchId": batch_id, **args}), "tx_hash": os.urandom(32).hex()}


def _status_everywhere(tables: DispatcherTables, head: int) -> tuple[dict, dict]:
    """(the status route's status, the explorer's SQL status) of every job."""
    hashes = [r["job_hash"] for r in tables.db.query("SELECT job_hash FROM dispatch_jobs")]
    route = {h: compute_job_status(tables, bytes.fromhex(h), head, PRESET)["status"] for h in hashes}
    rows = ExplorerTables(tables.db).get_job_rows(hashes, head, PRESET.START_WINDOW_BLOCKS)
    return route, {r["job_hash"]: r["status"] for r in rows}


def test_the_explorer_status_is_the_status_route_s_in_every_state(tmp_path):
    """Filtering on a status the page computes differently from the job's own route would hide jobs:
    walk jobs through every state, comparing both at each step (and around the start window's end)."""
    tables = DispatcherTables(open_store(tmp_path / "n.sqlite").db)
    receipts = [_dispatch(tables, n) for n in range(1, 8)]
    seen = set()

    def check(head):
        route, sql = _status_everywhere(tables, head)
        assert sql == route, head
        seen.update(route.values())

    check(0)
    row = tables.insert_batch(b"\x0a" * 32, [r.job_hash for r in receipts[:6]])
    check(0)  # posting: still dispatched
    tables.update_batch(row, status="drawn", batch_id=0, posted_block=5)
    tables.record_events("protocol", [_event(8, "AuditDrawn", batch_id=0, seed="0x00", beta="0x00")], 9)
    for head in (9, 18, 19):  # receipt 6 (leaf 5) never audited: committed, then final once the start window closes
        check(head)
    for audit_id, index in ((1, 0), (2, 1), (3, 2), (4, 3), (5, 4)):
        tables.insert_audit(audit_id, receipts[index].job_hash, row, index, requested=False)
    check(19)
    tables.record_events("protocol", [_event(20, "RoundDecided", 1, round=0, verdict=1, agree=3, disagree=0),
                                      _event(20, "RoundDecided", 2, log_index=1, round=0, verdict=2, agree=0, disagree=3),
                                      _event(20, "RoundDecided", 3, log_index=2, round=0, verdict=3, agree=1, disagree=1)], 21)
    check(21)
    tables.update_audit(1, status="settled", verdict=1)
    tables.update_audit(2, status="settled", verdict=4)
    tables.update_audit(4, status="abandoned")
    check(40)
    assert seen == set(STATUSES)


def test_pages_filter_by_status_worker_and_model_through_the_indexes(tmp_path):
    db = open_store(tmp_path / "n.sqlite").db
    tables, explorer = DispatcherTables(db), ExplorerTables(db)
    for n in range(1, 8):
        _dispatch(tables, n, KEYS[n % 2], MODELS[n % 3 == 0])
    total, page = explorer.get_job_page(0, 10, limit=3, offset=0)
    assert total == 7 and len(page) == 3 and [r["created_at"] for r in page] == sorted((r["created_at"] for r in page), reverse=True)
    assert explorer.get_job_page(0, 10, limit=3, offset=6)[1][0]["job_hash"] not in {r["job_hash"] for r in page}
    second = keys.PrivateKey(KEYS[1]).public_key.to_canonical_address()
    total, page = explorer.get_job_page(0, 10, limit=50, offset=0, worker=second)
    assert total == 4 and {r["worker"] for r in page} == {second.hex()}
    total, page = explorer.get_job_page(0, 10, limit=50, offset=0, model=MODELS[1])
    assert total == 2 and {r["model_id"] for r in page} == {MODELS[1].hex()}
    assert explorer.get_job_page(0, 10, limit=50, offset=0, status="dispatched")[0] == 7
    assert explorer.get_job_page(0, 10, limit=50, offset=0, status="final")[0] == 0
    plans = {name: " ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()) for name, sql, params in (
        ("model", "SELECT job_hash FROM dispatch_jobs WHERE substr(job, 1, 32) = ? ORDER BY created_at DESC", [MODELS[1]]),
        ("worker", "SELECT job_hash FROM dispatch_jobs WHERE worker = ? ORDER BY created_at DESC", [second.hex()]),
        ("newest", "SELECT job_hash FROM dispatch_jobs ORDER BY created_at DESC LIMIT 5", []),
        ("tx", "SELECT * FROM chain_events WHERE tx_hash = ?", ["00"]),
        ("batch", "SELECT * FROM chain_events WHERE batch_id = ?", [1]))}
    assert "dispatch_jobs_by_model" in plans["model"] and "dispatch_jobs_by_worker" in plans["worker"], plans
    assert "dispatch_jobs_by_created" in plans["newest"] and "chain_events_by_tx" in plans["tx"] and "chain_events_by_batch" in plans["batch"], plans


def test_the_model_index_reads_the_model_id_encode_puts_first():
    job = Job(model_id=MODELS[1], input_tokens=(1,), sampling=SamplingParams(), max_new_tokens=1, nonce=b"\x00" * 32)
    assert encode(job)[:32] == MODELS[1]


def test_every_recorded_event_s_parties_are_indexed_by_a_trigger(tmp_path):
    db = open_store(tmp_path / "n.sqlite").db
    tables, explorer = DispatcherTables(db), ExplorerTables(db)
    member = "0x" + "ab" * 20
    events = [_event(9, "CommitteeDrawn", 4, members=["0x" + "AA" * 20, member.upper().replace("0X", "0x"), "0x" + "cc" * 20], round=0, attempt=0),
              _event(10, "Opened", 4, round=0, slot=2, party=member, openingHash="0x00", vote=1),
              _event(11, "Slashed", node=member, amountWei=5, stakeLeftWei=0, by="0x" + "ee" * 20)]
    tables.record_events("protocol", events, 12)
    tables.record_events("protocol", events, 12)  # recorded twice (a restart): ignored, no duplicate party
    assert explorer.count_events_naming(bytes.fromhex("ab" * 20)) == {"CommitteeDrawn": 1, "Opened": 1, "Slashed": 1}
    assert not explorer.is_known_address(bytes.fromhex("ee" * 20))  # `by` names the slashing contract, not a node
    votes = explorer.get_events_naming(bytes.fromhex("ab" * 20), ("Opened",), 10, role="party")
    assert [e["args"]["vote"] for e in votes] == [1]


def test_migration_7_indexes_the_events_recorded_before_it(tmp_path):
    path = tmp_path / "old.sqlite"
    db = Database(sqlite3.connect(str(path), isolation_level=None))
    assert process_migrations(db, MIGRATIONS[:6]) == 6
    DispatcherTables(db).record_events("protocol", [_event(3, "Registered", node="0x" + "Ab" * 20, stakeWei=1, endpoint="e", models=[])], 4)
    assert process_migrations(db, MIGRATIONS[:7]) == 7 and get_schema_version(db) == 7
    assert ExplorerTables(db).count_events_naming(bytes.fromhex("ab" * 20)) == {"Registered": 1}


def test_the_status_body_and_every_explorer_view_render_one_outcome(tmp_path):
    """Issue 36: a lazy member's agree, proven a lie by an adjudication, is a lie (not counted) in the
    status body, the explorer's audit page, its lists and the member's node page, each slash with the
    same node, amount and rule: all of them render `verillm.spec.outcome` over the recorded events."""
    from verillm.node.api.explorer_bodies import compute_audit_body, compute_audit_brief
    from verillm.node.api.explorer_pages import compute_node_body

    tables = DispatcherTables(open_store(tmp_path / "n.sqlite").db)
    receipt = _dispatch(tables, 1)
    row = tables.insert_batch(b"\x0a" * 32, [receipt.job_hash])
    tables.update_batch(row, status="started", batch_id=0, posted_block=5)
    tables.insert_audit(3, receipt.job_hash, row, 0, requested=False)
    worker = "0x" + receipt.worker.hex()
    lazy, honest, silent = ("0x" + f"{n:02x}" * 20 for n in (0xA1, 0xB2, 0xC3))
    adjudication = os.urandom(32).hex()
    events = [_event(6, "AuditStarted", 3, 0, worker=worker, index=0, receiptHash="0x" + "00" * 32, outputTokens=2, requested=False),
              _event(7, "CommitteeDrawn", 3, round=0, attempt=0, members=[lazy, honest, silent]),
              _event(9, "Opened", 3, round=0, slot=0, party=worker, vote=0), _event(9, "Opened", 3, log_index=1, round=0, slot=1, party=lazy, vote=1),
              _event(9, "Opened", 3, log_index=2, round=0, slot=2, party=honest, vote=1),
              _event(10, "RoundDecided", 3, round=0, verdict=1, agree=2, disagree=0),
              {**_event(11, "Adjudicated", 3, contract="Disputes", round=0, slot=1, member=lazy, dataAgrees=False, vote=1), "tx_hash": adjudication},
              {**_event(11, "Slashed", log_index=1, node=lazy, amountWei=10**17, stakeLeftWei=0, by=honest), "contract": "Registry", "tx_hash": adjudication},
              _event(20, "PartySlashed", 3, node=silent, amountWei=10**16, reason="missed opening or minority vote"),
              _event(20, "AuditSettled", 3, log_index=1, verdict=1)]
    for e in events:  # the Registry's Slashed carries no audit id
        e["args"] = json.dumps({k: v for k, v in json.loads(e["args"]).items() if not (k in ("auditId", "batchId") and v is None)})
    tables.record_events("protocol", events, 21)
    tables.update_audit(3, status="settled", verdict=1)
    explorer = ExplorerTables(tables.db)
    status = compute_job_status(tables, receipt.job_hash, 21, PRESET)["audit"]
    page = compute_audit_body(explorer, 3)
    brief = compute_audit_brief(explorer, 3, worker)
    assert status["chain_outcome"] == page["chain_outcome"]
    outcome = page["chain_outcome"]
    assert outcome["verdict"] == "pass" and outcome["rounds"][0]["counted"] == {"agree": 1, "disagree": 0}
    assert [(v["node"], v["lie"], v["counted"]) for v in outcome["votes"]] == [(lazy, True, False), (honest, False, True)]
    assert {v["node"]: v["lie"] for v in brief["votes"]} == {lazy: True, honest: False, silent: False}
    assert page["conduct"][lazy]["lie"] and page["conduct"][lazy]["slashed_wei"] == 10**17
    slashes = [(s["node"], s["amount_wei"], s["rule"], s["reason"], s["penalty"]) for s in status["slashed"]]
    assert slashes == [(lazy, 10**17, "Adjudicated", "adjudicated: voted agree against its own posted data", False),
                       (silent, 10**16, "missed opening or minority vote", "missed opening", True)]
    for view in (page["slashed"], brief["slashed"]):
        assert [(s["node"], s["amount_wei"], s["rule"], s["reason"], s["penalty"]) for s in view] == slashes
    node_page = compute_node_body(explorer, bytes.fromhex(lazy[2:]), 50)
    assert [(s["reason"], s["amount_wei"], s["penalty"]) for s in node_page["slashes"]] == [(slashes[0][3], 10**17, False)]
    assert [v["lie"] for v in node_page["votes"]] == [True]
