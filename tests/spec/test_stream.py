"""Signed streams (issue 35, finding 2): the running hash, the signed prefix, what a reader accepts, and
what counts as equivocation (verillm/spec/stream.py; the contract's side: tests/contracts/test_stream_equivocation.py)."""

import dataclasses
import os
import struct

import pytest
from eth_keys import keys
from hypothesis import given
from hypothesis import strategies as st

from verillm.errors import InvalidProof, InvalidSignature
from verillm.spec.hashing import keccak256
from verillm.spec.receipt import SigningDomain, compute_receipt, sign_receipt
from verillm.spec.stream import (
    EMPTY_PREFIX_HASH, Equivocation, SignedPrefix, StreamPrefix, StreamState, compute_prefix_hash, is_prefix_contradicted, process_stream_chunk,
    sign_prefix, verify_equivocation, verify_prefix_signature, verify_receipt_extends_prefix,
)
from verillm.spec.types import Job, SamplingParams
from verillm.wire import signed_prefix_from_json, signed_prefix_to_json, stream_chunk_from_json, stream_chunk_to_json

DOMAIN = SigningDomain(31337, b"\x44" * 20)
KEY = b"\x07" * 32
WORKER = keys.PrivateKey(KEY).public_key.to_canonical_address()
JOB = Job(model_id=b"\x01" * 32, input_tokens=(5, 6, 7), sampling=SamplingParams(), max_new_tokens=8, nonce=b"\x00" * 32)
JOB_HASH = b"\x55" * 32
tokens_lists = st.lists(st.integers(0, 2**32 - 1), max_size=20)


def _signed(tokens, key=KEY, worker=WORKER, job_hash=JOB_HASH, domain=DOMAIN):
    return sign_prefix(StreamPrefix(job_hash, len(tokens), compute_prefix_hash(EMPTY_PREFIX_HASH, tokens), worker), key, domain)


def _receipt(output, key=KEY):
    receipt = compute_receipt(JOB, output, b"\x09" * 32, keys.PrivateKey(key).public_key.to_canonical_address(), 100)
    return sign_receipt(dataclasses.replace(receipt, job_hash=JOB_HASH), key, DOMAIN)


def test_the_running_hash_is_the_documented_keccak_chain():
    expected = EMPTY_PREFIX_HASH
    for token in (1, 70000):
        expected = keccak256(b"\x1f" + expected + struct.pack(">I", token))
    assert compute_prefix_hash(EMPTY_PREFIX_HASH, [1, 70000]) == expected


@given(tokens_lists, tokens_lists)
def test_the_running_hash_extends_chunk_by_chunk(first, second):
    assert compute_prefix_hash(compute_prefix_hash(EMPTY_PREFIX_HASH, first), second) == compute_prefix_hash(EMPTY_PREFIX_HASH, first + second)


def test_a_reader_accepts_chunks_that_extend_the_signed_prefix_and_nothing_else():
    state = process_stream_chunk(StreamState(JOB_HASH), [1, 2], _signed([1, 2]), DOMAIN)
    state = process_stream_chunk(state, [3], _signed([1, 2, 3]), DOMAIN)
    assert (state.token_count, state.worker) == (3, WORKER)
    other_key = os.urandom(32)
    other = keys.PrivateKey(other_key).public_key.to_canonical_address()
    refusals = {
        "other tokens than signed": ([4], _signed([1, 2, 3, 5]), InvalidProof),
        "a count that skips": ([4], _signed([1, 2, 3, 4, 4]), InvalidProof),
        "a prefix that does not extend": ([4], _signed([9, 2, 3, 4]), InvalidProof),
        "another job": ([4], _signed([1, 2, 3, 4], job_hash=b"\x66" * 32), InvalidProof),
        "another worker": ([4], _signed([1, 2, 3, 4], key=other_key, worker=other), InvalidProof),
        "a signature by another key": ([4], SignedPrefix(_signed([1, 2, 3, 4]).prefix, _signed([1, 2, 3, 4], key=other_key, worker=other).signature),
                                       InvalidSignature),
        "another deployment": ([4], _signed([1, 2, 3, 4], domain=SigningDomain(1, b"\x44" * 20)), InvalidSignature),
        "no token": ([], _signed([1, 2, 3]), InvalidProof),
    }
    for name, (tokens, signed, error) in refusals.items():
        with pytest.raises(error):
            process_stream_chunk(state, tokens, signed, DOMAIN)
            pytest.fail(name)


def test_the_json_forms_round_trip_and_refuse_malformed_fields():
    signed = _signed([1, 2])
    assert signed_prefix_from_json(signed_prefix_to_json(signed)) == signed
    assert stream_chunk_from_json(stream_chunk_to_json([1, 2], signed)) == ((1, 2), signed)
    verify_prefix_signature(signed, DOMAIN)
    for bad in ({"token_count": 0}, {"token_count": True}, {"signature": "0x00"}, {"worker": "nothex"}):
        with pytest.raises(Exception, match="stream prefix"):
            signed_prefix_from_json(signed_prefix_to_json(signed) | bad)


@given(tokens_lists, tokens_lists)
def test_a_prefix_is_contradicted_exactly_when_the_output_does_not_start_with_it(prefix, rest):
    p = StreamPrefix(JOB_HASH, len(prefix), compute_prefix_hash(EMPTY_PREFIX_HASH, prefix), WORKER)
    assert not is_prefix_contradicted(p, prefix + rest)
    if rest:
        assert is_prefix_contradicted(p, prefix[:-1] + [(prefix[-1] + 1) % 2**32] + rest) if prefix else True
    assert is_prefix_contradicted(p, prefix[:-1]) == bool(prefix)


def test_a_receipt_that_contradicts_the_signed_prefix_is_equivocation_evidence():
    streamed, output = [11, 12, 13], [11, 99, 13, 14]
    state = process_stream_chunk(StreamState(JOB_HASH), streamed, _signed(streamed), DOMAIN)
    verify_receipt_extends_prefix(_receipt(streamed + [14]), streamed + [14], state)  # honest: extends it
    with pytest.raises(InvalidProof, match="equivocation"):
        verify_receipt_extends_prefix(_receipt(output), output, state)
    evidence = Equivocation(state.last, JOB.input_tokens + tuple(output), receipt=_receipt(output))
    verify_equivocation(evidence, DOMAIN)
    honest = Equivocation(state.last, JOB.input_tokens + (11, 12, 13, 14), receipt=_receipt([11, 12, 13, 14]))
    with pytest.raises(InvalidProof, match="no equivocation"):
        verify_equivocation(honest, DOMAIN)


def test_two_prefixes_of_one_job_that_disagree_are_equivocation_evidence():
    verify_equivocation(Equivocation(_signed([1, 2]), (1, 3), other=_signed([1, 3])), DOMAIN)
    verify_equivocation(Equivocation(_signed([1, 2]), (1, 3, 4), other=_signed([1, 3, 4])), DOMAIN)
    with pytest.raises(InvalidProof):
        verify_equivocation(Equivocation(_signed([1, 2]), (1, 2, 4), other=_signed([1, 2, 4])), DOMAIN)
    with pytest.raises(InvalidProof, match="shorter"):
        verify_equivocation(Equivocation(_signed([1, 2]), (3,), other=_signed([3])), DOMAIN)
