import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verillm.errors import EncodingError
from verillm.spec.encoding import decode, encode
from verillm.spec.merkle import MerkleProof
from verillm.spec.types import Challenge, Job, Leaf, LeafOpening, ModelManifest, Opening, Receipt, SamplingParams

u32 = st.integers(0, 2**32 - 1)
b32 = st.binary(min_size=32, max_size=32)
f32 = st.floats(width=32, allow_nan=False)
sampling = st.builds(SamplingParams, u32, u32, u32, st.integers(0, 2**64 - 1))
jobs = st.builds(Job, b32, st.lists(u32, max_size=50).map(tuple), sampling, u32, b32)
leaves = st.builds(Leaf, u32, st.integers(0, 65535), st.lists(f32, max_size=4).map(tuple), st.integers(0, 255))
proofs = st.builds(MerkleProof, u32, u32, st.lists(b32, max_size=5).map(tuple))
openings = st.builds(Opening, b32, st.lists(st.builds(LeafOpening, leaves, proofs), max_size=4).map(tuple))
receipts = st.builds(Receipt, b32, b32, b32, b32, sampling, u32, b32, u32, st.binary(min_size=20, max_size=20), st.binary(min_size=65, max_size=65))
manifests = st.builds(
    ModelManifest, st.text(max_size=20), b32, b32, b32, st.sampled_from(["float32", "bfloat16"]), u32, u32,
    st.integers(0, 65535), st.lists(st.integers(0, 65535), max_size=4).map(tuple), st.integers(0, 255),
    st.lists(u32, max_size=3).map(tuple), u32, u32,
)
challenges = st.builds(Challenge, b32, st.lists(u32, max_size=8).map(tuple), st.lists(st.integers(0, 65535), max_size=3).map(tuple), st.lists(u32, max_size=8).map(tuple))


@pytest.mark.parametrize("strategy", [jobs, leaves, openings, receipts, manifests, challenges, proofs])
def test_round_trip(strategy):
    @given(strategy)
    @settings(max_examples=60, deadline=None)
    def check(record):
        assert decode(type(record), encode(record)) == record

    check()


@given(jobs)
@settings(max_examples=50, deadline=None)
def test_truncated_or_extended_bytes_are_rejected(job):
    data = encode(job)
    with pytest.raises(EncodingError):
        decode(Job, data[:-1])
    with pytest.raises(EncodingError, match="trailing"):
        decode(Job, data + b"\x00")


def test_out_of_range_values_are_named():
    with pytest.raises(EncodingError, match="max_new_tokens"):
        encode(Job(b"\x00" * 32, (1,), SamplingParams(), 2**32, b"\x00" * 32))
    with pytest.raises(EncodingError, match="model_id"):
        encode(Job(b"\x00" * 31, (1,), SamplingParams(), 1, b"\x00" * 32))
    with pytest.raises(EncodingError, match="input_tokens"):
        encode(Job(b"\x00" * 32, (-1,), SamplingParams(), 1, b"\x00" * 32))


def test_leaf_layout_is_fixed():
    leaf = Leaf(position=7, layer=30, fingerprint=(1.5,), flags=3)
    assert encode(leaf).hex() == "00000007" "001e" "00000001" "3fc00000" "03"


def test_f32_values_survive_exactly():
    leaf = Leaf(1, 1, (float.fromhex("0x1.fffffep-1"), -0.0, math.inf), 0)
    assert decode(Leaf, encode(leaf)).fingerprint == leaf.fingerprint


def _generic_encoding(record) -> bytes:
    """The field-by-field path `encode` used before its per-class encoders (the reference)."""
    from verillm.spec.encoding import _encode_value, _field_wires

    return b"".join(_encode_value(name, wire, getattr(record, name)) for name, wire in _field_wires(type(record)))


def _outcome(function, record):
    try:
        return function(record)
    except EncodingError as exc:
        return ("EncodingError", str(exc))


scalars = st.one_of(u32, st.integers(-5, 2**70), st.booleans(), st.binary(max_size=40), st.just(bytearray(32)), st.none())


@given(st.builds(Job, st.one_of(b32, scalars), st.lists(u32, max_size=4).map(tuple), sampling, st.one_of(u32, scalars), st.one_of(b32, scalars)),
       st.builds(Receipt, b32, b32, b32, b32, sampling, st.one_of(u32, scalars), b32, u32, st.one_of(st.binary(min_size=20, max_size=20), scalars), st.binary(min_size=65, max_size=65)))
@settings(max_examples=300, deadline=None)
def test_per_class_encoders_match_the_generic_path_bytes_and_errors(job, receipt):
    for record in (job, receipt):
        assert _outcome(encode, record) == _outcome(_generic_encoding, record)
