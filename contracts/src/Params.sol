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
    // A private draw revealed this many blocks after its window still counts (the same draw), at
    // memberPenaltyBps. Here, in the storage slot the round's deadlines already read (Jobs._deadlines).
    uint16 privateRevealGraceBlocks;
    uint32 disputeWindowBlocks;
    uint32 proofWindowBlocks;
    uint32 unbondingBlocks;
    uint32 maxBatchReceipts;
    uint32 epochBlocks; // stake and membership changes take effect for draws at the next epoch
    uint16 memberPenaltyBps; // a member's minority vote or missed opening: not a provable lie, a small share
    uint32 maxTranscriptTokens; // input + output tokens a receipt may sign to be auditable: its publication fits a block
    uint32 auditHorizonBlocks; // a leaver's receipts are auditable from batches posted within this many blocks of its unbond
    uint32 receiptHorizonBlocks; // a receipt is auditable until the worker's head when it signed + this (ReceiptData.auditableUntilBlock)
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

/// @notice Undelivered jobs' parameters (contracts/src/Delivery.sol), a struct of their own for the
/// same reason as CoverageParams. Same preset, same naming.
struct DeliveryParams {
    uint256 deliveryClaimBondWei; // a delivery claim's bond: the publication it forces at MAX_TRANSCRIPT_TOKENS × deliveryGasPriceWei
    uint256 deliveryGasPriceWei; // the price a publication's gas is paid at out of the bonds (not tx.gasprice: the same in an estimate)
}

/// @notice One-byte domain tags prefixed to every hashed preimage (verillm/spec/hashing.py).
library Domains {
    bytes1 internal constant MERKLE_LEAF = 0x00;
    bytes1 internal constant MERKLE_NODE = 0x01;
    bytes1 internal constant CHALLENGE = 0x10;
    bytes1 internal constant AUDIT_SEED = 0x13;
    bytes1 internal constant AUDIT_PICK = 0x17;
    bytes1 internal constant SORTITION = 0x19;
    bytes1 internal constant CHALLENGE_SEED = 0x1a;
    bytes1 internal constant ROUND_SEED = 0x1c; // every round's committee seed (0x18 and 0x1b: the β- and escalation-seeded draws before issue 20)
    bytes1 internal constant DRAW_SECRET = 0x1d; // a private draw's commitment: keccak256(0x1d ‖ secret)
    bytes1 internal constant VOTE_SEAL = 0x1e; // a member's sealed vote (Jobs.sealVote)
}

/// @notice The protocol's timeline, composed once (docs/protocol.md §12 "One timeline", mirrored by
/// verillm.spec.params.compute_timeline). Each span is the longest the windows allow when every
/// party acts at the last block of its window and every permissionless call comes at its first.
/// A round is entered (E) by startAudit or an escalation; its committee is drawn in
/// (E + delay, E + delay + draw]; each redraw comes one block after a commit deadline and adds a
/// commit window; one claim window per round adds at most two commit windows (publish deadline =
/// claim + commit, commit deadline ≥ publish deadline + commit). A first round drawn privately
/// whose dispatcher never reveals falls back to a public draw: lapse one block after its draw
/// window and its reveal grace, then a draw window of its own (privateFallback).
struct Timeline {
    uint256 claimExtension; // 2 × commit: the round's one publication window and the commit window after it
    uint256 privateFallback; // delay + draw + grace + 1: a private draw missed (its grace too), then the public one
    uint256 roundDrawSpan; // E → the round's last draw: privateFallback + delay + draw + redraws × (commit + 1) + claimExtension
    uint256 roundSpan; // E → the verdict: roundDrawSpan + commit + delay + 3 × open (worker, seals, their openings) + 1 (finalize)
    uint256 startSpan; // a batch's posting → its last audit start: delay + draw + start
    uint256 auditSpan; // a start → the last settle: round 0, dispute, appeal (public), dispute, decider (public), dispute, proof, settle
    uint256 leaverDutySpan; // an unbond → the end of its last duty: horizon + startSpan + auditSpan
    uint256 receiptDutySpan; // a receipt signed at S → the last settle of its audit: receiptHorizon + auditSpan
}

