// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Domains} from "./Params.sol";

/// @notice Stake-weighted sampling without replacement (verillm.spec.audit.compute_committee).
/// Draw i takes r = keccak256(0x19 ‖ seed ‖ u8 attempt ‖ u32 i) mod (weight still in play) and
/// walks the candidates in order, skipping those already drawn, to the first whose running
/// weight exceeds r. Candidates of weight 0 (excluded, or no stake) are never drawn.
library Sortition {
    error NotEnoughCandidates(uint256 wanted, uint256 drawn);

    function draw(bytes32 seed, uint8 attempt, uint256 size, address[] memory candidates, uint256[] memory weights)
        internal
        pure
        returns (address[] memory chosen)
    {
        uint256 total;
        for (uint256 i = 0; i < weights.length; i++) {
            total += weights[i];
        }
        chosen = new address[](size);
        for (uint256 i = 0; i < size; i++) {
            if (total == 0) revert NotEnoughCandidates(size, i);
            uint256 r = uint256(keccak256(abi.encodePacked(Domains.SORTITION, seed, attempt, uint32(i)))) % total;
            uint256 picked = _walk(r, weights);
            chosen[i] = candidates[picked];
            total -= weights[picked];
            weights[picked] = 0; // drawn: out of play
        }
    }

    function _walk(uint256 r, uint256[] memory weights) private pure returns (uint256) {
        uint256 running;
        for (uint256 j = 0; j < weights.length; j++) {
            running += weights[j];
            if (r < running) return j;
        }
        revert NotEnoughCandidates(0, 0); // unreachable: r < total = Σ weights
    }
}
