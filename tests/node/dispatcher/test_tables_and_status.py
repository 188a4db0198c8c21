"""The dispatcher's tables on a real SQLite file (migration 3 of the node store), and the job
status and evidence computed from them."""

import dataclasses
import json
import os

from verillm.node.dispatcher.status import compute_job_deadlines, compute_job_status
from verillm.spec.audit import Phase, RoundDeadlines, RoundState
from verillm.spec.params import compute_timeline
from verillm.node.store.evidence import compute_evidence
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.store.migrations import MIGRATIONS, get_schema_version
from verillm.node.store.store import open_store
from verillm.spec.params import MINIMAL
from verillm.spec.receipt import SigningDomain, compute_receipt, compute_receipt_hash, sign_receipt
from verillm.spec.types import Job, LeafOpening, Leaf, Opening, SamplingParams
from verillm.spec.merkle import MerkleProof
from verillm.verifier.replay import load_case, read_evidence

KEY = b"\x07" * 32
PRESET = MINIMAL.replace(START_WINDOW_BLOCKS=10)


def _job(n: int) -> Job:
    return Job(model_id=b"\x01" * 32, input_tokens=(1, 2, n), sampling=SamplingParams(), max_new_tokens=2, nonce=bytes([n]) * 32)


def _dispatch(tables: DispatcherTables, n: int):
    from eth_keys import keys

    job = _job(n)
    worker = keys.PrivateKey(KEY).public_key.to_canonical_address()
    receipt = sign_receipt(compute_receipt(job, (4, 5), b"\x09" * 32, worker, 1_000), KEY, SigningDomain())
    tables.insert_dispatched_job(receipt.job_hash, job, worker, "http://w", (4, 5), receipt, audit_requested=n == 1)
    return receipt


def _event(block: int, name: str, audit_id=None, batch_id=None, **args) -> dict:
    return {"block_number": block, "log_index": 0, "contract": "Jobs", "name": name, "audit_id": audit_id, "batch_id": batch_id,
            "contest_id": None, "args": json.dumps({"auditId": audit_id, "batchId": batch_id, **args}), "tx_hash": os.urandom(32).hex()}


def test_migration_3_adds_the_dispatcher_tables(tmp_path):
    store = open_store(tmp_path / "n.sqlite")
    assert get_schema_version(store.db) == len(MIGRATIONS) >= 3
    assert {"dispatch_jobs", "dispatch_batches", "dispatch_audits", "committee_jobs", "party_duties", "proven_openings",
            "chain_events", "chain_cursor", "chain_txs"} <= set(store.db.table_names())


def test_a_job_goes_from_dispatched_to_final_as_the_chain_moves(tmp_path):
    tables = DispatcherTables(open_store(tmp_path / "n.sqlite").db)
    receipts = [_dispatch(tables, n) for n in (1, 2)]
    job_hash = receipts[0].job_hash
    assert compute_job_status(tables, job_hash, 0, PRESET)["status"] == "dispatched"
    row = tables.insert_batch(b"\x0a" * 32, [r.job_hash for r in receipts])
    assert [j.batch_index for j in tables.get_batch_jobs(row)] == [0, 1] and tables.get_unbatched_jobs(10) == []
    assert compute_job_status(tables, job_hash, 0, PRESET)["status"] == "dispatched"  # still posting
    tables.update_batch(row, status="posted", batch_id=0, posted_block=5)
    assert compute_job_status(tables, job_hash, 6, PRESET)["status"] == "committed"
    tables.insert_audit(3, job_hash, row, 0, requested=True)
    tables.record_events("protocol", [_event(9, "CommitteeDrawn", 3, members=["0xaa", "0xbb", "0xcc"], round=0, attempt=0)], 10)
    body = compute_job_status(tables, job_hash, 10, PRESET)
    assert body["status"] == "audited" and body["audit"]["committee"] == ["0xaa", "0xbb", "0xcc"] and body["audit"]["requested"]
    tables.record_events("protocol", [_event(12, "RoundDecided", 3, round=0, verdict=1, agree=3, disagree=0)], 13)
    assert compute_job_status(tables, job_hash, 13, PRESET)["status"] == "verified"
    tables.update_audit(3, status="settled", verdict=1)
    assert compute_job_status(tables, job_hash, 30, PRESET)["status"] == "final"
    assert tables.get_cursor("protocol", 0) == 13


