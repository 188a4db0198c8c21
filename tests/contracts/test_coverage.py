"""Batching promises and the omission challenge (contracts/src/Coverage.sol, docs/protocol.md §12
"Batching promises"): a dispatcher's signed promise to batch a receipt by a block, the holder's
bonded claim, the inclusion proof that answers it, the slash when none comes. Real anvil, the
real deployment of helpers.contracts; every path, each attacker's move, and the gas."""

import dataclasses

import pytest
from eth_keys import keys
from web3 import Web3

from helpers.chain import reverts
from verillm.chain.protocol import compute_protocol_params
from verillm.errors import InvalidProof
from verillm.spec import promise as spec
from verillm.spec.receipt import compute_domain_separator, compute_receipt_hash

from helpers.contracts import CHEAT_OFFSET, PRESET

BOND = PRESET.OMISSION_CLAIM_BOND_WEI
ANSWER_GAS = PRESET.OMISSION_ANSWER_GAS
GAS_BOUND = 200_000  # a claim or an answer (measured: docs/protocol.md §12)
SLASH_GAS_BOUND = 300_000  # a slash also rewrites the stake tree's weights


def _receipts(world, node, count: int, first_nonce: int = 0) -> list[bytes]:
    return [compute_receipt_hash(world.make_worker(node, nonce=first_nonce + i).receipt) for i in range(count)]


def _promise(world, dispatcher, receipt_hash: bytes, batch_by: int | None = None, signer=None) -> spec.SignedPromise:
    """The promise ``dispatcher`` returns with a job served now (head + BATCH_BY_BLOCKS)."""
    head = world.chain.get_block_number()
    promise = spec.BatchPromise(receipt_hash, bytes.fromhex(dispatcher.address[2:]),
                                batch_by if batch_by is not None else spec.compute_batch_by_block(head, PRESET.BATCH_BY_BLOCKS))
    key = (signer or dispatcher).account.key
    if signer is not None:  # a forgery: sign the digest with another key
        sig = keys.PrivateKey(key).sign_msg_hash(spec.compute_promise_digest(promise, world.protocol.get_promise_domain()))
        return spec.SignedPromise(promise, sig.r.to_bytes(32, "big") + sig.s.to_bytes(32, "big") + bytes([sig.v + 27]))
    return spec.sign_promise(promise, key, world.protocol.get_promise_domain())


def _mine_to(world, head: int) -> None:
    """Mine until the chain head is ``head``: the next transaction is checked (eth_estimateGas) at
    ``head`` and mined in ``head`` + 1."""
    now = world.chain.get_block_number()
    if head > now:
        world.chain.mine(head - now)


def _credit(world, address: str) -> int:
    return world.protocol.jobs.call("credits", address)


def _answer_at(world, sender, claim_id: int, batch_id: int, proof, gas_price_wei: int) -> dict:
    """Send proveIncluded as a legacy transaction at ``gas_price_wei`` (tx.gasprice), the next
    block's base fee set to 0 so that any price is accepted; return its receipt."""
    chain, coverage = world.chain, world.protocol.coverage
    chain.w3.provider.make_request("anvil_setNextBlockBaseFeePerGas", [hex(0)])
    data = coverage.web3.encode_abi("proveIncluded", args=[claim_id, batch_id, proof.index, list(proof.siblings)])
    tx = {"to": coverage.address, "data": data, "value": 0, "gas": GAS_BOUND, "gasPrice": gas_price_wei, "chainId": chain.chain_id}
    with chain.nonces.reserve(sender.address) as nonce:
        signed = sender.sign_transaction(tx | {"nonce": nonce})
        tx_hash = chain.w3.eth.send_raw_transaction(signed.raw_transaction)
    receipt = chain.wait_for_receipt(tx_hash, label="Coverage.proveIncluded")
    assert receipt["effectiveGasPrice"] == gas_price_wei
    return receipt


def _answered(world, receipt: dict) -> dict:
    return dict(world.protocol.coverage.web3.events.OmissionAnswered().process_receipt(receipt)[0]["args"])


