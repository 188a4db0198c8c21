// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title BlsVrf: a BLS signature over BN254 (alt_bn128) used as a verifiable random function.
/// @notice The same scheme as verillm/spec/vrf.py (shared vectors: tests/vectors/vrf.json):
///   pk    = sk·G2, as uint256[4] in EIP-197 word order [x_imag, x_real, y_imag, y_real]
///   H(m)  = try-and-increment: x = sha256(DOMAIN ‖ m ‖ uint32 ctr) mod p until x³+3 is a square,
///           y = (x³+3)^((p+1)/4), the even root
///   proof = sk·H(m) in G1 as uint256[2] [x, y];  output = keccak256(x ‖ y)
///   valid iff proof is a canonical G1 point (not infinity) and e(proof, −G2)·e(H(m), pk) = 1
/// At most one proof verifies per (pk, m), so the output is unique. Keys are registered with a
/// proof of possession over pk ‖ owner (`verifyPossession`). A pk that is not a valid G2 point
/// makes the 0x08 precompile fail, and this library reverts then (never returns a silent false:
/// eth_estimateGas would otherwise settle on a gas level where the precompile runs out of gas).
/// All functions are internal: they are inlined into the calling contract, no linking needed.
library BlsVrf {
    /// The base field modulus p of BN254.
    uint256 internal constant P = 21888242871839275222246405745257275088696311157297823662689037894645226208583;
    uint256 internal constant SQRT_EXPONENT = (P + 1) / 4;
    uint256 internal constant MAX_HASH_TRIES = 256;

    // −G2 (the generator negated), EIP-197 word order.
    uint256 internal constant NEG_G2_X_IMAG = 11559732032986387107991004021392285783925812861821192530917403151452391805634;
    uint256 internal constant NEG_G2_X_REAL = 10857046999023057135944570762232829481370756359578518086990519993285655852781;
    uint256 internal constant NEG_G2_Y_IMAG = 17805874995975841540914202342111839520379459829704422454583296818431106115052;
    uint256 internal constant NEG_G2_Y_REAL = 13392588948715843804641432497768002650278120570034223513918757245338268106653;

    /// Domain tags, equal in length so that (domain, message, counter) parses one way only.
    bytes internal constant DOMAIN_VRF = "VeriLLM/BN254/VRF/v1";
    bytes internal constant DOMAIN_POP = "VeriLLM/BN254/PoP/v1";

    error HashToCurveFailed();
    error PrecompileFailed(uint256 precompile);
    error InvalidVrfProof();

    /// @notice Hash ``message`` to a point of G1 under ``domain``.
    function hashToG1(bytes memory domain, bytes memory message) internal view returns (uint256 x, uint256 y) {
        for (uint256 counter = 0; counter < MAX_HASH_TRIES; ++counter) {
            x = uint256(sha256(abi.encodePacked(domain, message, uint32(counter)))) % P;
            uint256 rhs = addmod(mulmod(mulmod(x, x, P), x, P), 3, P);
            y = _modExp(rhs, SQRT_EXPONENT);
            if (mulmod(y, y, P) == rhs) {
                if (y & 1 == 1) y = P - y;
                return (x, y);
            }
        }
        revert HashToCurveFailed(); // probability 2^-256
    }

    /// @notice Whether ``proof`` is ``publicKey``'s VRF proof for ``message``.
    function verify(uint256[4] memory publicKey, bytes memory message, uint256[2] memory proof)
        internal view returns (bool)
    {
        if (!isG1Point(proof) || _isZero(publicKey)) return false;
        (uint256 hx, uint256 hy) = hashToG1(DOMAIN_VRF, message);
        return _pairingCheck(proof, hx, hy, publicKey);
    }

    /// @notice The VRF output of a proof: keccak256 of its 64-byte encoding.
    function output(uint256[2] memory proof) internal pure returns (bytes32) {
        return keccak256(abi.encodePacked(proof[0], proof[1]));
    }

    /// @notice Verify and return the output; revert InvalidVrfProof if the proof does not verify.
    function verifyAndOutput(uint256[4] memory publicKey, bytes memory message, uint256[2] memory proof)
        internal view returns (bytes32)
    {
        if (!verify(publicKey, message, proof)) revert InvalidVrfProof();
        return output(proof);
    }

    /// @notice Whether ``pop`` proves that ``owner`` holds the secret key of ``publicKey``.
    /// Reverts (PrecompileFailed(8)) if publicKey is not a point of G2's order-r subgroup.
    function verifyPossession(uint256[4] memory publicKey, address owner, uint256[2] memory pop)
        internal view returns (bool)
    {
        if (!isG1Point(pop) || _isZero(publicKey)) return false;
        (uint256 hx, uint256 hy) = hashToG1(DOMAIN_POP, abi.encodePacked(publicKey, owner));
        return _pairingCheck(pop, hx, hy, publicKey);
    }

    /// @notice Whether ``point`` is a canonically encoded point of G1 other than infinity.
    function isG1Point(uint256[2] memory point) internal pure returns (bool) {
        uint256 x = point[0];
        uint256 y = point[1];
        if (x >= P || y >= P || (x == 0 && y == 0)) return false;
        return mulmod(y, y, P) == addmod(mulmod(mulmod(x, x, P), x, P), 3, P);
    }

    /// e(sig, −G2) · e((hx, hy), pk) == 1 through the EIP-197 precompile.
    function _pairingCheck(uint256[2] memory sig, uint256 hx, uint256 hy, uint256[4] memory pk)
        private view returns (bool)
    {
        uint256[12] memory input = [
            sig[0], sig[1], NEG_G2_X_IMAG, NEG_G2_X_REAL, NEG_G2_Y_IMAG, NEG_G2_Y_REAL,
            hx, hy, pk[0], pk[1], pk[2], pk[3]
        ];
        uint256[1] memory result;
        bool ok;
        assembly ("memory-safe") {
            ok := staticcall(gas(), 0x08, input, 384, result, 32)
        }
        if (!ok) revert PrecompileFailed(8);
        return result[0] == 1;
    }

    /// base^exponent mod P through the EIP-198 precompile.
    function _modExp(uint256 base, uint256 exponent) private view returns (uint256 value) {
        bytes memory input = abi.encodePacked(uint256(32), uint256(32), uint256(32), base, exponent, P);
        uint256[1] memory result;
        bool ok;
        assembly ("memory-safe") {
            ok := staticcall(gas(), 0x05, add(input, 32), mload(input), result, 32)
        }
        if (!ok) revert PrecompileFailed(5);
        return result[0];
    }

    function _isZero(uint256[4] memory point) private pure returns (bool) {
        return point[0] == 0 && point[1] == 0 && point[2] == 0 && point[3] == 0;
    }
}