def test_a_job_the_draw_skipped_is_final_once_the_start_window_closes(tmp_path):
    tables = DispatcherTables(open_store(tmp_path / "n.sqlite").db)
    receipt = _dispatch(tables, 2)
    row = tables.insert_batch(b"\x0a" * 32, [receipt.job_hash])
    tables.update_batch(row, status="started", batch_id=4, posted_block=5)
    tables.record_events("protocol", [_event(8, "AuditDrawn", batch_id=4, seed="0x00", beta="0x00")], 9)
    assert compute_job_status(tables, receipt.job_hash, 18, PRESET)["status"] == "committed"
    assert compute_job_status(tables, receipt.job_hash, 19, PRESET)["status"] == "final"


def test_each_step_names_the_contract_deadline_it_waits_on_and_the_latest_final_block(tmp_path):
    """The deadline each status shows is the window the contracts enforce (verillm/spec/deadlines.py;
    an audit's round deadlines come from Jobs.getRoundState, checked against Jobs.getDeadlines on anvil in
    tests/contracts/test_state_machine.py), and the final bound is the timeline's."""
    tables = DispatcherTables(open_store(tmp_path / "n.sqlite").db)
    receipt = _dispatch(tables, 2)  # auditable until block 1,000
    job_hash, span = receipt.job_hash, compute_timeline(PRESET)

    def deadlines(head, round_state=None, rate=2.0):
        body = compute_job_deadlines(tables, compute_job_status(tables, job_hash, head, PRESET), PRESET, round_state, rate)
        return body["status"], body["phase_deadline"], body["phase_ends_block"], body["final_by_block"], body["seconds_per_block"]

    assert deadlines(3) == ("dispatched", None, None, 1_000 + span.audit_span, 2.0)  # no promise made: the receipt's horizon bounds it
    tables.insert_promise(job_hash, compute_receipt_hash(receipt), 33, b"\x01" * 65)
    assert deadlines(3, rate=None) == ("dispatched", "batch_by", 33, 1_000 + span.audit_span, None)
    row = tables.insert_batch(b"\x0a" * 32, [job_hash])
    tables.update_batch(row, status="posted", batch_id=4, posted_block=20)
    draw_by = 20 + PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS  # Batches.drawAudit: TooLate after seed + window
    assert deadlines(21) == ("committed", "draw_by", draw_by, 20 + span.start_span + span.audit_span, 2.0)
    tables.update_batch(row, status="drawn")
    tables.record_events("protocol", [_event(25, "AuditDrawn", batch_id=4, seed="0x00", beta="0x00")], 26)
    start_by = 25 + PRESET.START_WINDOW_BLOCKS
    assert deadlines(26) == ("committed", "start_by", start_by, start_by + span.audit_span, 2.0)
    assert deadlines(start_by + 1) == ("final", None, None, None, None)  # no audit started: final, nothing left to wait for
    tables.update_batch(row, status="missed")
    assert deadlines(26)[1:4] == (None, None, None)  # a missed draw: no audit of it can start

    tables.update_batch(row, status="started")
    tables.insert_audit(5, job_hash, row, 0, requested=False)
    tables.record_events("protocol", [_event(30, "AuditStarted", 5, batch_id=4, worker="0x" + "11" * 20)], 31)
    state = _round_state(Phase.COMMITTING, commit_by=70)
    assert deadlines(40, state) == ("audited", "commit_by", 70, 30 + span.audit_span, 2.0)
    claimed = dataclasses.replace(state, publish_deadline=45)  # a delivery claim stands: the worker's publication is what the round waits on
    assert deadlines(40, claimed)[1:3] == ("publish_by", 45)
    assert deadlines(60, _round_state(Phase.OPENING, worker_open_by=80, members_open_by=120))[1:3] == ("worker_open_by", 80)
    opened = dataclasses.replace(_round_state(Phase.OPENING, worker_open_by=80, members_open_by=120), worker_opened=True)
    assert deadlines(60, opened)[1:3] == ("members_open_by", 120)
    tables.record_events("protocol", [_event(90, "RoundDecided", 5, round=0, verdict=1, agree=3, disagree=0)], 91)
    assert deadlines(91, _round_state(Phase.DECIDED, dispute_by=100)) == ("verified", "dispute_by", 100, 30 + span.audit_span, 2.0)
    tables.update_audit(5, status="settled", verdict=1)
    assert deadlines(120) == ("final", None, None, None, None)


