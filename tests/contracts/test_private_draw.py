"""Private first-round draws (docs/protocol.md §12 "Private draws"; issue 20, "No free look-ahead"):
a member must not learn that it sits on a committee before its own receipt for the job is on-chain.

The dispatcher commits to a secret when it starts a selected audit (before the seed block's hash
exists), draws the committee with it, sends the members their jobs (which they run as any other)
and reveals the draw with their receipts in one transaction. Each test replays what a party that
breaks a rule would do: a chain watcher looking for its seat, a stranger committing for the
dispatcher, a stranger or a wrong secret revealing, a dispatcher that keeps its secret to void its
worker's audit.
"""

import pytest

from helpers.chain import reverts
from verillm.chain.events import get_events
from verillm.spec.audit import (Phase, compute_batch_proof, compute_draw_commitment, compute_due_steps, compute_private_draw_bond,
                                compute_round_seed)
from verillm.spec.receipt import compute_receipt_hash
from verillm.spec.hashing import keccak256
from verillm.spec.settlement import PASS

from helpers.contracts import AuditRun, World

SECRET = keccak256(b"the dispatcher's draw secret")
_NONCES = iter(range(1000, 2000))  # one module-wide deployment: each test audits a receipt of its own


@pytest.fixture
def world(world_base) -> World:
    return world_base


def _start_private(world: World, secret: bytes = SECRET, dispatcher: int = 1):
    worker, dispatcher = world.make_worker(world.nodes[0], nonce=next(_NONCES)), world.nodes[dispatcher]
    run = world.start(worker, dispatcher=dispatcher, secret=secret)
    return worker, dispatcher, run


def _events(world, from_block: int, names: set[str]):
    return get_events(world.chain, [world.protocol.jobs, world.protocol.batches], from_block, names=names)


def test_a_chain_watcher_learns_no_seat_before_its_receipt_is_on_chain(world):
    start_block = world.chain.get_block_number()
    worker, dispatcher, run = _start_private(world)
    committee = world.preview(run, SECRET)
    assert len(committee) == world.preset.COMMITTEE_SIZE
    # Everything public before the reveal: the round's state, its (empty) committee, every event
    # since the start, and the only draw anyone else may call.
    state = world.protocol.get_round_state(run.audit_id)
    assert state.phase == Phase.DRAWING and state.private_draw and state.members == 0
    assert world.protocol.get_committee(run.audit_id, 0) == []
    assert "draw_round" not in compute_due_steps(state, world.chain.get_block_number() + 1)
    with reverts("PrivateDraw"):
        world.protocol.draw_round(world.outsider, run.audit_id)
    seen = _events(world, start_block, None)
    assert not [e for e in seen if e.name == "CommitteeDrawn"]
    for node in committee:
        assert all(node.address not in str(e.args) for e in seen), f"{node.address} named on chain before the reveal"
    # The secret decides the seats: without it a watcher cannot compute them (the public seed's
    # committee is another draw), and other secrets seat other members.
    previews = {tuple(n.address for n in world.preview(run, keccak256(bytes([i])))) for i in range(12)}
    assert len(previews) > 1
    # The reveal names the members in the transaction that posts their receipts: each learns its
    # seat with its receipt already on-chain.
    members = [world.make_member(n) for n in committee]
    tx = world.reveal(run, dispatcher, SECRET, members)
    assert [world.node(a) for a in tx.value] == committee
    in_tx = [e for e in _events(world, tx.receipt["blockNumber"], {"CommitteeDrawn", "CommitteeReceiptPosted"})
             if e.tx_hash == bytes(tx.receipt["transactionHash"])]
    assert [e.name for e in in_tx] == ["CommitteeDrawn"] + ["CommitteeReceiptPosted"] * len(committee)
    assert world.protocol.get_round_state(run.audit_id).phase == Phase.OPENING
    # The seed is the public one with the secret appended: anyone can check the draw once revealed.
    seed_block = world.protocol.get_round_state(run.audit_id).deadlines.draw_after
    seed_hash = bytes(world.chain.w3.eth.get_block(seed_block)["hash"])
    assert compute_round_seed(run.audit_id, 0, seed_hash, SECRET) != compute_round_seed(run.audit_id, 0, seed_hash)
    world.open_worker(run)
    world.vote_members(run)
    assert world.finish(run) == PASS


def test_only_the_dispatcher_may_promise_a_private_draw(world):
    """A stranger that starts a selected job with its own commitment and never reveals would get
    the dispatcher slashed for a promise it never made; a request is drawn publicly."""
    worker, dispatcher = world.make_worker(world.nodes[0], nonce=next(_NONCES)), world.nodes[1]
    batch, _, _ = world.post_and_draw(dispatcher, [worker.receipt])
    commitment = keccak256(b"\x1d" + SECRET)
    with reverts("PrivateDrawRefused"):
        world.protocol.start_audit(world.nodes[2].account, batch.batch_id, 0, worker.receipt, batch.levels, draw_commitment=commitment)
    assert world.protocol.start_audit(dispatcher.account, batch.batch_id, 0, worker.receipt, batch.levels,
                                      draw_commitment=commitment).value > 0


