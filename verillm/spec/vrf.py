"""A verifiable random function: a BLS signature over BN254 (alt_bn128), checkable on-chain.

    sk       a scalar in [1, r)                   (r: the order of G1 and G2)
    pk       sk·G2, encoded in EIP-197 word order: x_imag ‖ x_real ‖ y_imag ‖ y_real (128 bytes)
    H(m)     try-and-increment hash to G1: for ctr = 0, 1, ...:
                 x = uint256(sha256(DOMAIN_VRF ‖ m ‖ u32 ctr)) mod p
                 if x³ + 3 is a square mod p: y = (x³ + 3)^((p+1)/4) mod p, the even root; return (x, y)
    proof    π = sk·H(m) in G1, encoded x ‖ y (64 bytes)
    output   β = keccak256(π)
    verify   π is a canonical point on G1 (not infinity) and e(π, −G2) · e(H(m), pk) = 1

Uniqueness: e(·, G2) is injective on G1 (prime order, cofactor 1), so for a given (pk, m) at
most one π passes; the prover cannot choose among outputs. Registration needs a proof of
possession, π_pop = sk·H_pop(pk ‖ owner) under a separate domain tag, and a pk that is on the
twist and in the order-r subgroup (the EIP-197 precompile enforces that too). BN254 gives about
100 bits of security; its precompiles exist on every EVM chain. `contracts/src/BlsVrf.sol` is
the same scheme in Solidity; `tests/vectors/vrf.json` holds vectors both sides check.

Curve arithmetic runs in py_ecc, the reference written here. A faster `CurveBackend` with the
same answers (revm's native precompiles: `verillm/chain/bn254.py`) may be installed by the
program that runs the spec with `use_backend`, as EELS patches in its optimized package; the
spec itself never picks one.
"""

import hashlib
from functools import lru_cache
from typing import Protocol

from py_ecc import optimized_bn128 as bn

from verillm.errors import ConfigError, EncodingError, InvalidProof
from verillm.spec.hashing import keccak256, sha256

P = bn.field_modulus
R = bn.curve_order
SQRT_EXPONENT = (P + 1) // 4  # p ≡ 3 (mod 4): a square's root is its (p+1)/4-th power
MAX_HASH_TRIES = 256

# Two tags of the same length, so (domain, message, counter) parses one way only.
DOMAIN_VRF = b"VeriLLM/BN254/VRF/v1"
DOMAIN_POP = b"VeriLLM/BN254/PoP/v1"

G1_BYTES = 64
G2_BYTES = 128


class CurveBackend(Protocol):
    """G1 scalar multiplication and the EIP-197 pairing check, computed elsewhere (faster)."""

    def compute_g1_multiple(self, point, scalar: int) -> bytes: ...

    def compute_pairing_check(self, pairs: list) -> bool: ...


# --- keys -----------------------------------------------------------------------------------
def derive_secret_key(seed: bytes) -> int:
    """Return the secret key derived from ``seed`` (≥ 32 bytes; 512 bits reduced mod r: no bias)."""
    if len(seed) < 32:
        raise ConfigError(f"a VRF key seed needs at least 32 bytes, got {len(seed)}")
    return int.from_bytes(hashlib.sha512(b"VeriLLM/BN254/keygen/v1" + seed).digest(), "big") % (R - 1) + 1


def compute_public_key(secret_key: int) -> bytes:
    """Return sk·G2 in EIP-197 encoding (128 bytes)."""
    _check_secret_key(secret_key)
    return encode_g2(bn.multiply(bn.G2, secret_key))


def _check_secret_key(secret_key: int) -> None:
    if not 0 < secret_key < R:
        raise ConfigError("VRF secret key out of range [1, r)")


# --- hashing to G1 --------------------------------------------------------------------------
def compute_hash_to_g1(message: bytes, domain: bytes = DOMAIN_VRF) -> tuple[int, int, int]:
    """Return (x, y, counter): the point H(message) and the try that found it."""
    for counter in range(MAX_HASH_TRIES):
        x = int.from_bytes(sha256(domain + message + counter.to_bytes(4, "big")), "big") % P
        rhs = (x * x * x + 3) % P
        y = pow(rhs, SQRT_EXPONENT, P)
        if y * y % P == rhs:
            return x, (y if y % 2 == 0 else P - y), counter
    raise InvalidProof(f"hash to G1 found no point in {MAX_HASH_TRIES} tries")  # probability 2^-256


