"""verillm.spec.audit: the shared vectors recomputed, and property tests against the
contracts' own arithmetic (pure calls on a real anvil)."""

import json
import random
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verillm.errors import InvalidInput
from verillm.spec import audit
from verillm.spec.challenge import compute_challenge_positions
from verillm.spec.merkle import MerkleProof, compute_merkle_levels, compute_merkle_proof, is_valid_merkle_proof
from verillm.spec.receipt import SigningDomain, compute_domain_separator, compute_receipt_hash, recover_receipt_signer
from verillm.spec.types import Receipt, SamplingParams

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _load(name):
    return json.loads((VECTORS / f"{name}.json").read_text())


def _b(value: str) -> bytes:
    return bytes.fromhex(value[2:])


# --- vectors, Python side ----------------------------------------------------------------------

def test_merkle_vectors():
    for case in _load("merkle")["cases"]:
        proof = MerkleProof(case["index"], case["leaf_count"], tuple(_b(s) for s in case["siblings"]))
        assert is_valid_merkle_proof(_b(case["leaf"]), proof, _b(case["root"])) is case["valid"], case


def test_fingerprint_vectors():
    for case in _load("fingerprint")["cases"]:
        ppb = audit.compute_fixed_ppb(int(case["bits"], 16))
        assert (None if ppb is None else str(ppb)) == case["ppb"], case


def test_receipt_vectors():
    vectors = _load("receipt")
    d = vectors["domain"]
    domain = SigningDomain(chain_id=d["chain_id"], verifying_contract=_b(d["verifying_contract"]))
    assert "0x" + compute_domain_separator(domain).hex() == d["separator"]
    for case in vectors["cases"]:
        f = case["fields"]
        receipt = Receipt(_b(f[0]), _b(f[1]), _b(f[2]), _b(f[3]), SamplingParams(f[4], f[5], f[6], int(f[7])), f[8], _b(f[9]), f[10],
                          _b(f[14].lower()), _b(case["signature"]), input_tokens=f[11], output_tokens=f[12], auditable_until_block=int(f[13]))
        assert "0x" + compute_receipt_hash(receipt).hex() == case["struct_hash"]
        assert "0x" + recover_receipt_signer(receipt, domain).hex() == vectors["signer"].lower()


def test_audit_vectors():
    v = _load("audit")
    assert audit.compute_draw_seed(_b(v["draw_seed"]["batch_root"]), _b(v["draw_seed"]["blockhash"])) == _b(v["draw_seed"]["seed"])
    assert audit.compute_committee_seed(_b(v["committee_seed"]["beta"]), v["committee_seed"]["index"]) == _b(v["committee_seed"]["seed"])
    e = v["escalation_seed"]
    assert audit.compute_escalation_seed(e["audit_id"], _b(e["blockhash"])) == _b(e["seed"])
    c = v["challenge_seed"]
    assert audit.compute_challenge_seed(_b(c["committee_seed"]), _b(c["blockhash"])) == _b(c["seed"])
    for pick in v["picks"]:
        assert audit.is_audited(_b(pick["beta"]), pick["index"], pick["rate_bps"]) is pick["audited"]
    for case in v["sortition"]:
        got = audit.compute_committee(_b(case["seed"]), case["attempt"], case["size"], case["candidates"], [int(w) for w in case["weights"]])
        assert list(got) == case["chosen"]
    for case in v["challenge_positions"]:
        assert list(compute_challenge_positions(_b(case["seed"]), case["prompt_len"], case["output_len"], case["count"])) == case["positions"]


# --- pure properties -------------------------------------------------------------------------

def test_sortition_draws_distinct_weighted_candidates_and_never_weight_zero():
    candidates = [f"n{i}" for i in range(6)]
    weights = [0, 5, 1, 0, 3, 1]
    counts = dict.fromkeys(candidates, 0)
    for j in range(400):
        chosen = audit.compute_committee(j.to_bytes(32, "big"), 0, 3, candidates, weights)
        assert len(set(chosen)) == 3 and not {"n0", "n3"} & set(chosen)
        counts[chosen[0]] += 1
    assert counts["n1"] > counts["n4"] > counts["n2"]  # the first seat follows stake: 5 : 3 : 1
    with pytest.raises(InvalidInput, match="not enough candidates"):
        audit.compute_committee(b"\x00" * 32, 0, 5, candidates, weights)


