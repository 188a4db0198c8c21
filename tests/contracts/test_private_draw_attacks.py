"""Attacks on private first-round draws (docs/protocol.md §12 "Private draws"; issue 20).

Each test replays one party's moves: a member that wants to know its seat before it answers, a
stranger with a mempool view, a griefer that wants the honest dispatcher's private draw broken,
a dispatcher that wants to choose its committee. Every one of them fails (a test that was an
xfail names the fix in its docstring).

Deployment: MINIMAL, six nodes (stakes 3, 2, 2, 1, 1, 1 × MIN_STAKE_WEI), the module's
deployment rolled back after each test (conftest `world`). The audited job is node 0's,
dispatched by node 1, so nodes 2–5 are the candidates of its three seats.
"""

import asyncio

import pytest

from helpers.chain import reverts
from helpers.contracts import MODEL_ID, World
from verillm.chain.errors import TransactionReverted
from verillm.errors import ChainError
from verillm.chain.events import get_events
from verillm.spec.audit import (Phase, compute_draw_commitment, compute_opening_hash, compute_private_draw_bond, compute_vote_salt,
                                compute_vote_seal, encode_opening_leaves)
from verillm.spec.hashing import keccak256
from verillm.spec.settlement import NO_VOTE, PASS
from verillm.spec.types import Job

from verillm.node.dispatcher.audit.private_draw import PrivateDrawDriver
from verillm.node.dispatcher.chainio import ChainIO
from verillm.node.dispatcher.tasks import KeyedTasks
from verillm.node.keys import compute_node_key
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.store.store import open_store

SECRET = keccak256(b"attacked dispatcher's secret")
_NONCES = iter(range(5000, 6000))


def _start_private(world: World, secret: bytes = SECRET):
    worker = world.make_worker(world.nodes[0], nonce=next(_NONCES))
    dispatcher = world.nodes[1]
    return dispatcher, world.start(worker, dispatcher=dispatcher, secret=secret)


def _record_dispatched(tables: DispatcherTables, receipt, audit_id: int) -> None:
    """What the dispatcher node keeps of a job it routed and then started the audit of: the
    worker's signed receipt, which its private start sent only the hash of."""
    job = Job(receipt.model_id, (1, 2, 3), receipt.sampling, receipt.max_new_tokens, bytes(32))
    job_hash = keccak256(b"job of audit " + audit_id.to_bytes(8, "big"))
    tables.insert_dispatched_job(job_hash, job, receipt.worker, "http://worker", (4,), receipt, False)
    tables.insert_audit(audit_id, job_hash, 0, 0, False)


def _node_starts_privately(world: World, dispatcher, contracts_anvil, tmp_path):
    """The dispatcher's node (its ChainIO and tables) batches node 0's job and starts its audit as
    the node's BatchScheduler does: committed to the secret derived from its key, the receipt kept back."""
    worker = world.make_worker(world.nodes[0], nonce=next(_NONCES))
    tables = DispatcherTables(open_store(tmp_path / "dispatcher.sqlite").db)
    chainio = ChainIO(contracts_anvil.url, world.protocol.deployment, compute_node_key(bytes(dispatcher.account.key)), tables)
    batch, _, _ = world.post_and_draw(dispatcher, [worker.receipt])
    secret = chainio.compute_draw_secret(batch.batch_id, 0)
    audit_id = world.protocol.start_audit(dispatcher.account, batch.batch_id, 0, worker.receipt, batch.levels,
                                          draw_commitment=compute_draw_commitment(secret)).value
    _record_dispatched(tables, worker.receipt, audit_id)
    return chainio, tables, audit_id, secret


def _missed_start_triggers(world: World, nodes) -> dict[str, int]:
    """Batches posted and drawn by ``nodes`` whose selected job was never started: after the start
    window anyone may fire `slashMissedStart` on them, at a block of its choosing (rewarded)."""
    triggers = {}
    for node in nodes:
        receipt = world.make_worker(world.nodes[0], nonce=next(_NONCES)).receipt
        batch, _, _ = world.post_and_draw(node, [receipt])
        triggers[node.address] = batch.batch_id
    world.chain.mine(world.preset.START_WINDOW_BLOCKS + 1)
    return triggers


# --- problems: each test fails on today's code ------------------------------------------------


