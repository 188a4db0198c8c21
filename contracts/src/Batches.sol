// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {AuditRequest, ReceiptClaim, ReceiptData, Receipts} from "./AuditTypes.sol";
import {BlsVrf} from "./BlsVrf.sol";
import {Jobs} from "./Jobs.sol";
import {MerkleLib} from "./MerkleLib.sol";
import {Domains, Params, ProtocolParams} from "./Params.sol";
import {Registry} from "./Registry.sol";

/// @notice Receipt batches and the audit draw (docs/protocol.md §12 "Messages, in order", steps
/// 1–3): a dispatcher posts the Merkle root of its receipts with the per-job fee, draws the batch
/// with its BLS-VRF over a later blockhash, and starts the audit of every job the draw selects
/// (anyone may request any other job's audit with the committee's fees). A start hands the
/// verified receipt to Jobs, which runs the audit; its committee is drawn there from a blockhash
/// after the start, so nobody knows a committee before its audit is paid for and started. A
/// missed draw or start slashes the dispatcher. The happy path (postBatch, drawAudit) is here,
/// apart from the audit state machine, so each contract stays under the code size limit.
contract Batches is ReentrancyGuard {
    /// @notice A batch as read (getBatch); stored in two slots and β.
    struct Batch {
        bytes32 root;
        address dispatcher;
        uint32 count;
        uint64 postedBlock;
        bytes32 beta; // VRF output, 0 until drawn
        uint64 drawnBlock;
        bool drawMissed;
    }

    /// @dev One slot for the dispatcher, the count and both blocks: a draw rewrites a slot the
    /// post already wrote (≈ 19k gas less per batch than a fresh one).
    struct Stored {
        bytes32 root;
        address dispatcher;
        uint16 count;
        uint40 postedBlock;
        uint40 drawnBlock;
        bytes32 beta;
    }

    Registry public immutable registry;
    Jobs public immutable jobs;
    uint256 private immutable jobFeeWei;
    uint256 private immutable requestFeeWei; // committeeSize × auditFeeWei
    uint256 private immutable maxBatchReceipts;
    uint256 private immutable drawDelay;
    uint256 private immutable drawWindow;
    uint256 private immutable startWindow;
    uint256 private immutable auditRateBps;
    uint256 private immutable slashRewardBps;
    uint256 private immutable keepBlocks; // auditHorizonBlocks (≥ batchByBlocks): how long an inactive node may still batch

    Stored[] private batches;
    mapping(uint256 => bool) private drawMissed;
    mapping(uint256 => mapping(uint256 => uint256)) private handledBits; // batch → index word → started, skipped or slashed

    event BatchPosted(uint256 indexed batchId, address indexed dispatcher, bytes32 root, uint32 count);
    event AuditDrawn(uint256 indexed batchId, bytes32 seed, bytes32 beta);
    event DispatcherSlashed(uint256 indexed batchId, address indexed dispatcher, uint256 amountWei, string reason);

    error NotActiveNode(address node);
    error BadBatch(string reason);
    error WrongFee(uint256 givenWei, uint256 expectedWei);
    error UnknownBatch(uint256 batchId);
    error AlreadyDrawn(uint256 batchId);
    error NotDrawn(uint256 batchId);
    error TooEarly(uint256 untilBlock);
    error TooLate(uint256 sinceBlock);
    error InvalidVrfProof();
    error IndexOutOfBatch(uint32 index, uint32 count);
    error AlreadyHandled(uint256 batchId, uint32 index);
    error NotAudited(uint256 batchId, uint32 index);
    error InvalidMerkleProof();
    error NotRegistry();
    error PrivateDrawRefused(string reason);

    constructor(Registry registry_, Jobs jobs_, ProtocolParams memory p) {
        if (keccak256(abi.encode(p)) != registry_.paramsHash()) revert Params.InvalidParams("not the Registry's parameters");
        registry = registry_;
        jobs = jobs_;
        jobFeeWei = p.jobFeeWei;
        requestFeeWei = uint256(p.committeeSize) * p.auditFeeWei;
        maxBatchReceipts = p.maxBatchReceipts;
        drawDelay = p.auditDrawDelayBlocks;
        drawWindow = p.drawWindowBlocks;
        startWindow = p.startWindowBlocks;
        auditRateBps = p.auditRateBps;
        slashRewardBps = p.slashRewardBps;
        keepBlocks = p.auditHorizonBlocks;
    }

    /// @dev Slashed stake arrives from the Registry.
    receive() external payable {
        if (msg.sender != address(registry)) revert NotRegistry();
    }

    // --- 1. batches --------------------------------------------------------------------------

    /// @notice Post the Merkle root over `count` receipt hashes (EIP-712 struct hashes) of jobs
    /// msg.sender dispatched, paying jobFeeWei per job into the audit fee pool (in Jobs). Open to
    /// an active node, and to a registered one that stopped being active (unbonded, or a penalty
    /// or slash left it below the minimum stake) at most auditHorizonBlocks ago (≥ batchByBlocks):
    /// a promise it gave while active falls due by then, so no penalty, unbond or settle ordering
    /// makes it unkeepable (Keepability, docs/protocol.md §12 "Batching promises"). What such a
    /// node batches only adds duties it answers for with the stake it has left.
    function postBatch(bytes32 root, uint32 count) external payable returns (uint256 batchId) {
        if (!registry.isActive(msg.sender)) {
            uint256 since = registry.inactiveSince(msg.sender);
            if (since == 0 || block.number > since + keepBlocks) revert NotActiveNode(msg.sender);
        }
        if (count == 0 || count > maxBatchReceipts) revert BadBatch("count outside [1, maxBatchReceipts]");
        uint256 fee = uint256(count) * jobFeeWei;
        if (msg.value != fee) revert WrongFee(msg.value, fee);
        jobs.fundPool{value: fee}();
        batchId = batches.length;
        batches.push(Stored(root, msg.sender, uint16(count), uint40(block.number), 0, bytes32(0)));
        emit BatchPosted(batchId, msg.sender, root, count);
    }

    // --- 2. the audit draw -----------------------------------------------------------------

    /// @notice The VRF input of a batch: keccak256(0x13 ‖ batch root ‖ blockhash(posted block +
    /// auditDrawDelayBlocks)). Known to nobody when the root is posted.
    function drawSeed(uint256 batchId) public view returns (bytes32) {
        Stored storage b = _batch(batchId);
        uint256 seedBlock = b.postedBlock + drawDelay;
        if (block.number <= seedBlock) revert TooEarly(seedBlock + 1);
        if (block.number > seedBlock + drawWindow) revert TooLate(seedBlock + drawWindow + 1);
        return keccak256(abi.encodePacked(Domains.AUDIT_SEED, b.root, blockhash(seedBlock)));
    }

    /// @notice Submit the dispatcher's BLS-VRF proof over the batch's seed (anyone may relay it).
    /// One draw per batch; its output decides every job of the batch.
    function drawAudit(uint256 batchId, uint256[2] calldata proof) external {
        Stored storage b = _batch(batchId);
        if (b.drawnBlock != 0) revert AlreadyDrawn(batchId);
        bytes32 seed = drawSeed(batchId);
        uint256[4] memory key = registry.getVrfPublicKey(b.dispatcher);
        if (!BlsVrf.verify(key, abi.encodePacked(seed), proof)) revert InvalidVrfProof();
        b.beta = BlsVrf.output(proof);
        b.drawnBlock = uint40(block.number);
        emit AuditDrawn(batchId, seed, b.beta);
    }

    /// @notice Whether job `index` of a drawn batch is audited: keccak256(0x17 ‖ β ‖ u32 index)
    /// mod 10000 < auditRateBps.
    function isAudited(uint256 batchId, uint32 index) public view returns (bool) {
        Stored storage b = _batch(batchId);
        if (b.drawnBlock == 0) revert NotDrawn(batchId);
        return uint256(keccak256(abi.encodePacked(Domains.AUDIT_PICK, b.beta, index))) % Params.BPS < auditRateBps;
    }

    /// @notice After the draw window, anyone may slash a dispatcher that never drew its batch.
    function slashMissedDraw(uint256 batchId) external nonReentrant {
        Stored storage b = _batch(batchId);
        uint256 closes = b.postedBlock + drawDelay + drawWindow;
        if (b.drawnBlock != 0) revert AlreadyDrawn(batchId);
        if (block.number <= closes) revert TooEarly(closes + 1);
        if (drawMissed[batchId]) revert AlreadyHandled(batchId, 0);
        drawMissed[batchId] = true;
        _slashDispatcher(batchId, b.dispatcher, "missed draw");
    }

    /// @notice After the start window, anyone may slash a dispatcher that did not start an audit
    /// its draw selected.
    function slashMissedStart(uint256 batchId, uint32 index) external nonReentrant {
        Stored storage b = _batch(batchId);
        if (!isAudited(batchId, index)) revert NotAudited(batchId, index);
        if (index >= b.count) revert IndexOutOfBatch(index, b.count);
        if (block.number <= b.drawnBlock + startWindow) revert TooEarly(b.drawnBlock + startWindow + 1);
        _markHandled(batchId, index);
        _slashDispatcher(batchId, b.dispatcher, "missed audit start");
    }

    // --- 3. starting an audit ----------------------------------------------------------------

    /// @notice Start the audit of job `index` of a drawn batch: the signed receipt and its
    /// Merkle proof into the batch. A job the draw did not select is audited on request when
    /// msg.value pays committeeSize × auditFeeWei. Jobs checks the receipt (signature, lengths,
    /// its worker's horizon, one audit per receipt) and opens the audit; its committee is drawn
    /// later (Jobs.drawRound). A selected job whose receipt another audit already took, or whose
    /// worker left before the horizon, is marked handled without an audit (auditId 0): its
    /// dispatcher did its duty.
    function startAudit(uint256 batchId, uint32 index, ReceiptData calldata receipt, bytes calldata signature, bytes32[] calldata siblings)
        external
        payable
        nonReentrant
        returns (uint256 auditId)
    {
        AuditRequest memory request = _admit(batchId, index, Receipts.hash(receipt), siblings, bytes32(0));
        return jobs.openAudit{value: msg.value}(request, receipt, signature);
    }

    /// @notice The dispatcher's start of a selected job whose first round it draws privately
    /// (docs/protocol.md §12 "Private draws"): a commitment keccak256(0x1d ‖ secret), the receipt's
    /// hash with its Merkle proof and its worker's signature, and what the draw needs of it
    /// (ReceiptClaim) — not the receipt, whose outputHash is the input hash of every member's job:
    /// it comes with the reveal (Jobs.revealRound), in the transaction that posts the members'
    /// receipts, so no member can learn its seat before its own receipt is on-chain. msg.value:
    /// the private-draw bond, committeeSize × auditFeeWei (what a request pays), returned at the reveal.
    function startPrivateAudit(
        uint256 batchId,
        uint32 index,
        bytes32 receiptHash,
        ReceiptClaim calldata claim,
        bytes calldata signature,
        bytes32[] calldata siblings,
        bytes32 drawCommitment
    ) external payable nonReentrant returns (uint256 auditId) {
        if (drawCommitment == bytes32(0)) revert PrivateDrawRefused("a private start commits to its draw");
        AuditRequest memory request = _admit(batchId, index, receiptHash, siblings, drawCommitment);
        ReceiptData memory claimed; // what the draw needs; the rest comes with the reveal
        (claimed.worker, claimed.modelId, claimed.auditableUntilBlock) = (claim.worker, claim.modelId, claim.auditableUntilBlock);
        return jobs.openAudit{value: msg.value}(request, claimed, signature);
    }

    /// @dev The checks every start makes before Jobs sees the receipt: a drawn batch, an index in
    /// it, in the start window, the right fee, the proof into the batch root, one start per leaf.
    function _admit(uint256 batchId, uint32 index, bytes32 receiptHash, bytes32[] calldata siblings, bytes32 drawCommitment)
        private
        returns (AuditRequest memory)
    {
        Stored storage b = _batch(batchId);
        if (b.drawnBlock == 0) revert NotDrawn(batchId);
        if (index >= b.count) revert IndexOutOfBatch(index, b.count);
        if (block.number > b.drawnBlock + startWindow) revert TooLate(b.drawnBlock + startWindow + 1);
        bool selected = isAudited(batchId, index);
        // Only the dispatcher, whose duty the draw is, may commit to drawing a selected job privately:
        // it is slashed if it never reveals (Jobs.lapse), so nobody else may make that promise for it.
        if (drawCommitment != bytes32(0) && (!selected || msg.sender != b.dispatcher)) revert PrivateDrawRefused("only the dispatcher, for a selected job");
        // The first half of the start window is the dispatcher's: a stranger copying its start from
        // the mempool cannot pre-empt it with a public draw. Later anyone may start it (liveness);
        // the dispatcher is slashed only after the whole window (slashMissedStart).
        uint256 ownHalf = b.drawnBlock + startWindow / 2;
        if (selected && msg.sender != b.dispatcher && block.number <= ownHalf) revert TooEarly(ownHalf + 1);
        // A request pays its committee; a private start deposits as much, returned at its reveal and
        // forfeited to the pool if it never comes: each refused private committee costs its dispatcher.
        uint256 fee = selected && drawCommitment == bytes32(0) ? 0 : requestFeeWei;
        if (msg.value != fee) revert WrongFee(msg.value, fee);
        if (!MerkleLib.isValidProof(MerkleLib.leafHash(abi.encodePacked(receiptHash)), index, b.count, siblings, b.root)) {
            revert InvalidMerkleProof();
        }
        _markHandled(batchId, index);
        return AuditRequest(uint64(batchId), index, b.dispatcher, b.postedBlock, selected, receiptHash, drawCommitment);
    }

    // --- views -----------------------------------------------------------------------------

    function hashReceipt(ReceiptData calldata r) external pure returns (bytes32) {
        return Receipts.hash(r);
    }

    function batchCount() external view returns (uint256) {
        return batches.length;
    }

    function getBatch(uint256 batchId) external view returns (Batch memory) {
        Stored storage b = _batch(batchId);
        return Batch(b.root, b.dispatcher, b.count, b.postedBlock, b.beta, b.drawnBlock, drawMissed[batchId]);
    }

    // --- internals -------------------------------------------------------------------------

    function _batch(uint256 batchId) private view returns (Stored storage) {
        if (batchId >= batches.length) revert UnknownBatch(batchId);
        return batches[batchId];
    }

    function _markHandled(uint256 batchId, uint32 index) private {
        uint256 bit = uint256(1) << (index & 255);
        uint256 word = handledBits[batchId][index >> 8];
        if (word & bit != 0) revert AlreadyHandled(batchId, index);
        handledBits[batchId][index >> 8] = word | bit;
    }

    function _slashDispatcher(uint256 batchId, address dispatcher, string memory reason) private {
        uint256 amount = registry.slash(dispatcher);
        emit DispatcherSlashed(batchId, dispatcher, amount, reason);
        jobs.depositCredit{value: amount}(msg.sender, amount * slashRewardBps / Params.BPS);
    }
}
