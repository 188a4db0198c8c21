"""`verillm audit chain` re-derives every rule it checks exactly as the contracts apply it.

Each scenario runs real audits on anvil, then the auditor re-checks them from events and
calldata alone: every check must be "ok" (no false alarm on an honest chain), the parties the
contracts slashed are named with the rule that caught them, and a recorded event that the
rules do not produce is reported as an inconsistency (the auditor is not a rubber stamp).
"""

import dataclasses

import pytest
from click.testing import CliRunner

from verillm.chain.events import ChainEvent
from verillm.cli.audit import audit
from verillm.spec import audit as spec_audit
from verillm.verifier.chain_audit import ChainAuditor

from helpers.contracts import PRESET, World, connect


def _lazy_member_caught(world):
    """Worker node 0, dispatcher node 1; member seat 1 commits garbage, votes agree and is adjudicated."""
    run = world.start(world.make_worker(world.nodes[0]), dispatcher=world.nodes[1])
    world.post_members(run, [world.make_member(n, offset=0.3 if seat == 1 else 0.0) for seat, n in enumerate(world.committee(run))])
    world.open_worker(run)
    lazy = run.members[1]
    world.vote_members(run, votes=lambda seat: True if seat == 1 else None)  # the lazy seat agrees on its garbage
    world.protocol.finalize(world.outsider, run.audit_id)
    world.protocol.adjudicate(world.outsider, run.audit_id, 0, 2, world.opening(run, run.worker), world.opening(run, lazy))
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    world.protocol.settle(world.outsider, run.audit_id)
    return run, lazy


def _problems(findings, audit_id=None):
    return [f for f in findings if f.severity != "ok" and (audit_id is None or f.subject.startswith(f"audit {audit_id}"))]


def test_a_lazy_member_caught_by_adjudication_is_named_and_nothing_is_inconsistent(world, tmp_path):
    run, lazy = _lazy_member_caught(world)
    auditor = ChainAuditor(world.chain, world.protocol.deployment)
    findings = auditor.run()  # raised KeyError: 0 on the adjudication's calldata before the fix
    assert _problems(findings) == []
    subject = f"audit {run.audit_id}"
    assert any(f.subject == subject and "committee = stake-weighted sortition" in f.detail for f in findings)
    assert any("adjudication" in f.subject and f.severity == "ok" for f in findings)
    assert any(lazy.node.address in line and "adjudicated" in line for line in auditor.caught)
    assert auditor.states[run.audit_id].startswith("settled: pass")
    path = tmp_path / "addresses.json"
    world.protocol.deployment.save(path)
    result = CliRunner().invoke(audit, ["chain", "--rpc-url", world.chain.url, "--addresses", str(path)])
    assert result.exit_code == 0, result.output
    assert "inconsistencies: 0" in result.output and "caught" in result.output and lazy.node.address in result.output


