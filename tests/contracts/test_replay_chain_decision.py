"""What `verillm audit replay` says the chain decided (verifier/chain_outcome.py `read_audit_outcome`,
`format_chain_decision`, `format_agreement`), read from a real chain: audits run on anvil to
settlement, their events read as `audit chain` reads them and derived by `verillm.spec.outcome`.
The replay's own verdict is set beside the round's: an ACCEPT of a round the chain failed says
DISAGREE. Evidence naming an audit of another receipt, or no audit at all, is said so."""

from verillm.spec.receipt import compute_receipt_hash
from verillm.spec.settlement import FAIL, PASS
from verillm.verifier.chain_outcome import format_agreement, format_chain_decision, read_audit_outcome


def _read(world, run, receipt=None):
    return read_audit_outcome(world.chain, world.protocol.deployment, run.audit_id, compute_receipt_hash(receipt or run.worker.receipt))


def test_a_passed_audit_its_counted_votes_who_was_paid_and_the_replay_beside_it(world):
    worker = world.make_worker(world.nodes[0])
    run = world.start(worker, dispatcher=world.nodes[1])
    members = [world.make_member(n) for n in world.committee(run)]
    assert world.decide(run, members) == PASS
    world.chain.mine(world.preset.DISPUTE_WINDOW_BLOCKS + 1)
    world.protocol.settle(world.outsider, run.audit_id)
    outcome = _read(world, run)
    assert (outcome.audit_id, outcome.state, outcome.verdict) == (run.audit_id, "settled", "pass")
    assert [(d.round_index, d.verdict) for d in outcome.rounds] == [(0, "pass")] and all(v.counted for v in outcome.votes)
    paid = {p.node.lower() for p in outcome.paid}
    assert {m.node.address.lower() for m in members} <= paid  # the committee's fees, credited at settlement
    lines = format_chain_decision(outcome)
    assert lines[0] == f"  audit {run.audit_id}: settled, verdict pass"
    assert "  round 0: pass; votes that counted: 3 agree, 0 disagree" in lines and "  slashed: nobody" in lines
    assert sum(line.startswith("  paid: ") for line in lines) == len(outcome.paid)
    assert format_agreement(outcome, 0, True).startswith("replay vs chain: AGREE — the replay says ACCEPT, the chain's round 0 verdict is pass")
    assert format_agreement(outcome, 0, False).startswith("replay vs chain: DISAGREE — the replay says REJECT")
    assert "has not decided round 1" in format_agreement(outcome, 1, True)


def test_a_failed_audit_names_each_slash_with_its_rule_and_amount(world):
    worker, run, _ = world.start_framed(lambda slot: slot == 2)  # two fabricated members disagree: round 0 fails an honest worker
    world.chain.mine(world.preset.DISPUTE_WINDOW_BLOCKS + 1)
    assert world.protocol.settle(world.outsider, run.audit_id).value == FAIL
    outcome = _read(world, run)
    assert outcome.verdict == "fail" and any(s.node.lower() == worker.node.address.lower() and s.role == "worker" for s in outcome.slashes)
    slashed = [line for line in format_chain_decision(outcome) if line.startswith("  slashed: ")]
    assert len(slashed) == len(outcome.slashes) and all(" ETH = " in line and "rule \"" in line for line in slashed)
    assert any(worker.node.address.lower() in line.lower() and "(worker)" in line for line in slashed)
    assert format_agreement(outcome, 0, True).startswith("replay vs chain: DISAGREE — the replay says ACCEPT, the chain's round 0 verdict is fail")


def test_evidence_naming_another_receipts_audit_or_none_is_said_so(world):
    worker = world.make_worker(world.nodes[0])
    run = world.start(worker, dispatcher=world.nodes[1])
    other = world.make_worker(world.nodes[2], nonce=1)
    assert "is of receipt 0x" in _read(world, run, other.receipt) and "not the replayed" in _read(world, run, other.receipt)
    missing = read_audit_outcome(world.chain, world.protocol.deployment, run.audit_id + 50, compute_receipt_hash(worker.receipt))
    assert missing.startswith(f"no audit {run.audit_id + 50} on this chain")