def _claimed_kept_promise(world, client, leaves: int = 3):
    """A kept promise (its receipt batched in time) and a claim on it: (claim id, batch id, proof)."""
    dispatcher = world.nodes[1]
    hashes = _receipts(world, world.nodes[0], leaves)
    signed = _promise(world, dispatcher, hashes[-1])
    posted = world.protocol.post_batch(dispatcher.account, hashes).value
    _mine_to(world, signed.promise.batch_by_block + 1)
    claim = world.protocol.claim_omitted(client, signed)
    return claim, posted.batch_id, spec.compute_inclusion_proof(hashes, hashes[-1])


def _eth_held(world) -> int:
    p = world.protocol
    return sum(world.chain.w3.eth.get_balance(h.address) for h in (p.registry, p.jobs, p.disputes, p.delivery, p.coverage))


@pytest.fixture
def client(world):
    return world.chain.dev_accounts[8]


def test_promise_hash_and_domain_are_the_spec_mirrors(world):
    signed = _promise(world, world.nodes[1], b"\x42" * 32)
    p = signed.promise
    on_chain = world.protocol.coverage.call("hashPromise", (p.receipt_hash, world.nodes[1].address, p.batch_by_block))
    assert bytes(on_chain) == spec.compute_promise_hash(p)
    assert bytes(world.protocol.coverage.call("domainSeparator")) == compute_domain_separator(world.protocol.get_promise_domain())
    assert world.protocol.preset.BATCH_BY_BLOCKS == PRESET.BATCH_BY_BLOCKS


def test_griefing_claim_on_an_included_receipt_pays_the_dispatcher_its_answer(world, client):
    dispatcher = world.nodes[1]
    hashes = _receipts(world, world.nodes[0], 3)
    signed = _promise(world, dispatcher, hashes[1])
    posted = world.protocol.post_batch(dispatcher.account, hashes).value
    _mine_to(world, signed.promise.batch_by_block + 1)
    held, stake = _eth_held(world), world.stakes()[dispatcher.address]
    claim = world.protocol.claim_omitted(client, signed)
    assert world.protocol.get_node(dispatcher.address)["locks"] == 1  # no withdrawal while a claim is open
    proof = spec.compute_inclusion_proof(hashes, hashes[1])
    assert spec.is_inclusion_proof(signed.promise, spec.BatchRecord(posted.root, signed.promise.dispatcher, 3, signed.promise.batch_by_block), proof)
    answer = world.protocol.prove_included(world.outsider, claim.value, posted.batch_id, proof)  # anyone may answer
    paid, refunded = spec.compute_answer_payout(BOND, ANSWER_GAS, answer.receipt["effectiveGasPrice"])
    assert (answer.value["paidWei"], answer.value["refundedWei"]) == (paid, refunded)
    assert _credit(world, dispatcher.address) == paid and _credit(world, client.address) == refunded
    assert world.protocol.get_omission_claim(claim.value)["state"] == spec.ANSWERED
    assert world.protocol.get_node(dispatcher.address)["locks"] == 0
    assert world.stakes()[dispatcher.address] == stake
    assert _eth_held(world) == held + BOND  # the bond moved from Coverage to the two credits
    assert world.chain.w3.eth.get_balance(world.protocol.coverage.address) == 0
    with reverts("ClaimResolved"):
        world.protocol.slash_omission(client, claim.value)
    assert claim.gas_used < GAS_BOUND and answer.gas_used < GAS_BOUND
    print(f"gas: claimOmitted {claim.gas_used}, proveIncluded {answer.gas_used} (3-leaf batch)")