def test_only_the_committed_secret_of_the_dispatcher_reveals_in_the_window(world):
    worker, dispatcher, run = _start_private(world)
    members = [world.make_member(n) for n in world.preview(run, SECRET)]
    with reverts("NotParty"):  # a stranger (the secret would be its to copy from the mempool)
        world.reveal(run, world.nodes[2], SECRET, members)
    with reverts("InvalidSecret"):  # another secret: another committee, chosen after the seed block
        world.reveal(run, dispatcher, keccak256(b"chosen later"), members)
    with reverts("NotParty"):  # a receipt for a seat it does not hold
        world.reveal(run, dispatcher, SECRET, [members[1], members[0], members[2]])
    world.chain.mine(world.preset.DRAW_WINDOW_BLOCKS + world.preset.PRIVATE_REVEAL_GRACE_BLOCKS)  # past the late reveal's grace too
    with reverts("TooLate"):
        world.reveal(run, dispatcher, SECRET, members)


def test_a_too_early_reveal_is_refused(world):
    worker, dispatcher, run = _start_private(world)
    with reverts("TooEarly"):
        world.reveal(run, dispatcher, SECRET, [])


def test_a_dispatcher_that_keeps_its_secret_is_slashed_and_the_audit_goes_on_publicly(world):
    """A dispatcher colluding with a cheating worker keeps its secret hoping the audit dies: it is
    slashed, and the round is drawn publicly from a later seed block; the cheat is still judged.
    (Its dispatcher is node 5, slashed here: the module's other tests dispatch from node 1.)"""
    worker, dispatcher, run = _start_private(world, dispatcher=5)
    stake = world.stakes()[dispatcher.address]
    deadlines = world.protocol.get_round_state(run.audit_id).deadlines
    world.chain.mine(deadlines.reveal_by + 1 - world.chain.get_block_number())
    assert compute_due_steps(world.protocol.get_round_state(run.audit_id), world.chain.get_block_number() + 1) == ("lapse",)
    lapsed = world.protocol.lapse(world.outsider, run.audit_id)
    slashed = [e for e in _events(world, lapsed.receipt["blockNumber"], {"PartySlashed", "PrivateDrawMissed"})]
    assert [e.name for e in slashed] == ["PrivateDrawMissed", "PartySlashed"]
    assert slashed[1].args["node"] == dispatcher.address and slashed[1].args["reason"] == "missed private draw"
    assert world.stakes()[dispatcher.address] < stake
    state = world.protocol.get_round_state(run.audit_id)
    assert state.phase == Phase.DRAWING and not state.private_draw and state.deadlines.entered_block == lapsed.receipt["blockNumber"]
    with reverts("InvalidSecret"):  # too late to reveal now: the round is public
        world.reveal(run, dispatcher, SECRET, [])
    # The start kept the receipt back: nothing to draw against until someone holding it shows it.
    assert not state.receipt_known
    world.chain.mine(world.preset.AUDIT_DRAW_DELAY_BLOCKS + 1)
    assert compute_due_steps(world.protocol.get_round_state(run.audit_id), world.chain.get_block_number() + 1) == ()
    with reverts("ReceiptNotOnChain"):
        world.protocol.draw_round(world.outsider, run.audit_id)
    other = world.make_worker(world.nodes[0], nonce=next(_NONCES))
    with reverts("ReceiptMismatch"):  # only the batched receipt: its hash is the start's
        world.protocol.supply_receipt(world.outsider, run.audit_id, other.receipt)
    world.protocol.supply_receipt(world.outsider, run.audit_id, worker.receipt)  # the client holds it
    with reverts("AlreadyHandled"):
        world.protocol.supply_receipt(world.outsider, run.audit_id, worker.receipt)
    assert world.protocol.get_audit(run.audit_id).output_tokens == worker.receipt.output_tokens
    assert "draw_round" in compute_due_steps(world.protocol.get_round_state(run.audit_id), world.chain.get_block_number() + 1)
    world.protocol.draw_round(world.outsider, run.audit_id)
    members = [world.make_member(n) for n in world.committee(run)]
    world.post_members(run, members)
    world.open_worker(run)
    world.vote_members(run)
    assert world.finish(run) == PASS


def test_seats_whose_receipt_is_not_revealed_go_on_as_after_a_public_draw(world):
    worker, dispatcher, run = _start_private(world)
    committee = world.preview(run, SECRET)
    members = [world.make_member(n) for n in committee]
    tx = world.protocol.reveal_round(dispatcher.account, run.audit_id, SECRET, run.worker.receipt,
                                     [(0, members[0].receipt), (2, members[2].receipt)])
    state = world.protocol.get_round_state(run.audit_id)
    assert state.phase == Phase.COMMITTING and state.receipts == 2
    assert state.deadlines.commit_by == tx.receipt["blockNumber"] + world.preset.COMMIT_WINDOW_BLOCKS
    world.protocol.post_committee_receipt(world.outsider, run.audit_id, 1, members[1].receipt)
    assert world.protocol.get_round_state(run.audit_id).phase == Phase.OPENING
    run.members = members
    world.open_worker(run)
    world.vote_members(run)
    assert world.finish(run) == PASS


