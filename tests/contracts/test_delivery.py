"""Undelivered committee jobs (contracts/src/Delivery.sol, docs/protocol.md §12 "Undelivered
jobs"): a member claims, the worker publishes its transcript or is slashed. Real anvil, the
real deployment of helpers.contracts; every path of the state machine and its gas bound."""

import dataclasses
import random

import pytest

from helpers.chain import reverts
from verillm.spec import delivery as spec_delivery
from verillm.spec import settlement as spec
from verillm.spec.audit import Phase
from verillm.spec.hashing import blake3_digest
from verillm.spec.job import compute_tokens_hash, compute_transcript_hash
from verillm.spec.receipt import compute_auditable_until_block, sign_receipt
from verillm.spec.types import Receipt, SamplingParams

from helpers.contracts import MODEL_ID, OUTPUT_TOKENS, PRESET, PROMPT_LEN, AuditRun, Party

INPUT = tuple(range(1000, 1000 + PROMPT_LEN))
BOND = PRESET.DELIVERY_CLAIM_BOND_WEI
COMMITTING, OPENING, DECIDED = Phase.COMMITTING, Phase.OPENING, Phase.DECIDED


def _resign(world, party: Party, **fields) -> Party:
    receipt = dataclasses.replace(party.receipt, signature=b"\x00" * 65, **fields)
    return dataclasses.replace(party, receipt=sign_receipt(receipt, party.node.account.key, world.domain))


def _transcript(party: Party) -> list[int]:
    return list(INPUT) + list(party.trace.output_tokens)


def _start(world, dispatcher: int = 1, nonce: int = 0) -> AuditRun:
    """An audit of node 0's job whose receipt signs its real transcript (input ‖ output)."""
    worker = world.make_worker(world.nodes[0], nonce=nonce)
    worker = _resign(world, worker, input_hash=compute_tokens_hash(INPUT),
                     output_hash=compute_transcript_hash(INPUT, worker.trace.output_tokens))
    return world.start(worker, dispatcher=world.nodes[dispatcher])


def _members(world, run: AuditRun) -> list[Party]:
    return [_resign(world, world.make_member(n), input_hash=run.worker.receipt.output_hash) for n in world.committee(run)]


def _commit_deadline(world, run: AuditRun) -> int:
    return world.protocol.jobs.call("getRound", run.audit_id, 0)[1]


def _balances(world) -> int:
    p = world.protocol
    return sum(world.chain.w3.eth.get_balance(h.address) for h in (p.registry, p.jobs, p.disputes, p.delivery))


def _settle_honestly(world, run: AuditRun, members: list[Party]) -> int:
    for slot, member in enumerate(members):
        world.protocol.post_committee_receipt(world.outsider, run.audit_id, slot, member.receipt)
    run.members = members
    world.open_worker(run)
    world.vote_members(run)
    return world.finish(run)


def test_blake3_in_solidity_is_the_spec_tokens_hash(world):
    harness = world.chain.deploy("Blake3Harness", sender=world.owner)
    rng = random.Random(3)
    # Every tree shape up to 5 chunks: empty, partial blocks, block, chunk and tree edges.
    for length in (0, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 2049, 3072, 3073, 4097, 5000):
        data = bytes(rng.getrandbits(8) for _ in range(length))
        assert bytes(harness.call("hash", data)) == blake3_digest(data), length


