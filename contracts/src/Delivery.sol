// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {Blake3} from "./Blake3.sol";
import {Jobs} from "./Jobs.sol";
import {AuditView, Deadlines, Phase, RoundState} from "./AuditTypes.sol";
import {DeliveryParams, Domains, Params, ProtocolParams} from "./Params.sol";
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
/// Standing (issue 34): a claim carries deliveryClaimBondWei. A publication pays the publisher
/// its measured gas at deliveryGasPriceWei out of the round's bonds (the claim forced it), the rest back to the
/// claimants; a default (the claim was true) or a round whose every receipt came (nothing was
/// published) returns every bond. Delivery holds exactly the bonds of unresolved claims.
contract Delivery is ReentrancyGuard {
    bytes1 private constant DOMAIN_TOKENS = 0x16; // verillm.spec.hashing.DOMAIN_TOKENS
    /// Gas a publication costs outside what gasleft() sees: the base transaction with the event's
    /// and the bond list's share, one credit written in Jobs per payout (the publisher and each
    /// claimant), and the calldata at its nonzero-byte price (an upper bound: a zero byte costs 4).
    /// verillm.spec.delivery.compute_publication_cost mirrors it.
    uint256 public constant PUBLISH_BASE_GAS = 26_000;
    uint256 public constant PAYOUT_GAS = 40_000;
    uint256 public constant CALLDATA_GAS_PER_BYTE = 16;

    Jobs public immutable jobs;
    Registry public immutable registry;
    uint256 private immutable rewardBps;
    uint256 public immutable claimBondWei;
    uint256 public immutable gasPriceWei;
    uint8 private immutable committeeSize;
    /// audit → round → the claimants whose bonds are held (a claim's bond until it is resolved).
    mapping(uint256 => mapping(uint256 => address[])) private bonded;

    event DeliveryClaimed(uint256 indexed auditId, uint8 round, uint8 slot, address indexed member, uint64 publishDeadline);
    /// @notice The job's transcript: P + N tokens, u32 big-endian each (input ‖ output), and
    /// the sampling the worker's receipt signed. A member's verification job is this input
    /// with the same sampling and one new token.
    event TranscriptPublished(
        uint256 indexed auditId, address indexed publisher, bytes tokens, uint32 temperatureMilli, uint32 topK, uint32 topPPpm, uint64 seed
    );
    event DeliveryDefaulted(uint256 indexed auditId, address indexed worker, uint256 slashedWei);
    /// @notice A round's claim bonds resolved: `paidWei` to the publisher for the publication the
    /// claims forced (0 when nothing was published), `refundedWei` back to each claimant.
    event ClaimBondsResolved(uint256 indexed auditId, uint8 round, address publisher, uint256 paidWei, uint256 refundedWei);

    error TranscriptMismatch(string field);
    error NotRegistry();
    error WrongBond(uint256 givenWei, uint256 expectedWei);
    error ClaimsOpen(uint256 auditId, uint8 round);
    error NoBonds(uint256 auditId, uint8 round);

    constructor(Jobs jobs_, Registry registry_, ProtocolParams memory p, DeliveryParams memory d) {
        if (keccak256(abi.encode(p)) != registry_.paramsHash()) revert Params.InvalidParams("not the Registry's parameters");
        if (d.deliveryClaimBondWei == 0 || d.deliveryGasPriceWei == 0) revert Params.InvalidParams("delivery claim bond and gas price must be positive");
        jobs = jobs_;
        registry = registry_;
        rewardBps = p.slashRewardBps;
        claimBondWei = d.deliveryClaimBondWei;
        gasPriceWei = d.deliveryGasPriceWei;
        committeeSize = p.committeeSize;
    }

    /// @notice The defaulting worker's slashed stake, from the Registry only (passed on to Jobs).
    receive() external payable {
        if (msg.sender != address(registry)) revert NotRegistry();
    }

    /// @notice Member `slot` of the current round says its verification job never came (only
    /// that member, with no receipt posted, by the commit deadline, before the transcript is
    /// public), with deliveryClaimBondWei. The round's first claim opens its one publication
    /// window of commitWindowBlocks (Jobs.onClaim); later claims join it.
    function claimUndelivered(uint256 auditId, uint8 slot) external payable {
        if (msg.value != claimBondWei) revert WrongBond(msg.value, claimBondWei);
        (uint8 round, uint64 publishDeadline) = jobs.onClaim(auditId, slot, msg.sender);
        bonded[auditId][round].push(msg.sender);
        emit DeliveryClaimed(auditId, round, slot, msg.sender, publishDeadline);
    }

    /// @notice Publish a claimed job (anyone may: the worker always can), by the publish
    /// deadline: `tokens` are the P + N tokens of input ‖ output, u32 big-endian, whose tokens
    /// hash must be the worker's signed outputHash, with the sampling its receipt signed.
    /// Restarts the committee's commit window.
    /// The publisher is paid its cost out of the round's claim bonds: the gas measured here plus
    /// PUBLISH_BASE_GAS, PAYOUT_GAS per payout and the calldata at CALLDATA_GAS_PER_BYTE, at deliveryGasPriceWei (a
    /// price the preset names: tx.gasprice would let a proposer publishing itself inflate it, and
    /// is 0 in a gas estimate, whose payouts would then differ), capped at the bonds; the
    /// claimants share the rest.
    function publishTranscript(uint256 auditId, bytes calldata tokens, uint32 temperatureMilli, uint32 topK, uint32 topPPpm, uint64 seed)
        external
        nonReentrant
    {
        uint256 gasAtStart = gasleft();
        jobs.onPublish(auditId);
        (bytes32 outputHash, bytes32 samplingKey, uint256 count) = jobs.transcriptOf(auditId);
        if (tokens.length != 4 * count) revert TranscriptMismatch("length");
        if (keccak256(abi.encode(temperatureMilli, topK, topPPpm, seed)) != samplingKey) revert TranscriptMismatch("sampling");
        if (Blake3.hash(bytes.concat(DOMAIN_TOKENS, tokens)) != outputHash) revert TranscriptMismatch("outputHash");
        emit TranscriptPublished(auditId, msg.sender, tokens, temperatureMilli, topK, topPPpm, seed);
        uint256 gasUsed = gasAtStart - gasleft() + PUBLISH_BASE_GAS + CALLDATA_GAS_PER_BYTE * msg.data.length;
        _resolveBonds(auditId, _round(auditId), msg.sender, gasUsed);
    }

    /// @notice After a claim's publication window passed with nothing published, slash the
    /// worker (anyone may; the caller gets slashRewardBps): the round is decided as the worker's
    /// default while still committing, so no verdict exists yet that this could change.
    /// Every claimant of the round gets its bond back: its claim was true.
    function slashUndelivered(uint256 auditId) external nonReentrant {
        address worker = jobs.onUndelivered(auditId);
        uint256 slashed = registry.slash(worker);
        jobs.depositCredit{value: slashed}(msg.sender, slashed * rewardBps / Params.BPS);
        emit DeliveryDefaulted(auditId, worker, slashed);
        _resolveBonds(auditId, _round(auditId), address(0), 0);
    }

    /// @notice Return the bonds of a round that left COMMITTING with its claims neither answered by
    /// a publication nor defaulted (every seat's receipt came: the claim cost the worker nothing).
    /// Anyone may call.
    function releaseClaimBonds(uint256 auditId, uint8 round) external nonReentrant {
        RoundState memory s = jobs.getRoundState(auditId, round);
        if (s.phase == Phase.COMMITTING) revert ClaimsOpen(auditId, round);
        if (bonded[auditId][round].length == 0) revert NoBonds(auditId, round);
        _resolveBonds(auditId, round, address(0), 0);
    }

    /// @notice Who the private draw of audit `auditId`'s first round with `secret` seats (empty
    /// until its seed block is mined, or once the round no longer waits for its reveal): the
    /// dispatcher's own preview before it sends the members their jobs (call it on a node you
    /// trust). The draw `Jobs.revealRound` makes, in time or late: seed keccak256(0x1c ‖ u64 auditId
    /// ‖ u8 0 ‖ blockhash(drawAfter) ‖ secret), the weights of the epoch the round was entered in,
    /// the worker and the dispatcher excluded (nobody else is seated in an audit before its first
    /// draw). Here, not in Jobs, for Jobs' code size (EIP-170; issue 34), and not in a contract the
    /// happy path calls (its function table would cost their calls gas).
    function previewCommittee(uint256 auditId, bytes32 secret) external view returns (address[] memory) {
        RoundState memory s = jobs.getRoundState(auditId, 0);
        Deadlines memory d = s.deadlines;
        if (!s.privateDraw || block.number <= d.drawAfter) return new address[](0);
        (,, address dispatcher,,,,,) = jobs.getAuditExtra(auditId);
        AuditView memory a = jobs.getAudit(auditId);
        address[] memory excluded = new address[](2);
        (excluded[0], excluded[1]) = (a.worker, dispatcher);
        bytes32 seed = keccak256(abi.encodePacked(Domains.ROUND_SEED, uint64(auditId), uint8(0), blockhash(d.drawAfter), secret));
        return registry.drawCommittee(a.modelId, seed, 0, committeeSize, excluded, registry.epochOf(d.enteredBlock), d.drawAfter);
    }

    /// @notice The claimants of `round` whose bonds Delivery holds.
    function getClaimBonds(uint256 auditId, uint8 round) external view returns (address[] memory) {
        return bonded[auditId][round];
    }

    function _round(uint256 auditId) private view returns (uint8) {
        AuditView memory v = jobs.getAudit(auditId);
        return v.round;
    }

    /// @dev Pay `publisher` its cost, (`gasUsed` + PAYOUT_GAS per payout) × deliveryGasPriceWei,
    /// capped at the bonds, and return the rest to the claimants in equal shares (the indivisible
    /// wei to the publisher; with no publisher the cost is 0 and nothing is left over).
    function _resolveBonds(uint256 auditId, uint8 round, address publisher, uint256 gasUsed) private {
        address[] memory claimants = bonded[auditId][round];
        if (claimants.length == 0) return;
        delete bonded[auditId][round];
        uint256 costWei = publisher == address(0) ? 0 : (gasUsed + PAYOUT_GAS * (claimants.length + 1)) * gasPriceWei;
        uint256 held = claimants.length * claimBondWei;
        uint256 share = (held - (costWei < held ? costWei : held)) / claimants.length;
        uint256 paid = held - share * claimants.length;
        if (paid != 0) jobs.depositCredit{value: paid}(publisher, paid);
        for (uint256 i = 0; i < claimants.length; i++) {
            if (share != 0) jobs.depositCredit{value: share}(claimants[i], share);
        }
        emit ClaimBondsResolved(auditId, round, publisher, paid, share);
    }
}
