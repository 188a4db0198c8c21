"""The BLS-over-BN254 VRF: shared vectors, both curve backends, encodings, proofs of possession."""

import json
import secrets
from pathlib import Path

import pytest
from py_ecc import optimized_bn128 as bn

from vectors.generate import compute_fq2_sqrt, compute_test_vectors, compute_twist_point_outside_subgroup  # tests/vectors/generate.py
from verillm.chain.bn254 import RevmBackend, get_bn254_backend, has_pyrevm
from verillm.errors import ConfigError, EncodingError, InvalidProof
from verillm.spec import vrf

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "vrf.json").read_text())
HAS_PYREVM = has_pyrevm()
FAST = get_bn254_backend()
NATIVE = RevmBackend()
needs_pyrevm = pytest.mark.skipif(not HAS_PYREVM, reason="pyrevm (dev extra) not installed")


def _b(hex_string: str) -> bytes:
    return bytes.fromhex(hex_string[2:])


def test_vectors_file_is_what_the_generator_writes():
    assert compute_test_vectors() == VECTORS, "regenerate: python tests/vectors/generate.py"


@pytest.mark.parametrize("key", VECTORS["keys"], ids=lambda k: k["sk"][:10])
def test_key_vectors(key):
    sk = int(key["sk"], 16)
    assert vrf.compute_public_key(sk) == _b(key["pk"])
    assert vrf.is_valid_public_key(_b(key["pk"]))
    assert vrf.compute_possession_proof(sk, _b(key["owner"])) == _b(key["pop"])
    assert vrf.is_valid_possession_proof(_b(key["pk"]), _b(key["owner"]), _b(key["pop"]), backend=FAST)


@pytest.mark.parametrize("case", VECTORS["valid"], ids=lambda v: f"counter{v['counter']}-{v['message'][:12]}")
def test_valid_vectors(case):
    sk = int(VECTORS["keys"][case["key"]]["sk"], 16)
    pk, message, proof = _b(VECTORS["keys"][case["key"]]["pk"]), _b(case["message"]), _b(case["proof"])
    x, y, counter = vrf.compute_hash_to_g1(message)
    assert [hex(x), hex(y), counter] == [*case["hash_to_g1"], case["counter"]]
    assert vrf.compute_vrf_proof(sk, message) == proof
    assert vrf.compute_vrf_output(proof) == _b(case["output"])
    assert vrf.verify_vrf_proof(pk, message, proof, backend=FAST) == _b(case["output"])


@pytest.mark.parametrize("case", VECTORS["invalid"], ids=lambda v: v["name"])
def test_invalid_vectors_are_rejected(case):
    pk, proof = _b(case["pk"]), _b(case["proof"])
    if case["kind"] == "vrf":
        assert not vrf.is_valid_vrf_proof(pk, _b(case["message"]), proof, backend=FAST)
        with pytest.raises(InvalidProof, match="does not verify"):
            vrf.verify_vrf_proof(pk, _b(case["message"]), proof, backend=FAST)
    else:
        assert not vrf.is_valid_possession_proof(pk, _b(case["owner"]), proof, backend=FAST)


def test_reference_backend_agrees_on_one_good_and_one_bad_proof():
    """py_ecc pairings cost ~0.5 s each here: two checks against the vectors."""
    good = VECTORS["valid"][2]
    pk = _b(VECTORS["keys"][good["key"]]["pk"])
    assert vrf.is_valid_vrf_proof(pk, _b(good["message"]), _b(good["proof"]), backend=vrf.REFERENCE)
    bad = next(c for c in VECTORS["invalid"] if c["name"] == "wrong_message")
    assert not vrf.is_valid_vrf_proof(_b(bad["pk"]), _b(bad["message"]), _b(bad["proof"]), backend=vrf.REFERENCE)


@needs_pyrevm
@pytest.mark.parametrize("scalar", [1, 2, 0xDEADBEEF, vrf.R - 1, vrf.derive_secret_key(b"k" * 32)])
def test_native_and_reference_multiplication_agree(scalar):
    point = vrf._hash_point(b"agree", vrf.DOMAIN_VRF)
    assert vrf.compute_g1_multiple(point, scalar, NATIVE) == vrf.compute_g1_multiple(point, scalar, vrf.REFERENCE)


