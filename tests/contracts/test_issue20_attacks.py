"""The four confirmed attacks of issue 20, each replayed on the real contracts in the attacker's
call order (docs/protocol.md §13, threat table): each now reverts, or ends with the attacker
slashed and every honest party whole.

    1  committee shopping: scan the committees of drawn batches, pay only for a favourable one,
       re-batch the same receipt for fresh draws
    2  a claim window pushes a redraw past its readable epoch: the cheat escapes by abandonment
    3  a leaver held hostage by requests on its old receipts before every withdraw
    4  a 30,000-token transcript that no block can publish: its honest worker slashed on a claim
"""

import dataclasses
import random

import pytest

from helpers.chain import reverts
from verillm.chain import RpcChain
from verillm.spec import settlement as spec
from verillm.spec.audit import (Phase, compute_committee, compute_committee_seed, compute_excluded_weights, compute_round_seed)
from verillm.spec.job import compute_tokens_hash, compute_transcript_hash
from verillm.spec.params import compute_timeline
from verillm.spec.receipt import compute_auditable_until_block, sign_receipt
from verillm.spec.types import Receipt, SamplingParams

from helpers.contracts import CHEAT_OFFSET, MODEL_ID, PRESET, AuditRun, Party, World


def _land_at(world, block: int) -> None:
    """Mine so that the next transaction is included in block ``block`` (anvil automines)."""
    head = world.chain.get_block_number()
    assert head < block, (head, block)
    world.chain.mine(block - 1 - head)


def _land_after(world, deadline: int) -> None:
    """Mine so that the next transaction's gas estimate (run at the head) sees a block past
    ``deadline``: it lands in deadline + 2, one block after the first it may land in."""
    _land_at(world, deadline + 2)


def _state(world, audit_id: int, round_index: int | None = None):
    return world.protocol.get_round_state(audit_id, round_index)


INPUT = tuple(range(1000, 1006))


def _resign(world, party: Party, **fields) -> Party:
    receipt = dataclasses.replace(party.receipt, signature=b"\x00" * 65, **fields)
    return dataclasses.replace(party, receipt=sign_receipt(receipt, party.node.account.key, world.domain))


def _publishable(world, party: Party) -> Party:
    """The worker's receipt over its real transcript (input ‖ output), so it can be published."""
    return _resign(world, party, input_hash=compute_tokens_hash(INPUT), output_hash=compute_transcript_hash(INPUT, party.trace.output_tokens))


def _member(world, node, worker: Party) -> Party:
    return _resign(world, world.make_member(node), input_hash=worker.receipt.output_hash)


# --- 1. committee shopping ------------------------------------------------------------------------

@pytest.fixture
def requests_world(world_base):
    """A deployment whose draw selects nothing (AUDIT_RATE_BPS = 0): every audit is requested and paid."""
    snapshot = world_base.chain.snapshot()  # before the deployment: the module's nonces stay right
    yield World(RpcChain(world_base.chain.url), PRESET.replace(AUDIT_RATE_BPS=0))
    world_base.chain.revert(snapshot)