def test_self_dispatched_cheat_that_never_batches_its_receipt_is_slashed(world, client):
    """The threat: a node serves a client itself, cheats, and keeps the receipt out of every
    batch (no audit can ever start on it). It keeps batching its other jobs; the client's
    promise makes the omission provable and the node loses its stake."""
    cheat = world.nodes[0]
    cheated = world.make_worker(cheat, offset=CHEAT_OFFSET, nonce=77).receipt
    signed = _promise(world, cheat, compute_receipt_hash(cheated))
    honest = _receipts(world, cheat, 2)
    posted = world.protocol.post_batch(cheat.account, honest).value  # batches, but not the cheated receipt
    _mine_to(world, signed.promise.batch_by_block + 1)
    held, stake = _eth_held(world), world.stakes()[cheat.address]
    claim = world.protocol.claim_omitted(client, signed)
    # The best it can do: a proof into its real batch (the leaf is not there) fails.
    with reverts("InvalidMerkleProof"):
        world.protocol.prove_included(cheat.account, claim.value, posted.batch_id, spec.compute_inclusion_proof(honest, honest[0]))
    with reverts("ProofWindowOpen"):
        world.protocol.slash_omission(client, claim.value)
    world.chain.mine(PRESET.PROOF_WINDOW_BLOCKS + 1)
    pool = world.protocol.jobs.call("feePoolWei")
    slash = world.protocol.slash_omission(world.outsider, claim.value)  # anyone may trigger it
    assert slash.value == stake * PRESET.SLASH_FRACTION_BPS // 10_000
    assert world.stakes()[cheat.address] == stake - slash.value
    credit, to_pool = spec.compute_omission_payout(slash.value, BOND, PRESET.SLASH_REWARD_BPS)
    assert _credit(world, client.address) == credit  # the claimant, not the caller, is paid
    assert world.protocol.jobs.call("feePoolWei") == pool + to_pool
    assert _eth_held(world) == held + BOND  # conserved: stake moved to credit + pool, bond to credit
    assert world.protocol.get_node(cheat.address)["locks"] == 0
    assert not world.protocol.get_node(cheat.address)["active"]
    assert slash.gas_used < SLASH_GAS_BOUND
    print(f"gas: slashOmission {slash.gas_used}")
    with reverts("ClaimResolved"):
        world.protocol.slash_omission(world.outsider, claim.value)  # nothing is slashed twice


def test_claim_with_a_forged_or_altered_signature_reverts(world, client):
    dispatcher = world.nodes[1]
    rh = _receipts(world, world.nodes[0], 1)[0]
    forged = _promise(world, dispatcher, rh, signer=world.nodes[2])  # names node 1, signed by node 2
    genuine = _promise(world, dispatcher, rh)
    stretched = dataclasses.replace(genuine, promise=dataclasses.replace(genuine.promise, batch_by_block=genuine.promise.batch_by_block - 5))
    junk = spec.SignedPromise(genuine.promise, b"\x01" * 65)
    _mine_to(world, genuine.promise.batch_by_block + 1)
    for bad in (forged, stretched, junk):
        with reverts("BadSignature"):
            world.protocol.claim_omitted(client, bad)
    with pytest.raises(Exception, match="not its dispatcher"):
        spec.verify_promise_signature(forged, world.protocol.get_promise_domain())
    # Signed for another deployment: the domain names this chain's Coverage contract.
    other = dataclasses.replace(world.protocol.get_promise_domain(), verifying_contract=bytes.fromhex(world.protocol.jobs.address[2:]))
    elsewhere = spec.sign_promise(genuine.promise, dispatcher.account.key, other)
    with reverts("BadSignature"):
        world.protocol.claim_omitted(client, elsewhere)
    assert world.protocol.coverage.call("claimCount") == 0


def test_claim_before_the_deadline_or_after_the_window_reverts(world, client):
    """An honest dispatcher cannot be claimed against while its promise still runs, and a stale
    promise cannot lock its stake once the claim window has closed."""
    dispatcher = world.nodes[1]
    signed = _promise(world, dispatcher, _receipts(world, world.nodes[0], 1)[0])
    due = signed.promise.batch_by_block
    _mine_to(world, due)
    with reverts("TooEarly"):
        world.protocol.claim_omitted(client, signed)  # at block batchByBlock itself
    _mine_to(world, due + PRESET.OMISSION_CLAIM_WINDOW_BLOCKS + 1)
    with reverts("ClaimClosed"):
        world.protocol.claim_omitted(client, signed)
    with reverts("WrongBond"):
        world.protocol._send(world.protocol.coverage, "claimOmitted", (signed.promise.receipt_hash, dispatcher.address, due),
                             signed.signature, sender=client, value=BOND - 1)