def test_claim_then_publish_restarts_the_window_and_the_audit_settles(world):
    run = _start(world)
    members = _members(world, run)
    output_hash, sampling_key, count = world.protocol.jobs.call("transcriptOf", run.audit_id)
    assert (bytes(output_hash), bytes(sampling_key), count) == (
        run.worker.receipt.output_hash, spec_delivery.compute_sampling_key(SamplingParams()), PROMPT_LEN + OUTPUT_TOKENS)
    deadline = _commit_deadline(world, run)
    claim = world.protocol.claim_undelivered(members[0].node.account, run.audit_id, 0)
    claim_block = claim.receipt["blockNumber"]
    assert claim.value == spec_delivery.compute_publish_deadline(claim_block, PRESET.COMMIT_WINDOW_BLOCKS)
    assert _commit_deadline(world, run) == spec_delivery.compute_commit_deadline_after_claim(deadline, claim_block, PRESET.COMMIT_WINDOW_BLOCKS)
    world.chain.mine(PRESET.COMMIT_WINDOW_BLOCKS - 2)
    published = world.protocol.publish_transcript(run.worker.node.account, run.audit_id, _transcript(run.worker), SamplingParams())
    publish_block = published.receipt["blockNumber"]
    assert _commit_deadline(world, run) >= publish_block + PRESET.COMMIT_WINDOW_BLOCKS
    # The member reads its job from the event: the worker's input ‖ output and its sampling.
    transcript = world.protocol.get_published_transcript(run.audit_id)
    assert transcript.tokens == tuple(_transcript(run.worker)) and transcript.sampling == SamplingParams()
    spec_delivery.verify_transcript(transcript.tokens, PROMPT_LEN, OUTPUT_TOKENS, run.worker.receipt.output_hash)
    with reverts("AlreadyPublished"):  # one publication per audit serves every member
        world.protocol.claim_undelivered(members[1].node.account, run.audit_id, 1)
    world.chain.mine(max(0, deadline - world.chain.get_block_number()) + 1)  # past the first deadline
    before = world.stakes()
    assert _settle_honestly(world, run, members) == spec.PASS
    assert world.stakes() == before  # nobody slashed: a claim answered is a normal audit


def test_claim_unanswered_slashes_the_worker_and_decides_its_default(world):
    run = _start(world)
    members = _members(world, run)
    worker = run.worker.node.address
    stake, total = world.stakes()[worker], _balances(world)
    claim = world.protocol.claim_undelivered(members[0].node.account, run.audit_id, 0)
    publish_deadline = claim.value
    with reverts("TooEarly"):
        world.protocol.slash_undelivered(world.outsider, run.audit_id)
    world.chain.mine(publish_deadline - world.chain.get_block_number() + 1)
    credit = world.protocol.get_credit(world.outsider.address)
    tx = world.protocol.slash_undelivered(world.outsider, run.audit_id)
    slashed = tx.value
    print(f"\nclaimUndelivered: {claim.gas_used} gas, slashUndelivered: {tx.gas_used} gas")
    assert slashed == stake * PRESET.SLASH_FRACTION_BPS // 10_000 > 0
    assert world.stakes()[worker] == stake - slashed
    assert world.protocol.get_credit(world.outsider.address) - credit == slashed * PRESET.SLASH_REWARD_BPS // 10_000
    assert world.protocol.get_audit(run.audit_id).phase == DECIDED
    assert _balances(world) == total + BOND  # the slashed stake moved to credits and the pool, the bond to a credit
    with reverts("UnexpectedPhase"):  # decided: no receipt, no second slash, no late publication changes it
        world.protocol.post_committee_receipt(world.outsider, run.audit_id, 1, members[1].receipt)
    with reverts("AlreadyHandled|UnexpectedPhase"):
        world.protocol.slash_undelivered(world.outsider, run.audit_id)
    with reverts("UnexpectedPhase"):
        world.protocol.publish_transcript(run.worker.node.account, run.audit_id, _transcript(run.worker), SamplingParams())
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    assert world.protocol.settle(world.outsider, run.audit_id).value == spec.WORKER_DEFAULT
    assert world.stakes()[worker] == stake - slashed  # slashed once
    assert _balances(world) == total + BOND
    assert all(world.protocol.get_node(n.address)["locks"] == 0 for n in world.nodes)