def test_attack1_a_requested_committee_is_unknown_until_paid_and_each_receipt_gets_one_draw(requests_world):
    world = requests_world
    honest, dispatcher = world.nodes[0], world.nodes[1]
    colluders = {n.address for n in world.nodes[3:6]}
    fee = PRESET.COMMITTEE_SIZE * PRESET.AUDIT_FEE_WEI
    receipts = [world.make_worker(honest, nonce=i).receipt for i in range(6)]
    batch, _, _ = world.post_and_draw(dispatcher, receipts)
    beta = world.protocol.get_batch(batch.batch_id)["beta"]
    # The shopper's scan, as the contracts allowed it before issue 20: every index's committee
    # was the β-seeded draw, free to compute from the moment the batch was drawn.
    epoch = world.protocol.registry.call("currentEpoch")
    nodes, weights = world.protocol.registry.call("getModelWeights", MODEL_ID, epoch)
    weights = compute_excluded_weights(nodes, weights, [honest.address, dispatcher.address])
    scan = {i: compute_committee(compute_committee_seed(beta, i), 0, PRESET.COMMITTEE_SIZE, nodes, weights) for i in range(6)}
    best = max(range(6), key=lambda i: len(colluders & set(scan[i])))
    shopper = world.nodes[3]
    tx = world.protocol.start_audit(shopper.account, batch.batch_id, best, receipts[best], batch.levels, fee)
    audit_id, paid_in = tx.value, tx.receipt["blockNumber"]
    state = _state(world, audit_id)
    # Paid, and no committee exists: its seed is the hash of a block after the payment.
    assert state.phase == Phase.DRAWING and world.protocol.get_committee(audit_id, 0) == []
    assert state.deadlines.draw_after > paid_in
    with reverts("TooEarly"):
        world.protocol.draw_round(world.outsider, audit_id)
    committee = world.draw_round(AuditRun(audit_id, None)).value
    seed = compute_round_seed(audit_id, 0, world.protocol.get_blockhash(state.deadlines.draw_after))
    assert committee == list(compute_committee(seed, 0, PRESET.COMMITTEE_SIZE, nodes, weights))
    # One draw per receipt, whoever batches it: re-batched under the colluders' identities, the
    # same receipt cannot be requested again (no fresh committee to shop).
    for other in world.nodes[4:6]:
        again, _, _ = world.post_and_draw(other, [receipts[best]])
        with reverts("ReceiptReplayed"):
            world.protocol.start_audit(other.account, again.batch_id, 0, receipts[best], again.levels, fee)
    # A request whose committee the shopper dislikes, left undrawn, lapses: the fee stays in the
    # pool, nobody is slashed, and the receipt can never be requested again.
    other_index = (best + 1) % 6
    pool = world.protocol.jobs.call("feePoolWei")
    stakes = world.stakes()
    lapsed = world.protocol.start_audit(shopper.account, batch.batch_id, other_index, receipts[other_index], batch.levels, fee).value
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS + 1)
    world.protocol.lapse(world.outsider, lapsed)
    assert _state(world, lapsed).phase == Phase.ABANDONED and world.stakes() == stakes
    assert world.protocol.jobs.call("feePoolWei") == pool + fee
    again, _, _ = world.post_and_draw(world.nodes[4], [receipts[other_index]])
    with reverts("ReceiptReplayed"):
        world.protocol.start_audit(world.nodes[4].account, again.batch_id, 0, receipts[other_index], again.levels, fee)


def test_attack1_a_dispatcher_sees_no_committee_before_it_starts(world):
    # As the dispatcher (≥ 2 of 3 colluding would do) nothing is learnt either: the committee
    # of a selected job does not exist when the start is due, and a start that is skipped
    # (the receipt audited already) or missed never gives a second draw.
    worker, dispatcher = world.make_worker(world.nodes[0]), world.nodes[1]
    batch, _, _ = world.post_and_draw(dispatcher, [worker.receipt])
    assert world.protocol.is_audited(batch.batch_id, 0)
    run = world.start(worker, dispatcher=dispatcher, draw=False)
    assert world.protocol.get_committee(run.audit_id, 0) == []
    # the same receipt in the dispatcher's earlier batch: its selected start is skipped
    assert world.protocol.start_audit(dispatcher.account, batch.batch_id, 0, worker.receipt, batch.levels).value == 0
    assert world.protocol.jobs.call("auditCount") == run.audit_id


# --- 2. the window-edge escape ------------------------------------------------------------------------

