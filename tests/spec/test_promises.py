"""verillm.spec.promise: the batching promise, its signature, and the claim / answer / slash
rules as pure functions (the contract side is tests/contracts/test_coverage.py)."""

import dataclasses

import pytest
from eth_keys import keys

from verillm.errors import InvalidInput, InvalidProof, InvalidSignature
from verillm.spec import promise as spec
from verillm.spec.audit import compute_batch_levels
from verillm.spec.params import MAINNET, MINIMAL
from verillm.spec.receipt import SigningDomain

KEY = bytes([7]) * 32
DISPATCHER = keys.PrivateKey(KEY).public_key.to_canonical_address()
DOMAIN = SigningDomain(chain_id=31337, verifying_contract=b"\x0c" * 20)
HASHES = [bytes([i]) * 32 for i in range(1, 6)]


def _promise(batch_by: int = 130, receipt_hash: bytes = HASHES[2]) -> spec.BatchPromise:
    return spec.BatchPromise(receipt_hash, DISPATCHER, batch_by)


def test_signed_promise_recovers_its_dispatcher_and_nothing_else():
    signed = spec.sign_promise(_promise(), KEY, DOMAIN)
    spec.verify_promise_signature(signed, DOMAIN)
    for changed in (dataclasses.replace(signed.promise, batch_by_block=131), dataclasses.replace(signed.promise, receipt_hash=HASHES[0])):
        with pytest.raises(InvalidSignature):
            spec.verify_promise_signature(dataclasses.replace(signed, promise=changed), DOMAIN)
    with pytest.raises(InvalidSignature):  # another deployment's Coverage contract
        spec.verify_promise_signature(signed, dataclasses.replace(DOMAIN, verifying_contract=b"\x0d" * 20))
    with pytest.raises(InvalidSignature):
        spec.verify_promise_signature(dataclasses.replace(signed, signature=signed.signature[:64] + b"\x00"), DOMAIN)
    with pytest.raises(InvalidSignature):
        spec.sign_promise(_promise(), bytes([8]) * 32, DOMAIN)  # not the dispatcher's key


def test_promise_hash_is_the_eip712_struct_hash_and_rejects_bad_fields():
    assert spec.PROMISE_TYPEHASH == spec.keccak256(b"BatchPromise(bytes32 receiptHash,address dispatcher,uint64 batchByBlock)")
    assert spec.compute_promise_hash(_promise()) != spec.compute_promise_hash(_promise(batch_by=131))
    with pytest.raises(InvalidInput):
        spec.compute_promise_hash(spec.BatchPromise(b"\x01" * 31, DISPATCHER, 1))
    with pytest.raises(InvalidInput):
        spec.compute_promise_hash(_promise(batch_by=1 << 64))


def test_client_rejects_a_promise_for_another_receipt_or_a_far_deadline():
    spec.verify_promise_terms(_promise(batch_by=130), HASHES[2], head_block=100, batch_by_blocks=30)
    with pytest.raises(InvalidProof, match="another receipt"):
        spec.verify_promise_terms(_promise(), HASHES[0], head_block=100, batch_by_blocks=30)
    with pytest.raises(InvalidProof, match="later than"):  # a deadline never reached is never claimable
        spec.verify_promise_terms(_promise(batch_by=131), HASHES[2], head_block=100, batch_by_blocks=30)
    spec.verify_promise_terms(_promise(batch_by=100), HASHES[2], head_block=100, batch_by_blocks=30)
    with pytest.raises(InvalidProof, match="backdated"):  # its claim window may be closed already
        spec.verify_promise_terms(_promise(batch_by=99), HASHES[2], head_block=100, batch_by_blocks=30)


