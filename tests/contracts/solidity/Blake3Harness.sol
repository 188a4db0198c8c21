// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Blake3} from "../../../contracts/src/Blake3.sol";

/// Test-only: exposes the contracts' BLAKE3 to compare it with verillm.spec.hashing.blake3_digest.
contract Blake3Harness {
    function hash(bytes calldata data) external pure returns (bytes32) {
        return Blake3.hash(data);
    }
}