def _hash_point(message: bytes, domain: bytes):
    x, y, _ = compute_hash_to_g1(message, domain)
    return (bn.FQ(x), bn.FQ(y), bn.FQ.one())


# --- prove ----------------------------------------------------------------------------------
def compute_vrf_proof(secret_key: int, message: bytes, backend: CurveBackend | None = None) -> bytes:
    """Return π = sk·H(message), 64 bytes."""
    _check_secret_key(secret_key)
    return compute_g1_multiple(_hash_point(message, DOMAIN_VRF), secret_key, backend)


def compute_vrf_output(proof: bytes) -> bytes:
    """Return β = keccak256(π): the 32 random bytes a proof stands for."""
    if len(proof) != G1_BYTES:
        raise EncodingError(f"a VRF proof is {G1_BYTES} bytes, got {len(proof)}")
    return keccak256(proof)


def compute_possession_proof(secret_key: int, owner: bytes, backend: CurveBackend | None = None) -> bytes:
    """Return the proof of possession of sk for registering its pk under address ``owner``."""
    _check_secret_key(secret_key)
    message = compute_possession_message(compute_public_key(secret_key), owner)
    return compute_g1_multiple(_hash_point(message, DOMAIN_POP), secret_key, backend)


def compute_possession_message(public_key: bytes, owner: bytes) -> bytes:
    """Return what a proof of possession signs: pk ‖ owner. Binding the owner stops a copied key+PoP
    from being registered (or front-run) by another address."""
    if len(owner) != 20:
        raise EncodingError(f"owner must be a 20-byte address, got {len(owner)} bytes")
    return public_key + owner


# --- verify ---------------------------------------------------------------------------------
def is_valid_vrf_proof(public_key: bytes, message: bytes, proof: bytes, backend: CurveBackend | None = None) -> bool:
    """Return whether ``proof`` is pk's VRF proof for ``message``. Malformed inputs are invalid."""
    return _is_valid_signature(public_key, message, proof, DOMAIN_VRF, backend)


def is_valid_possession_proof(public_key: bytes, owner: bytes, proof: bytes, backend: CurveBackend | None = None) -> bool:
    """Return whether ``proof`` proves possession of ``public_key``'s secret for ``owner``."""
    message = compute_possession_message(public_key, owner) if len(public_key) == G2_BYTES else b""
    return _is_valid_signature(public_key, message, proof, DOMAIN_POP, backend)


def verify_vrf_proof(public_key: bytes, message: bytes, proof: bytes, backend: CurveBackend | None = None) -> bytes:
    """Check ``proof`` and return its output β; raise InvalidProof if it does not verify."""
    if not is_valid_vrf_proof(public_key, message, proof, backend):
        raise InvalidProof(f"VRF proof 0x{proof.hex()[:16]}… does not verify for this key and message")
    return compute_vrf_output(proof)


def _is_valid_signature(public_key: bytes, message: bytes, proof: bytes, domain: bytes, backend: CurveBackend | None) -> bool:
    if not (is_valid_public_key(public_key) and is_valid_g1_encoding(proof)):
        return False
    pk, signature = decode_g2(public_key), decode_g1(proof)
    pairs = [(signature, bn.neg(bn.G2)), (_hash_point(message, domain), pk)]
    return compute_pairing_check(pairs, backend)


def is_valid_public_key(public_key: bytes) -> bool:
    """Return whether ``public_key`` encodes a point of G2 other than infinity: canonical
    coordinates, on the twist, in the order-r subgroup (G2's cofactor is not 1)."""
    return _is_valid_public_key(bytes(public_key))


@lru_cache(maxsize=4096)  # keys are few and reused; the subgroup check is a G2 multiplication
def _is_valid_public_key(public_key: bytes) -> bool:
    try:
        point = decode_g2(public_key)
    except EncodingError:
        return False
    return not bn.is_inf(point) and bn.is_on_curve(point, bn.b2) and bn.is_inf(bn.multiply(point, R))


def is_valid_g1_encoding(proof: bytes) -> bool:
    """Return whether ``proof`` encodes a G1 point other than infinity (cofactor 1: on-curve suffices)."""
    try:
        point = decode_g1(proof)
    except EncodingError:
        return False
    return not bn.is_inf(point) and bn.is_on_curve(point, bn.b)