def test_colluding_dispatcher_cannot_cost_an_honest_worker_its_stake(world):
    # The dispatcher (node 1) withholds every job; the honest worker publishes when claimed.
    run = _start(world, dispatcher=1)
    members = _members(world, run)
    for slot, member in enumerate(members):
        world.protocol.claim_undelivered(member.node.account, run.audit_id, slot)
    before = world.stakes()
    world.protocol.publish_transcript(run.worker.node.account, run.audit_id, _transcript(run.worker), SamplingParams())
    assert _settle_honestly(world, run, members) == spec.PASS
    assert world.stakes() == before


def test_lying_member_costs_the_worker_one_publication_and_nothing_else(world):
    # Member 0 has its job (it will post its receipt) but claims anyway: the worker publishes
    # (gas below) and the audit goes on. The liar keeps its stake: a claim cannot be told from
    # a true one, but it can be made once per seat and answered once per audit.
    run = _start(world)
    members = _members(world, run)
    world.protocol.claim_undelivered(members[0].node.account, run.audit_id, 0)
    with reverts("AlreadyClaimed"):
        world.protocol.claim_undelivered(members[0].node.account, run.audit_id, 0)
    gas = world.protocol.publish_transcript(run.worker.node.account, run.audit_id, _transcript(run.worker), SamplingParams()).gas_used
    assert gas < 200_000, gas  # 16 tokens
    before = world.stakes()
    assert _settle_honestly(world, run, members) == spec.PASS
    assert world.stakes() == before


def _delivery_held(world) -> int:
    return world.chain.w3.eth.get_balance(world.protocol.delivery.address)


def _bonds_resolved(world, tx) -> dict:
    delivery = world.protocol.delivery
    own = {**tx.receipt, "logs": [log for log in tx.receipt["logs"] if log["address"] == delivery.address]}
    return dict(delivery.web3.events.ClaimBondsResolved().process_receipt(own)[0]["args"])


def test_a_false_claim_costs_its_maker_the_publication_it_forced_paid_to_the_publisher(world):
    """Attack 4: a member that had its job claims anyway. Its bond pays the worker's publication
    (measured gas at DELIVERY_GAS_PRICE_WEI, capped at the bond); it gets only the rest back."""
    run = _start(world)
    members = _members(world, run)
    liar, worker = members[0].node, run.worker.node
    credits = {a: world.protocol.get_credit(a) for a in (liar.address, worker.address)}
    world.protocol.claim_undelivered(liar.account, run.audit_id, 0)
    assert _delivery_held(world) == BOND and world.protocol.get_claim_bonds(run.audit_id, 0) == [liar.address]
    tokens = _transcript(run.worker)
    published = world.protocol.publish_transcript(worker.account, run.audit_id, tokens, SamplingParams())
    resolved = _bonds_resolved(world, published)
    paid, refunded = resolved["paidWei"], resolved["refundedWei"]
    assert resolved["publisher"] == worker.address and paid + refunded == BOND and paid > 0
    # What it was paid for is what it spent: its gas (within 10%: the calldata is priced as if no
    # byte were zero, the payouts at a flat PAYOUT_GAS), at the preset's price.
    paid_gas = paid // PRESET.DELIVERY_GAS_PRICE_WEI
    assert published.gas_used * 0.95 <= paid_gas <= published.gas_used * 1.1, (paid_gas, published.gas_used)
    assert world.protocol.get_credit(worker.address) - credits[worker.address] == paid
    assert world.protocol.get_credit(liar.address) - credits[liar.address] == refunded
    assert _delivery_held(world) == 0 and world.protocol.get_claim_bonds(run.audit_id, 0) == []
    print(f"\nfalse claim: the claimant paid {paid} wei ({paid_gas} gas at {PRESET.DELIVERY_GAS_PRICE_WEI} wei) for a "
          f"{published.gas_used}-gas publication; {refunded} wei of its bond back")


