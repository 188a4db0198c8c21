// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {AuditCodes, AuditView, PartyView} from "./AuditTypes.sol";
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
/// slashed and the round is decided as its default. Part of Disputes (the contract both Jobs
/// and the Registry already let slash), so Jobs keeps its code size.
abstract contract Delivery is ReentrancyGuard {
    /// @dev One audit's publication state: the open (or last) claim window and its round.
    struct Availability {
        uint64 publishDeadline; // 0 = never claimed
        uint8 round;
        bool published;
    }

    bytes1 private constant DOMAIN_TOKENS = 0x16; // verillm.spec.hashing.DOMAIN_TOKENS

    Jobs private immutable deliveryJobs;
    Registry private immutable deliveryRegistry;
    uint256 private immutable commitWindow;
    uint256 private immutable rewardBps;

    mapping(uint256 => Availability) public availability;
    /// auditId → (round << 8 | slot) → the member that claimed that seat's job.
    mapping(uint256 => mapping(uint256 => address)) public claimants;

    event DeliveryClaimed(uint256 indexed auditId, uint8 round, uint8 slot, address indexed member, uint64 publishDeadline);
    /// @notice The job's transcript: P + N tokens, u32 big-endian each (input ‖ output), and
    /// the sampling the worker's receipt signed. A member's verification job is this input
    /// with the same sampling and one new token.
    event TranscriptPublished(
        uint256 indexed auditId, address indexed publisher, bytes tokens, uint32 temperatureMilli, uint32 topK, uint32 topPPpm, uint64 seed
    );
    event DeliveryDefaulted(uint256 indexed auditId, address indexed worker, uint256 slashedWei);

    error NotCommitteeMember(address caller);
    error JobDelivered(uint8 slot); // the member has posted its receipt: it had its job
    error AlreadyClaimed(uint8 slot);
    error AlreadyPublished(uint256 auditId);
    error NoClaim(uint256 auditId);
    error ClaimClosed(uint256 closedAt);
    error PublishClosed(uint256 closedAt);
    error PublishOpen(uint256 untilBlock);
    error TranscriptMismatch(string field);

    constructor(Jobs jobs_, Registry registry_, ProtocolParams memory p) {
        deliveryJobs = jobs_;
        deliveryRegistry = registry_;
        commitWindow = p.commitWindowBlocks;
        rewardBps = p.slashRewardBps;
    }

    /// @notice Member `slot` of the current round says its verification job never came. Only
    /// a drawn member without a posted receipt, in the commit window, before the transcript is
    /// published. The first claim of a round (or the first after an unanswered window)
    /// opens a publication window of commitWindowBlocks and moves the commit deadline to its
    /// end plus one commit window; later claims share it.
    function claimUndelivered(uint256 auditId, uint8 slot) external {
        (uint8 round, PartyView memory member) = _seat(auditId, slot);
        (, uint64 commitDeadline,,,,,) = deliveryJobs.getRound(auditId, round);
        if (member.node != msg.sender) revert NotCommitteeMember(msg.sender);
        if (member.root != bytes32(0)) revert JobDelivered(slot);
        if (block.number > commitDeadline) revert ClaimClosed(commitDeadline + 1);
        Availability storage av = availability[auditId];
        if (av.published) revert AlreadyPublished(auditId);
        uint256 key = (uint256(round) << 8) | slot;
        if (claimants[auditId][key] == msg.sender) revert AlreadyClaimed(slot);
        claimants[auditId][key] = msg.sender;
        if (av.publishDeadline == 0 || av.round != round || block.number > av.publishDeadline) {
            av.publishDeadline = uint64(block.number + commitWindow);
            av.round = round;
            deliveryJobs.onDelivery(auditId, uint64(av.publishDeadline + commitWindow));
        }
        emit DeliveryClaimed(auditId, round, slot, msg.sender, av.publishDeadline);
    }

    /// @notice Publish a claimed job (anyone may: the worker always can): `tokens` are the P + N
    /// tokens of input ‖ output, u32 big-endian, whose tokens hash must be the worker's signed
    /// outputHash, with the sampling its receipt signed. Restarts the committee's commit window.
    function publishTranscript(uint256 auditId, bytes calldata tokens, uint32 temperatureMilli, uint32 topK, uint32 topPPpm, uint64 seed)
        external
    {
        Availability storage av = availability[auditId];
        if (av.publishDeadline == 0) revert NoClaim(auditId);
        if (av.published) revert AlreadyPublished(auditId);
        if (block.number > av.publishDeadline) revert PublishClosed(av.publishDeadline + 1);
        (bytes32 outputHash, bytes32 samplingKey, uint256 count) = deliveryJobs.transcriptOf(auditId);
        if (tokens.length != 4 * count) revert TranscriptMismatch("length");
        if (keccak256(abi.encode(temperatureMilli, topK, topPPpm, seed)) != samplingKey) revert TranscriptMismatch("sampling");
        if (Blake3.hash(bytes.concat(DOMAIN_TOKENS, tokens)) != outputHash) revert TranscriptMismatch("outputHash");
        av.published = true;
        deliveryJobs.onDelivery(auditId, uint64(block.number + commitWindow));
        emit TranscriptPublished(auditId, msg.sender, tokens, temperatureMilli, topK, topPPpm, seed);
    }

    /// @notice After an unanswered publication window, slash the worker (anyone may; the caller
    /// gets slashRewardBps): member `slot` claimed and still has no receipt (it has none either
    /// if it was since redrawn: only seats without a receipt are). The round is decided as the
    /// worker's default while still committing: no verdict exists yet that this could change.
    function slashUndelivered(uint256 auditId, uint8 slot) external nonReentrant {
        Availability storage av = availability[auditId];
        if (av.publishDeadline == 0) revert NoClaim(auditId);
        if (av.published) revert AlreadyPublished(auditId);
        if (block.number <= av.publishDeadline) revert PublishOpen(av.publishDeadline + 1);
        (uint8 round, PartyView memory member) = _seat(auditId, slot);
        address claimant = claimants[auditId][(uint256(round) << 8) | slot];
        if (round != av.round || claimant == address(0)) revert NoClaim(auditId);
        if (member.node == claimant && member.root != bytes32(0)) revert JobDelivered(slot);
        address worker = deliveryJobs.recordFault(auditId, round, 0);
        deliveryJobs.onDelivery(auditId, 0);
        uint256 slashed = deliveryRegistry.slash(worker);
        deliveryJobs.depositCredit{value: slashed}(msg.sender, slashed * rewardBps / Params.BPS);
        emit DeliveryDefaulted(auditId, worker, slashed);
    }

    /// @dev The current round and member `slot` of it; the round must still be committing.
    function _seat(uint256 auditId, uint8 slot) private view returns (uint8 round, PartyView memory member) {
        AuditView memory a = deliveryJobs.getAudit(auditId);
        if (a.phase != AuditCodes.COMMITTING) revert Jobs.WrongPhase(a.phase);
        if (slot >= a.committeeSize) revert NotCommitteeMember(msg.sender);
        round = a.round;
        member = deliveryJobs.getParty(auditId, round, slot + 1);
    }
}
