"""`verillm audit replay` on evidence from real runs: an honest worker is accepted, a quantized
one and a tampered opening are rejected for the right reason, and the report says where."""

import pytest

from verillm.errors import NotFound
from verillm.spec.policy import REASON_FINGERPRINT, REASON_PROOF
from verillm.engine.profiles import load_profile
from verillm.spec.outcome import EventRecord, compute_audit_outcome, compute_tx_key
from verillm.spec.receipt import SigningDomain
from verillm.spec.settlement import FAIL
from verillm.verifier.replay import compute_challenge_count, load_case, run_replay
from verillm.verifier.report import format_replay

from verifier_evidence import CHALLENGE_POSITIONS, build_evidence, move_first_leaf


@pytest.fixture(scope="module")
def profile():
    return load_profile("tiny", "float32")


def _replay(engine, evidence, profile):
    return run_replay(load_case(evidence), "tiny", engine, profile)


def test_an_honest_worker_is_accepted_and_every_challenged_cell_is_reported(tiny_engine, tiny_job, profile):
    replay = _replay(tiny_engine, build_evidence(tiny_engine, tiny_job), profile)
    assert replay.result.accepted, replay.result.reasons
    assert replay.signature.startswith("valid")
    report = format_replay(replay)
    assert "verdict: ACCEPT" in report
    for position in replay.challenge.positions:
        row = next(line for line in report.splitlines() if line.strip().startswith(f"{position} "))
        assert row.count(" ok") == len(replay.challenge.layers) and "within margin" in row
    assert len(replay.challenge.positions) == min(CHALLENGE_POSITIONS, len(replay.case.output_tokens))
    assert report.splitlines()[-1] == "chain decision: not read (no --rpc-url)"  # without chain access it says so, last
    # with the chain's outcome (read by `read_audit_outcome`; tests/contracts/test_replay_chain_decision.py reads it from anvil)
    chain = compute_audit_outcome(_audit_events(7, verdict=FAIL))
    lines = format_replay(replay, chain).splitlines()
    tail = lines[next(i for i, line in enumerate(lines) if line.startswith("chain decision (")):]
    assert tail[1:3] == ["  audit 7: settled, verdict fail", "  round 0: fail; votes that counted: 0 agree, 1 disagree"]
    assert any(line.startswith("  slashed: 0x" + "0a" * 20) and 'rule "failed audit"' in line for line in tail)
    assert "  paid: 0x" + "b2" * 20 + " 0.000003 ETH (block 50)" in tail
    assert tail[-1].startswith("replay vs chain: DISAGREE — the replay says ACCEPT, the chain's round 0 verdict is fail")


def _audit_events(audit_id: int, verdict: int) -> list[EventRecord]:
    worker, member = "0x" + "0a" * 20, "0x" + "b2" * 20
    rows = [(5, "AuditStarted", {"auditId": audit_id, "worker": worker, "batchId": 1, "index": 0}),
            (20, "Opened", {"auditId": audit_id, "round": 0, "slot": 1, "party": member, "vote": 2}),
            (30, "RoundDecided", {"auditId": audit_id, "round": 0, "verdict": verdict, "agree": 0, "disagree": 1}),
            (50, "PartySlashed", {"auditId": audit_id, "node": worker, "amountWei": 10**16, "reason": "failed audit"}),
            (50, "Credited", {"to": member, "amountWei": 3 * 10**12}), (50, "AuditSettled", {"auditId": audit_id, "verdict": verdict})]
    return [EventRecord(name, args, block, i, compute_tx_key(f"{block:064x}")) for i, (block, name, args) in enumerate(rows)]


def test_a_quantized_worker_is_rejected_on_fingerprints(tiny_model, tiny_engine, tiny_job, profile):
    from verillm.engine.attacks import get_attack

    cheater = get_attack("int8").build(*tiny_model)
    replay = _replay(tiny_engine, build_evidence(cheater, tiny_job), profile)
    assert not replay.result.accepted and REASON_FINGERPRINT in replay.result.reason_kinds
    report = format_replay(replay)
    assert "verdict: REJECT" in report and "OVER" in report


def test_an_opening_that_does_not_prove_is_rejected_as_proof(tiny_engine, tiny_job, profile):
    replay = _replay(tiny_engine, build_evidence(tiny_engine, tiny_job, edit_opening=move_first_leaf), profile)
    assert not replay.result.accepted and replay.result.reason_kinds == {REASON_PROOF}
    assert replay.worker_cells == {} and "did not prove" in format_replay(replay)


def test_a_receipt_signed_for_another_deployment_is_reported_invalid(tiny_engine, tiny_job, profile):
    evidence = build_evidence(tiny_engine, tiny_job)
    evidence["signing_domain"] = {"chain_id": 1, "verifying_contract": "0x" + "42" * 20}
    replay = _replay(tiny_engine, evidence, profile)
    assert replay.result.accepted and replay.signature.startswith("INVALID")
    assert "verdict: REJECT" in format_replay(replay)


def test_evidence_without_an_audit_cannot_be_replayed(tiny_engine, tiny_job):
    evidence = build_evidence(tiny_engine, tiny_job)
    with pytest.raises(NotFound, match="no audit"):
        load_case({**evidence, "audits": []})
    without_worker = dict(evidence["audits"][0], openings={})
    with pytest.raises(NotFound, match="worker's opening"):
        load_case({**evidence, "audits": [without_worker]})


def test_the_challenge_size_is_read_from_the_workers_opening(tiny_engine, tiny_job):
    case = load_case(build_evidence(tiny_engine, tiny_job))
    first_layer = tiny_engine.manifest.committed_layers[0]
    assert compute_challenge_count(case.worker_opening, first_layer) == min(CHALLENGE_POSITIONS, len(case.output_tokens))
    assert case.signing_domain == SigningDomain(31337, b"\x42" * 20)