def test_batch_posted_one_block_late_or_by_another_node_does_not_answer(world, client):
    """The receipt is batched, but late (a congested dispatcher) or in a colluder's batch: no
    answer, the dispatcher is slashed. The last promised block itself still counts."""
    dispatcher, colluder = world.nodes[1], world.nodes[2]
    hashes = _receipts(world, world.nodes[0], 2)
    on_time, late = _promise(world, dispatcher, hashes[0]), _promise(world, dispatcher, hashes[1])
    foreign = world.protocol.post_batch(colluder.account, hashes).value
    _mine_to(world, late.promise.batch_by_block - 1)
    at_deadline = world.protocol.post_batch(dispatcher.account, [hashes[0]]).value  # mined in batchByBlock
    assert world.protocol.batches.call("getBatch", at_deadline.batch_id)[3] == on_time.promise.batch_by_block
    too_late = world.protocol.post_batch(dispatcher.account, [hashes[1]]).value  # one block after
    answered = world.protocol.claim_omitted(client, on_time).value
    world.protocol.prove_included(dispatcher.account, answered, at_deadline.batch_id, spec.compute_inclusion_proof([hashes[0]], hashes[0]))
    claim = world.protocol.claim_omitted(client, late).value
    with reverts("BatchTooLate"):
        world.protocol.prove_included(dispatcher.account, claim, too_late.batch_id, spec.compute_inclusion_proof([hashes[1]], hashes[1]))
    with reverts("ForeignBatch"):
        world.protocol.prove_included(dispatcher.account, claim, foreign.batch_id, spec.compute_inclusion_proof(hashes, hashes[1]))
    with reverts("UnknownBatch"):
        world.protocol.prove_included(dispatcher.account, claim, 99, spec.compute_inclusion_proof(hashes, hashes[1]))
    world.chain.mine(PRESET.PROOF_WINDOW_BLOCKS + 1)
    with reverts("ProofWindowClosed"):  # the window is over: no answer counts any more
        world.protocol.prove_included(dispatcher.account, claim, too_late.batch_id, spec.compute_inclusion_proof([hashes[1]], hashes[1]))
    assert world.protocol.slash_omission(client, claim).value > 0


def test_each_promise_is_claimed_once_and_resolved_once(world, client):
    dispatcher = world.nodes[1]
    hashes = _receipts(world, world.nodes[0], 1)
    signed = _promise(world, dispatcher, hashes[0])
    posted = world.protocol.post_batch(dispatcher.account, hashes).value
    _mine_to(world, signed.promise.batch_by_block + 1)
    claim = world.protocol.claim_omitted(client, signed).value
    with reverts("AlreadyClaimed"):
        world.protocol.claim_omitted(world.outsider, signed)  # a replay, by anyone
    proof = spec.compute_inclusion_proof(hashes, hashes[0])
    world.protocol.prove_included(dispatcher.account, claim, posted.batch_id, proof)
    with reverts("ClaimResolved"):
        world.protocol.prove_included(dispatcher.account, claim, posted.batch_id, proof)  # the bond is paid once
    with reverts("AlreadyClaimed"):
        world.protocol.claim_omitted(client, signed)
    with reverts("UnknownClaim"):
        world.protocol.slash_omission(client, claim + 1)
    assert _credit(world, dispatcher.address) + _credit(world, client.address) == BOND


def test_a_dispatcher_that_deregisters_after_promising_cannot_withdraw_past_a_claim(world, client):
    """Leaving does not outrun a promise: the claim window closes before unbonding ends, and
    an open claim locks the stake until it is answered or slashed."""
    dispatcher = world.nodes[3]
    signed = _promise(world, dispatcher, _receipts(world, world.nodes[0], 1)[0])
    world.chain.transact(world.protocol.registry, "deregister", sender=dispatcher.account)
    end = world.protocol.get_node(dispatcher.address)["unbonding_end_block"]
    assert signed.promise.batch_by_block + PRESET.OMISSION_CLAIM_WINDOW_BLOCKS < end
    _mine_to(world, signed.promise.batch_by_block + PRESET.OMISSION_CLAIM_WINDOW_BLOCKS - 1)
    claim = world.protocol.claim_omitted(client, signed).value  # mined in the claim window's last block
    _mine_to(world, end)
    with reverts("StakeLocked"):
        world.chain.transact(world.protocol.registry, "withdraw", sender=dispatcher.account)
    assert world.protocol.slash_omission(client, claim).value > 0


def test_a_promise_from_a_key_that_is_no_node_cannot_be_claimed(world, client):
    stranger = dataclasses.replace(world.nodes[0], account=world.chain.dev_accounts[7])
    signed = _promise(world, stranger, b"\x07" * 32)
    _mine_to(world, signed.promise.batch_by_block + 1)
    with reverts("NotRegistered"):
        world.protocol.claim_omitted(client, signed)  # the bond stays with the client