def test_the_receipt_is_kept_back_until_the_reveal_and_must_be_the_started_one(world):
    """A private start sends the receipt's hash and its claim (worker, model, horizon), not the
    receipt; the reveal must show the batched receipt, and the claim must be true."""
    worker, dispatcher, run = _start_private(world)
    audit = world.protocol.get_audit(run.audit_id)
    assert (audit.num_positions, audit.output_tokens) == (0, 0)
    assert not world.protocol.get_round_state(run.audit_id).receipt_known
    with reverts("PrivateDraw"):  # nobody else may make it public before the reveal
        world.protocol.supply_receipt(world.outsider, run.audit_id, worker.receipt)
    members = [world.make_member(n) for n in world.preview(run, SECRET)]
    other = world.make_worker(world.nodes[0], nonce=next(_NONCES))
    with reverts("ReceiptMismatch"):
        world.protocol.reveal_round(dispatcher.account, run.audit_id, SECRET, other.receipt, [])
    world.reveal(run, dispatcher, SECRET, members)
    audit = world.protocol.get_audit(run.audit_id)
    assert (audit.num_positions, audit.output_tokens) == (worker.receipt.num_positions, worker.receipt.output_tokens)


def test_a_missed_reveal_nobody_follows_with_the_receipt_ends_the_audit_with_one_slash(world):
    """Nobody shows the receipt after a missed reveal: the round ends as a missed start would — its
    dispatcher slashed once (at the first lapse), nobody else, every lock released. (Node 4
    dispatches: node 5 was slashed above; the module's deployment is shared.)"""
    worker, dispatcher, run = _start_private(world, dispatcher=4)
    world.chain.mine(world.protocol.get_round_state(run.audit_id).deadlines.reveal_by + 1 - world.chain.get_block_number())
    world.protocol.lapse(world.outsider, run.audit_id)
    after_first = world.stakes()
    world.chain.mine(world.protocol.get_round_state(run.audit_id).deadlines.draw_by + 1 - world.chain.get_block_number())
    with reverts("TooLate"):
        world.protocol.supply_receipt(world.outsider, run.audit_id, worker.receipt)
    world.protocol.lapse(world.outsider, run.audit_id)
    assert world.protocol.get_round_state(run.audit_id).phase == Phase.ABANDONED
    assert world.stakes() == after_first


def test_a_false_claim_at_a_private_start_costs_its_dispatcher(world):
    """The claim is checked where it can be: the worker by its signature at the start (a claim naming
    another worker is refused), the model and the horizon against the receipt at the reveal — a
    dispatcher that claimed a later horizon to audit an expired receipt cannot reveal, and is slashed."""
    worker, dispatcher = world.make_worker(world.nodes[0], nonce=next(_NONCES)), world.nodes[3]
    batch, _, _ = world.post_and_draw(dispatcher, [worker.receipt])
    r = worker.receipt
    siblings = list(compute_batch_proof(batch.levels, 0).siblings)
    commitment = compute_draw_commitment(SECRET)

    def start(claim):
        return world.chain.transact(world.protocol.batches, "startPrivateAudit", batch.batch_id, 0, compute_receipt_hash(r), claim,
                                    r.signature, siblings, commitment, sender=dispatcher.account, value=compute_private_draw_bond(world.preset))
    with reverts("InvalidSignature"):
        start((world.nodes[2].address, r.model_id, r.auditable_until_block))
    start((world.nodes[0].address, r.model_id, r.auditable_until_block + 1000))
    run = AuditRun(world.protocol.jobs.call("auditCount"), worker)
    world.chain.mine(world.preset.AUDIT_DRAW_DELAY_BLOCKS + 1)
    with reverts("ReceiptMismatch"):
        world.reveal(run, dispatcher, SECRET, [])
    stake = world.stakes()[dispatcher.address]
    world.chain.mine(world.protocol.get_round_state(run.audit_id).deadlines.reveal_by + 1 - world.chain.get_block_number())
    world.protocol.lapse(world.outsider, run.audit_id)
    assert world.stakes()[dispatcher.address] < stake


def test_a_skipped_private_start_returns_its_bond_at_once(world):
    """A selected receipt another audit already owns is skipped (its dispatcher did its duty): a
    private start of it has nothing to reveal, so its bond comes straight back."""
    worker = world.make_worker(world.nodes[0], nonce=next(_NONCES))
    world.start(worker, dispatcher=world.nodes[2], draw=False)  # the receipt's audit, batched by node 2
    dispatcher = world.nodes[1]
    batch, _, _ = world.post_and_draw(dispatcher, [worker.receipt])  # batched again by node 1
    credit = world.protocol.get_credit(dispatcher.address)
    tx = world.protocol.start_audit(dispatcher.account, batch.batch_id, 0, worker.receipt, batch.levels,
                                    draw_commitment=compute_draw_commitment(SECRET))
    assert tx.value == 0  # skipped
    assert world.protocol.get_credit(dispatcher.address) - credit == compute_private_draw_bond(world.preset)
