"""One audit's outcome from its events (`verillm.spec.outcome`): the derivation `audit chain`, the
status body, the explorer and the devnet all render. A vote proven a lie does not count; every
slash carries its node, role, amount in wei and the contract's rule."""

import pytest

from verillm.errors import InvalidInput
from verillm.spec.outcome import (
    EventRecord, compute_audit_outcome, compute_counted_tally, compute_eth_text, compute_outcome_dict, compute_tx_key,
)
from verillm.spec.settlement import AGREE, DISAGREE, FAIL, PASS

WORKER, A, B, C, DISPATCHER = ("0x" + f"{n:02x}" * 20 for n in (0x0A, 0xA1, 0xB2, 0xC3, 0x0D))
ETH = 10**18


def _events(*rows, audit_id=7) -> list[EventRecord]:
    """(block, name, args, tx) rows; every event carrying an audit id but ContestLost and Slashed (as on chain)."""
    out = []
    for i, (block, name, args, tx) in enumerate(rows):
        own = {} if name in ("ContestLost", "Slashed") else {"auditId": audit_id}
        out.append(EventRecord(name, {**own, **args}, block, i, compute_tx_key(f"{tx:064x}")))
    return out


def _started(worker=WORKER):
    return (5, "AuditStarted", {"worker": worker, "batchId": 1, "index": 0}, 1)


def _opened(slot, vote, party, block=20):
    return (block, "Opened", {"round": 0, "slot": slot, "party": party, "vote": vote}, 100 + slot)


