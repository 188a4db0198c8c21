"""`verillm audit chain` reports every audit's state: settled, abandoned (nobody slashed), open."""

import dataclasses

from click.testing import CliRunner

from verillm.chain import protocol as chain_protocol
from verillm.verifier.chain_audit import ChainAuditor
from verillm.cli.audit import audit
from verillm.verifier.report import format_chain_audit

from helpers.contracts import PRESET


def _abandon(world):
    run = world.start(world.make_worker(world.nodes[0]), dispatcher=world.nodes[1])
    first = world.committee(run)[0]  # one member posts: the others are replaced once, then it is abandoned
    world.protocol.post_committee_receipt(world.outsider, run.audit_id, 0, world.make_member(first).receipt)
    for _ in range(PRESET.MAX_COMMITTEE_REDRAWS + 1):  # redraws while the pool allows, then abandons
        world.chain.mine(PRESET.COMMIT_WINDOW_BLOCKS + 1)
        world.protocol.replace_missing(world.outsider, run.audit_id)
        if chain_protocol.PHASE_NAMES[world.protocol.get_audit(run.audit_id).phase] == "abandoned":
            return run
    raise AssertionError("the audit was not abandoned")


def test_an_abandoned_audit_is_reported_with_nobody_slashed_and_an_open_one_with_its_phase(world, tmp_path):
    abandoned = _abandon(world)
    open_run = world.start(world.make_worker(world.nodes[2], nonce=5), dispatcher=world.nodes[3])
    auditor = ChainAuditor(world.chain, world.protocol.deployment)
    findings = auditor.run()
    state = auditor.states[abandoned.audit_id]
    assert state == "abandoned in round 0; slashed nobody"  # an unstaffable round slashes no one (issue 9)
    assert auditor.states[open_run.audit_id] == "open: committing in round 0"
    mine = [f for f in findings if f.subject == f"audit {abandoned.audit_id}" and "abandoned" in f.detail]
    assert [f.severity for f in mine] == ["ok", "ok"]  # why it was abandoned (re-derived), and that nobody was slashed
    assert any("pool exhausted" in f.detail or "receipts still missing" in f.detail for f in mine)
    assert not any("not settled yet" in f.detail for f in findings if f.subject == f"audit {abandoned.audit_id}")
    report = format_chain_audit([], auditor.summary(), auditor.states)
    assert f"audit {abandoned.audit_id}: abandoned in round 0; slashed nobody" in report
    path = tmp_path / "addresses.json"
    world.protocol.deployment.save(path)
    result = CliRunner().invoke(audit, ["chain", "--rpc-url", world.chain.url, "--addresses", str(path)])
    assert f"audit {abandoned.audit_id}: abandoned in round 0" in result.output, result.output
    assert f"audit {open_run.audit_id}: open: committing" in result.output
    assert chain_protocol.PHASE_NAMES[world.protocol.get_audit(abandoned.audit_id).phase] == "abandoned"


def test_a_selected_audit_never_drawn_slashes_only_its_dispatcher_and_a_draw_hidden_from_it_is_flagged(world):
    """Issue 20: a selected first round nobody drew lapses (`Jobs.lapse`): abandoned, its dispatcher
    slashed for the missed draw, nobody else. The auditor re-derives both; a recorded draw for a
    round abandoned as never drawn is an inconsistency."""
    run = world.start(world.make_worker(world.nodes[0], nonce=61), dispatcher=world.nodes[1], draw=False)
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS + 1)
    world.protocol.lapse(world.outsider, run.audit_id)
    auditor = ChainAuditor(world.chain, world.protocol.deployment)
    findings = [f for f in auditor.run() if f.subject.startswith(f"audit {run.audit_id}")]
    assert [f for f in findings if f.severity != "ok"] == [], findings
    dispatcher = world.nodes[1].address
    assert auditor.states[run.audit_id].startswith(f"abandoned in round 0; slashed {dispatcher} (missed committee draw")
    assert any("its committee was never drawn" in f.detail for f in findings)
    abandoned = auditor.named("AuditAbandoned", auditId=run.audit_id)[0]
    forged = ChainAuditor(world.chain, world.protocol.deployment)
    started = forged.named("AuditStarted", auditId=run.audit_id)[0]
    fake_draw = dataclasses.replace(started, name="CommitteeDrawn", log_index=started.log_index + 1,
                                    args={"auditId": run.audit_id, "round": 0, "attempt": 0, "members": []})
    forged.events = sorted(forged.events + [fake_draw], key=lambda e: (e.block_number, e.log_index))
    flagged = [f for f in forged.run() if f.subject == f"audit {run.audit_id}" and f.severity == "inconsistent"]
    assert any("never drawn although" in f.detail for f in flagged), flagged
    assert abandoned.args["reason"] == "committee never drawn"


def _settle_honestly(world, run) -> None:
    members = [world.make_member(n) for n in world.committee(run)]
    world.post_members(run, members)
    world.open_worker(run)
    world.vote_members(run)
    world.finish(run)


def test_private_draws_are_re_derived_from_the_revealed_secret_and_a_missed_one_is_reported(world):
    """docs/protocol.md §12 "Private draws": the auditor re-derives a privately drawn committee from
    the secret the reveal published (checked against the start's commitment), and a draw whose
    dispatcher kept its secret from its public fallback, with the dispatcher's slash."""
    secret = b"\x42" * 32
    revealed = world.start(world.make_worker(world.nodes[0], nonce=71), dispatcher=world.nodes[1], secret=secret)
    members = [world.make_member(n) for n in world.preview(revealed, secret)]
    world.reveal(revealed, world.nodes[1], secret, members)
    world.open_worker(revealed)
    world.vote_members(revealed)
    world.finish(revealed)
    missed = world.start(world.make_worker(world.nodes[0], nonce=72), dispatcher=world.nodes[2], secret=secret)
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS + PRESET.PRIVATE_REVEAL_GRACE_BLOCKS + 1)
    world.protocol.lapse(world.outsider, missed.audit_id)
    world.protocol.supply_receipt(world.outsider, missed.audit_id, missed.worker.receipt)  # the client shows the receipt
    world.draw_round(missed)
    _settle_honestly(world, missed)
    auditor = ChainAuditor(world.chain, world.protocol.deployment)
    findings = auditor.run()
    for run in (revealed, missed):
        mine = [f for f in findings if f.subject.startswith(f"audit {run.audit_id}")]
        assert [f for f in mine if f.severity == "inconsistent"] == [], mine
    assert any("drawn privately" in f.detail and f.severity == "ok" for f in findings if f.subject == f"audit {revealed.audit_id}")
    assert any("never revealed its private draw" in f.detail for f in findings if f.subject == f"audit {missed.audit_id}")
    assert any("what its start claimed" in f.detail and f.severity == "ok" for f in findings if f.subject == f"audit {missed.audit_id}")
    assert "missed private draw" in auditor.states[missed.audit_id], auditor.states[missed.audit_id]