def test_only_the_bound_coverage_contract_slashes_and_relays(world):
    with reverts("AlreadyBound"):
        world.chain.transact(world.protocol.registry, "bindCoverage", world.outsider.address, sender=world.owner)
    with reverts("NotDeployer"):
        world.chain.transact(world.protocol.registry, "bindCoverage", world.outsider.address, sender=world.outsider)
    with reverts("NotCoverage"):
        world.chain.transact(world.protocol.disputes, "relayCredit", world.outsider.address, 1, sender=world.outsider, value=1)
    # Plain ETH (not a bond, not slashed stake) is refused: what Coverage holds is open bonds only.
    with pytest.raises(Exception) as refused:
        world.chain.w3.eth.call({"from": world.outsider.address, "to": world.protocol.coverage.address, "value": 1})
    assert Web3.keccak(text="NotRegistry()")[:4].hex() in str(refused.value)


def test_coverage_params_must_keep_a_claim_inside_the_unbonding_period(world):
    p = world.protocol
    bad = PRESET.replace(OMISSION_CLAIM_WINDOW_BLOCKS=PRESET.UNBONDING_BLOCKS - PRESET.BATCH_BY_BLOCKS)
    args = (p.jobs.address, p.registry.address, p.disputes.address, compute_protocol_params(bad, world.chain.artifacts),
            compute_protocol_params(bad, world.chain.artifacts, "Coverage", "CoverageParams"))
    with pytest.raises(Exception, match="shorter than unbondingBlocks|InvalidParams|revert"):
        world.chain.deploy("Coverage", *args, sender=world.owner)