def test_a_member_cannot_match_its_job_to_a_started_audit(world):
    """Fixed (Batches.startPrivateAudit): a private start carries the receipt's hash, not the
    receipt, whose outputHash is every member's job input hash; the receipt comes with the reveal."""
    start = world.chain.get_block_number() + 1
    dispatcher, run = _start_private(world)
    committee = world.preview(run, SECRET)
    # A member receives its job over the job API; it computes its input's tokens hash (it signs it
    # as its receipt's inputHash) and scans every public transaction and event since the audits it
    # saw start.
    member = world.make_member(committee[0]).receipt
    seen = []
    for number in range(start, world.chain.get_block_number() + 1):
        for tx in world.chain.w3.eth.get_block(number, full_transactions=True)["transactions"]:
            seen.append(bytes(tx["input"]))
            seen += [bytes(log["data"]) + b"".join(bytes(t) for t in log["topics"])
                     for log in world.chain.w3.eth.get_transaction_receipt(tx["hash"])["logs"]]
    assert world.protocol.get_round_state(run.audit_id).phase == Phase.DRAWING  # not revealed yet
    assert not any(member.input_hash in data for data in seen), "the member knows it sits on a committee"
    assert world.protocol.jobs.call("transcriptOf", run.audit_id)[0] == bytes(32)


def test_a_stranger_cannot_make_a_selected_draw_public_by_starting_it_first(world):
    """Fixed (Batches.startAudit): the first half of the start window is the dispatcher's."""
    worker = world.make_worker(world.nodes[0], nonce=next(_NONCES))
    dispatcher = world.nodes[1]
    batch, _, _ = world.post_and_draw(dispatcher, [worker.receipt])
    # A chain watcher copies the dispatcher's pending startAudit (receipt, signature, proof) and
    # sends it first without a commitment, hoping for a public draw, every seat known at the seed block.
    with reverts("TooEarly"):
        world.protocol.start_audit(world.outsider, batch.batch_id, 0, worker.receipt, batch.levels)
    audit_id = world.protocol.start_audit(dispatcher.account, batch.batch_id, 0, worker.receipt, batch.levels,
                                          draw_commitment=compute_draw_commitment(SECRET)).value
    assert world.protocol.get_round_state(audit_id).private_draw


def test_a_griefer_cannot_break_the_reveal_by_firing_a_slash_before_it(world):
    """Fixed (Registry.outBlock): a slash after the seed block changes no draw seeded before it;
    before, a slash lowered the readable weights at once, the committee re-rolled and the reveal
    with the previewed members' receipts reverted NotParty (the draw then went public)."""
    triggers = _missed_start_triggers(world, world.nodes[2:6])
    dispatcher, run = _start_private(world)
    committee = world.preview(run, SECRET)
    members = [world.make_member(n) for n in committee]
    # A stranger sees the reveal in the mempool and front-runs it with a slash it was holding
    # (any pool node's: here a member's, so the re-roll is certain). It is even rewarded.
    world.protocol.slash_missed_start(world.outsider, triggers[committee[0].address], 0)
    world.reveal(run, dispatcher, SECRET, members)  # the slashed member keeps its seat: it was drawn before its slash
    assert world.protocol.get_round_state(run.audit_id).phase == Phase.OPENING


def test_a_dispatcher_cannot_reroll_its_private_committee_by_slashing_a_sybil(world):
    """Fixed (Registry.outBlock): the private committee is a function of the state at the seed
    block; before, it was one of the weights at the reveal, and a dispatcher that could slash a
    sybil re-rolled it for the sybil's stake."""
    sybils = world.nodes[2:6]  # the dispatcher's own nodes (it needs one in the committee it dislikes)
    triggers = _missed_start_triggers(world, sybils)
    dispatcher, run = _start_private(world)
    first = world.preview(run, SECRET)
    # It dislikes this committee: it lets one of its sybils be slashed (calling it itself: the
    # reward comes back) and looks again, all within the draw window, before it reveals.
    world.protocol.slash_missed_start(dispatcher.account, triggers[first[0].address], 0)
    assert world.preview(run, SECRET) == first, "the dispatcher chose between two committees"