# --- curve arithmetic: the py_ecc reference, or an installed backend with the same answers ----
class ReferenceBackend:
    """py_ecc: the readable, slow reference (~0.5 s a pairing check)."""

    def compute_g1_multiple(self, point, scalar: int) -> bytes:
        return encode_g1(bn.multiply(point, scalar))

    def compute_pairing_check(self, pairs: list) -> bool:
        product = bn.FQ12.one()
        for g1, g2 in pairs:
            product *= bn.pairing(g2, g1, final_exponentiate=False)
        return bn.final_exponentiate(product) == bn.FQ12.one()


REFERENCE = ReferenceBackend()
_installed: list[CurveBackend] = [REFERENCE]  # the backend `use_backend` installed last


def use_backend(backend: CurveBackend | None) -> None:
    """Install ``backend`` for every later call that names none (None: back to the reference)."""
    _installed[0] = backend or REFERENCE


def get_backend(backend: CurveBackend | None = None) -> CurveBackend:
    """Return ``backend``, else the installed one."""
    return backend or _installed[0]


def compute_g1_multiple(point, scalar: int, backend: CurveBackend | None = None) -> bytes:
    """Return scalar·point (a G1 point) encoded."""
    return get_backend(backend).compute_g1_multiple(point, scalar)


def compute_pairing_check(pairs: list, backend: CurveBackend | None = None) -> bool:
    """Return whether the product of e(g1, g2) over ``pairs`` is 1 (the EIP-197 check)."""
    return get_backend(backend).compute_pairing_check(pairs)


def encode_pairing_input(pairs: list) -> bytes:
    """Return the 0x08 precompile's calldata for ``pairs``: (G1 ‖ G2) per pair, 192 bytes each."""
    return b"".join(encode_g1(g1) + encode_g2(g2) for g1, g2 in pairs)


# --- encodings ------------------------------------------------------------------------------
def _word(value: int) -> bytes:
    return value.to_bytes(32, "big")


def _coordinate(data: bytes, index: int) -> int:
    value = int.from_bytes(data[32 * index:32 * index + 32], "big")
    if value >= P:
        raise EncodingError(f"coordinate word {index} is not reduced mod p")
    return value


def encode_g1(point) -> bytes:
    """Return x ‖ y (64 bytes) of a G1 point; infinity is all zeros (as in EIP-196)."""
    if bn.is_inf(point):
        return b"\x00" * G1_BYTES
    x, y = bn.normalize(point)
    return _word(x.n) + _word(y.n)


def decode_g1(data: bytes):
    """Return the G1 point encoded by ``data`` (not checked to be on the curve)."""
    if len(data) != G1_BYTES:
        raise EncodingError(f"a G1 point is {G1_BYTES} bytes, got {len(data)}")
    x, y = _coordinate(data, 0), _coordinate(data, 1)
    return bn.Z1 if x == y == 0 else (bn.FQ(x), bn.FQ(y), bn.FQ.one())


def encode_g2(point) -> bytes:
    """Return x_imag ‖ x_real ‖ y_imag ‖ y_real (EIP-197 order, 128 bytes) of a G2 point."""
    if bn.is_inf(point):
        return b"\x00" * G2_BYTES
    x, y = bn.normalize(point)
    return _word(x.coeffs[1]) + _word(x.coeffs[0]) + _word(y.coeffs[1]) + _word(y.coeffs[0])


def decode_g2(data: bytes):
    """Return the G2 point encoded by ``data`` in EIP-197 order (not checked to be on the twist)."""
    if len(data) != G2_BYTES:
        raise EncodingError(f"a G2 point is {G2_BYTES} bytes, got {len(data)}")
    xi, xr, yi, yr = (_coordinate(data, i) for i in range(4))
    if xi == xr == yi == yr == 0:
        return bn.Z2
    return (bn.FQ2([xr, xi]), bn.FQ2([yr, yi]), bn.FQ2.one())


def compute_words(data: bytes) -> list[int]:
    """Return ``data`` as big-endian 256-bit words: how Solidity takes uint256[2] / uint256[4]."""
    if len(data) % 32:
        raise EncodingError(f"{len(data)} bytes is not a whole number of 32-byte words")
    return [int.from_bytes(data[i:i + 32], "big") for i in range(0, len(data), 32)]
