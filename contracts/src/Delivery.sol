// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {Blake3} from "./Blake3.sol";
import {Jobs} from "./Jobs.sol";
import {Params, ProtocolParams} from "./Params.sol";
import {Registry} from "./Registry.sol";

/// @notice Data availability of committee jobs (docs/protocol.md §12, "Undelivered jobs").
/// Whoever dispatches an audit must send each member its verification job (the worker's input
/// ‖ output); a dispatcher that withholds them would otherwise see the audit abandoned with
/// nobody slashed. Here a drawn member that has no job claims it; the worker, who can always
/// publish its own transcript, must then post the tokens on-chain within a commit window,
/// checked against the outputHash and sampling its receipt signed. Published: the members'
/// commit window restarts (they read the job from the event). Not published: the worker is
/// slashed and the round is decided as its default. The phases and windows are the audit state
/// machine's (Jobs.onClaim, onPublish, onUndelivered: one claim window per round, answered only
/// by publication); here are the checks of what is published, the events and the slash.
/// Its own contract (EIP-170: Disputes has no room for it and the cross-round adjudication).
/// Its rights, each the narrowest that works: Jobs lets only it call onClaim/onPublish/
/// onUndelivered (Jobs.delivery) and depositCredit; the Registry lets it `slash` (not penalize,
/// lock or unlock: Registry.delivery). Relaying through Disputes instead would give Disputes a
/// slash-anyone entry point for Delivery (the same power, one more hop) and cost Disputes the
/// very bytes this split frees.
contract Delivery is ReentrancyGuard {
    bytes1 private constant DOMAIN_TOKENS = 0x16; // verillm.spec.hashing.DOMAIN_TOKENS

    Jobs public immutable jobs;
    Registry public immutable registry;
    uint256 private immutable rewardBps;

    event DeliveryClaimed(uint256 indexed auditId, uint8 round, uint8 slot, address indexed member, uint64 publishDeadline);
    /// @notice The job's transcript: P + N tokens, u32 big-endian each (input ‖ output), and
    /// the sampling the worker's receipt signed. A member's verification job is this input
    /// with the same sampling and one new token.
    event TranscriptPublished(
        uint256 indexed auditId, address indexed publisher, bytes tokens, uint32 temperatureMilli, uint32 topK, uint32 topPPpm, uint64 seed
    );
    event DeliveryDefaulted(uint256 indexed auditId, address indexed worker, uint256 slashedWei);

    error TranscriptMismatch(string field);
    error NotRegistry();

    constructor(Jobs jobs_, Registry registry_, ProtocolParams memory p) {
        if (keccak256(abi.encode(p)) != registry_.paramsHash()) revert Params.InvalidParams("not the Registry's parameters");
        jobs = jobs_;
        registry = registry_;
        rewardBps = p.slashRewardBps;
    }

    /// @notice The defaulting worker's slashed stake, from the Registry only (passed on to Jobs).
    receive() external payable {
        if (msg.sender != address(registry)) revert NotRegistry();
    }

    /// @notice Member `slot` of the current round says its verification job never came (only
    /// that member, with no receipt posted, by the commit deadline, before the transcript is
    /// public). The round's first claim opens its one publication window of commitWindowBlocks
    /// (Jobs.onClaim); later claims join it.
    function claimUndelivered(uint256 auditId, uint8 slot) external {
        (uint8 round, uint64 publishDeadline) = jobs.onClaim(auditId, slot, msg.sender);
        emit DeliveryClaimed(auditId, round, slot, msg.sender, publishDeadline);
    }

    /// @notice Publish a claimed job (anyone may: the worker always can), by the publish
    /// deadline: `tokens` are the P + N tokens of input ‖ output, u32 big-endian, whose tokens
    /// hash must be the worker's signed outputHash, with the sampling its receipt signed.
    /// Restarts the committee's commit window.
    function publishTranscript(uint256 auditId, bytes calldata tokens, uint32 temperatureMilli, uint32 topK, uint32 topPPpm, uint64 seed)
        external
    {
        jobs.onPublish(auditId);
        (bytes32 outputHash, bytes32 samplingKey, uint256 count) = jobs.transcriptOf(auditId);
        if (tokens.length != 4 * count) revert TranscriptMismatch("length");
        if (keccak256(abi.encode(temperatureMilli, topK, topPPpm, seed)) != samplingKey) revert TranscriptMismatch("sampling");
        if (Blake3.hash(bytes.concat(DOMAIN_TOKENS, tokens)) != outputHash) revert TranscriptMismatch("outputHash");
        emit TranscriptPublished(auditId, msg.sender, tokens, temperatureMilli, topK, topPPpm, seed);
    }

    /// @notice After a claim's publication window passed with nothing published, slash the
    /// worker (anyone may; the caller gets slashRewardBps): the round is decided as the worker's
    /// default while still committing, so no verdict exists yet that this could change.
    function slashUndelivered(uint256 auditId) external nonReentrant {
        address worker = jobs.onUndelivered(auditId);
        uint256 slashed = registry.slash(worker);
        jobs.depositCredit{value: slashed}(msg.sender, slashed * rewardBps / Params.BPS);
        emit DeliveryDefaulted(auditId, worker, slashed);
    }
}
