// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @notice On-chain reading of commitment leaves and the tolerance test on their fingerprints.
///
/// A leaf is `encode(Leaf)` of verillm/spec/types.py: u32 position, u16 layer, u32 count,
/// count × f32 big-endian fingerprint, u8 flags (11 + 4·count bytes). Fingerprints are decoded
/// exactly from their IEEE-754 bits into fixed point in parts per billion (value × 1e9,
/// truncated toward zero) and clamped to ±2^96 ppb so that squares of differences cannot
/// overflow; NaN and infinities are "not finite" and fail any comparison.
/// A cell (one position at one layer) fails when its error ‖f_W − f_M‖/√d exceeds the layer's
/// max cell error, computed without square roots: Σ(Δ²) > d · threshold².
library Fingerprint {
    uint256 internal constant PPB = 1e9;
    int256 internal constant CLAMP_PPB = int256(1) << 96;
    uint8 internal constant FLAG_NEXT_WITHIN_MARGIN = 1;
    uint8 internal constant FLAG_STOP_WITHIN_MARGIN = 2;

    error MalformedLeaf(uint256 length, uint256 expected);

    struct Leaf {
        uint32 position;
        uint16 layer;
        uint8 flags;
        bool finite;
        int256[] valuesPpb;
    }

    function leafLength(uint256 dims) internal pure returns (uint256) {
        return 11 + 4 * dims;
    }

    /// @notice Decode f32 bits into ppb fixed point (see the library comment).
    function toPpb(uint32 bits) internal pure returns (int256 value, bool finite) {
        uint256 exponent = (bits >> 23) & 0xff;
        if (exponent == 0xff) return (0, false);
        uint256 mantissa = bits & 0x7fffff;
        if (exponent == 0) exponent = 1; // subnormal: no implicit bit, same scale as exponent 1
        else mantissa |= 0x800000;
        // value = mantissa · 2^(exponent − 150)
        uint256 scaled = mantissa * PPB;
        uint256 magnitude = exponent >= 150 ? scaled << (exponent - 150) : scaled >> (150 - exponent);
        value = magnitude > uint256(CLAMP_PPB) ? CLAMP_PPB : int256(magnitude);
        if (bits >> 31 == 1) value = -value;
        return (value, true);
    }

    function decodeLeaf(bytes memory raw, uint256 dims) internal pure returns (Leaf memory leaf) {
        if (raw.length != leafLength(dims)) revert MalformedLeaf(raw.length, leafLength(dims));
        leaf.position = uint32(_readUint(raw, 0, 4));
        leaf.layer = uint16(_readUint(raw, 4, 2));
        if (_readUint(raw, 6, 4) != dims) revert MalformedLeaf(raw.length, leafLength(dims));
        leaf.valuesPpb = new int256[](dims);
        leaf.finite = true;
        for (uint256 k = 0; k < dims; k++) {
            (int256 value, bool finite) = toPpb(uint32(_readUint(raw, 10 + 4 * k, 4)));
            leaf.valuesPpb[k] = value;
            leaf.finite = leaf.finite && finite;
        }
        leaf.flags = uint8(raw[raw.length - 1]);
    }

    /// @return sumSq Σ over dimensions of (a − b)² in ppb², or type(uint256).max when either
    /// side is not finite (such a cell fails every threshold).
    function squaredError(Leaf memory a, Leaf memory b) internal pure returns (uint256 sumSq) {
        if (!a.finite || !b.finite) return type(uint256).max;
        for (uint256 k = 0; k < a.valuesPpb.length; k++) {
            int256 delta = a.valuesPpb[k] - b.valuesPpb[k];
            sumSq += uint256(delta * delta);
        }
    }

    /// @notice Whether a cell's error is within `maxCellErrorPpb`: Σ(Δ²) ≤ d · threshold².
    function isCellWithin(uint256 sumSq, uint256 dims, uint256 maxCellErrorPpb) internal pure returns (bool) {
        return sumSq <= dims * maxCellErrorPpb * maxCellErrorPpb;
    }

    /// @notice Whether a layer's RMS error over `cells` cells is within `rmsErrorPpb`.
    function isLayerRmsWithin(uint256 sumSq, uint256 cells, uint256 dims, uint256 rmsErrorPpb) internal pure returns (bool) {
        if (sumSq == type(uint256).max) return false;
        return sumSq <= cells * dims * rmsErrorPpb * rmsErrorPpb;
    }

    function _readUint(bytes memory raw, uint256 offset, uint256 size) private pure returns (uint256 value) {
        for (uint256 i = 0; i < size; i++) {
            value = (value << 8) | uint8(raw[offset + i]);
        }
    }
}