library Params {
    error InvalidParams(string reason);

    uint256 internal constant BPS = 10_000;
    /// blockhash() sees only the last 256 blocks: every window that ends in a blockhash read
    /// must close before its seed block leaves that range.
    uint256 internal constant BLOCKHASH_RANGE = 256;
    uint256 internal constant MAX_ANSWER_GAS = 30_000_000;
    /// publishTranscript costs ≈ 1.1k gas per token (tests/contracts/test_bounds.py measures it at
    /// the bound): 8,192 tokens ≈ 9 M gas, under a third of a 30 M block.
    uint256 internal constant MAX_TRANSCRIPT_TOKENS = 8_192;

    function timeline(ProtocolParams memory p) internal pure returns (Timeline memory t) {
        uint256 commit = p.commitWindowBlocks;
        t.claimExtension = 2 * commit;
        t.privateFallback = uint256(p.auditDrawDelayBlocks) + p.drawWindowBlocks + p.privateRevealGraceBlocks + 1;
        t.roundDrawSpan = t.privateFallback + uint256(p.auditDrawDelayBlocks) + p.drawWindowBlocks + uint256(p.maxCommitteeRedraws) * (commit + 1)
            + t.claimExtension;
        t.roundSpan = t.roundDrawSpan + commit + p.auditDrawDelayBlocks + 3 * uint256(p.openWindowBlocks) + 1;
        t.startSpan = uint256(p.auditDrawDelayBlocks) + p.drawWindowBlocks + p.startWindowBlocks;
        // round 0 may carry the private fallback; the appeal and its decider are drawn publicly;
        // the decider is entered by the appeal's settle, which waits out a contest (proof + 1)
        t.auditSpan = 3 * (t.roundSpan + p.disputeWindowBlocks) - 2 * t.privateFallback + 2 * (uint256(p.proofWindowBlocks) + 1);
        t.leaverDutySpan = uint256(p.auditHorizonBlocks) + t.startSpan + t.auditSpan;
        t.receiptDutySpan = uint256(p.receiptHorizonBlocks) + t.auditSpan;
    }

    function validate(ProtocolParams memory p) internal pure {
        if (p.minStakeWei == 0) revert InvalidParams("minStakeWei must be positive");
        if (p.auditRateBps > BPS || p.slashFractionBps > BPS || p.slashRewardBps > BPS) revert InvalidParams("a bps value exceeds 10000");
        if (p.memberPenaltyBps > p.slashFractionBps) revert InvalidParams("memberPenaltyBps exceeds slashFractionBps");
        if (p.committeeSize == 0 || p.committeeSize % 2 == 0) revert InvalidParams("committeeSize must be odd");
        if (p.escalationCommitteeSize <= p.committeeSize || p.escalationCommitteeSize % 2 == 0) {
            revert InvalidParams("escalationCommitteeSize must be odd and larger than committeeSize");
        }
        if (p.challengePositions == 0 || p.maxBatchReceipts == 0 || p.maxBatchReceipts > type(uint16).max) {
            revert InvalidParams("challengePositions and maxBatchReceipts must be positive, maxBatchReceipts < 65536");
        }
        if (p.maxTranscriptTokens < 2 || p.maxTranscriptTokens > MAX_TRANSCRIPT_TOKENS) {
            revert InvalidParams("maxTranscriptTokens must be in [2, 8192]: a publication fits a third of a block");
        }
        // The per-job levy must pay, in expectation, every audit's fees: the committee and the
        // worker each earn auditFeeWei per passed audit.
        if (uint256(p.auditRateBps) * (uint256(p.committeeSize) + 1) * p.auditFeeWei > BPS * p.jobFeeWei) {
            revert InvalidParams("jobFeeWei does not cover the expected audit fees");
        }
        _validateWindows(p);
    }

    /// @dev A promise made while active is claimable before its dispatcher can withdraw: a
    /// deregistering node posts no batch, so it waits unbondingBlocks, longer than a promise's
    /// batching and claim windows together; a claim locks the stake until it is resolved. And a
    /// receipt served before its worker left is batched under its promise within the horizon,
    /// and every receipt batched under its promise can still be started when its batch is drawn.
    function validateCoverage(ProtocolParams memory p, CoverageParams memory c) internal pure {
        if (c.batchByBlocks == 0 || c.omissionClaimWindowBlocks == 0 || c.omissionClaimBondWei == 0 || c.omissionAnswerGas == 0) {
            revert InvalidParams("batchByBlocks, omissionClaimWindowBlocks, omissionClaimBondWei and omissionAnswerGas must be positive");
        }
        // An answer must fit in a block to be paid for; 30M gas is Ethereum's block limit.
        if (c.omissionAnswerGas > MAX_ANSWER_GAS) revert InvalidParams("omissionAnswerGas exceeds a block's gas");
        if (uint256(c.batchByBlocks) + c.omissionClaimWindowBlocks >= p.unbondingBlocks) {
            revert InvalidParams("batchByBlocks + omissionClaimWindowBlocks must be shorter than unbondingBlocks");
        }
        if (c.batchByBlocks > p.auditHorizonBlocks) revert InvalidParams("auditHorizonBlocks shorter than batchByBlocks");
        // A receipt batched by its promise's deadline is still auditable at its batch's last
        // start: an honest worker signs head + receiptHorizonBlocks, and what exceeds this sum is
        // the lag tolerated between its signing head and the dispatcher's promising head.
        if (p.receiptHorizonBlocks < uint256(c.batchByBlocks) + timeline(p).startSpan) {
            revert InvalidParams("receiptHorizonBlocks shorter than batchByBlocks + a batch's start span");
        }
    }

    function _validateWindows(ProtocolParams memory p) private pure {
        if (p.auditDrawDelayBlocks == 0) revert InvalidParams("auditDrawDelayBlocks must be positive");
        if (p.drawWindowBlocks == 0 || p.drawWindowBlocks >= BLOCKHASH_RANGE) revert InvalidParams("drawWindowBlocks must be in [1, 255]");
        // A late reveal (revealBy = seed block + draw + grace) still reads its seed block's hash.
        if (p.privateRevealGraceBlocks == 0 || uint256(p.drawWindowBlocks) + p.privateRevealGraceBlocks >= BLOCKHASH_RANGE) {
            revert InvalidParams("privateRevealGraceBlocks must be positive, drawWindowBlocks + privateRevealGraceBlocks < 256");
        }
        if (p.openWindowBlocks == 0 || p.openWindowBlocks >= BLOCKHASH_RANGE) revert InvalidParams("openWindowBlocks must be in [1, 255]");
        if (p.startWindowBlocks == 0 || p.commitWindowBlocks == 0 || p.disputeWindowBlocks == 0 || p.proofWindowBlocks == 0) {
            revert InvalidParams("every window must be positive");
        }
        Timeline memory t = timeline(p);
        // A round's draws read the weights of the epoch it was entered in, and only the current
        // or the previous epoch is readable: every draw of a round, redraws and the claim window
        // included, falls within one epoch of its entry, wherever in its epoch the round began.
        if (p.epochBlocks < t.roundDrawSpan) revert InvalidParams("epochBlocks shorter than a round's draws");
        // A node that unbonds knows the block its duties end: every audit of its receipts and
        // every seat it can still be drawn into ends before it may withdraw; and no readable
        // epoch weighs a node that has withdrawn.
        if (p.unbondingBlocks < t.leaverDutySpan) revert InvalidParams("unbondingBlocks shorter than a leaver's duties");
        if (p.unbondingBlocks < 2 * uint256(p.epochBlocks)) revert InvalidParams("unbondingBlocks shorter than two epochs");
    }
}
