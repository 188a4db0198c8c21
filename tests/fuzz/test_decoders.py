"""Fuzz targets for every decoder of untrusted bytes: canonical records, JSON, envelopes,
receipts, openings, trace blobs, opening payloads. See conftest.py for the property."""

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzing import fuzz_settings, tally
from verillm.errors import VerillmError
from verillm.jsonsafe import load_json
from verillm.node.worker.commit import compute_job_output
from verillm.node.worker.trace_blob import decode_trace_blob
from verillm.node.envelope import decode_envelope_json, encode_envelope_json, verify_envelope_freshness, verify_envelope_signature, sign_envelope
from verillm.node.keys import new_node_key
from verillm.node.api.native_views import parse_opening_payload
from verillm.wire import opening_from_json, opening_to_json, receipt_from_json, receipt_to_json
from verillm.spec.commitment import compute_commitment, compute_opening, verify_opening
from verillm.spec.encoding import decode, encode
from verillm.spec.receipt import SigningDomain, verify_receipt_signature
from verillm.spec.types import Challenge, Job, ModelManifest, Opening, Receipt, SamplingParams

DOMAIN = SigningDomain(chain_id=31337, verifying_contract=b"\x00" * 20)
PATH = "/v1/verillm/jobs"


@pytest.fixture(scope="module")
def samples(tiny_engine):
    """Valid records of every kind, from a real run of the tiny model, to mutate."""
    key = new_node_key()
    job = Job(tiny_engine.model_id, (5, 17, 300, 42), SamplingParams(), 5, b"\x07" * 32)
    trace = tiny_engine.run([job])[0]
    layers = tiny_engine.manifest.committed_layers
    output = compute_job_output(job, trace, layers, key, DOMAIN)
    opening = compute_opening(trace, compute_commitment(trace, layers), [(0, layers[0]), (trace.num_positions - 1, layers[-1])])
    challenge = Challenge(b"\x01" * 32, (0, 2), tuple(layers), (1, 2, 3))
    return {"job": job, "receipt": output.receipt, "blob": output.trace_blob, "opening": opening, "challenge": challenge,
            "manifest": tiny_engine.manifest, "layers": layers, "key": key}


def mutated(base: bytes) -> st.SearchStrategy[bytes]:
    """Bytes near ``base``: truncated, extended, with bytes overwritten, inserted or deleted."""
    edit = st.tuples(st.sampled_from(["set", "insert", "delete", "cut"]), st.integers(0, max(len(base) - 1, 0)), st.binary(min_size=1, max_size=8))

    def apply(edits):
        data = bytearray(base)
        for kind, at, chunk in edits:
            at = min(at, len(data))
            if kind == "set":
                data[at:at + len(chunk)] = chunk
            elif kind == "insert":
                data[at:at] = chunk
            elif kind == "delete":
                del data[at:at + len(chunk)]
            else:
                del data[at:]
        return bytes(data)

    return st.one_of(st.binary(max_size=600), st.lists(edit, min_size=1, max_size=4).map(apply))


def refused_or_accepted(call):
    """Run ``call``; a typed VerillmError is a refusal. Any other exception fails the property."""
    try:
        return call()
    except VerillmError:
        return None


RECORDS = {"job": Job, "receipt": Receipt, "opening": Opening, "challenge": Challenge, "manifest": ModelManifest}


@pytest.mark.parametrize("kind", list(RECORDS))
def test_canonical_decoding(samples, examples, kind):
    """decode(T, bytes) is a record or an EncodingError; what decodes re-encodes to the same bytes (one encoding per record)."""
    cls = RECORDS[kind]

    @fuzz_settings(examples)
    @given(mutated(encode(samples[kind])))
    def check(data):
        tally()
        record = refused_or_accepted(lambda: decode(cls, data))
        if record is not None:
            assert encode(record) == data

    check()


def test_json_loader(examples):
    text = st.one_of(
        st.text(max_size=300),
        st.binary(max_size=300),
        st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20), lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=30).map(json.dumps),
        st.tuples(st.integers(0, 3000), st.sampled_from("[{"), st.sampled_from(['"x"', "1", ""])).map(lambda t: t[1] * t[0] + t[2]),
    )

    @fuzz_settings(examples)
    @given(text)
    def check(raw):
        tally()
        refused_or_accepted(lambda: load_json(raw))

    check()


def test_envelopes(samples, examples):
    """An envelope body is refused (400/401/409) or names a checked sender; nothing else escapes."""
    me = samples["key"].address
    good = json.loads(encode_envelope_json(sign_envelope(PATH, encode(samples["job"]), new_node_key().private_key, me)))
    hexes = st.binary(max_size=70).map(lambda b: "0x" + b.hex())
    value = st.one_of(hexes, st.text(max_size=10), st.integers(-2**70, 2**70), st.none(), st.booleans(), st.lists(st.integers(), max_size=2))
    body = st.fixed_dictionaries({}, optional={k: value for k in good}).map(lambda d: {**good, **d}) | st.dictionaries(st.text(max_size=10), value, max_size=7)

    @fuzz_settings(examples)
    @given(body, st.sampled_from([PATH, PATH + "/0x" + "00" * 32 + "/openings"]))
    def check(data, path):
        tally()
        envelope = refused_or_accepted(lambda: decode_envelope_json(data))
        if envelope is not None:
            refused_or_accepted(lambda: (verify_envelope_signature(envelope, path, me), verify_envelope_freshness(envelope, time.time(), 60)))

    check()


def test_receipts(samples, examples):
    readable = receipt_to_json(samples["receipt"])

    @fuzz_settings(examples)
    @given(mutated(encode(samples["receipt"])), st.dictionaries(st.sampled_from(sorted(readable)), st.text(max_size=5) | st.integers(), max_size=2))
    def check(encoded, extra):
        tally()
        receipt = refused_or_accepted(lambda: receipt_from_json({**readable, **extra, "encoded": "0x" + encoded.hex()}))
        if receipt is not None:
            refused_or_accepted(lambda: verify_receipt_signature(receipt, DOMAIN))

    check()


def test_openings(samples, examples):
    receipt, layers = samples["receipt"], samples["layers"]

    @fuzz_settings(examples)
    @given(mutated(encode(samples["opening"])))
    def check(encoded):
        tally()
        opening = refused_or_accepted(lambda: opening_from_json({**opening_to_json(samples["opening"]), "encoded": "0x" + encoded.hex()}))
        if opening is not None:
            refused_or_accepted(lambda: verify_opening(opening, receipt.commitment_root, layers, receipt.num_positions))

    check()


def test_trace_blobs(samples, examples):
    @fuzz_settings(examples)
    @given(mutated(samples["blob"]))
    def check(blob):
        tally()
        refused_or_accepted(lambda: decode_trace_blob(blob))

    check()


def test_opening_payloads(samples, examples):
    challenge = "0x" + encode(samples["challenge"]).hex()
    payload = st.one_of(
        st.binary(max_size=200),
        st.fixed_dictionaries({"cells": st.lists(st.lists(st.integers(-5, 2**40) | st.booleans() | st.none(), max_size=3), max_size=5)}).map(json.dumps).map(str.encode),
        mutated(encode(samples["challenge"])).map(lambda b: json.dumps({"challenge": "0x" + b.hex()}).encode()),
        st.just(json.dumps({"challenge": challenge, "cells": []}).encode()),
    )

    @fuzz_settings(examples)
    @given(payload)
    def check(data):
        tally()
        refused_or_accepted(lambda: parse_opening_payload(data))

    check()
