// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @notice BLAKE3 (unkeyed hash mode, 32-byte output) over bytes in memory: what
/// verillm.spec.hashing.blake3_digest computes, so that a contract can check published token
/// data against a receipt's tokens hash (verillm.spec.job.compute_tokens_hash). Written from
/// the BLAKE3 specification: chunks of 1024 bytes, blocks of 64, a binary tree of chunk
/// chaining values. A chaining value is one word (8 u32, word 0 most significant). The
/// compression runs the four columns (then the four diagonals) at once: a state row is one
/// word of four u32 lanes spaced 64 bits apart, so a lane's carries never reach the next.
/// ≈ 15k gas per 64-byte block (tests/contracts/test_delivery.py measures a publication).
library Blake3 {
    uint256 private constant CHUNK_START = 1;
    uint256 private constant CHUNK_END = 2;
    uint256 private constant PARENT = 4;
    uint256 private constant ROOT = 8;
    uint256 private constant IV = 0x6A09E667BB67AE853C6EF372A54FF53A510E527F9B05688C1F83D9AB5BE0CD19;
    /// The message word order of each of the 7 rounds (the permutation applied r times).
    bytes private constant SCHEDULE =
        hex"000102030405060708090a0b0c0d0e0f0206030a0700040d010b0c05090e0f0803040a0c0d02070e060509000b0f08010a070c090e030d0f04000b02050801060c0d090b0f0a0e080702050300010604090e0b05080c0f010d03000a020604070b0f0500010908060e0a020c0304070d";

    /// @dev Scratch memory of one hash: 16 message words, then a 64-byte block buffer.
    struct Scratch {
        uint256 message;
        uint256 buffer;
        uint256 schedule;
    }

    function hash(bytes memory data) internal pure returns (bytes32) {
        uint256 len = data.length;
        uint256 chunks = len == 0 ? 1 : (len + 1023) / 1024;
        uint256[] memory stack = new uint256[](64); // chunk counts are < 2^64
        uint256 depth;
        Scratch memory s = _scratch();
        uint256 base;
        assembly ("memory-safe") {
            base := add(data, 32)
        }
        for (uint256 c = 0; c + 1 < chunks; c++) {
            uint256 cv = _chunk(s, base + c * 1024, 1024, c, 0);
            // Merge completed subtrees: one per trailing zero bit of the chunk count.
            for (uint256 total = c + 1; total & 1 == 0; total >>= 1) {
                cv = _parent(s, stack[--depth], cv, 0);
            }
            stack[depth++] = cv;
        }
        uint256 last = chunks - 1;
        uint256 out = _chunk(s, base + last * 1024, len - last * 1024, last, depth == 0 ? ROOT : 0);
        while (depth > 1) out = _parent(s, stack[--depth], out, 0);
        if (depth == 1) out = _parent(s, stack[0], out, ROOT);
        return bytes32(_littleEndian(out));
    }

    function _scratch() private pure returns (Scratch memory s) {
        bytes memory schedule = SCHEDULE;
        assembly ("memory-safe") {
            let ptr := mload(0x40)
            mstore(0x40, add(ptr, 576))
            mstore(s, ptr)
            mstore(add(s, 32), add(ptr, 512))
            mstore(add(s, 64), add(schedule, 32))
        }
    }

    /// @dev The chaining value (with ROOT: the root output) of one chunk of `len` ≤ 1024 bytes.
    function _chunk(Scratch memory s, uint256 src, uint256 len, uint256 counter, uint256 rootFlag) private pure returns (uint256 cv) {
        cv = IV;
        uint256 blocks = len == 0 ? 1 : (len + 63) / 64;
        uint256 buf = s.buffer;
        uint256 m = s.message;
        for (uint256 b = 0; b < blocks; b++) {
            uint256 blockLen = b + 1 < blocks ? 64 : len - b * 64;
            uint256 flags = (b == 0 ? CHUNK_START : 0) | (b + 1 == blocks ? CHUNK_END | rootFlag : 0);
            assembly ("memory-safe") {
                // A short last block is zero-padded; message words are little-endian u32.
                mstore(buf, 0)
                mstore(add(buf, 32), 0)
                mcopy(buf, add(src, mul(b, 64)), blockLen)
                for { let i := 0 } lt(i, 16) { i := add(i, 1) } {
                    let x := shr(224, mload(add(buf, shl(2, i))))
                    x := or(or(shl(24, and(x, 0xff)), shl(8, and(x, 0xff00))), or(and(shr(8, x), 0xff00), shr(24, x)))
                    mstore(add(m, shl(5, i)), x)
                }
            }
            cv = _compress(s, cv, counter, blockLen, flags);
        }
    }

    function _parent(Scratch memory s, uint256 left, uint256 right, uint256 rootFlag) private pure returns (uint256) {
        uint256 m = s.message;
        assembly ("memory-safe") {
            for { let i := 0 } lt(i, 8) { i := add(i, 1) } {
                let shift := shl(5, sub(7, i))
                mstore(add(m, shl(5, i)), and(shr(shift, left), 0xffffffff))
                mstore(add(m, shl(5, add(i, 8))), and(shr(shift, right), 0xffffffff))
            }
        }
        return _compress(s, IV, 0, 64, PARENT | rootFlag);
    }

    /// @dev The compression function; returns the first 8 output words (state[i] ^ state[i+8]).
    function _compress(Scratch memory s, uint256 cv, uint256 counter, uint256 blockLen, uint256 flags) private pure returns (uint256 out) {
        uint256 m = s.message;
        uint256 sched = s.schedule;
        assembly ("memory-safe") {
            // Four u32 (word j at bits 32·(3−j)) → four lanes (lane j at bits 64·(3−j)), and back.
            function spread(x) -> y {
                y := or(or(shl(192, and(shr(96, x), 0xffffffff)), shl(128, and(shr(64, x), 0xffffffff))),
                        or(shl(64, and(shr(32, x), 0xffffffff)), and(x, 0xffffffff)))
            }
            function gather(y) -> x {
                x := or(or(shl(96, and(shr(192, y), 0xffffffff)), shl(64, and(shr(128, y), 0xffffffff))),
                        or(shl(32, and(shr(64, y), 0xffffffff)), and(y, 0xffffffff)))
            }
            let L := 0x00000000ffffffff00000000ffffffff00000000ffffffff00000000ffffffff
            let a := spread(shr(128, cv))
            let b := spread(cv)
            let c := spread(shr(128, IV))
            let d := or(or(shl(192, and(counter, 0xffffffff)), shl(128, and(shr(32, counter), 0xffffffff))), or(shl(64, blockLen), flags))
            for { let p := sched } lt(p, add(sched, 112)) { p := add(p, 16) } {
                let w := mload(p)
                // Columns: message words 0..7 of this round's order, as even/odd lanes.
                let mx := or(or(shl(192, mload(add(m, shl(5, byte(0, w))))), shl(128, mload(add(m, shl(5, byte(2, w)))))),
                             or(shl(64, mload(add(m, shl(5, byte(4, w))))), mload(add(m, shl(5, byte(6, w))))))
                let my := or(or(shl(192, mload(add(m, shl(5, byte(1, w))))), shl(128, mload(add(m, shl(5, byte(3, w)))))),
                             or(shl(64, mload(add(m, shl(5, byte(5, w))))), mload(add(m, shl(5, byte(7, w))))))
                a := and(add(add(a, b), mx), L)
                d := xor(d, a)
                d := and(or(shr(16, d), shl(16, d)), L)
                c := and(add(c, d), L)
                b := xor(b, c)
                b := and(or(shr(12, b), shl(20, b)), L)
                a := and(add(add(a, b), my), L)
                d := xor(d, a)
                d := and(or(shr(8, d), shl(24, d)), L)
                c := and(add(c, d), L)
                b := xor(b, c)
                b := and(or(shr(7, b), shl(25, b)), L)
                // Diagonals: rows 1, 2, 3 rotate left by 1, 2, 3 lanes; words 8..15.
                b := or(shl(64, b), shr(192, b))
                c := or(shl(128, c), shr(128, c))
                d := or(shl(192, d), shr(64, d))
                mx := or(or(shl(192, mload(add(m, shl(5, byte(8, w))))), shl(128, mload(add(m, shl(5, byte(10, w)))))),
                         or(shl(64, mload(add(m, shl(5, byte(12, w))))), mload(add(m, shl(5, byte(14, w))))))
                my := or(or(shl(192, mload(add(m, shl(5, byte(9, w))))), shl(128, mload(add(m, shl(5, byte(11, w)))))),
                         or(shl(64, mload(add(m, shl(5, byte(13, w))))), mload(add(m, shl(5, byte(15, w))))))
                a := and(add(add(a, b), mx), L)
                d := xor(d, a)
                d := and(or(shr(16, d), shl(16, d)), L)
                c := and(add(c, d), L)
                b := xor(b, c)
                b := and(or(shr(12, b), shl(20, b)), L)
                a := and(add(add(a, b), my), L)
                d := xor(d, a)
                d := and(or(shr(8, d), shl(24, d)), L)
                c := and(add(c, d), L)
                b := xor(b, c)
                b := and(or(shr(7, b), shl(25, b)), L)
                b := or(shl(192, b), shr(64, b))
                c := or(shl(128, c), shr(128, c))
                d := or(shl(64, d), shr(192, d))
            }
            out := or(shl(128, gather(xor(a, c))), gather(xor(b, d)))
        }
    }

    /// @dev The digest bytes: each output word little-endian.
    function _littleEndian(uint256 packed) private pure returns (uint256 digest) {
        for (uint256 i = 0; i < 8; i++) {
            uint256 x = (packed >> (32 * (7 - i))) & 0xffffffff;
            x = ((x & 0xff) << 24) | ((x & 0xff00) << 8) | ((x >> 8) & 0xff00) | (x >> 24);
            digest |= x << (32 * (7 - i));
        }
    }
}
