// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Domains} from "./Params.sol";

/// @notice The binary Merkle tree of verillm/spec/merkle.py: sha256 (precompile 0x02) with a
/// 0x00 prefix on leaves and 0x01 on nodes; an odd level promotes its last node unchanged.
/// A proof is the siblings from the leaf upward; the index and the leaf count fix the path.
library MerkleLib {
    function leafHash(bytes memory leafBytes) internal pure returns (bytes32) {
        return sha256(abi.encodePacked(Domains.MERKLE_LEAF, leafBytes));
    }

    function nodeHash(bytes32 left, bytes32 right) internal pure returns (bytes32) {
        return sha256(abi.encodePacked(Domains.MERKLE_NODE, left, right));
    }

    /// @return root the root the proof leads to, and ok = false if the proof has the wrong shape
    /// (index outside the tree, too few or too many siblings).
    function computeRoot(bytes32 leaf, uint256 index, uint256 leafCount, bytes32[] memory siblings)
        internal
        pure
        returns (bytes32 root, bool ok)
    {
        if (index >= leafCount) return (bytes32(0), false);
        uint256 used;
        uint256 position = index;
        uint256 width = leafCount;
        root = leaf;
        while (width > 1) {
            if ((position ^ 1) < width) {
                if (used == siblings.length) return (bytes32(0), false);
                bytes32 sibling = siblings[used++];
                root = position & 1 == 1 ? nodeHash(sibling, root) : nodeHash(root, sibling);
            }
            position >>= 1;
            width = (width + 1) >> 1;
        }
        ok = used == siblings.length;
    }

    function isValidProof(bytes32 leaf, uint256 index, uint256 leafCount, bytes32[] memory siblings, bytes32 root)
        internal
        pure
        returns (bool)
    {
        (bytes32 computed, bool ok) = computeRoot(leaf, index, leafCount, siblings);
        return ok && computed == root;
    }
}
