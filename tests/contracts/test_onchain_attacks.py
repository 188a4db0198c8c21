"""The eight confirmed attacks of issue 9, each replayed on the real contracts in the attacker's
call order: each now reverts, or slashes the attacker instead of an honest party
(docs/protocol.md §13, threat table)."""

import dataclasses


from helpers.chain import reverts
from verillm.spec import audit as spec_audit
from verillm.spec.audit import Phase
from verillm.spec.encoding import encode
from verillm.spec.receipt import sign_receipt

from helpers.contracts import CHEAT_OFFSET, MODEL_ID, OUTPUT_TOKENS, PRESET, AuditRun

ABANDONED, DECIDED = Phase.ABANDONED, Phase.DECIDED
WORKER_DEFAULT = 4


def _locks(world) -> list[int]:
    return [world.protocol.get_node(n.address)["locks"] for n in world.nodes]


def _opened(world, worker_cheats: bool = False) -> AuditRun:
    run = world.start(world.make_worker(world.nodes[0], offset=CHEAT_OFFSET if worker_cheats else 0.0), dispatcher=world.nodes[1])
    world.post_members(run, [world.make_member(n) for n in world.committee(run)])
    world.open_worker(run)
    return run


def _seeded(world, worker, dispatcher):
    """Start the audit and mine its round's seed block: from here the seed is public, the
    committee not drawn yet (the window in which an attacker would re-roll the table)."""
    run = world.start(worker, dispatcher=dispatcher, draw=False)
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    return run


def test_attack1_committee_grinding_by_topup_cannot_pick_the_committee(world):
    worker, dispatcher, attacker = world.make_worker(world.nodes[0]), world.nodes[1], world.nodes[5]
    run = _seeded(world, worker, dispatcher)
    snapshot = world.chain.snapshot()
    committee = world.protocol.draw_round(world.outsider, run.audit_id).value
    world.chain.revert(snapshot)
    # The attacker re-rolls the table after seeing the seed: a few wei, then a whole new stake.
    world.protocol.top_up(attacker.account, 7)
    world.protocol.top_up(world.nodes[4].account, 50 * PRESET.MIN_STAKE_WEI)
    world.protocol.update_models(world.nodes[3].account, [MODEL_ID])
    ground = world.protocol.draw_round(world.outsider, run.audit_id).value
    assert len(committee) == PRESET.COMMITTEE_SIZE and ground == committee  # the draw read the round's epoch


def test_attack1_registration_after_the_seed_is_not_drawable(world):
    worker, dispatcher = world.make_worker(world.nodes[0]), world.nodes[1]
    run = _seeded(world, worker, dispatcher)
    snapshot = world.chain.snapshot()
    committee = world.protocol.draw_round(world.outsider, run.audit_id).value
    world.chain.revert(snapshot)
    sybils = [world._funded_account(40 + i) for i in range(3)]
    for i, sybil in enumerate(sybils):
        key = 1234 + i
        world.protocol.register(sybil, key, "http://127.0.0.1:1", [MODEL_ID], PRESET.MIN_STAKE_WEI * 10)
    drawn = world.protocol.draw_round(world.outsider, run.audit_id).value
    assert len(committee) == PRESET.COMMITTEE_SIZE and drawn == committee and not set(drawn) & {s.address for s in sybils}


def test_attack2_opening_after_the_verdict_is_refused_and_the_worker_defaults(world):
    run = world.start(world.make_worker(world.nodes[0], offset=CHEAT_OFFSET), dispatcher=world.nodes[1])
    world.post_members(run, [world.make_member(n) for n in world.committee(run)])
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    world.protocol.draw_challenge(world.outsider, run.audit_id)
    world.chain.mine(PRESET.OPEN_WINDOW_BLOCKS + 1)  # the worker skips its window
    late = world.opening(run, run.worker)
    with reverts("TooLate"):
        world.protocol.open_worker(run.worker.node.account, run.audit_id, late)
    world.protocol.finalize(world.outsider, run.audit_id)  # worker default recorded
    with reverts("UnexpectedPhase"):  # and nothing it opens now can change it
        world.protocol.open_worker(run.worker.node.account, run.audit_id, late)
    stakes = world.stakes()
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    assert world.protocol.settle(world.outsider, run.audit_id).value == WORKER_DEFAULT
    after = world.stakes()
    assert after[run.worker.node.address] < stakes[run.worker.node.address]
    assert all(after[m.node.address] == stakes[m.node.address] for m in run.members)


