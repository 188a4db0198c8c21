"""verillm.spec.delivery: what a published transcript is and the windows a claim opens (the
contract side is tests/contracts/test_delivery.py)."""

import pytest

from verillm.errors import InvalidInput
from verillm.spec import delivery
from verillm.spec.job import compute_tokens_hash, compute_transcript_hash
from verillm.spec.types import SamplingParams


def test_transcript_bytes_are_the_tokens_hash_preimage():
    tokens = (0, 1, 49_151, 2**32 - 1)
    data = delivery.encode_transcript_tokens(tokens)
    assert delivery.decode_transcript_tokens(data) == tokens
    assert compute_tokens_hash(tokens) == compute_tokens_hash(delivery.decode_transcript_tokens(data))
    with pytest.raises(InvalidInput):
        delivery.encode_transcript_tokens([2**32])
    with pytest.raises(InvalidInput):
        delivery.decode_transcript_tokens(data[:-1])


def test_check_transcript_binds_counts_and_hash():
    prompt, output = (5, 6, 7), (8, 9)
    signed = compute_transcript_hash(prompt, output)
    delivery.verify_transcript(prompt + output, 3, 2, signed)
    with pytest.raises(InvalidInput, match="tokens"):
        delivery.verify_transcript(prompt + output, 2, 2, signed)
    with pytest.raises(InvalidInput, match="outputHash"):
        delivery.verify_transcript((5, 6, 7, 8, 10), 3, 2, signed)


def test_windows():
    assert delivery.compute_publish_deadline(100, 20) == 120
    assert delivery.compute_commit_deadline_after_claim(110, 100, 20) == 140
    assert delivery.compute_commit_deadline_after_claim(150, 100, 20) == 150  # never shortened
    assert delivery.compute_commit_deadline_after_publish(140, 130, 20) == 150


def test_sampling_key_is_abi_encoded_words():
    key = delivery.compute_sampling_key(SamplingParams(700, 40, 900_000, 2**64 - 1))
    assert len(key) == 32 and key != delivery.compute_sampling_key(SamplingParams())


def test_claim_bonds_pay_the_publication_and_return_the_rest():
    """Standing (issue 34): a publication is paid its cost out of the round's bonds, capped at
    them; the claimants share the rest; with no publication every bond comes back."""
    from verillm.spec import delivery as spec_delivery
    from verillm.spec.params import MAINNET, MINIMAL, PUBLICATION_GAS_AT_MAX_TRANSCRIPT

    bond = 10**16
    assert spec_delivery.compute_claim_bond_payout(1, bond, None) == (0, bond)
    assert spec_delivery.compute_claim_bond_payout(3, bond, None) == (0, bond)
    assert spec_delivery.compute_claim_bond_payout(1, bond, 4 * 10**14) == (4 * 10**14, bond - 4 * 10**14)
    assert spec_delivery.compute_claim_bond_payout(2, bond, 10**20) == (2 * bond, 0)  # capped at the bonds
    paid, share = spec_delivery.compute_claim_bond_payout(3, bond, 10**15 + 1)
    assert paid + 3 * share == 3 * bond and paid - (10**15 + 1) < 3  # the indivisible wei to the publisher
    assert spec_delivery.compute_claim_bond_payout(0, bond, 10**15) == (0, 0)
    cost = spec_delivery.compute_publication_cost(100_000, 1_000, 2, 10**9)
    assert cost == (100_000 + spec_delivery.PUBLISH_BASE_GAS + 3 * spec_delivery.PAYOUT_GAS + 16 * 1_000) * 10**9
    for p in (MINIMAL, MAINNET):  # a bond covers the publication at the bound at the preset's price
        assert p.DELIVERY_CLAIM_BOND_WEI >= PUBLICATION_GAS_AT_MAX_TRANSCRIPT * p.DELIVERY_GAS_PRICE_WEI
