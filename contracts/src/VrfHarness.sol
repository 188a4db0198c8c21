// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {BlsVrf} from "./BlsVrf.sol";

/// @title VrfHarness: exposes BlsVrf for tests against tests/vectors/vrf.json and gas measurement.
contract VrfHarness {
    event VrfVerified(address indexed caller, bytes32 indexed messageHash, bytes32 output);

    function hashToG1(bytes calldata message) external view returns (uint256 x, uint256 y) {
        return BlsVrf.hashToG1(BlsVrf.DOMAIN_VRF, message);
    }

    function verify(uint256[4] calldata publicKey, bytes calldata message, uint256[2] calldata proof)
        external view returns (bool)
    {
        return BlsVrf.verify(publicKey, message, proof);
    }

    function verifyPossession(uint256[4] calldata publicKey, address owner, uint256[2] calldata pop)
        external view returns (bool)
    {
        return BlsVrf.verifyPossession(publicKey, owner, pop);
    }

    function output(uint256[2] calldata proof) external pure returns (bytes32) {
        return BlsVrf.output(proof);
    }

    function isG1Point(uint256[2] calldata point) external pure returns (bool) {
        return BlsVrf.isG1Point(point);
    }

    /// A transaction that verifies a proof and logs its output: what Jobs does per audit draw.
    function verifyAndRecord(uint256[4] calldata publicKey, bytes calldata message, uint256[2] calldata proof)
        external returns (bytes32 vrfOutput)
    {
        vrfOutput = BlsVrf.verifyAndOutput(publicKey, message, proof);
        emit VrfVerified(msg.sender, keccak256(message), vrfOutput);
    }
}