def test_attack2_a_claim_window_never_turns_a_redraw_into_an_abandonment(world):
    # The self-dispatching cheat times everything at the window edges (batch in an epoch's last
    # block, draw and start at their windows' ends, the committee draw at its end); a colluding
    # member claims its job falsely at the last block of the commit window and withholds its
    # receipt; the cheat publishes at the last block of the publication window. Before issue 20
    # the redraw read the batch's epoch, two epochs back: EpochNotReadable ended the round,
    # ABANDONED, nobody slashed. Now a round reads the epoch it began in, and EPOCH_BLOCKS covers
    # the round's longest draw span, claim window included (Params.timeline): the redraw stands.
    cheat = world.nodes[0]
    epoch_blocks = PRESET.EPOCH_BLOCKS
    world.protocol.advance_to_next_epoch()
    _land_at(world, world.chain.get_block_number() + epoch_blocks - (world.chain.get_block_number() + 1) % epoch_blocks)
    worker = _publishable(world, world.make_worker(cheat, offset=CHEAT_OFFSET))  # signed now: its horizon outlives the batch's last start
    posted = world.protocol.post_batch(cheat.account, [world.protocol.batches.call("hashReceipt", _tuple(worker.receipt))]).value
    posted_block = world.protocol.get_batch(posted.batch_id)["posted_block"]
    assert (posted_block + 1) % epoch_blocks == 0  # the batch's epoch ends with it
    _land_at(world, posted_block + PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS)
    drawn = world.protocol.draw_audit(cheat.account, posted.batch_id, cheat.vrf_key).receipt["blockNumber"]
    _land_at(world, drawn + PRESET.START_WINDOW_BLOCKS)
    run = AuditRun(world.protocol.start_audit(cheat.account, posted.batch_id, 0, worker.receipt, posted.levels).value, worker)
    d = _state(world, run.audit_id).deadlines
    _land_at(world, d.draw_by)
    world.protocol.draw_round(cheat.account, run.audit_id)
    committee = world.committee(run)
    colluder, honest = committee[0], committee[1:]
    members = {n.address: _member(world, n, worker) for n in committee}
    _land_at(world, _state(world, run.audit_id).deadlines.commit_by)
    publish_deadline = world.protocol.claim_undelivered(colluder.account, run.audit_id, 0).value  # false, bond-free
    _land_at(world, publish_deadline)
    world.protocol.publish_transcript(cheat.account, run.audit_id, list(INPUT) + list(worker.trace.output_tokens), SamplingParams())
    for slot, node in enumerate(honest, start=1):
        world.protocol.post_committee_receipt(world.outsider, run.audit_id, slot, members[node.address].receipt)
    _land_after(world, _state(world, run.audit_id).deadlines.commit_by)  # the honest parties redraw at once
    epoch_before = world.protocol.registry.call("currentEpoch")
    world.protocol.replace_missing(world.outsider, run.audit_id)
    assert world.protocol.registry.call("epochOf", posted_block) + 2 == epoch_before  # the old read would have failed here
    state = _state(world, run.audit_id)
    assert state.phase == Phase.COMMITTING and state.attempt == 1, state  # redrawn, not abandoned
    replacement = world.committee(run)[0]
    assert replacement.address != colluder.address
    run.members = [_member(world, replacement, worker)] + [members[n.address] for n in honest]
    world.protocol.post_committee_receipt(world.outsider, run.audit_id, 0, run.members[0].receipt)
    world.open_worker(run)
    world.vote_members(run)  # honest votes, sealed then opened: the cheat's data fail
    stake = world.stakes()[cheat.address]
    assert world.finish(run) == spec.FAIL
    assert world.stakes()[cheat.address] < stake  # the cheat is slashed: no escape


def _tuple(receipt):
    from verillm.chain.protocol import compute_receipt_tuple

    return compute_receipt_tuple(receipt)


# --- 3. the hostage-taker -----------------------------------------------------------------------------

@pytest.fixture
def ten_world(world_base):
    """Ten nodes: room for an escalation committee of 5 besides the worker, the hostage-taker and round 0."""
    snapshot = world_base.chain.snapshot()
    yield World(RpcChain(world_base.chain.url), PRESET, extra_nodes=4)
    world_base.chain.revert(snapshot)


def _post_at_edges(world, run: AuditRun, round_index: int) -> None:
    """Every member of the round posts its receipt at the last block of the commit window."""
    _land_at(world, _state(world, run.audit_id, round_index).deadlines.commit_by - len(world.committee(run, round_index)) + 1)
    world.post_members(run, [world.make_member(n) for n in world.committee(run, round_index)], round_index)


def _round_at_edges(world, run: AuditRun, round_index: int) -> None:
    """Drive a round with every party at the last block of its window; finalize at the first."""
    d = _state(world, run.audit_id, round_index).deadlines
    _land_at(world, d.draw_by)
    world.protocol.draw_round(world.outsider, run.audit_id)
    _post_at_edges(world, run, round_index)
    d = _state(world, run.audit_id, round_index).deadlines
    _land_at(world, d.worker_open_by)
    world.protocol.open_worker(run.worker.node.account, run.audit_id, world.opening(run, run.worker))
    _land_at(world, d.members_seal_by - len(run.members) + 1)  # every seal at the seal window's end
    for slot in range(len(run.members)):
        world.seal_member(run, slot)
    _land_at(world, d.members_open_by - len(run.members) + 1)  # every opening at the open window's end
    for slot in range(len(run.members)):
        world.open_member(run, slot)
    world.protocol.finalize(world.outsider, run.audit_id)