def test_attack3_contests_are_capped_sorted_unique_and_answerable(world):
    run = _opened(world)
    opening = world.opening(run, run.worker)
    cells = sorted((i.leaf.position, i.leaf.layer) for i in opening.leaves)
    cap = world.protocol.disputes.call("MAX_CONTEST_CELLS")
    assert len(cells) > cap
    with reverts("too many cells"):
        world.protocol.contest(world.outsider, run.audit_id, 0, 0, cells[:cap] + [cells[cap]])
    with reverts("sorted"):  # a repeated cell
        world.protocol.contest(world.outsider, run.audit_id, 0, 0, [cells[0], cells[0]])
    with reverts("sorted"):
        world.protocol.contest(world.outsider, run.audit_id, 0, 0, [cells[1], cells[0]])
    contest_id = world.protocol.contest(world.outsider, run.audit_id, 0, 0, cells[:cap]).value
    answer = world.protocol.answer_contest(run.worker.node.account, contest_id, cells[:cap], opening)
    # A maximal contest's answer stays far below the block gas limit (30 M).
    assert answer.gas_used < 2_000_000, answer.gas_used
    assert not world.protocol.get_party(run.audit_id, 0, 0)["slashed"]


def test_attack4_posted_leaves_that_are_not_committed_slash_the_worker_not_the_members(world):
    cheat = world.make_worker(world.nodes[0], offset=CHEAT_OFFSET)
    run = world.start(cheat, dispatcher=world.nodes[1])
    world.post_members(run, [world.make_member(n) for n in world.committee(run)])
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    world.protocol.draw_challenge(world.outsider, run.audit_id)
    committed = world.opening(run, run.worker)
    honest = world.make_worker(world.nodes[0])  # the honest trace: its leaves look right
    shown = world.opening(run, honest)
    world.protocol.open_worker(run.worker.node.account, run.audit_id, shown)  # posts leaves its root does not commit
    world.vote_members(run, votes=lambda slot: True)  # members agree with what they were shown
    members = [world.opening(run, m) for m in run.members]
    # The worker adjudicates each member against its root-proven leaves: refused.
    with reverts("OpeningMismatch"):
        world.protocol.adjudicate(run.worker.node.account, run.audit_id, 0, 1, committed, members[0])
    pairs = [(c, members[0].leaves[i]) for i, c in enumerate(committed.leaves)]
    cells = [(encode(c.leaf), list(c.proof.siblings), encode(m.leaf), list(m.proof.siblings)) for c, m in pairs]
    posted = (spec_audit.encode_opening_leaves(shown), list(range(len(cells))))
    with reverts("LeafMismatch"):
        world.chain.transact(world.protocol.disputes, "adjudicate", run.audit_id, 0, 1, cells, posted, sender=run.worker.node.account)
    # Anyone contests the worker's posted opening: it cannot prove it under its root.
    cell = [(shown.leaves[0].leaf.position, shown.leaves[0].leaf.layer)]
    contest_id = world.protocol.contest(world.outsider, run.audit_id, 0, 0, cell).value
    with reverts("InvalidMerkleProof"):
        world.protocol.answer_contest(run.worker.node.account, contest_id, cell, shown)
    stakes = world.stakes()
    world.chain.mine(PRESET.PROOF_WINDOW_BLOCKS + 1)
    world.protocol.resolve_contest(world.outsider, contest_id)
    assert world.protocol.get_party(run.audit_id, 0, 0)["slashed"]
    world.protocol.finalize(world.outsider, run.audit_id)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    world.protocol.settle(world.outsider, run.audit_id)
    after = world.stakes()
    assert after[run.worker.node.address] < stakes[run.worker.node.address]
    assert all(after[m.node.address] == stakes[m.node.address] for m in run.members)


def test_attack5_output_length_and_member_input_are_bound_by_the_receipts(world):
    worker, dispatcher = world.make_worker(world.nodes[0]), world.nodes[1]
    # N comes from the worker's signature, not from whoever starts the audit: a receipt whose
    # counts disagree with its positions is refused, whoever signed it.
    inconsistent = sign_receipt(dataclasses.replace(worker.receipt, output_tokens=OUTPUT_TOKENS + 1), worker.node.account.key, world.domain)
    batch, _, _ = world.post_and_draw(dispatcher, [inconsistent])
    with reverts("ReceiptMismatch"):
        world.protocol.start_audit(dispatcher.account, batch.batch_id, 0, inconsistent, batch.levels)
    run = world.start(worker, dispatcher=dispatcher)
    assert world.protocol.get_audit(run.audit_id).output_tokens == OUTPUT_TOKENS
    node = world.committee(run)[0]
    member = world.make_member(node)
    key = node.account.key
    for field, value in (("input_hash", b"\x44" * 32), ("input_tokens", member.receipt.input_tokens - 3)):
        wrong = sign_receipt(dataclasses.replace(member.receipt, **{field: value}), key, world.domain)
        with reverts("ReceiptMismatch"):  # a member's job must read exactly the worker's input ‖ output
            world.protocol.post_committee_receipt(world.outsider, run.audit_id, 0, wrong)
    world.protocol.post_committee_receipt(world.outsider, run.audit_id, 0, member.receipt)