def test_an_honest_dispatcher_is_not_slashed_when_its_private_draw_cannot_be_seated(world, contracts_anvil, tmp_path):
    """Fixed (node/dispatcher/audit/private_draw.py): a preview that reverts NotEnoughCandidates is
    revealed at once without receipts, and the contract abandons the round, nobody slashed."""
    # Two nodes leave before the start (as a griefer's nodes may, stake back after unbonding):
    # candidates 2 and 3 remain for three seats.
    for node in world.nodes[4:6]:
        world.protocol.deregister(node.account)
    dispatcher = world.nodes[1]
    chainio, tables, audit_id, secret = _node_starts_privately(world, dispatcher, contracts_anvil, tmp_path)
    stake = world.stakes()[dispatcher.address]
    tasks = KeyedTasks()
    driver = PrivateDrawDriver(chainio, tables, committee=None, tasks=tasks)  # no seat to send: none can be drawn

    async def drive_window():
        reveal_by = world.protocol.get_round_state(audit_id).deadlines.reveal_by  # the window and the late reveal's grace
        while world.chain.get_block_number() < reveal_by:
            world.chain.mine(1)
            state = world.protocol.get_round_state(audit_id)
            if state.phase != Phase.DRAWING:
                break
            await driver.advance(world.protocol.get_audit(audit_id), state, world.chain.get_block_number())
            await tasks.wait_idle()

    asyncio.run(drive_window())
    state = world.protocol.get_round_state(audit_id)
    if state.phase == Phase.DRAWING:
        world.protocol.lapse(world.outsider, audit_id)
    assert world.stakes()[dispatcher.address] == stake


def test_each_refused_private_committee_costs_its_dispatcher(world):
    """Fixed (Batches.startPrivateAudit): each private start deposits a bond (what a request pays,
    `compute_private_draw_bond`), returned at the reveal and forfeited at a missed one; before, the
    price of refusing was the dispatcher's slash alone, nothing once it was slashed to nothing."""
    dispatcher = world.nodes[5]  # a colluding dispatcher with two selected jobs of cheats in flight
    runs = [world.start(world.make_worker(world.nodes[0], nonce=next(_NONCES)), dispatcher=dispatcher, secret=SECRET)
            for _ in range(2)]

    bond = compute_private_draw_bond(world.preset)
    costs = []
    for run in runs:  # it dislikes each private committee and keeps the secret: the public draw is its second chance
        world.preview(run, SECRET)
        world.chain.mine(world.protocol.get_round_state(run.audit_id).deadlines.reveal_by + 1 - world.chain.get_block_number())
        stake, credit = world.stakes()[dispatcher.address], world.protocol.get_credit(dispatcher.address)
        world.protocol.lapse(world.outsider, run.audit_id)
        world.protocol.supply_receipt(world.outsider, run.audit_id, run.worker.receipt)  # the client shows the receipt
        # its cost: the stake slashed, and the bond it deposited at the start minus what came back
        costs.append(stake - world.stakes()[dispatcher.address] + bond - (world.protocol.get_credit(dispatcher.address) - credit))
        assert world.protocol.get_round_state(run.audit_id).phase == Phase.DRAWING  # drawn publicly next
    assert world.stakes()[dispatcher.address] < world.preset.MIN_STAKE_WEI  # slashed out of play by the first refusal...
    assert all(cost >= bond > 0 for cost in costs), costs  # ...and the second still cost it the bond


def test_an_honest_reveal_returns_the_bond_whatever_the_pool_holds(world):
    """The bond is held apart from the fee pool (whose payments could otherwise spend it between
    the start and the reveal, and short the honest dispatcher): the pool neither gains it at the
    start nor pays it at the reveal."""
    pool = world.protocol.jobs.call("feePoolWei")
    dispatcher, run = _start_private(world)
    pool_after_start = world.protocol.jobs.call("feePoolWei")
    credit = world.protocol.get_credit(dispatcher.address)
    members = [world.make_member(n) for n in world.preview(run, SECRET)]
    world.reveal(run, dispatcher, SECRET, members)
    assert world.protocol.get_credit(dispatcher.address) - credit == compute_private_draw_bond(world.preset)
    assert world.protocol.jobs.call("feePoolWei") == pool_after_start == pool + world.preset.JOB_FEE_WEI  # the batch's job fee only


# --- attacks that fail ----------------------------------------------------------------------------


def _public_bytes(world, from_block: int) -> list[bytes]:
    """Everything a chain watcher reads from ``from_block`` to the head: every transaction's input,
    every log's topics and data (any contract)."""
    w3, head = world.chain.w3, world.chain.get_block_number()
    public = [bytes(tx["input"]) for n in range(from_block, head + 1) for tx in w3.eth.get_block(n, full_transactions=True)["transactions"]]
    for log in w3.eth.get_logs({"fromBlock": from_block, "toBlock": head}):
        public += [bytes(t) for t in log["topics"]] + [bytes(log["data"])]
    return public