def test_attack3_a_leaver_knows_the_block_its_duties_end_and_no_hostage_holds_it(ten_world):
    world = ten_world
    leaver, hostage = world.nodes[0], world.nodes[1]
    old = [world.make_worker(leaver, nonce=i) for i in range(3)]  # receipts the hostage-taker kept
    left = world.protocol.deregister(leaver.account).receipt["blockNumber"]
    free_at = world.protocol.get_node(leaver.address)["unbonding_end_block"]
    assert free_at == left + PRESET.UNBONDING_BLOCKS >= left + compute_timeline(PRESET).leaver_duty_span
    # The last batch that may still carry its receipts, posted at the horizon's last block, its
    # audit stretched at every window's edge, escalated by the hostage-taker at the last block.
    _land_at(world, left + PRESET.AUDIT_HORIZON_BLOCKS)
    batch, _, _ = world.post_and_draw(hostage, [old[0].receipt])
    _land_at(world, world.protocol.get_batch(batch.batch_id)["drawn_block"] + PRESET.START_WINDOW_BLOCKS)
    run = AuditRun(world.protocol.start_audit(hostage.account, batch.batch_id, 0, old[0].receipt, batch.levels).value, old[0])
    _round_at_edges(world, run, 0)
    _land_at(world, _state(world, run.audit_id, 0).deadlines.dispute_by)
    world.protocol.escalate(hostage.account, run.audit_id)
    _round_at_edges(world, run, 1)
    _land_after(world, _state(world, run.audit_id, 1).deadlines.dispute_by)
    assert world.protocol.settle(world.outsider, run.audit_id).value == spec.PASS
    # One block later, the hostage-taker's next batch of an old receipt opens no audit: skipped,
    # nobody locked, nobody slashed; and the leaver withdraws at the block it was told.
    late, _, _ = world.post_and_draw(hostage, [old[1].receipt])
    assert world.protocol.get_batch(late.batch_id)["posted_block"] > left + PRESET.AUDIT_HORIZON_BLOCKS
    assert world.protocol.start_audit(hostage.account, late.batch_id, 0, old[1].receipt, late.levels).value == 0
    assert world.protocol.get_node(leaver.address)["locks"] == 0
    _land_at(world, free_at - 1)  # the block before the withdraw: the hostage-taker tries once more
    last, _, _ = world.post_and_draw(hostage, [old[2].receipt])
    assert world.protocol.start_audit(hostage.account, last.batch_id, 0, old[2].receipt, last.levels).value == 0
    stake = world.protocol.get_node(leaver.address)["stake_wei"]
    assert world.protocol.withdraw(leaver.account).value == stake


def test_attack3_a_request_on_a_leavers_old_receipt_is_refused_after_the_horizon(requests_world):
    world = requests_world
    leaver, hostage = world.nodes[0], world.nodes[3]
    receipt = world.make_worker(leaver).receipt
    left = world.protocol.deregister(leaver.account).receipt["blockNumber"]
    _land_at(world, left + PRESET.AUDIT_HORIZON_BLOCKS + 1)
    batch, _, _ = world.post_and_draw(hostage, [receipt])
    with reverts("ReceiptExpired"):
        world.protocol.start_audit(hostage.account, batch.batch_id, 0, receipt, batch.levels, PRESET.COMMITTEE_SIZE * PRESET.AUDIT_FEE_WEI)


# --- 4. the long transcript ---------------------------------------------------------------------------