def test_answer_into_a_full_batch_stays_cheap(world, client):
    """The deepest proof MINIMAL allows (MAX_BATCH_RECEIPTS leaves): each tree level adds a
    sha256 precompile call and a calldata word."""
    dispatcher = world.nodes[1]
    hashes = [bytes([i % 256, i // 256]) * 16 for i in range(PRESET.MAX_BATCH_RECEIPTS)]
    signed = _promise(world, dispatcher, hashes[-1])
    posted = world.protocol.post_batch(dispatcher.account, hashes).value
    _mine_to(world, signed.promise.batch_by_block + 1)
    claim = world.protocol.claim_omitted(client, signed).value
    answer = world.protocol.prove_included(dispatcher.account, claim, posted.batch_id, spec.compute_inclusion_proof(hashes, hashes[-1]))
    print(f"gas: proveIncluded {answer.gas_used} ({PRESET.MAX_BATCH_RECEIPTS}-leaf batch)")
    assert answer.gas_used < GAS_BOUND


def test_backdated_promise_cannot_be_claimed_so_the_client_refuses_it(world, client):
    """Found while adding promises to the protocol fuzzer (issue 9): the contract cannot know when
    a job was served, so a dispatcher that signs its promise with a batchByBlock already past its
    claim window escapes the omission challenge (claimOmitted reverts ClaimClosed, forever). Only
    the client can refuse it, on receipt: the promise check (spec.verify_promise_terms, used by
    verillm.client.verify_promise) accepted it, since it bounded the deadline from above only."""
    cheat = world.nodes[0]
    cheated = compute_receipt_hash(world.make_worker(cheat, offset=CHEAT_OFFSET, nonce=78).receipt)
    _mine_to(world, PRESET.OMISSION_CLAIM_WINDOW_BLOCKS + 2)
    head = world.chain.get_block_number()
    backdated = _promise(world, cheat, cheated, batch_by=head - PRESET.OMISSION_CLAIM_WINDOW_BLOCKS - 1)
    with reverts("ClaimClosed"):
        world.protocol.claim_omitted(client, backdated)  # never claimable: the omission is free
    with pytest.raises(InvalidProof, match="backdated"):
        spec.verify_promise_terms(backdated.promise, cheated, head, PRESET.BATCH_BY_BLOCKS)
    spec.verify_promise_terms(_promise(world, cheat, cheated).promise, cheated, head, PRESET.BATCH_BY_BLOCKS)  # an honest one passes


def test_a_dispatcher_withholding_its_proof_gains_nothing_beyond_its_answer_gas(world, client):
    """The farm: the dispatcher batches in time but answers "not batched" off-chain, waits for an
    honest client to claim, and answers on-chain. It is paid exactly OMISSION_ANSWER_GAS at the
    answer's gas price (at most the margin above the gas it spent), the client gets the rest back,
    and no wei is made or lost."""
    claim, batch_id, proof = _claimed_kept_promise(world, client)
    dispatcher = world.nodes[1]
    price = BOND // (2 * ANSWER_GAS)  # the answer costs about half the bond: neither side is capped
    held, balance = _eth_held(world), world.chain.get_balance(dispatcher.address)
    receipt = _answer_at(world, dispatcher.account, claim.value, batch_id, proof, price)
    assert _answered(world, receipt) == {"claimId": claim.value, "batchId": batch_id, "leafIndex": proof.index,
                                         "paidWei": ANSWER_GAS * price, "refundedWei": BOND - ANSWER_GAS * price}
    assert _credit(world, dispatcher.address) == ANSWER_GAS * price
    assert _credit(world, client.address) == BOND - ANSWER_GAS * price
    assert world.chain.w3.eth.get_balance(world.protocol.coverage.address) == 0
    assert _eth_held(world) == held  # conserved to the wei: the bond left Coverage for the two credits
    spent = balance - world.chain.get_balance(dispatcher.address)
    assert spent == receipt["gasUsed"] * price
    gain = _credit(world, dispatcher.address) - spent
    print(f"gas: proveIncluded {receipt['gasUsed']} (3-leaf batch, both credits new)")
    assert 0 <= gain <= (ANSWER_GAS - receipt["gasUsed"]) * price  # the margin only, never the bond


def test_a_griefing_claim_still_costs_the_griefer_the_answer_it_forces(world, client):
    """A claim on a kept promise is not free: the griefer loses at least what the dispatcher spent
    answering it (and its own claim's gas)."""
    claim, batch_id, proof = _claimed_kept_promise(world, client, leaves=PRESET.MAX_BATCH_RECEIPTS)
    price = BOND // (3 * ANSWER_GAS)
    receipt = _answer_at(world, world.nodes[1].account, claim.value, batch_id, proof, price)
    griefer_loss = BOND - _credit(world, client.address)
    assert griefer_loss == ANSWER_GAS * price >= receipt["gasUsed"] * price  # the deepest proof MINIMAL allows
    print(f"gas: proveIncluded {receipt['gasUsed']} ({PRESET.MAX_BATCH_RECEIPTS}-leaf batch, both credits new)")
    assert claim.gas_used > 0


def test_an_absurd_gas_price_is_paid_no_more_than_the_bond(world, client):
    """A dispatcher that is also the block's proposer can answer at any price and take its tip
    back: the cap at the bond bounds what it draws from the claimant (docs/protocol.md §13)."""
    claim, batch_id, proof = _claimed_kept_promise(world, client)
    dispatcher = world.nodes[1]
    price = 1000 * BOND // ANSWER_GAS
    held = _eth_held(world)
    receipt = _answer_at(world, dispatcher.account, claim.value, batch_id, proof, price)
    assert (_answered(world, receipt)["paidWei"], _answered(world, receipt)["refundedWei"]) == (BOND, 0)
    assert _credit(world, dispatcher.address) == BOND and _credit(world, client.address) == 0
    assert _eth_held(world) == held
    assert spec.compute_answer_payout(BOND, ANSWER_GAS, price) == (BOND, 0)


def test_answer_gas_must_be_positive_and_fit_in_a_block(world):
    p = world.protocol
    for gas, reason in ((0, "omissionAnswerGas must be positive"), (30_000_001, "omissionAnswerGas exceeds a block's gas")):
        bad = PRESET.replace(OMISSION_ANSWER_GAS=gas)
        args = (p.jobs.address, p.registry.address, p.disputes.address, compute_protocol_params(bad, world.chain.artifacts),
                compute_protocol_params(bad, world.chain.artifacts, "Coverage", "CoverageParams"))
        with pytest.raises(Exception, match=f"{reason}|InvalidParams"):
            world.chain.deploy("Coverage", *args, sender=world.owner)
    assert p.preset.OMISSION_ANSWER_GAS == ANSWER_GAS