def test_claim_window_is_after_the_promised_block_and_bounded():
    spec.verify_claim(_promise(batch_by=130), 131, claim_window_blocks=100)
    spec.verify_claim(_promise(batch_by=130), 230, claim_window_blocks=100)
    with pytest.raises(InvalidInput, match="claims open at 131"):
        spec.verify_claim(_promise(batch_by=130), 130, claim_window_blocks=100)
    with pytest.raises(InvalidInput, match="closed at block 231"):
        spec.verify_claim(_promise(batch_by=130), 231, claim_window_blocks=100)
    assert spec.compute_prove_deadline(131, 5) == 136
    assert spec.compute_batch_by_block(100, MINIMAL.BATCH_BY_BLOCKS) == 130


def test_inclusion_answers_only_from_the_dispatchers_own_batch_in_time():
    proof = spec.compute_inclusion_proof(HASHES, HASHES[2])
    root = compute_batch_levels(HASHES)[-1][0]
    batch = spec.BatchRecord(root, DISPATCHER, len(HASHES), posted_block=130)
    assert spec.is_inclusion_proof(_promise(), batch, proof)
    assert not spec.is_inclusion_proof(_promise(), dataclasses.replace(batch, posted_block=131), proof)  # one block late
    assert not spec.is_inclusion_proof(_promise(), dataclasses.replace(batch, dispatcher=b"\x09" * 20), proof)  # someone else's
    assert not spec.is_inclusion_proof(_promise(receipt_hash=HASHES[1]), batch, proof)  # another leaf
    with pytest.raises(InvalidInput):
        spec.compute_inclusion_proof(HASHES, b"\xee" * 32)


def test_omission_payout_refunds_the_bond_and_pays_the_reward():
    assert spec.compute_omission_payout(10**16, 10**14, 1_000) == (10**14 + 10**15, 9 * 10**15)


def test_an_answer_pays_its_gas_out_of_the_bond_and_refunds_the_rest():
    assert spec.compute_answer_payout(10**16, 190_000, 10 * 10**9) == (19 * 10**14, 10**16 - 19 * 10**14)
    assert spec.compute_answer_payout(10**16, 190_000, 10**12) == (10**16, 0)  # capped at the bond
    assert spec.compute_answer_payout(10**16, 190_000, 0) == (0, 10**16)
    with pytest.raises(InvalidInput):
        spec.compute_answer_payout(10**16, 190_000, -1)


@pytest.mark.parametrize("preset", [MAINNET, MINIMAL], ids=lambda p: p.name)
def test_presets_keep_a_promise_claimable_before_its_dispatcher_can_leave(preset):
    assert preset.BATCH_BY_BLOCKS + preset.OMISSION_CLAIM_WINDOW_BLOCKS < preset.UNBONDING_BLOCKS
    assert preset.OMISSION_CLAIM_BOND_WEI > 0


def test_an_inactive_node_may_batch_until_its_promises_fall_due():
    """Keepability (issue 34): a node that went inactive at block X (a penalty below the minimum,
    an unbond) may post until X + AUDIT_HORIZON_BLOCKS, which covers every promise it gave while
    active (batchByBlock ≤ X + BATCH_BY_BLOCKS); never registered (X = 0): never."""
    from verillm.spec.params import MAINNET, MINIMAL

    for p in (MINIMAL, MAINNET):
        went_inactive = 1_000
        latest_promise = spec.compute_batch_by_block(went_inactive, p.BATCH_BY_BLOCKS)
        assert spec.is_batch_allowed(False, went_inactive, latest_promise, p.AUDIT_HORIZON_BLOCKS)
        assert spec.is_batch_allowed(False, went_inactive, went_inactive + p.AUDIT_HORIZON_BLOCKS, p.AUDIT_HORIZON_BLOCKS)
        assert not spec.is_batch_allowed(False, went_inactive, went_inactive + p.AUDIT_HORIZON_BLOCKS + 1, p.AUDIT_HORIZON_BLOCKS)
        assert not spec.is_batch_allowed(False, 0, 5, p.AUDIT_HORIZON_BLOCKS)
        assert spec.is_batch_allowed(True, 0, 10**9, p.AUDIT_HORIZON_BLOCKS)