def test_a_true_claim_gets_its_bond_back_when_the_worker_defaults(world):
    run = _start(world)
    members = _members(world, run)
    claimant = members[1].node
    credit = world.protocol.get_credit(claimant.address)
    publish_deadline = world.protocol.claim_undelivered(claimant.account, run.audit_id, 1).value
    with reverts("ClaimsOpen"):
        world.protocol.release_claim_bonds(world.outsider, run.audit_id, 0)
    world.chain.mine(publish_deadline - world.chain.get_block_number() + 1)
    tx = world.protocol.slash_undelivered(world.outsider, run.audit_id)
    assert _bonds_resolved(world, tx)["refundedWei"] == BOND
    assert world.protocol.get_credit(claimant.address) - credit == BOND  # whole
    assert _delivery_held(world) == 0


def test_claim_bonds_come_back_when_every_receipt_came_and_nothing_was_published(world):
    run = _start(world)
    members = _members(world, run)
    credit = world.protocol.get_credit(members[0].node.address)
    world.protocol.claim_undelivered(members[0].node.account, run.audit_id, 0)
    for slot, member in enumerate(members):
        world.protocol.post_committee_receipt(world.outsider, run.audit_id, slot, member.receipt)
    assert world.protocol.get_round_state(run.audit_id, 0).phase == OPENING
    world.protocol.release_claim_bonds(world.outsider, run.audit_id, 0)
    assert world.protocol.get_credit(members[0].node.address) - credit == BOND and _delivery_held(world) == 0
    with reverts("NoBonds"):
        world.protocol.release_claim_bonds(world.outsider, run.audit_id, 0)


def test_a_claim_without_its_bond_reverts(world):
    run = _start(world)
    member = world.committee(run)[0]
    for value in (0, BOND - 1, BOND + 1):
        with reverts("WrongBond"):
            world.chain.transact(world.protocol.delivery, "claimUndelivered", run.audit_id, 0, sender=member.account, value=value)


def test_claim_rules(world):
    run = _start(world)
    members = _members(world, run)
    outsider_member = next(n for n in world.nodes if n.address not in {m.node.address for m in members})
    with reverts("NoClaim"):
        world.protocol.publish_transcript(run.worker.node.account, run.audit_id, _transcript(run.worker), SamplingParams())
    with reverts("NotParty"):
        world.protocol.claim_undelivered(outsider_member.account, run.audit_id, 0)
    with reverts("NotParty"):
        world.protocol.claim_undelivered(members[0].node.account, run.audit_id, 7)
    world.protocol.post_committee_receipt(world.outsider, run.audit_id, 0, members[0].receipt)
    with reverts("JobDelivered"):  # a member with a posted receipt had its job
        world.protocol.claim_undelivered(members[0].node.account, run.audit_id, 0)
    world.chain.mine(_commit_deadline(world, run) - world.chain.get_block_number() + 1)
    with reverts("ClaimClosed"):
        world.protocol.claim_undelivered(members[1].node.account, run.audit_id, 1)


def test_late_and_wrong_publications_are_rejected(world):
    run = _start(world)
    members = _members(world, run)
    publish_deadline = world.protocol.claim_undelivered(members[0].node.account, run.audit_id, 0).value
    tokens = _transcript(run.worker)
    account = run.worker.node.account
    with reverts("TranscriptMismatch.*outputHash"):
        world.protocol.publish_transcript(account, run.audit_id, tokens[:-1] + [tokens[-1] + 1], SamplingParams())
    with reverts("TranscriptMismatch.*length"):
        world.protocol.publish_transcript(account, run.audit_id, tokens[:-1], SamplingParams())
    with reverts("TranscriptMismatch.*sampling"):
        world.protocol.publish_transcript(account, run.audit_id, tokens, SamplingParams(temperature_milli=700))
    world.chain.mine(publish_deadline - world.chain.get_block_number() + 1)
    with reverts("TooLate"):
        world.protocol.publish_transcript(account, run.audit_id, tokens, SamplingParams())


