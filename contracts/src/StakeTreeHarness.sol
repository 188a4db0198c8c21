// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {StakeTree} from "./StakeTree.sol";

/// Test and bench only (never deployed by the protocol): the Registry's StakeTree library on its own, so a test can fill a model's tree with
/// tens of thousands of slots without a BLS proof of possession per node, and measure a draw.
contract StakeTreeHarness {
    using StakeTree for StakeTree.Tree;

    StakeTree.Tree private tree;

    /// Give nodes address(firstId) .. address(firstId + count - 1) `weight` from epoch + 1 on.
    function setMany(uint160 firstId, uint256 count, uint256 weight, uint256 epoch) external {
        for (uint256 i = 0; i < count; i++) {
            tree.set(address(firstId + uint160(i)), weight, epoch);
        }
    }

    function draw(bytes32 seed, uint8 attempt, uint256 size, address[] calldata excluded, uint256 epoch)
        external
        view
        returns (address[] memory)
    {
        return tree.draw(seed, attempt, size, excluded, epoch);
    }

    function table(uint256 epoch) external view returns (address[] memory, uint256[] memory) {
        return tree.table(epoch);
    }

    function size() external view returns (uint256 slots, uint256 capacity) {
        return (tree.slots, tree.capacity);
    }
}
