"""Spec tests for `verillm.spec.hashing`: the three hash functions and the domain tags.

- sha256 hashes Merkle leaves and nodes (contracts re-hash them through the 0x02 precompile);
- keccak256 hashes what contracts hash natively: receipts, seeds, ids;
- blake3 hashes bulk data no contract re-derives (weights, token sequences, projections).
Every preimage starts with a one-byte domain tag, so two kinds of object never collide.
"""

import hashlib

import blake3
import pytest
from Crypto.Hash import keccak
from hypothesis import given
from hypothesis import strategies as st

from verillm.spec import hashing
from verillm.spec.hashing import blake3_digest, blake3_xof, keccak256, sha256

# Published test vectors (Ethereum's empty-input keccak, FIPS 180-2 "abc", the BLAKE3 reference).
KNOWN_ANSWERS = [
    (keccak256, b"", "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"),
    (keccak256, b"abc", "4e03657aea45a94fc7d47ba826c8d667c0d1e6e33a64a036ec44f58fa12d6c45"),
    (sha256, b"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    (sha256, b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    (blake3_digest, b"", "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"),
    (blake3_digest, b"abc", "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"),
]

# The tags of docs/protocol.md §2, plus the audit-draw tags of `spec/audit.py`.
DOMAIN_TAGS = {
    "DOMAIN_MERKLE_LEAF": 0x00,
    "DOMAIN_MERKLE_NODE": 0x01,
    "DOMAIN_CHALLENGE": 0x10,
    "DOMAIN_PROJECTION": 0x11,
    "DOMAIN_SAMPLER": 0x12,
    "DOMAIN_AUDIT_SEED": 0x13,
    "DOMAIN_MODEL_ID": 0x14,
    "DOMAIN_JOB": 0x15,
    "DOMAIN_TOKENS": 0x16,
    "DOMAIN_AUDIT_PICK": 0x17,
    "DOMAIN_COMMITTEE": 0x18,
    "DOMAIN_SORTITION": 0x19,
    "DOMAIN_CHALLENGE_SEED": 0x1A,
    "DOMAIN_ESCALATION": 0x1B,
    "DOMAIN_ROUND_SEED": 0x1C,
    "DOMAIN_DRAW_SECRET": 0x1D,
    "DOMAIN_VOTE_SEAL": 0x1E,
    "DOMAIN_STREAM_PREFIX": 0x1F,
}


@pytest.mark.parametrize("function, data, digest", KNOWN_ANSWERS, ids=lambda v: getattr(v, "__name__", None))
def test_each_hash_function_gives_the_published_digest(function, data, digest):
    assert function(data).hex() == digest


def test_keccak256_is_ethereums_keccak_not_the_nist_sha3_standard():
    # The two differ only in padding, so they never agree: hashlib.sha3_256 would be a bug.
    assert keccak256(b"") != hashlib.sha3_256(b"").digest()


@given(st.binary(max_size=300))
def test_each_wrapper_is_its_library_function_and_returns_32_bytes(data):
    assert sha256(data) == hashlib.sha256(data).digest()
    assert keccak256(data) == keccak.new(digest_bits=256, data=data).digest()
    assert blake3_digest(data) == blake3.blake3(data).digest()
    assert len(sha256(data)) == len(keccak256(data)) == len(blake3_digest(data)) == 32


def test_blake3_extendable_output_has_the_asked_length_and_extends_the_digest():
    data = b"weights"
    assert len(blake3_xof(data, 100)) == 100
    assert blake3_xof(data, 100)[:32] == blake3_digest(data)
    assert blake3_xof(data, 16) == blake3_digest(data)[:16]


def test_every_domain_tag_is_one_byte_with_the_value_the_protocol_assigns():
    declared = {name: getattr(hashing, name) for name in dir(hashing) if name.startswith("DOMAIN_")}
    assert declared == {name: bytes([value]) for name, value in DOMAIN_TAGS.items()}


def test_no_two_domains_share_a_tag():
    assert len(set(DOMAIN_TAGS.values())) == len(DOMAIN_TAGS)


@pytest.mark.parametrize("function", [sha256, keccak256, blake3_digest])
def test_the_same_bytes_under_two_domains_hash_differently(function):
    payload = b"\x00" * 32
    digests = {function(getattr(hashing, name) + payload) for name in DOMAIN_TAGS}
    assert len(digests) == len(DOMAIN_TAGS)


def test_a_leaf_tag_keeps_a_leaf_from_passing_as_an_inner_node():
    left, right = b"\xaa" * 32, b"\xbb" * 32
    assert sha256(hashing.DOMAIN_MERKLE_LEAF + left + right) != sha256(hashing.DOMAIN_MERKLE_NODE + left + right)