def test_attack7_receipt_consumed_elsewhere_does_not_block_its_dispatcher(world):
    # Issue 20: one audit per receipt whoever batches it (receiptState is global). The thief's
    # audit takes the receipt; the dispatcher's selected start is then skipped (AuditSkipped, no
    # second committee for the receipt) and counts as done: nobody slashes the dispatcher.
    worker, dispatcher, thief = world.make_worker(world.nodes[0]), world.nodes[1], world.nodes[3]
    mine, _, _ = world.post_and_draw(dispatcher, [worker.receipt])
    stolen, _, _ = world.post_and_draw(thief, [worker.receipt])  # the client's copy of the receipt
    first = world.protocol.start_audit(thief.account, stolen.batch_id, 0, worker.receipt, stolen.levels).value
    stakes = world.stakes()
    assert world.protocol.start_audit(dispatcher.account, mine.batch_id, 0, worker.receipt, mine.levels).value == 0
    assert world.protocol.jobs.call("auditCount") == first and world.protocol.get_audit(first).worker == worker.node.address
    world.chain.mine(PRESET.START_WINDOW_BLOCKS + 1)
    with reverts("AlreadyHandled"):  # its dispatcher started it (skipped): nothing to slash
        world.protocol.slash_missed_start(world.outsider, mine.batch_id, 0)
    assert world.stakes() == stakes


def test_attack8_exhausted_pool_ends_the_round_and_releases_every_lock(world):
    # 6 nodes, worker and dispatcher excluded: 4 candidates, 3 drawn, 1 left for 3 seats.
    run = world.start(world.make_worker(world.nodes[0]), dispatcher=world.nodes[1])
    world.chain.mine(PRESET.COMMIT_WINDOW_BLOCKS + 1)
    stakes = world.stakes()
    world.protocol.replace_missing(world.outsider, run.audit_id)
    assert world.protocol.get_audit(run.audit_id).phase == ABANDONED
    assert world.stakes() == stakes and _locks(world) == [0] * len(world.nodes)


def test_attack8_start_with_too_small_a_pool_slashes_nobody(world):
    for node in world.nodes[2:5]:
        world.protocol.deregister(node.account)
    world.protocol.advance_to_next_epoch()  # 1 candidate left besides worker and dispatcher
    worker, dispatcher = world.make_worker(world.nodes[0]), world.nodes[1]
    stakes = world.stakes()
    run = world.start(worker, dispatcher=dispatcher, draw=False)
    world.draw_round(run)  # the committee draw finds too few candidates
    assert world.protocol.get_audit(run.audit_id).phase == ABANDONED
    assert world.stakes() == stakes and _locks(world) == [0] * len(world.nodes)
    world.chain.mine(PRESET.UNBONDING_BLOCKS)
    world.protocol.withdraw(world.nodes[2].account)  # nothing stays locked


def test_dispatcher_is_excluded_from_its_own_committee(world):
    for nonce in range(4):
        run = world.start(world.make_worker(world.nodes[0], nonce=nonce), dispatcher=world.nodes[1])
        committee = world.protocol.get_committee(run.audit_id, 0)
        assert world.nodes[1].address not in committee and world.nodes[0].address not in committee


def test_only_a_party_with_standing_may_escalate_a_pass(world):
    # Issue 34 (Standing): an outsider, the worker of a PASS and a majority voter have nothing at
    # stake in the appeal they would impose; the dispatcher may (its appeal costs an honest party
    # at most the penalty, docs/protocol.md §12 "Proportionality").
    run = _opened(world)
    world.vote_members(run)
    world.protocol.finalize(world.outsider, run.audit_id)
    assert world.protocol.get_audit(run.audit_id).phase == DECIDED
    for caller in (world.outsider, world.nodes[0].account, run.members[0].node.account):
        with reverts("NoStanding"):
            world.protocol.escalate(caller, run.audit_id)
    world.protocol.escalate(world.nodes[1].account, run.audit_id)  # a PASS, escalated by its dispatcher
    assert world.protocol.get_audit(run.audit_id).round == 1
    with reverts("AlreadyHandled|UnexpectedPhase"):  # one appeal per audit
        world.protocol.escalate(world.nodes[1].account, run.audit_id)
