// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {CoverageParams, Params, ProtocolParams, Timeline} from "../../../contracts/src/Params.sol";

/// @notice Params.timeline and Params.validate as the contracts run them, for the property test
/// that verillm.spec.params.compute_timeline and compute_timeline_problems are their twins.
contract ParamsHarness {
    function timeline(ProtocolParams calldata p) external pure returns (Timeline memory) {
        return Params.timeline(p);
    }

    /// @notice Reverts InvalidParams(reason) exactly when a deployment with these parameters would.
    function validate(ProtocolParams calldata p, CoverageParams calldata c) external pure {
        Params.validate(p);
        Params.validateCoverage(p, c);
    }
}