def test_a_member_cannot_read_another_member_s_vote_before_casting_its_own(world):
    """A member (the copier, slot 1) that does not check the work waits, watching everything public,
    to copy the others' votes. Before it has sealed its own, nothing public names another member's
    vote or opening, nobody can show one (openAndVote reverts TooEarly until every member sealed),
    and once the seal window has closed without its seal it cannot vote at all. After its seal, what
    it reads comes too late: its seal fixes its vote. (Before sealed votes, member 0's one call
    posted its vote and leaves in the clear: the first assertion failed.)"""
    worker = world.make_worker(world.nodes[0], nonce=next(_NONCES))
    run = world.start(worker, dispatcher=world.nodes[1])
    members = [world.make_member(n) for n in world.committee(run)]
    world.post_members(run, members)
    world.open_worker(run)
    watched_from = world.chain.get_block_number() + 1
    copier, others = 1, (0, 2)
    for slot in others:  # every step the others may take before the copier has committed
        world.seal_member(run, slot)
    secrets = {slot: run.sealed[(0, slot)] for slot in others}  # (opening, agree, salt), off-chain
    public = _public_bytes(world, watched_from)
    for slot, (opening, agree, salt) in secrets.items():
        party = world.protocol.get_party(run.audit_id, 0, slot + 1)
        assert party["vote"] == NO_VOTE and not party["opened"], f"member {slot}'s vote is readable before the copier votes"
        leaves, opening_hash = encode_opening_leaves(opening), compute_opening_hash(opening)
        assert not any(leaves in b or opening_hash in b or salt in b for b in public), f"member {slot}'s opening is public"
        # Even a copier that knew the member's opening cannot try both votes against its seal: it
        # lacks the salt (from the member's key); none it can form (zero, its own) matches either vote.
        guesses = {compute_vote_seal(run.audit_id, 0, slot, vote, opening_hash, guess) for vote in (True, False)
                   for guess in (bytes(32), compute_vote_salt(bytes(members[copier].node.account.key), run.audit_id, 0, slot))}
        assert party["opening_hash"] not in guesses
    assert world.protocol.get_round_state(run.audit_id).opens == 0
    assert not [e for e in get_events(world.chain, [world.protocol.jobs], watched_from, names={"Opened"})]
    # Nobody can show a vote yet: not the copier (it has not sealed), not a member that sealed.
    copier_opening = world.opening(run, members[copier])
    copier_salt = compute_vote_salt(bytes(members[copier].node.account.key), run.audit_id, 0, copier)
    with reverts("TooEarly"):
        world.protocol.open_and_vote(members[copier].node.account, run.audit_id, copier, copier_opening, True, copier_salt)
    with reverts("TooEarly"):
        world.protocol.open_and_vote(members[0].node.account, run.audit_id, 0, *secrets[0])
    # Waiting out the seal window does not help: the votes open then, but its seal is refused.
    snapshot = world.chain.snapshot()
    world.mine_past_seals(run)
    world.open_member(run, 0)
    assert world.protocol.get_party(run.audit_id, 0, 1)["vote"] != NO_VOTE
    with reverts("TooLate"):
        world.seal_member(run, copier)
    world.chain.revert(snapshot)
    # It seals blind; the votes open; it cannot then open the other vote than the one it sealed.
    world.seal_member(run, copier)
    world.open_member(run, 0)
    sealed_vote = run.sealed[(0, copier)][1]
    with reverts("SealMismatch"):
        world.protocol.open_and_vote(members[copier].node.account, run.audit_id, copier, copier_opening, not sealed_vote, copier_salt)
    world.open_member(run, copier)
    world.open_member(run, 2)
    assert world.finish(run) == PASS




def test_registrations_top_ups_model_changes_and_leaving_after_the_seed_do_not_reroll(world):
    """Only slashes weigh at once: every other change a node can make at will waits for the next
    epoch (or, for leaving, is judged at the seed block), so none re-rolls a previewed committee."""
    dispatcher, run = _start_private(world)
    first = world.preview(run, SECRET)
    newcomer = world._funded_account(7)
    world.protocol.register(newcomer, 77, "http://127.0.0.1:9999", [MODEL_ID], world.preset.MIN_STAKE_WEI)
    world.protocol.top_up(world.nodes[5].account, 5 * world.preset.MIN_STAKE_WEI)
    world.protocol.deregister(first[0].account)
    assert world.preview(run, SECRET) == first
    world.reveal(run, dispatcher, SECRET, [world.make_member(n) for n in first])
    assert world.protocol.get_round_state(run.audit_id).phase == Phase.OPENING