def _long_receipt(world, node, input_tokens: int, output_tokens: int) -> tuple[Party, list[int]]:
    rng = random.Random(input_tokens + 31 * output_tokens)
    tokens = [rng.randrange(49_152) for _ in range(input_tokens + output_tokens)]
    receipt = Receipt(job_hash=rng.randbytes(32), model_id=MODEL_ID, input_hash=compute_tokens_hash(tokens[:input_tokens]),
                      output_hash=compute_transcript_hash(tokens[:input_tokens], tokens[input_tokens:]), sampling=SamplingParams(),
                      max_new_tokens=output_tokens, commitment_root=b"\x44" * 32, num_positions=input_tokens + output_tokens - 1,
                      worker=bytes.fromhex(node.address[2:]), signature=b"\x00" * 65, input_tokens=input_tokens, output_tokens=output_tokens,
                      auditable_until_block=compute_auditable_until_block(world.chain.get_block_number(), world.preset))
    return Party(node, None, None, sign_receipt(receipt, node.account.key, world.domain)), tokens


def test_attack4_a_transcript_over_the_bound_cannot_be_audited_nor_its_worker_slashed(world):
    # A 30,000-token receipt: its publication (≈ 33 M gas) fits no block, so any claim slashed
    # its honest worker. Now no audit of it can start (its dispatcher must not batch it, and a
    # node refuses such a job: docs/protocol.md §12 "Bounded everything").
    party, _ = _long_receipt(world, world.nodes[0], 26_000, 4_000)
    batch, _, _ = world.post_and_draw(world.nodes[1], [party.receipt])
    stakes = world.stakes()
    with reverts("transcript too long"):
        world.protocol.start_audit(world.nodes[1].account, batch.batch_id, 0, party.receipt, batch.levels)
    assert world.stakes()[world.nodes[0].address] == stakes[world.nodes[0].address]


def test_attack4_publication_at_the_bound_fits_a_third_of_a_block(world):
    # Measured at MAX_TRANSCRIPT_TOKENS (8,192 = 4,096 + 4,096), the bound every preset keeps.
    assert PRESET.MAX_TRANSCRIPT_TOKENS == 8_192
    party, tokens = _long_receipt(world, world.nodes[0], 4_096, 4_096)
    run = world.start(party, dispatcher=world.nodes[1])
    world.protocol.claim_undelivered(world.committee(run)[0].account, run.audit_id, 0)
    gas = world.protocol.publish_transcript(party.node.account, run.audit_id, tokens, SamplingParams()).gas_used
    print(f"\npublishTranscript at the bound (4,096 + 4,096 tokens): {gas} gas")
    assert gas < 10_000_000, gas  # a third of a 30 M block
    over, _ = _long_receipt(world, world.nodes[0], 4_097, 4_096)
    batch, _, _ = world.post_and_draw(world.nodes[1], [over.receipt])
    with reverts("transcript too long"):  # one token over the bound
        world.protocol.start_audit(world.nodes[1].account, batch.batch_id, 0, over.receipt, batch.levels)


# --- 1 (the framing itself), 5: accountable votes ---------------------------------------------------

def _round_opening(world, run: AuditRun, party: Party, round_index: int):
    """``party``'s opening for round ``round_index``'s challenge (round 0's while round 1 runs)."""
    from verillm.spec.challenge import compute_challenge, compute_opened_cells
    from verillm.spec.commitment import compute_opening
    from helpers.contracts import LAYERS, OUTPUT_TOKENS, PROMPT_LEN

    seed = bytes(world.protocol.jobs.call("getRound", run.audit_id, round_index)[4])
    challenge = compute_challenge(seed, PROMPT_LEN, OUTPUT_TOKENS, LAYERS, PRESET.CHALLENGE_POSITIONS)
    return compute_opening(party.trace, party.commitment, compute_opened_cells(challenge, party.trace.num_positions))


@pytest.fixture
def fifteen_world(world_base):
    """Fifteen nodes: room for the appeal (5) and its decider (5) besides the worker, the dispatcher and round 0."""
    snapshot = world_base.chain.snapshot()
    yield World(RpcChain(world_base.chain.url), PRESET, extra_nodes=9)
    world_base.chain.revert(snapshot)


