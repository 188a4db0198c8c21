// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @notice Protocol parameters, fixed at deploy from a preset of verillm/spec/params.py.
/// Field names mirror the preset's (units in the names); `verillm.chain.protocol` builds
/// this tuple from a `Preset`, so the preset stays the single source.
struct ProtocolParams {
    uint256 minStakeWei;
    uint256 jobFeeWei;
    uint256 auditFeeWei;
    uint256 disputeBondWei;
    uint16 auditRateBps;
    uint16 slashFractionBps;
    uint16 slashRewardBps;
    uint8 committeeSize;
    uint8 escalationCommitteeSize;
    uint8 challengePositions;
    uint8 maxCommitteeRedraws;
    uint32 auditDrawDelayBlocks;
    uint32 drawWindowBlocks;
    uint32 startWindowBlocks;
    uint32 commitWindowBlocks;
    uint32 openWindowBlocks;
    uint32 disputeWindowBlocks;
    uint32 proofWindowBlocks;
    uint32 unbondingBlocks;
    uint32 maxBatchReceipts;
    uint32 epochBlocks; // stake and membership changes take effect for draws at the next epoch
    uint16 memberPenaltyBps; // a member's minority vote or missed opening: not a provable lie, a small share
}

/// @notice The omission challenge's parameters (contracts/src/Coverage.sol), a struct of their own
/// so that Jobs, which stores ProtocolParams, keeps its code size. Same preset, same naming.
struct CoverageParams {
    uint32 batchByBlocks; // a dispatcher promises to batch a job's receipt within this many blocks
    uint32 omissionClaimWindowBlocks; // after the promised block, how long its holder may claim
    uint256 omissionClaimBondWei; // a claim's bond: refunded, less the answer's cost, if the dispatcher proves inclusion
    uint32 omissionAnswerGas; // gas an answer is paid for (× its gas price, capped at the bond): proveIncluded's gas for a
    // maxBatchReceipts-leaf batch (≈ 162k + 1.7k per tree level, measured) plus a margin, sized in the preset
}

/// @notice One-byte domain tags prefixed to every hashed preimage (verillm/spec/hashing.py).
library Domains {
    bytes1 internal constant MERKLE_LEAF = 0x00;
    bytes1 internal constant MERKLE_NODE = 0x01;
    bytes1 internal constant CHALLENGE = 0x10;
    bytes1 internal constant AUDIT_SEED = 0x13;
    bytes1 internal constant AUDIT_PICK = 0x17;
    bytes1 internal constant COMMITTEE = 0x18;
    bytes1 internal constant SORTITION = 0x19;
    bytes1 internal constant CHALLENGE_SEED = 0x1a;
    bytes1 internal constant ESCALATION = 0x1b;
}

library Params {
    error InvalidParams(string reason);

    uint256 internal constant BPS = 10_000;
    /// blockhash() sees only the last 256 blocks: every window that ends in a blockhash read
    /// must close before its seed block leaves that range.
    uint256 internal constant BLOCKHASH_RANGE = 256;
    uint256 internal constant MAX_ANSWER_GAS = 30_000_000;

    function validate(ProtocolParams memory p) internal pure {
        if (p.minStakeWei == 0) revert InvalidParams("minStakeWei must be positive");
        if (p.auditRateBps > BPS || p.slashFractionBps > BPS || p.slashRewardBps > BPS) revert InvalidParams("a bps value exceeds 10000");
        if (p.memberPenaltyBps > p.slashFractionBps) revert InvalidParams("memberPenaltyBps exceeds slashFractionBps");
        if (p.committeeSize == 0 || p.committeeSize % 2 == 0) revert InvalidParams("committeeSize must be odd");
        if (p.escalationCommitteeSize <= p.committeeSize || p.escalationCommitteeSize % 2 == 0) {
            revert InvalidParams("escalationCommitteeSize must be odd and larger than committeeSize");
        }
        if (p.challengePositions == 0 || p.maxBatchReceipts == 0) revert InvalidParams("challengePositions and maxBatchReceipts must be positive");
        // The per-job levy must pay, in expectation, every audit's fees: the committee and the
        // worker each earn auditFeeWei per passed audit.
        if (uint256(p.auditRateBps) * (uint256(p.committeeSize) + 1) * p.auditFeeWei > BPS * p.jobFeeWei) {
            revert InvalidParams("jobFeeWei does not cover the expected audit fees");
        }
        _validateWindows(p);
    }

    /// @dev A promise made while active is claimable before its dispatcher can withdraw: a
    /// deregistering node posts no batch, so it waits unbondingBlocks, longer than a promise's
    /// batching and claim windows together; a claim locks the stake until it is resolved.
    function validateCoverage(ProtocolParams memory p, CoverageParams memory c) internal pure {
        validate(p);
        if (c.batchByBlocks == 0 || c.omissionClaimWindowBlocks == 0 || c.omissionClaimBondWei == 0 || c.omissionAnswerGas == 0) {
            revert InvalidParams("batchByBlocks, omissionClaimWindowBlocks, omissionClaimBondWei and omissionAnswerGas must be positive");
        }
        // An answer must fit in a block to be paid for; 30M gas is Ethereum's block limit.
        if (c.omissionAnswerGas > MAX_ANSWER_GAS) revert InvalidParams("omissionAnswerGas exceeds a block's gas");
        if (uint256(c.batchByBlocks) + c.omissionClaimWindowBlocks >= p.unbondingBlocks) {
            revert InvalidParams("batchByBlocks + omissionClaimWindowBlocks must be shorter than unbondingBlocks");
        }
    }

    function _validateWindows(ProtocolParams memory p) private pure {
        if (p.auditDrawDelayBlocks == 0) revert InvalidParams("auditDrawDelayBlocks must be positive");
        if (p.drawWindowBlocks == 0 || p.drawWindowBlocks >= BLOCKHASH_RANGE) revert InvalidParams("drawWindowBlocks must be in [1, 255]");
        if (p.openWindowBlocks == 0 || p.openWindowBlocks >= BLOCKHASH_RANGE) revert InvalidParams("openWindowBlocks must be in [1, 255]");
        if (p.startWindowBlocks == 0 || p.commitWindowBlocks == 0 || p.disputeWindowBlocks == 0 || p.proofWindowBlocks == 0) {
            revert InvalidParams("every window must be positive");
        }
        // A node that deregisters stays slashable until every batch it posted before leaving
        // has been drawn and every audited job in it started (after that, audits lock stake).
        uint256 batchLifetime = uint256(p.auditDrawDelayBlocks) + p.drawWindowBlocks + p.startWindowBlocks;
        if (p.unbondingBlocks < batchLifetime) revert InvalidParams("unbondingBlocks shorter than a batch's draw and start windows");
        // Draws read the weights of the epoch their seed's batch (or escalation) began in, and
        // only the current or the previous epoch can be read: every draw a round makes in its
        // windows must fall within one epoch of its start, and a node that leaves stays
        // registered until no readable epoch still weighs it.
        uint256 drawSpan = batchLifetime + (uint256(p.maxCommitteeRedraws) + 1) * p.commitWindowBlocks;
        if (p.epochBlocks < drawSpan) revert InvalidParams("epochBlocks shorter than a round's draws");
        if (p.unbondingBlocks < 2 * uint256(p.epochBlocks)) revert InvalidParams("unbondingBlocks shorter than two epochs");
    }
}