def test_a_revealed_secret_reused_for_another_audit_gives_nobody_a_choice(world):
    """A dispatcher that reuses its secret only makes its own second draw public once the first is
    revealed; the secret cannot be revealed twice, nor by anyone else, nor for a round already drawn."""
    dispatcher, first = _start_private(world)
    _, second = _start_private(world)
    members = [world.make_member(n) for n in world.preview(first, SECRET)]
    world.reveal(first, dispatcher, SECRET, members)
    with reverts("UnexpectedPhase"):
        world.reveal(first, dispatcher, SECRET, [])
    with reverts("NotParty"):
        world.reveal(second, world.nodes[2], SECRET, [])
    seats = world.preview(second, SECRET)  # anyone can now compute it: the reuse costs only privacy
    tx = world.reveal(second, dispatcher, SECRET, [world.make_member(n) for n in seats])
    assert [world.node(a) for a in tx.value] == seats


def test_a_receipt_less_reveal_after_a_slash_still_seats_the_previewed_committee(world):
    """The node's fallback for a refused reveal (`PrivateDrawDriver._reveal`) reveals the draw
    alone: after a slash of a previewed member the seats are still the previewed ones (drawn at the
    seed block, before the slash), nobody is slashed, and only the privacy is lost (every seat is
    named before its receipt)."""
    triggers = _missed_start_triggers(world, world.nodes[2:6])
    dispatcher, run = _start_private(world)
    committee = world.preview(run, SECRET)
    world.protocol.slash_missed_start(world.outsider, triggers[committee[0].address], 0)
    assert world.preview(run, SECRET) == committee
    stake = world.stakes()[dispatcher.address]
    tx = world.reveal(run, dispatcher, SECRET, [])
    state = world.protocol.get_round_state(run.audit_id)
    assert state.phase == Phase.COMMITTING and state.receipts == 0 and [world.node(a) for a in tx.value] == committee
    assert world.stakes()[dispatcher.address] == stake


def test_a_receipt_less_reveal_of_an_unseatable_draw_abandons_it_and_slashes_nobody(world):
    """What the node does when previewCommittee reverts NotEnoughCandidates:
    reveal at once with no receipts; the contract then abandons the round as a public draw would."""
    for node in world.nodes[4:6]:
        world.protocol.deregister(node.account)
    dispatcher, run = _start_private(world)
    with reverts("NotEnoughCandidates"):
        world.preview(run, SECRET)
    stakes = world.stakes()
    tx = world.reveal(run, dispatcher, SECRET, [])
    assert tx.value == [] and world.protocol.get_round_state(run.audit_id).phase == Phase.ABANDONED
    assert world.stakes() == stakes


def test_a_dispatcher_node_back_after_its_missed_reveal_shows_the_receipt_and_the_audit_goes_on(world, contracts_anvil, tmp_path):
    """The node was down through its draw window (slashed at the lapse: it owed the reveal); back up,
    it shows the worker's receipt the private start kept back (`supply_receipt`), so the round is
    drawn publicly and the audit goes on: a crash costs the dispatcher, never the audit."""
    dispatcher = world.nodes[1]
    chainio, tables, audit_id, secret = _node_starts_privately(world, dispatcher, contracts_anvil, tmp_path)
    world.chain.mine(world.protocol.get_round_state(audit_id).deadlines.reveal_by + 1 - world.chain.get_block_number())
    world.protocol.lapse(world.outsider, audit_id)
    assert not world.protocol.get_round_state(audit_id).receipt_known
    driver = PrivateDrawDriver(chainio, tables, committee=None, tasks=KeyedTasks())
    asyncio.run(driver.supply_receipt(audit_id))
    asyncio.run(driver.supply_receipt(audit_id))  # a second tick after a restart: already shown, no error
    state = world.protocol.get_round_state(audit_id)
    assert state.receipt_known and state.phase == Phase.DRAWING
    world.chain.mine(state.deadlines.draw_after + 1 - world.chain.get_block_number())
    assert len(world.protocol.draw_round(world.outsider, audit_id).value) == world.preset.COMMITTEE_SIZE