def test_a_claim_is_answered_by_a_publication_or_by_every_receipt_arriving(world):
    # One claim window per round, answered only by publication: the claimant's job coming late
    # does not close it while another seat still waits (the worker's node publishes on any claim:
    # docs/protocol.md §12); once every member has posted, the round opens and no slash applies.
    run = _start(world)
    members = _members(world, run)
    publish_deadline = world.protocol.claim_undelivered(members[0].node.account, run.audit_id, 0).value
    world.protocol.post_committee_receipt(world.outsider, run.audit_id, 0, members[0].receipt)
    world.chain.mine(publish_deadline - world.chain.get_block_number() + 1)
    with reverts("ClaimClosed"):  # the round's one window has passed: no second window, no extension
        world.protocol.claim_undelivered(members[1].node.account, run.audit_id, 1)
    world.chain.mine(_commit_deadline(world, run) - world.chain.get_block_number() + 1)
    with reverts("ClaimStanding"):  # no redraw, no abandonment while a claim stands unpublished
        world.protocol.replace_missing(world.outsider, run.audit_id)
    snapshot = world.chain.snapshot()
    assert world.protocol.slash_undelivered(world.outsider, run.audit_id).value > 0
    world.chain.revert(snapshot)
    moot = _start(world, nonce=1)
    members = _members(world, moot)
    world.protocol.claim_undelivered(members[0].node.account, moot.audit_id, 0)
    for slot in range(3):
        world.protocol.post_committee_receipt(world.outsider, moot.audit_id, slot, members[slot].receipt)
    world.chain.mine(PRESET.COMMIT_WINDOW_BLOCKS + 1)
    with reverts("UnexpectedPhase"):  # every job came: the round is opening, the claim moot
        world.protocol.slash_undelivered(world.outsider, moot.audit_id)


def _long_worker(world, input_tokens: int, output_tokens: int) -> tuple[Party, list[int]]:
    """A worker receipt over a transcript of input_tokens + output_tokens random token ids."""
    rng = random.Random(input_tokens * 7 + output_tokens)
    tokens = [rng.randrange(49_152) for _ in range(input_tokens + output_tokens)]
    node = world.nodes[0]
    receipt = Receipt(job_hash=bytes(rng.getrandbits(8) for _ in range(32)), model_id=MODEL_ID,
                      input_hash=compute_tokens_hash(tokens[:input_tokens]),
                      output_hash=compute_transcript_hash(tokens[:input_tokens], tokens[input_tokens:]),
                      sampling=SamplingParams(), max_new_tokens=output_tokens, commitment_root=b"\x44" * 32,
                      num_positions=input_tokens + output_tokens - 1, worker=bytes.fromhex(node.address[2:]),
                      signature=b"\x00" * 65, input_tokens=input_tokens, output_tokens=output_tokens,
                      auditable_until_block=compute_auditable_until_block(world.chain.get_block_number(), world.preset))
    party = Party(node, None, None, sign_receipt(receipt, node.account.key, world.domain))
    return party, tokens


@pytest.mark.parametrize(("input_tokens", "output_tokens", "bound"), [(256, 256, 900_000), (4096, 4096, 11_000_000)])
def test_publication_gas_is_bounded_by_the_signed_token_count(world, input_tokens, output_tokens, bound):
    # What a worker pays to answer a claim (once per audit at most): calldata, the event and
    # BLAKE3 over 4 bytes per token. Measured: see docs/protocol.md §12 "Undelivered jobs".
    party, tokens = _long_worker(world, input_tokens, output_tokens)
    run = world.start(party, dispatcher=world.nodes[1])
    members = world.committee(run)
    world.protocol.claim_undelivered(members[0].account, run.audit_id, 0)
    gas = world.protocol.publish_transcript(party.node.account, run.audit_id, tokens, SamplingParams()).gas_used
    print(f"publishTranscript {input_tokens} + {output_tokens} tokens: {gas} gas")
    assert gas < bound, gas