def test_audit_rate_is_the_share_of_jobs_drawn():
    beta = b"\x07" * 32
    audited = sum(audit.is_audited(beta, i, 500) for i in range(4000))
    assert 140 <= audited <= 260  # 5% of 4000 = 200, ±6 σ
    assert not any(audit.is_audited(beta, i, 0) for i in range(100))
    assert all(audit.is_audited(beta, i, 10_000) for i in range(100))


def test_fixed_point_decode_is_exact_truncation():
    for value in (1.0, -2.5, 1e-3, 0.1, 7.0e-8):
        bits = audit.compute_f32_bits(value)
        exact = audit.compute_fixed_ppb(bits)
        f32 = struct.unpack(">f", struct.pack(">f", value))[0]
        assert abs(exact - f32 * 1e9) < 1 and abs(exact) <= abs(f32 * 1e9) + 1e-6
    assert audit.compute_fixed_ppb(0x7FC00000) is None
    assert audit.compute_fixed_ppb(0x7F7FFFFF) == audit.CLAMP_PPB


def test_cell_test_uses_the_rms_over_dims():
    a = [audit.compute_f32_bits(v) for v in (1.0, 1.0)]
    b = [audit.compute_f32_bits(v) for v in (1.00003, 0.99997)]
    sum_sq = audit.compute_cell_squared_error(a, b)
    assert audit.is_cell_within(sum_sq, 2, 31_000) and not audit.is_cell_within(sum_sq, 2, 29_000)
    assert not audit.is_cell_within(audit.compute_cell_squared_error(a, [0x7FC00000, a[1]]), 2, 10**9)


# --- against the contracts ---------------------------------------------------------------------

@PROPERTY
@given(seed=st.binary(min_size=32, max_size=32), attempt=st.integers(0, 3),
       weights=st.lists(st.integers(0, 10**20), min_size=1, max_size=12), size=st.integers(1, 6))
def test_sortition_matches_registry(protocol, seed, attempt, weights, size):
    candidates = [f"0x{i + 1:040x}" for i in range(len(weights))]
    size = min(size, sum(1 for w in weights if w))
    if size == 0:
        return
    got = protocol.registry.call("computeCommittee", seed, attempt, size, [protocol.chain.w3.to_checksum_address(c) for c in candidates], weights)
    want = audit.compute_committee(seed, attempt, size, candidates, weights)
    assert [g.lower() for g in got] == list(want)


@PROPERTY
@given(bits=st.integers(0, 2**32 - 1))
def test_fingerprint_decode_matches_contract(protocol, bits):
    value, finite = protocol.disputes.call("decodeFingerprintPpb", bits)
    want = audit.compute_fixed_ppb(bits)
    assert finite is (want is not None)
    if finite:
        assert value == want


@PROPERTY
@given(seed=st.binary(min_size=32, max_size=32), prompt=st.integers(1, 200), output=st.integers(1, 300), count=st.integers(1, 40))
def test_challenge_positions_match_contract(protocol, seed, prompt, output, count):
    got = protocol.disputes.call("computeChallengePositions", seed, prompt, output, count)
    assert list(got) == list(compute_challenge_positions(seed, prompt, output, count))


@PROPERTY
@given(count=st.integers(1, 40), data=st.data())
def test_merkle_proofs_match_contract(protocol, count, data):
    rng = random.Random(count)
    leaves = [rng.randbytes(32) for _ in range(count)]
    levels = compute_merkle_levels(leaves)
    index = data.draw(st.integers(0, count - 1))
    proof = compute_merkle_proof(levels, index)
    claimed = data.draw(st.integers(1, count + 2))
    python = is_valid_merkle_proof(leaves[index], MerkleProof(index, claimed, proof.siblings), levels[-1][0])
    contract = protocol.disputes.call("isValidMerkleProof", leaves[index], index, claimed, list(proof.siblings), levels[-1][0])
    assert contract is python
    assert python is True or claimed != count