def test_audit_chain_names_each_slash_with_its_amount_rule_and_node_and_says_it_again_as_json(world, tmp_path):
    """Issue 36: an audit that settled PASS while a member lost its stake to an adjudication said
    "slashed nobody"; now the state line, the caught line and `--json` carry the slash: the node, the
    amount (ETH and wei), the rule, and the lazy member's agree as a proven lie that did not count."""
    import json

    run, lazy = _lazy_member_caught(world)
    address = lazy.node.address
    auditor = ChainAuditor(world.chain, world.protocol.deployment)
    auditor.run()
    outcome = auditor.outcomes[run.audit_id]
    slash = next(s for s in outcome.slashes if s.node == address)
    taken = next(e for e in auditor.named("Slashed") if e.args["node"] == address)
    assert (slash.amount_wei, slash.rule, slash.role, slash.lie) == (taken.args["amountWei"], "Adjudicated", "member", True) and slash.amount_wei > 0
    state = auditor.states[run.audit_id]
    assert state.startswith(f"settled: pass; slashed {address} (adjudicated: voted agree against its own posted data, ") and "slashed nobody" not in state
    assert f"1 vote proven a lie ({address})" in state
    line = next(line for line in auditor.caught if address in line)
    assert f"{slash.amount_wei} wei" in line and 'rule "Adjudicated"' in line and f"{address} (member): adjudicated" in line
    path = tmp_path / "addresses.json"
    world.protocol.deployment.save(path)
    result = CliRunner().invoke(audit, ["chain", "--rpc-url", world.chain.url, "--addresses", str(path), "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output[result.output.index("{"):])  # progress lines go to stderr; CliRunner mixes them in
    assert body["inconsistencies"] == 0 and body["caught"] == auditor.caught
    audited = next(a for a in body["audits"] if a["audit_id"] == run.audit_id)
    assert audited["summary"] == state and audited["verdict"] == "pass"
    assert [(v["node"], v["lie"], v["counted"]) for v in audited["votes"] if v["node"] == address] == [(address, True, False)]
    assert [(s["amount_wei"], s["rule"]) for s in audited["slashes"] if s["node"] == address] == [(slash.amount_wei, "Adjudicated")]


def _settled(world, nonce: int, votes: dict[int, bool]):
    """An honest worker's audit where seat i seals, opens and votes ``votes[i]`` (a seat not in it never seals nor opens)."""
    run = world.start(world.make_worker(world.nodes[0], nonce=nonce), dispatcher=world.nodes[1])
    world.post_members(run, [world.make_member(n) for n in world.committee(run)])
    world.open_worker(run)
    world.vote_members(run, slots=list(votes), votes=votes.get)  # the seats in ``votes`` seal, then open
    if len(votes) < PRESET.COMMITTEE_SIZE:  # wait out the members' opening window
        open_by = world.protocol.get_round_state(run.audit_id).deadlines.members_open_by
        world.chain.mine(open_by - world.chain.get_block_number() + 1)
    world.protocol.finalize(world.outsider, run.audit_id)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    world.protocol.settle(world.outsider, run.audit_id)
    return run


def test_a_missed_opening_and_a_minority_vote_are_told_apart(world):
    outvoted = _settled(world, 3, {0: True, 1: False, 2: True})  # honest data, a "disagree" against the PASS majority
    silent = _settled(world, 4, {0: True, 1: True})  # seat 2 never opens
    auditor = ChainAuditor(world.chain, world.protocol.deployment)
    findings = auditor.run()
    assert [f for f in _problems(findings) if "disagree although" not in f.detail] == []
    minority, missing = outvoted.members[1].node.address, silent.members[2].node.address
    assert f"{minority} (minority vote" in auditor.states[outvoted.audit_id], auditor.states[outvoted.audit_id]
    assert f"{missing} (missed opening" in auditor.states[silent.audit_id], auditor.states[silent.audit_id]
    assert any(f"{minority.lower()} (minority vote)" in f.detail and f.severity == "ok" for f in findings)
    assert any(f"{missing}: penalised: missed opening" in line for line in auditor.caught)
    assert auditor.states[outvoted.audit_id].startswith("settled: pass; slashed nobody; penalised ")  # a penalty is not a conviction


def test_every_draw_and_redraw_is_the_contracts_own_draw(world):
    """The auditor's plan (seed from the blockhash after the round's entry, epoch, exclusions:
    worker, dispatcher, members so far, nodes unbonded by the seed block; seats to fill) run through the spec's sortition gives the members the contract drew, and the
    Registry's own `drawCommittee` over the same plan agrees with it."""
    runs = [world.start(world.make_worker(world.nodes[w], nonce=10 + w), dispatcher=world.nodes[d]) for w, d in ((0, 1), (2, 0), (3, 3))]
    redrawn = runs[0]
    members = [world.make_member(n) for n in world.committee(redrawn)]
    for slot in (0, 1):  # seat 2 never posts: a redraw fills it from the one candidate left
        world.protocol.post_committee_receipt(world.outsider, redrawn.audit_id, slot, members[slot].receipt)
    world.chain.mine(PRESET.COMMIT_WINDOW_BLOCKS + 1)
    world.protocol.replace_missing(world.outsider, redrawn.audit_id)
    auditor = ChainAuditor(world.chain, world.protocol.deployment)
    findings = auditor.run()
    draws = auditor.named("CommitteeDrawn")
    assert {e.args["attempt"] for e in draws} == {0, 1} and len(draws) == 4
    assert [f for f in findings if "committee" in f.detail or "redraw" in f.detail] != []
    assert all(f.severity == "ok" for f in findings if "sortition" in f.detail)
    for event in draws:
        audit_id = event.args["auditId"]
        base = _base(world, auditor, audit_id)
        plan = auditor.committees.compute_plan(audit_id, event.args["round"], event.args["attempt"], event, base)
        seats = auditor.committees.compute_draw(plan, base["model_id"], event)
        contract = world.chain.call(world.protocol.registry, "drawCommittee", base["model_id"], plan.seed, plan.attempt, plan.count,
                                    [world.chain.w3.to_checksum_address(a) for a in plan.excluded], plan.epoch, plan.seed_block,
                                    block=event.block_number - 1)
        assert [s for s in seats if s not in plan.kept] == [c.lower() for c in contract] == [m.lower() for m in event.args["members"] if m.lower() not in plan.kept]
        assert base["dispatcher"] in plan.excluded and base["worker"] in plan.excluded


def _base(world, auditor, audit_id):
    started = auditor.named("AuditStarted", auditId=audit_id)[0]
    root, dispatcher, count, posted, beta, *_ = world.protocol.batches.call("getBatch", started.args["batchId"])
    return {"worker": started.args["worker"].lower(), "dispatcher": dispatcher.lower(), "beta": bytes(beta),
            "index": started.args["index"], "posted_block": posted, "model_id": world.protocol.get_audit(audit_id).model_id}


def test_a_committee_that_did_not_exclude_the_dispatcher_is_an_inconsistency(world):
    """What the old auditor assumed (only the worker excluded) is not the contract's rule: on a
    draw where the two rules differ, the real committee passes and the worker-only one is flagged."""
    for nonce in range(21, 31):
        run = world.start(world.make_worker(world.nodes[0], nonce=nonce), dispatcher=world.nodes[1])
        auditor = ChainAuditor(world.chain, world.protocol.deployment)
        drawn = auditor.named("CommitteeDrawn", auditId=run.audit_id)[0]
        base = _base(world, auditor, run.audit_id)
        plan = auditor.committees.compute_plan(run.audit_id, 0, 0, drawn, base)  # the round's seed and epoch
        slots, weights = auditor.committees.compute_weights(base["model_id"], plan.epoch, drawn)
        worker_only = spec_audit.compute_committee(plan.seed, 0, PRESET.COMMITTEE_SIZE, slots,
                                                   spec_audit.compute_excluded_weights(slots, weights, [base["worker"]]))
        if base["dispatcher"] in worker_only:
            break
    else:
        raise AssertionError("no draw in ten where the worker-only rule picks the dispatcher (stake 2 of 7: practically impossible)")
    honest = [f for f in auditor.run() if f.subject == f"audit {run.audit_id}" and "committee" in f.detail]
    assert [f.severity for f in honest] == ["ok"]
    forged = dataclasses.replace(drawn, args={**drawn.args, "members": list(worker_only)})
    auditor = ChainAuditor(world.chain, world.protocol.deployment)
    auditor.events = [forged if _same(e, drawn) else e for e in auditor.events]
    flagged = [f for f in auditor.run() if f.subject == f"audit {run.audit_id}" and "committee" in f.detail]
    assert [f.severity for f in flagged] == ["inconsistent"]


def _same(a: ChainEvent, b: ChainEvent) -> bool:
    return (a.block_number, a.log_index) == (b.block_number, b.log_index)


def test_a_tally_that_counts_an_adjudicated_member_is_an_inconsistency(world):
    run, _ = _lazy_member_caught(world)
    auditor = ChainAuditor(world.chain, world.protocol.deployment)
    decided = auditor.named("RoundDecided", auditId=run.audit_id)[0]
    forged = dataclasses.replace(decided, args={**decided.args, "agree": decided.args["agree"] - 1})
    auditor.events = [forged if _same(e, decided) else e for e in auditor.events]
    flagged = [f for f in auditor.run() if f.severity == "inconsistent"]
    assert [f.subject for f in flagged] == [f"audit {run.audit_id} round 0"], flagged


@pytest.fixture(scope="module")
def big_world(contracts_anvil):
    """Twelve nodes: enough for an escalation committee of 5 after the worker, the dispatcher and round 0's 3."""
    return World(connect(contracts_anvil), extra_nodes=6)


def test_an_escalation_committee_excludes_every_member_drawn_before(big_world):
    world = big_world
    snapshot = world.chain.snapshot()
    try:
        run = world.start(world.make_worker(world.nodes[0], nonce=40), dispatcher=world.nodes[1])
        world.post_members(run, [world.make_member(n) for n in world.committee(run)])
        world.open_worker(run)
        world.vote_members(run)
        world.protocol.finalize(world.outsider, run.audit_id)
        world.protocol.escalate(world.nodes[1].account, run.audit_id)  # the dispatcher: standing (issue 34)
        world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
        world.protocol.draw_escalation(world.outsider, run.audit_id)
        auditor = ChainAuditor(world.chain, world.protocol.deployment)
        findings = [f for f in auditor.run() if f.subject == f"audit {run.audit_id}" and "sortition" in f.detail]
        assert [f.severity for f in findings] == ["ok", "ok"], findings
        assert "round 1 committee" in findings[1].detail and "3 earlier members excluded" in findings[1].detail
        escalation = set(m.lower() for m in world.protocol.get_committee(run.audit_id, 1))
        first = set(m.lower() for m in world.protocol.get_committee(run.audit_id, 0))
        assert len(escalation) == PRESET.ESCALATION_COMMITTEE_SIZE and not escalation & (first | {world.nodes[0].address.lower(), world.nodes[1].address.lower()})
    finally:
        world.chain.revert(snapshot)


def test_a_draw_whose_block_state_was_pruned_is_a_note_not_a_crash(world):
    """The project's anvil keeps the last 500 blocks' states; a kept devnet outlives that. The
    committee of an older audit cannot be re-derived there: a note says so (run against an
    archive node), and everything else is still checked."""
    run = world.start(world.make_worker(world.nodes[0], nonce=50), dispatcher=world.nodes[1])
    world.chain.mine(600)
    findings = ChainAuditor(world.chain, world.protocol.deployment).run()
    mine = [f for f in findings if f.subject == f"audit {run.audit_id}"]
    assert any(f.severity == "note" and "archive node" in f.detail for f in mine), mine
    assert not [f for f in findings if f.severity == "inconsistent"]
    assert any(f.severity == "ok" and "signed by its worker" in f.detail for f in mine)