@needs_pyrevm
def test_native_and_reference_pairing_agree_on_a_fresh_key():
    sk = vrf.derive_secret_key(secrets.token_bytes(32))
    pk, proof = vrf.compute_public_key(sk), vrf.compute_vrf_proof(sk, b"fresh")
    pairs = [(vrf.decode_g1(proof), bn.neg(bn.G2)), (vrf._hash_point(b"fresh", vrf.DOMAIN_VRF), vrf.decode_g2(pk))]
    assert vrf.compute_pairing_check(pairs, NATIVE) is True
    assert vrf.compute_pairing_check(pairs, vrf.REFERENCE) is True


def test_hash_to_g1_gives_canonical_curve_points():
    for i in range(50):
        x, y, _ = vrf.compute_hash_to_g1(i.to_bytes(2, "big"))
        assert x < vrf.P and y < vrf.P and y % 2 == 0
        assert (y * y - x ** 3 - 3) % vrf.P == 0
    assert vrf.compute_hash_to_g1(b"m", vrf.DOMAIN_VRF)[:2] != vrf.compute_hash_to_g1(b"m", vrf.DOMAIN_POP)[:2]


def test_outputs_differ_across_keys_and_messages():
    sks = [vrf.derive_secret_key(bytes([i]) * 32) for i in (1, 2)]
    outputs = {vrf.compute_vrf_output(vrf.compute_vrf_proof(sk, m)) for sk in sks for m in (b"a", b"b")}
    assert len(outputs) == 4


def test_key_generation_and_range_checks():
    assert 0 < vrf.derive_secret_key(secrets.token_bytes(32)) < vrf.R
    assert vrf.derive_secret_key(b"s" * 32) == vrf.derive_secret_key(b"s" * 32) != vrf.derive_secret_key(b"t" * 32)
    with pytest.raises(ConfigError, match="32 bytes"):
        vrf.derive_secret_key(b"short")
    for bad in (0, vrf.R):
        with pytest.raises(ConfigError, match="out of range"):
            vrf.compute_vrf_proof(bad, b"m")


def test_encodings_round_trip_and_reject_malformed_bytes():
    pk = _b(VECTORS["keys"][0]["pk"])
    assert vrf.encode_g2(vrf.decode_g2(pk)) == pk
    assert vrf.encode_g1(bn.G1) == (1).to_bytes(32, "big") + (2).to_bytes(32, "big")
    assert vrf.encode_g1(bn.Z1) == b"\x00" * 64 and bn.is_inf(vrf.decode_g1(b"\x00" * 64))
    with pytest.raises(EncodingError, match="64 bytes"):
        vrf.decode_g1(b"\x00" * 63)
    with pytest.raises(EncodingError, match="not reduced"):
        vrf.decode_g1(vrf.P.to_bytes(32, "big") + b"\x00" * 32)
    with pytest.raises(EncodingError, match="20-byte"):
        vrf.compute_possession_message(pk, b"\x00" * 19)
    assert vrf.compute_words(pk)[1] == int.from_bytes(pk[32:64], "big")


def test_g2_encoding_uses_eip197_word_order():
    words = vrf.compute_words(vrf.encode_g2(bn.G2))
    # the G2 generator as EIP-197 lists it: x = x_real + x_imag·i, words (x_imag, x_real, y_imag, y_real)
    assert words == [
        11559732032986387107991004021392285783925812861821192530917403151452391805634,
        10857046999023057135944570762232829481370756359578518086990519993285655852781,
        4082367875863433681332203403145435568316851327593401208105741076214120093531,
        8495653923123431417604973247489272438418190587263600148770280649306958101930,
    ]


def test_rogue_shaped_key_is_on_the_twist_but_rejected():
    point = vrf.decode_g2(compute_twist_point_outside_subgroup())
    assert bn.is_on_curve(point, bn.b2)
    assert not vrf.is_valid_public_key(vrf.encode_g2(point))


def test_fq2_square_roots():
    for t in range(1, 20):
        square = bn.FQ2([t, 3 * t + 1]) ** 2
        root = compute_fq2_sqrt(square)
        assert root is not None and root * root == square


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown BN254 backend"):
        get_bn254_backend("gmpy")