def _lazy_member_audit():
    """An honest worker; A agrees on data it never computed and is adjudicated; C misses its opening."""
    return _events(_started(), (10, "CommitteeDrawn", {"round": 0, "attempt": 0, "members": [A, B, C]}, 2),
                   _opened(0, 0, WORKER), _opened(1, AGREE, A), _opened(2, AGREE, B),
                   (30, "RoundDecided", {"round": 0, "verdict": PASS, "agree": 2, "disagree": 0}, 3),
                   (35, "Adjudicated", {"round": 0, "slot": 1, "member": A, "dataAgrees": False, "vote": AGREE}, 4),
                   (35, "Slashed", {"node": A, "amountWei": ETH // 10, "stakeLeftWei": 0, "by": DISPATCHER}, 4),
                   (50, "PartySlashed", {"node": C, "amountWei": ETH // 100, "reason": "missed opening or minority vote"}, 5),
                   (50, "AuditSettled", {"verdict": PASS}, 5))


def test_a_lie_proven_by_adjudication_does_not_count_and_its_slash_names_amount_rule_and_node():
    outcome = compute_audit_outcome(list(reversed(_lazy_member_audit())))  # any order: sorted by (block, log index)
    assert (outcome.audit_id, outcome.worker, outcome.state, outcome.verdict) == (7, WORKER, "settled", "pass")
    lazy = next(v for v in outcome.votes if v.node == A)
    assert lazy.lie and not lazy.counted and lazy.vote == AGREE
    assert [v.node for v in outcome.votes if v.counted] == [B]
    assert compute_counted_tally(outcome, 0) == (1, 0)  # RoundDecided counted 2 before the lie was proven
    assert (outcome.rounds[0].agree, outcome.rounds[0].verdict) == (2, "pass")
    slashes = {s.node: s for s in outcome.slashes}
    assert (slashes[A].amount_wei, slashes[A].rule, slashes[A].role, slashes[A].lie, slashes[A].penalty) == (ETH // 10, "Adjudicated", "member", True, False)
    assert slashes[A].meaning == "adjudicated: voted agree against its own posted data"
    assert (slashes[C].rule, slashes[C].meaning, slashes[C].penalty, slashes[C].amount_wei) == ("missed opening or minority vote", "missed opening", True, ETH // 100)
    body = compute_outcome_dict(outcome)
    assert body["rounds"][0]["counted"] == {"agree": 1, "disagree": 0}
    assert {s["node"]: s["amount_eth"] for s in body["slashes"]} == {A: "0.1", C: "0.01"}


def test_who_was_paid_is_every_credit_of_the_audits_transactions():
    rows = _lazy_member_audit() + _events((50, "Credited", {"to": B, "amountWei": 3 * 10**12}, 5), (50, "Credited", {"to": WORKER, "amountWei": 10**12}, 5))
    outcome = compute_audit_outcome([EventRecord(e.name, {k: v for k, v in e.args.items() if not (e.name == "Credited" and k == "auditId")},
                                                 e.block_number, e.log_index, e.tx_hash) for e in rows])  # Credited names no audit
    assert [(p.node, p.amount_wei) for p in outcome.paid] == [(B, 3 * 10**12), (WORKER, 10**12)]
    assert [(p["node"], p["amount_eth"]) for p in compute_outcome_dict(outcome)["paid"]] == [(B, "0.000003"), (WORKER, "0.000001")]
    assert compute_audit_outcome(_lazy_member_audit()).paid == ()  # a view that read no credit says none


def test_a_failed_worker_a_minority_vote_and_a_lost_contest():
    events = _events(_started(), (10, "CommitteeDrawn", {"round": 0, "attempt": 0, "members": [A, B, C]}, 2),
                     _opened(0, 0, WORKER), _opened(1, AGREE, A), _opened(2, DISAGREE, B), _opened(3, DISAGREE, C),
                     (30, "RoundDecided", {"round": 0, "verdict": FAIL, "agree": 1, "disagree": 2}, 3),
                     (31, "Contested", {"contestId": 9, "round": 0, "slot": 1, "challenger": B}, 6),
                     (44, "ContestLost", {"contestId": 9, "party": A, "slashedWei": 3 * ETH // 10}, 7),
                     (44, "ContestLost", {"contestId": 10, "party": B, "slashedWei": 1}, 8),  # another audit's contest: not this one's
                     (50, "PartySlashed", {"node": WORKER, "amountWei": ETH, "reason": "failed audit"}, 5),
                     (50, "AuditSettled", {"verdict": FAIL}, 5))
    outcome = compute_audit_outcome(events)
    assert outcome.verdict == "fail" and [v.node for v in outcome.votes if v.lie] == [A]
    rows = [(s.node, s.role, s.rule, s.amount_wei, s.lie, s.penalty) for s in outcome.slashes]
    assert rows == [(A, "member", "ContestLost", 3 * ETH // 10, True, False), (WORKER, "worker", "failed audit", ETH, True, False)]


def test_an_open_and_an_abandoned_audit():
    assert compute_audit_outcome(_events(_started())).state == "open"
    abandoned = compute_audit_outcome(_events(_started(), (40, "AuditAbandoned", {"round": 0, "reason": "committee never drawn"}, 2),
                                              (40, "PartySlashed", {"node": DISPATCHER, "amountWei": 5, "reason": "missed committee draw"}, 2)))
    assert (abandoned.state, abandoned.verdict, abandoned.abandoned_round, abandoned.abandoned_reason) == ("abandoned", "abandoned", 0, "committee never drawn")
    assert [(s.node, s.role, s.penalty) for s in abandoned.slashes] == [(DISPATCHER, "dispatcher", False)]


def test_events_that_are_not_one_audits_are_refused():
    with pytest.raises(InvalidInput, match="no AuditStarted"):
        compute_audit_outcome(_events(_opened(1, AGREE, A)))
    with pytest.raises(InvalidInput, match="several audits"):
        compute_audit_outcome(_events(_started()) + _events((9, "AuditSettled", {"verdict": PASS}, 3), audit_id=8))


def test_amounts_in_eth_are_exact():
    assert [compute_eth_text(w) for w in (0, 10**17, 10**18, 123456789012345678901, 1)] == ["0", "0.1", "1", "123.456789012345678901", "0.000000000000000001"]
    assert compute_tx_key(b"\xab" * 2) == compute_tx_key("ABAB") == compute_tx_key("0xabab") == "0xabab"