def test_attack1_framing_costs_the_worker_nothing_and_the_colluders_the_penalty(fifteen_world):
    # The framing: two colluders of a round-0 committee commit fabricated, self-consistent data
    # and vote DISAGREE on an honest worker (before issue 20: FAIL, the worker slashed in full, a
    # DISAGREE never adjudicated). The worker appeals (escalates: its node does so on a FAIL of
    # its own honest data); the fresh round passes it. Issue 20 then slashed the colluders in full
    # (the appeal majority's data contradict theirs); issue 34 (attack 2) showed the same rule
    # slashing honest dissenters in full after a captured appeal: one round against another is no
    # proof, so after an overturned FAIL nobody is adjudicated across rounds (`NoFault`) and the
    # framers take the minority penalty of settlement; the worker is whole. The appeal's PASS
    # contradicts round 0's FAIL, so it decides nothing alone: a decider round (honest here)
    # agrees with it (issue 34; before the decider the appeal's PASS was final).
    from helpers.contracts import LAYERS, MODEL, OUTPUT_TOKENS, PROMPT_LEN
    from verillm.spec.audit import compute_appeal_cells

    world = fifteen_world
    worker, run, round0 = world.start_framed(votes=lambda slot: slot == 2)  # the colluders DISAGREE, the honest member agrees
    colluders = [member.node for member in round0[:2]]
    stakes = world.stakes()
    escalated, drawn = world.pass_appeal(run, worker)
    gas = {"escalate (the appeal)": escalated.gas_used, "drawRound (5 members)": drawn.gas_used}
    cells = compute_appeal_cells(PROMPT_LEN, OUTPUT_TOKENS, LAYERS)
    worker_opening = _round_opening(world, run, worker, 0)
    for slot, liar in enumerate(round0[:2], start=1):
        liar_opening = _round_opening(world, run, liar, 0)
        contest = world.protocol.contest(worker.node.account, run.audit_id, 0, slot, sorted(cells))  # round 0, during the appeal's window
        gas["contest (10 token cells)"] = contest.gas_used
        gas["answerContest"] = world.protocol.answer_contest(liar.node.account, contest.value, sorted(cells), liar_opening).gas_used
        published = world.protocol.get_answered_opening(contest.value, MODEL)  # its proofs, now public: anyone adjudicates with them
        assert {(i.leaf.position, i.leaf.layer) for i in published.leaves} == cells
        with reverts("NoFault"):  # round 0's majority failed the worker: the appeal's PASS alone convicts nobody in full
            world.protocol.adjudicate(worker.node.account, run.audit_id, 0, slot, worker_opening, published, only=cells)
    with reverts("NoFault"):  # the honest round-0 member's data pass: nothing to slash
        world.protocol.adjudicate(worker.node.account, run.audit_id, 0, 3, worker_opening, _round_opening(world, run, round0[2], 0), only=cells)
    _, verdict = world.decider(run)  # settling the appeal entered it
    assert verdict == spec.PASS
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    settled = world.protocol.settle(world.outsider, run.audit_id)
    assert settled.value == spec.PASS
    gas["settle (3 rounds, 13 seats)"] = settled.gas_used
    print("\n" + "\n".join(f"{k}: {v} gas" for k, v in gas.items()))
    after = world.stakes()
    assert after[worker.node.address] == stakes[worker.node.address] and after[round0[2].node.address] == stakes[round0[2].node.address]
    assert all(after[n.address] == stakes[n.address] * (10_000 - PRESET.MEMBER_PENALTY_BPS) // 10_000 for n in colluders)


def test_a_disagree_on_honest_data_is_never_slashed_as_a_lie(ten_world):
    # Attack 6 of issue 9 stays closed: a member that caught a truncation votes DISAGREE on data
    # that agree with the worker's. An appeal that passes the worker does not make it a liar.
    from helpers.contracts import LAYERS, OUTPUT_TOKENS, PROMPT_LEN
    from verillm.spec.audit import compute_appeal_cells

    world = ten_world
    worker = world.make_worker(world.nodes[0])
    run = world.start(worker, dispatcher=world.nodes[1])
    members = [world.make_member(n) for n in world.committee(run)]
    world.decide(run, members, votes=lambda slot: slot == 0)  # two honest-data DISAGREEs (the stop rule)
    world.pass_appeal(run, worker)
    cells = compute_appeal_cells(PROMPT_LEN, OUTPUT_TOKENS, LAYERS)
    for slot in (2, 3):
        with reverts("NoFault"):
            world.protocol.adjudicate(world.outsider, run.audit_id, 0, slot, _round_opening(world, run, worker, 0),
                                      _round_opening(world, run, members[slot - 1], 0), only=cells)
