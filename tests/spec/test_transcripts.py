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