def _round_state(phase: Phase, **deadlines) -> RoundState:
    d = RoundDeadlines(*(deadlines.get(f.name, 0) for f in dataclasses.fields(RoundDeadlines)))
    return RoundState(phase, 0, 0, 3, 0, 0, 0, False, False, False, 0, 0, d)


def test_evidence_read_from_the_store_file_replays_the_same_case(tmp_path):
    path = tmp_path / "n.sqlite"
    tables = DispatcherTables(open_store(path).db)
    receipt = _dispatch(tables, 1)
    row = tables.insert_batch(b"\x0a" * 32, [receipt.job_hash])
    tables.insert_audit(3, receipt.job_hash, row, 0, requested=False)
    opening = Opening(b"\x09" * 32, (LeafOpening(Leaf(2, 1, (0.5,), 1), MerkleProof(0, 1, ())),))
    tables.insert_proven_opening(3, 0, 0, b"\x0c" * 32, opening)
    served = compute_evidence(tables, receipt.job_hash)
    from_file = read_evidence(str(path), receipt.job_hash)
    assert from_file == served
    case = load_case(from_file)
    assert (case.audit_id, case.challenge_seed, case.worker_opening, case.receipt) == (3, b"\x0c" * 32, opening, receipt)


def test_a_member_penalty_says_whether_the_member_was_outvoted_or_missed_its_opening(tmp_path):
    """The contract names both rules in one string ("missed opening or minority vote"); the node
    knows which applied (did the member open?) and says it, marking both as penalties, not convictions."""
    tables = DispatcherTables(open_store(tmp_path / "n.sqlite").db)
    receipt = _dispatch(tables, 3)
    row = tables.insert_batch(b"\x0a" * 32, [receipt.job_hash])
    tables.update_batch(row, status="started", batch_id=1, posted_block=5)
    tables.insert_audit(4, receipt.job_hash, row, 0, requested=False)
    worker = "0x" + receipt.worker.hex()
    penalty = "missed opening or minority vote"
    tables.record_events("protocol", [
        _event(9, "CommitteeDrawn", 4, members=["0xaa", "0xbb", "0xcc"], round=0, attempt=0),
        _event(11, "Opened", 4, round=0, slot=0, party=worker, openingHash="0x00", vote=0),
        _event(12, "Opened", 4, round=0, slot=1, party="0xAA", openingHash="0x00", vote=1),
        _event(13, "Opened", 4, round=0, slot=2, party="0xBB", openingHash="0x00", vote=2),  # one event a block: (block, log index) is the key
        _event(20, "PartySlashed", 4, node="0xBB", amountWei=5, reason=penalty),
        _event(21, "PartySlashed", 4, node="0xCC", amountWei=5, reason=penalty),
    ], 22)
    slashed = {s["node"]: s for s in compute_job_status(tables, receipt.job_hash, 22, PRESET)["audit"]["slashed"]}
    assert slashed["0xBB"]["reason"].startswith("minority vote") and slashed["0xCC"]["reason"].startswith("missed opening")
    assert slashed["0xBB"]["penalty"] and slashed["0xCC"]["penalty"]
