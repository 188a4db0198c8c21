// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {AuditCodes, AuditView, PartyView, ReceiptData} from "./AuditTypes.sol";
import {BlsVrf} from "./BlsVrf.sol";
import {MerkleLib} from "./MerkleLib.sol";
import {Domains, Params, ProtocolParams} from "./Params.sol";
import {Registry} from "./Registry.sol";
import {Sortition} from "./Sortition.sol";

/// @notice Receipt batches, the audit draw, committees, openings, votes, verdicts and settlement.
/// The rules, windows and who is slashed when are in docs/protocol.md §12; the arithmetic is
/// mirrored by verillm/spec/audit.py and verillm/spec/settlement.py.
contract Jobs is EIP712, ReentrancyGuard {
    bytes32 public constant RECEIPT_TYPEHASH = keccak256(
        "Receipt(bytes32 jobHash,bytes32 modelId,bytes32 inputHash,bytes32 outputHash,"
        "uint32 temperatureMilli,uint32 topK,uint32 topPPpm,uint64 seed,"
        "uint32 maxNewTokens,bytes32 commitmentRoot,uint32 numPositions,uint32 inputTokens,uint32 outputTokens,address worker)"
    );

    struct Batch {
        bytes32 root;
        address dispatcher;
        uint32 count;
        uint64 postedBlock;
        bytes32 beta; // VRF output, 0 until drawn
        uint64 drawnBlock;
        bool drawMissed;
    }

    struct Member {
        address node;
        uint8 vote;
        bool posted;
        bool opened;
        bool slashed;
        bytes32 root;
        bytes32 openingHash;
    }

    struct Round {
        bytes32 seed; // the committee seed of this round
        bytes32 challengeSeed;
        bytes32 workerOpeningHash;
        uint64 commitDeadline;
        uint64 readyBlock; // when the last committee receipt arrived
        uint64 verdictBlock;
        uint64 escalationBlock;
        uint64 epoch; // whose weights the round's draws read
        uint8 attempt;
        uint8 receipts;
        uint8 opens;
        uint8 phase;
        bool workerOpened;
        Member[] members;
    }

    struct Audit {
        uint64 batchId;
        uint32 index;
        uint32 numPositions;
        uint32 outputTokens;
        uint32 inputTokens;
        uint8 round;
        uint8 verdict;
        uint8 fingerprintDims;
        uint16 layerCount;
        uint16 pendingContests;
        bool requested;
        bool workerSlashed;
        address worker;
        address dispatcher;
        address escalator;
        uint256 escalationBondWei;
        bytes32 modelId;
        bytes32 workerRoot;
        bytes32 workerOutputHash; // hash of input ‖ output: a member's verification job's input hash
        bytes32 samplingKey;
        address[] drawn; // every member ever drawn: excluded from later draws, unlocked at the end
    }

    Registry public immutable registry;
    address public immutable deployer;
    address public disputes;
    ProtocolParams public params;

    Batch[] private batches;
    uint256 public auditCount;
    mapping(uint256 => Audit) private audits;
    mapping(uint256 => mapping(uint256 => Round)) private rounds;
    mapping(uint256 => mapping(uint256 => uint256)) private handledBits; // batch → index word → started-or-slashed
    /// keccak256(receipt hash ‖ scope) → used. A worker's receipt enters at most one audit per
    /// dispatcher (scope = the batch's dispatcher), a member's one seat (scope = the audit id):
    /// nobody else holding a receipt can use it up.
    mapping(bytes32 => bool) public receiptUsed;
    mapping(address => uint256) public credits;
    uint256 public feePoolWei;

    event BatchPosted(uint256 indexed batchId, address indexed dispatcher, bytes32 root, uint32 count);
    event AuditDrawn(uint256 indexed batchId, bytes32 seed, bytes32 beta);
    event AuditStarted(uint256 indexed auditId, uint256 indexed batchId, uint32 index, address indexed worker, bytes32 receiptHash, uint32 outputTokens, bool requested);
    event CommitteeDrawn(uint256 indexed auditId, uint8 round, uint8 attempt, address[] members);
    event CommitteeReceiptPosted(uint256 indexed auditId, uint8 round, uint8 slot, address indexed member, bytes32 receiptHash, bytes32 commitmentRoot);
    event ChallengeDrawn(uint256 indexed auditId, uint8 round, bytes32 challengeSeed);
    event Opened(uint256 indexed auditId, uint8 round, uint8 slot, address indexed party, bytes32 openingHash, uint8 vote);
    event RoundDecided(uint256 indexed auditId, uint8 round, uint8 verdict, uint8 agree, uint8 disagree);
    event EscalationStarted(uint256 indexed auditId, address indexed escalator);
    event EscalationLapsed(uint256 indexed auditId);
    event AuditAbandoned(uint256 indexed auditId, uint8 round, string reason);
    event AuditSettled(uint256 indexed auditId, uint8 verdict);
    event PartySlashed(uint256 indexed auditId, address indexed node, uint256 amountWei, string reason);
    event DispatcherSlashed(uint256 indexed batchId, address indexed dispatcher, uint256 amountWei, string reason);
    event Credited(address indexed to, uint256 amountWei);
    event Claimed(address indexed to, uint256 amountWei);

    error NotDeployer();
    error NotDisputes();
    error NotActiveNode(address node);
    error BadBatch(string reason);
    error WrongFee(uint256 givenWei, uint256 expectedWei);
    error UnknownBatch(uint256 batchId);
    error UnknownAudit(uint256 auditId);
    error AlreadyDrawn(uint256 batchId);
    error NotDrawn(uint256 batchId);
    error TooEarly(uint256 untilBlock);
    error TooLate(uint256 sinceBlock);
    error InvalidVrfProof();
    error IndexOutOfBatch(uint32 index, uint32 count);
    error AlreadyHandled(uint256 batchId, uint32 index);
    error NotAudited(uint256 batchId, uint32 index);
    error InvalidMerkleProof();
    error InvalidSignature(address expected);
    error ReceiptReplayed(bytes32 receiptHash);
    error ReceiptMismatch(string field);
    error WrongPhase(uint8 phase);
    error NotParty(address caller);
    error AlreadyOpened();
    error BadOpening(uint256 length, uint256 expected);
    error WorkerNotOpened();
    error ContestsPending(uint16 count);
    error NothingToClaim();
    error TransferFailed();
    error DrawFailed();

    constructor(Registry registry_, ProtocolParams memory p) EIP712("VeriLLM", "1") {
        Params.validate(p);
        registry = registry_;
        deployer = msg.sender;
        params = p;
    }

    modifier onlyDisputes() {
        if (msg.sender != disputes) revert NotDisputes();
        _;
    }

    /// @notice Name the Disputes contract (once, by the deployer).
    function bindDisputes(address disputes_) external {
        if (msg.sender != deployer || disputes != address(0)) revert NotDeployer();
        disputes = disputes_;
    }

    receive() external payable {
        if (msg.sender != address(registry)) revert NotDisputes(); // slashed stake only
    }

    // --- 1. batches --------------------------------------------------------------------------

    /// @notice Post the Merkle root over `count` receipt hashes (EIP-712 struct hashes) of jobs
    /// msg.sender dispatched, paying jobFeeWei per job into the audit fee pool.
    function postBatch(bytes32 root, uint32 count) external payable returns (uint256 batchId) {
        if (!registry.isActive(msg.sender)) revert NotActiveNode(msg.sender);
        if (count == 0 || count > params.maxBatchReceipts) revert BadBatch("count outside [1, maxBatchReceipts]");
        uint256 fee = uint256(count) * params.jobFeeWei;
        if (msg.value != fee) revert WrongFee(msg.value, fee);
        feePoolWei += fee;
        batchId = batches.length;
        batches.push(Batch(root, msg.sender, count, uint64(block.number), bytes32(0), 0, false));
        emit BatchPosted(batchId, msg.sender, root, count);
    }

    // --- 2. the audit draw -----------------------------------------------------------------

    /// @notice The VRF input of a batch: keccak256(0x13 ‖ batch root ‖ blockhash(posted block +
    /// auditDrawDelayBlocks)). Known to nobody when the root is posted.
    function drawSeed(uint256 batchId) public view returns (bytes32) {
        Batch storage b = _batch(batchId);
        uint256 seedBlock = b.postedBlock + params.auditDrawDelayBlocks;
        if (block.number <= seedBlock) revert TooEarly(seedBlock + 1);
        if (block.number > seedBlock + params.drawWindowBlocks) revert TooLate(seedBlock + params.drawWindowBlocks + 1);
        return keccak256(abi.encodePacked(Domains.AUDIT_SEED, b.root, blockhash(seedBlock)));
    }

    /// @notice Submit the dispatcher's BLS-VRF proof over the batch's seed (anyone may relay it).
    /// One draw per batch; its output decides every job of the batch.
    function drawAudit(uint256 batchId, uint256[2] calldata proof) external {
        Batch storage b = _batch(batchId);
        if (b.drawnBlock != 0) revert AlreadyDrawn(batchId);
        bytes32 seed = drawSeed(batchId);
        uint256[4] memory key = registry.getVrfPublicKey(b.dispatcher);
        if (!BlsVrf.verify(key, abi.encodePacked(seed), proof)) revert InvalidVrfProof();
        b.beta = BlsVrf.output(proof);
        b.drawnBlock = uint64(block.number);
        emit AuditDrawn(batchId, seed, b.beta);
    }

    /// @notice Whether job `index` of a drawn batch is audited: keccak256(0x17 ‖ β ‖ u32 index)
    /// mod 10000 < auditRateBps.
    function isAudited(uint256 batchId, uint32 index) public view returns (bool) {
        Batch storage b = _batch(batchId);
        if (b.drawnBlock == 0) revert NotDrawn(batchId);
        return uint256(keccak256(abi.encodePacked(Domains.AUDIT_PICK, b.beta, index))) % Params.BPS < params.auditRateBps;
    }

    /// @notice After the draw window, anyone may slash a dispatcher that never drew its batch.
    function slashMissedDraw(uint256 batchId) external nonReentrant {
        Batch storage b = _batch(batchId);
        uint256 closes = b.postedBlock + params.auditDrawDelayBlocks + params.drawWindowBlocks;
        if (b.drawnBlock != 0) revert AlreadyDrawn(batchId);
        if (block.number <= closes) revert TooEarly(closes + 1);
        if (b.drawMissed) revert AlreadyHandled(batchId, 0);
        b.drawMissed = true;
        _slashDispatcher(batchId, b.dispatcher, "missed draw");
    }

    /// @notice After the start window, anyone may slash a dispatcher that did not start an audit
    /// its draw selected.
    function slashMissedStart(uint256 batchId, uint32 index) external nonReentrant {
        Batch storage b = _batch(batchId);
        if (!isAudited(batchId, index)) revert NotAudited(batchId, index);
        if (index >= b.count) revert IndexOutOfBatch(index, b.count);
        if (block.number <= b.drawnBlock + params.startWindowBlocks) revert TooEarly(b.drawnBlock + params.startWindowBlocks + 1);
        _markHandled(batchId, index);
        _slashDispatcher(batchId, b.dispatcher, "missed audit start");
    }

    // --- 3. starting an audit ----------------------------------------------------------------

    /// @notice Start the audit of job `index` of a drawn batch: the signed receipt (it signs P
    /// and N, numPositions = P + N − 1) and its Merkle proof into the batch. A job the draw did
    /// not select is audited on request when msg.value pays committeeSize × auditFeeWei. The
    /// committee is drawn from the VRF output with the weights of the batch's epoch, the worker
    /// and the dispatcher excluded; a pool too small for it ends the audit, nobody slashed.
    function startAudit(
        uint256 batchId,
        uint32 index,
        ReceiptData calldata receipt,
        bytes calldata signature,
        bytes32[] calldata siblings
    ) external payable nonReentrant returns (uint256 auditId) {
        Batch storage b = _batch(batchId);
        bool requested = _checkStartable(b, batchId, index);
        bytes32 receiptHash = hashReceipt(receipt);
        if (!MerkleLib.isValidProof(MerkleLib.leafHash(abi.encodePacked(receiptHash)), index, b.count, siblings, b.root)) {
            revert InvalidMerkleProof();
        }
        _checkSigner(receiptHash, signature, receipt.worker);
        _useReceipt(receiptHash, uint256(uint160(b.dispatcher)));
        _checkLengths(receipt);
        if (!registry.isRegistered(receipt.worker)) revert NotActiveNode(receipt.worker);
        _markHandled(batchId, index);
        auditId = _createAudit(batchId, index, b.dispatcher, receipt, requested);
        emit AuditStarted(auditId, batchId, index, receipt.worker, receiptHash, receipt.outputTokens, requested);
        Round storage r = rounds[auditId][0];
        r.seed = keccak256(abi.encodePacked(Domains.COMMITTEE, b.beta, index));
        r.epoch = uint64(b.postedBlock / registry.epochBlocks());
        if (!_drawMembers(auditId, 0, params.committeeSize)) _abandonRound(auditId, audits[auditId], "pool exhausted", false);
    }

    /// @dev The signed lengths: at least one output token, no more than allowed, and
    /// numPositions = P + N − 1.
    function _checkLengths(ReceiptData calldata receipt) private pure {
        if (receipt.outputTokens == 0 || receipt.outputTokens > receipt.maxNewTokens || receipt.inputTokens == 0) {
            revert ReceiptMismatch("outputTokens");
        }
        if (uint256(receipt.inputTokens) + receipt.outputTokens - 1 != receipt.numPositions) revert ReceiptMismatch("numPositions");
    }

    function _checkStartable(Batch storage b, uint256 batchId, uint32 index) private returns (bool requested) {
        if (b.drawnBlock == 0) revert NotDrawn(batchId);
        if (index >= b.count) revert IndexOutOfBatch(index, b.count);
        if (block.number > b.drawnBlock + params.startWindowBlocks) revert TooLate(b.drawnBlock + params.startWindowBlocks + 1);
        requested = !isAudited(batchId, index);
        uint256 fee = requested ? uint256(params.committeeSize) * params.auditFeeWei : 0;
        if (msg.value != fee) revert WrongFee(msg.value, fee);
        feePoolWei += fee;
    }

    function _createAudit(uint256 batchId, uint32 index, address dispatcher, ReceiptData calldata receipt, bool requested)
        private
        returns (uint256 auditId)
    {
        Registry.ModelConfig memory model = registry.getModelConfig(receipt.modelId);
        auditId = ++auditCount;
        Audit storage a = audits[auditId];
        a.batchId = uint64(batchId);
        a.index = index;
        a.numPositions = receipt.numPositions;
        a.outputTokens = receipt.outputTokens;
        a.inputTokens = receipt.inputTokens;
        a.workerOutputHash = receipt.outputHash;
        a.fingerprintDims = model.fingerprintDims;
        a.layerCount = uint16(model.committedLayers.length);
        a.requested = requested;
        a.worker = receipt.worker;
        a.dispatcher = dispatcher;
        a.modelId = receipt.modelId;
        a.workerRoot = receipt.commitmentRoot;
        a.samplingKey = _samplingKey(receipt);
        registry.lock(receipt.worker);
        registry.lock(dispatcher);
    }

    // --- 4. committee receipts ---------------------------------------------------------------

    /// @notice Post member `slot`'s signed receipt of its verification job (anyone may relay it:
    /// the member runs it as an ordinary job). It must be for the worker's model and sampling,
    /// one new token, over P + N positions, and its input must be the worker's input ‖ output:
    /// inputHash = the worker's outputHash (a receipt's outputHash hashes input ‖ output).
    function postCommitteeReceipt(uint256 auditId, uint8 slot, ReceiptData calldata receipt, bytes calldata signature) external {
        Audit storage a = _audit(auditId);
        Round storage r = rounds[auditId][a.round];
        if (r.phase != AuditCodes.COMMITTING) revert WrongPhase(r.phase);
        if (block.number > r.commitDeadline) revert TooLate(r.commitDeadline + 1);
        if (slot >= r.members.length) revert NotParty(receipt.worker);
        Member storage m = r.members[slot];
        if (m.posted) revert AlreadyOpened();
        if (receipt.worker != m.node) revert NotParty(receipt.worker);
        _checkVerificationReceipt(a, receipt);
        bytes32 receiptHash = hashReceipt(receipt);
        _checkSigner(receiptHash, signature, m.node);
        _useReceipt(receiptHash, auditId);
        m.posted = true;
        m.root = receipt.commitmentRoot;
        r.receipts += 1;
        emit CommitteeReceiptPosted(auditId, a.round, slot, m.node, receiptHash, receipt.commitmentRoot);
        if (r.receipts == r.members.length) {
            r.phase = AuditCodes.OPENING;
            r.readyBlock = uint64(block.number);
        }
    }

    function _checkVerificationReceipt(Audit storage a, ReceiptData calldata receipt) private view {
        if (receipt.modelId != a.modelId) revert ReceiptMismatch("modelId");
        if (_samplingKey(receipt) != a.samplingKey) revert ReceiptMismatch("sampling");
        if (receipt.maxNewTokens != 1 || receipt.outputTokens != 1) revert ReceiptMismatch("maxNewTokens");
        if (receipt.inputHash != a.workerOutputHash) revert ReceiptMismatch("inputHash");
        if (receipt.inputTokens != uint256(a.inputTokens) + a.outputTokens) revert ReceiptMismatch("inputTokens");
        if (receipt.numPositions != uint256(a.numPositions) + 1) revert ReceiptMismatch("numPositions");
    }

    /// @notice After the commit window, replace members whose receipt never came (nobody is
    /// slashed: a missing receipt cannot be pinned on the member rather than on whoever had to
    /// send it the job). After maxCommitteeRedraws redraws, or when the pool has nobody left,
    /// the audit is abandoned, nobody slashed (an unheard escalation: see _abandonRound).
    function replaceMissing(uint256 auditId) external nonReentrant {
        Audit storage a = _audit(auditId);
        Round storage r = rounds[auditId][a.round];
        if (r.phase != AuditCodes.COMMITTING) revert WrongPhase(r.phase);
        if (block.number <= r.commitDeadline) revert TooEarly(r.commitDeadline + 1);
        if (r.attempt >= params.maxCommitteeRedraws) {
            _abandonRound(auditId, a, "members missing", true);
            return;
        }
        r.attempt += 1;
        if (!_drawMembers(auditId, a.round, uint8(r.members.length - r.receipts))) _abandonRound(auditId, a, "pool exhausted", true);
    }

    /// @dev Draw `count` members into the round's empty (or not-yet-posted) slots; false (and
    /// nothing changed) when the round's epoch has too few candidates or is no longer readable.
    function _drawMembers(uint256 auditId, uint8 roundIndex, uint8 count) private returns (bool) {
        Audit storage a = audits[auditId];
        Round storage r = rounds[auditId][roundIndex];
        address[] memory excluded = new address[](a.drawn.length + 2);
        excluded[0] = a.worker;
        excluded[1] = a.dispatcher;
        for (uint256 i = 0; i < a.drawn.length; i++) {
            excluded[i + 2] = a.drawn[i];
        }
        address[] memory chosen;
        try registry.drawCommittee(a.modelId, r.seed, r.attempt, count, excluded, r.epoch) returns (address[] memory c) {
            chosen = c;
        } catch (bytes memory reason) {
            // Only a pool that is really too small (or an epoch no longer readable) ends the
            // round; anything else (out of gas on a starved call) reverts, so nobody can kill
            // an audit by starting it with too little gas.
            bytes4 code = reason.length >= 4 ? bytes4(reason) : bytes4(0);
            if (code != Sortition.NotEnoughCandidates.selector && code != Registry.EpochNotReadable.selector) revert DrawFailed();
            return false;
        }
        uint256 next;
        for (uint256 slot = 0; next < count; slot++) {
            if (slot == r.members.length) r.members.push();
            else if (r.members[slot].posted) continue;
            r.members[slot] = Member(chosen[next], AuditCodes.NO_VOTE, false, false, false, bytes32(0), bytes32(0));
            a.drawn.push(chosen[next]);
            registry.lock(chosen[next]);
            next++;
        }
        r.commitDeadline = uint64(block.number + params.commitWindowBlocks);
        r.phase = AuditCodes.COMMITTING;
        emit CommitteeDrawn(auditId, roundIndex, r.attempt, _memberNodes(r));
        return true;
    }

    /// @dev A round that cannot fill ends the audit, nobody slashed, every lock released. An
    /// escalation that cannot be heard does not reinstate the verdict it disputes (a colluding
    /// FAIL would slash the honest worker): the audit is abandoned, the job's fees stay in the
    /// pool. The bond is refunded, unless the escalator is the dispatcher and the round lapsed
    /// for missing receipts: it had to send the round's jobs (docs/protocol.md §13).
    function _abandonRound(uint256 auditId, Audit storage a, string memory reason, bool withheld) private {
        emit AuditAbandoned(auditId, a.round, reason);
        rounds[auditId][a.round].phase = AuditCodes.ABANDONED;
        if (a.round > 0) {
            uint256 bond = a.escalationBondWei;
            a.escalationBondWei = 0;
            if (withheld && a.escalator == a.dispatcher) feePoolWei += bond;
            else _credit(a.escalator, bond);
        }
        _unlockAll(a);
    }

    // --- 5. challenge, openings, votes -----------------------------------------------------

    /// @notice The round's challenge seed: keccak256(0x1a ‖ committee seed ‖ blockhash(ready
    /// block + auditDrawDelayBlocks)), stored on first use. Parties compute the challenged cells
    /// from it with verillm.spec.challenge.
    function drawChallenge(uint256 auditId) public returns (bytes32) {
        Audit storage a = _audit(auditId);
        Round storage r = rounds[auditId][a.round];
        if (r.challengeSeed != bytes32(0)) return r.challengeSeed;
        if (r.phase != AuditCodes.OPENING) revert WrongPhase(r.phase);
        uint256 seedBlock = r.readyBlock + params.auditDrawDelayBlocks;
        if (block.number <= seedBlock) revert TooEarly(seedBlock + 1);
        if (block.number > seedBlock + params.openWindowBlocks) revert TooLate(seedBlock + params.openWindowBlocks + 1);
        r.challengeSeed = keccak256(abi.encodePacked(Domains.CHALLENGE_SEED, r.seed, blockhash(seedBlock)));
        emit ChallengeDrawn(auditId, a.round, r.challengeSeed);
        return r.challengeSeed;
    }

    /// @notice The worker posts its opening: the encoded leaves at the challenged cells, sorted
    /// by (position, layer), without proofs (calldata; the contract keeps their keccak256).
    /// Proofs go on-chain only if someone contests (Disputes). Only in the OPENING phase and
    /// within the worker's window: a late opening cannot change a verdict.
    function openWorker(uint256 auditId, bytes calldata leaves) external {
        Audit storage a = _audit(auditId);
        if (msg.sender != a.worker) revert NotParty(msg.sender);
        Round storage r = rounds[auditId][a.round];
        if (r.phase != AuditCodes.OPENING) revert WrongPhase(r.phase);
        uint256 closes = r.readyBlock + params.auditDrawDelayBlocks + params.openWindowBlocks;
        if (block.number > closes) revert TooLate(closes + 1);
        drawChallenge(auditId);
        if (r.workerOpened) revert AlreadyOpened();
        _checkOpeningLength(a, leaves.length, 0);
        r.workerOpened = true;
        r.workerOpeningHash = keccak256(leaves);
        emit Opened(auditId, a.round, 0, msg.sender, r.workerOpeningHash, AuditCodes.NO_VOTE);
    }

    /// @notice A member posts its own opening and its vote on the worker (agree = within
    /// tolerance and every output token within margin), after the worker has opened.
    function openAndVote(uint256 auditId, uint8 slot, bytes calldata leaves, bool agree) external {
        Audit storage a = _audit(auditId);
        Round storage r = rounds[auditId][a.round];
        if (r.phase != AuditCodes.OPENING) revert WrongPhase(r.phase);
        if (slot >= r.members.length || r.members[slot].node != msg.sender) revert NotParty(msg.sender);
        if (!r.workerOpened) revert WorkerNotOpened();
        uint256 closes = r.readyBlock + params.auditDrawDelayBlocks + 2 * uint256(params.openWindowBlocks);
        if (block.number > closes) revert TooLate(closes + 1);
        Member storage m = r.members[slot];
        if (m.opened) revert AlreadyOpened();
        _checkOpeningLength(a, leaves.length, 1);
        m.opened = true;
        m.vote = agree ? AuditCodes.AGREE : AuditCodes.DISAGREE;
        m.openingHash = keccak256(leaves);
        r.opens += 1;
        emit Opened(auditId, a.round, slot + 1, msg.sender, m.openingHash, m.vote);
    }

    /// @notice Cells a party opens: k challenged positions × L layers plus the last layer at
    /// the N (worker) or N + 1 (member) token positions, k = min(N, challengePositions).
    function _checkOpeningLength(Audit storage a, uint256 length, uint256 extra) private view {
        uint256 k = a.outputTokens < params.challengePositions ? a.outputTokens : params.challengePositions;
        uint256 cells = k * (uint256(a.layerCount) - 1) + a.outputTokens + extra;
        uint256 expected = cells * (11 + 4 * uint256(a.fingerprintDims));
        if (length != expected) revert BadOpening(length, expected);
    }

    /// @notice Close the round once every member has voted, or its windows have passed: the
    /// worker's at ready + delay + openWindow, the members' one openWindow later.
    function finalize(uint256 auditId) external {
        Audit storage a = _audit(auditId);
        Round storage r = rounds[auditId][a.round];
        if (r.phase != AuditCodes.OPENING) revert WrongPhase(r.phase);
        uint256 workerCloses = r.readyBlock + params.auditDrawDelayBlocks + params.openWindowBlocks;
        uint256 membersClose = workerCloses + params.openWindowBlocks;
        if (!r.workerOpened && block.number <= workerCloses) revert TooEarly(workerCloses + 1);
        if (r.workerOpened && r.opens < r.members.length && block.number <= membersClose) revert TooEarly(membersClose + 1);
        r.phase = AuditCodes.DECIDED;
        r.verdictBlock = uint64(block.number);
        (uint8 agree, uint8 disagree) = _tally(r);
        emit RoundDecided(auditId, a.round, _verdictOf(a, r), agree, disagree);
    }

    // --- 6. settlement -----------------------------------------------------------------------

    /// @notice After the dispute window, with no contest pending: slash and pay (see
    /// docs/protocol.md §12, "Verdict and settlement"). Rewards from slashes go to the members on the
    /// verdict's side; fees come from the pool.
    function settle(uint256 auditId) external nonReentrant {
        Audit storage a = _audit(auditId);
        Round storage r = rounds[auditId][a.round];
        if (r.phase == AuditCodes.ESCALATING) {
            uint256 lapses = r.escalationBlock + params.auditDrawDelayBlocks + params.drawWindowBlocks;
            // Nobody drew the escalation committee in its window: the bond goes to the pool.
            if (block.number <= lapses) revert TooEarly(lapses + 1);
            _lapseEscalation(auditId, a);
            r = rounds[auditId][0];
        }
        if (r.phase != AuditCodes.DECIDED) revert WrongPhase(r.phase);
        if (block.number <= r.verdictBlock + params.disputeWindowBlocks) revert TooEarly(r.verdictBlock + params.disputeWindowBlocks + 1);
        if (a.pendingContests != 0) revert ContestsPending(a.pendingContests);
        uint8 verdict = _verdictOf(a, r);
        // Read before settling slashes anyone: the first round's majority as it was decided.
        uint8 firstMajority = _majorityOf(rounds[auditId][0]);
        a.verdict = verdict;
        r.phase = AuditCodes.SETTLED;
        _settleParties(auditId, a, verdict);
        _settleBond(a, verdict, firstMajority);
        _unlockAll(a);
        emit AuditSettled(auditId, verdict);
    }

    function _settleParties(uint256 auditId, Audit storage a, uint8 verdict) private {
        address[] memory winners = new address[](a.drawn.length);
        uint256 winnerCount;
        uint256 pot;
        for (uint256 ri = 0; ri <= a.round; ri++) {
            Round storage r = rounds[auditId][ri];
            for (uint256 i = 0; i < r.members.length; i++) {
                (bool slashIt, bool wins) = _judgeMember(r, r.members[i], verdict);
                if (slashIt) pot += _slashParty(auditId, r.members[i], "missed opening or minority vote");
                if (wins) winners[winnerCount++] = r.members[i].node;
            }
        }
        if ((verdict == AuditCodes.FAIL || verdict == AuditCodes.WORKER_DEFAULT) && !a.workerSlashed) {
            a.workerSlashed = true;
            uint256 amount = _slash(auditId, a.worker, "failed audit");
            pot += _rewardOf(amount);
            feePoolWei += amount - _rewardOf(amount);
        }
        for (uint256 i = 0; i < winnerCount; i++) {
            _payFromPool(winners[i], params.auditFeeWei);
        }
        if (verdict == AuditCodes.PASS) _payFromPool(a.worker, params.auditFeeWei);
        _splitPot(pot, winners, winnerCount);
    }

    /// @dev A member is slashed for a missed opening (the worker opened, it did not) or a vote
    /// against a majority verdict; it wins its fee when on the verdict's side, when it voted in
    /// a tie, or when the worker defaulted and it did its part.
    function _judgeMember(Round storage r, Member storage m, uint8 verdict) private view returns (bool slashIt, bool wins) {
        if (m.slashed || !m.posted) return (false, false);
        if (r.workerOpened && !m.opened) return (true, false);
        bool majority = verdict == AuditCodes.PASS || verdict == AuditCodes.FAIL;
        if (majority && m.vote != verdict) return (true, false);
        wins = majority || verdict == AuditCodes.TIE ? m.opened : true;
    }

    /// @dev A member's minority vote or missed opening is not a provable lie: it loses
    /// memberPenaltyBps of its stake, not slashFractionBps.
    function _slashParty(uint256 auditId, Member storage m, string memory reason) private returns (uint256 reward) {
        m.slashed = true;
        uint256 amount = registry.penalize(m.node, params.memberPenaltyBps);
        emit PartySlashed(auditId, m.node, amount, reason);
        reward = _rewardOf(amount);
        feePoolWei += amount - reward;
    }

    function _splitPot(uint256 pot, address[] memory winners, uint256 winnerCount) private {
        if (winnerCount == 0) {
            feePoolWei += pot;
            return;
        }
        uint256 share = pot / winnerCount;
        for (uint256 i = 0; i < winnerCount; i++) {
            _credit(winners[i], share);
        }
        feePoolWei += pot - share * winnerCount;
    }

    function _settleBond(Audit storage a, uint8 verdict, uint8 firstMajority) private {
        if (a.round == 0 || a.escalationBondWei == 0) return;
        uint256 bond = a.escalationBondWei;
        a.escalationBondWei = 0;
        // The escalator wins only when the larger committee decides the other way: a PASS
        // becomes a conviction (FAIL or default), a FAIL a PASS, a TIE anything decisive. A
        // worker that escalates its FAIL and then defaults is convicted again: bond kept.
        bool convicted = verdict == AuditCodes.FAIL || verdict == AuditCodes.WORKER_DEFAULT;
        bool overturned = firstMajority == AuditCodes.PASS ? convicted
            : firstMajority == AuditCodes.FAIL ? verdict == AuditCodes.PASS
            : verdict != AuditCodes.TIE;
        if (overturned) _credit(a.escalator, bond);
        else feePoolWei += bond;
    }

    // --- 7. escalation (through Disputes) --------------------------------------------------

    /// @notice Disputes forwards a bonded escalation of a decided first round.
    function startEscalation(uint256 auditId, address escalator) external payable onlyDisputes {
        Audit storage a = _audit(auditId);
        Round storage r0 = rounds[auditId][0];
        if (a.round != 0 || r0.phase != AuditCodes.DECIDED) revert WrongPhase(r0.phase);
        if (!r0.workerOpened || a.workerSlashed) revert WrongPhase(AuditCodes.DECIDED); // nothing to re-judge
        if (a.escalator != address(0)) revert AlreadyHandled(auditId, 1); // one escalation per audit
        if (block.number > r0.verdictBlock + params.disputeWindowBlocks) revert TooLate(r0.verdictBlock + params.disputeWindowBlocks + 1);
        if (msg.value != params.disputeBondWei) revert WrongFee(msg.value, params.disputeBondWei);
        a.round = 1;
        a.escalator = escalator;
        a.escalationBondWei = msg.value;
        Round storage r1 = rounds[auditId][1];
        r1.phase = AuditCodes.ESCALATING;
        r1.escalationBlock = uint64(block.number);
        emit EscalationStarted(auditId, escalator);
    }

    /// @notice Draw the escalation committee from a blockhash after the escalation: excluded are
    /// the worker and every member drawn so far.
    function drawEscalation(uint256 auditId) external {
        Audit storage a = _audit(auditId);
        Round storage r = rounds[auditId][a.round];
        if (r.phase != AuditCodes.ESCALATING) revert WrongPhase(r.phase);
        uint256 seedBlock = r.escalationBlock + params.auditDrawDelayBlocks;
        if (block.number <= seedBlock) revert TooEarly(seedBlock + 1);
        if (block.number > seedBlock + params.drawWindowBlocks) revert TooLate(seedBlock + params.drawWindowBlocks + 1);
        r.seed = keccak256(abi.encodePacked(Domains.ESCALATION, uint64(auditId), blockhash(seedBlock)));
        r.epoch = uint64(r.escalationBlock / registry.epochBlocks());
        if (!_drawMembers(auditId, a.round, params.escalationCommitteeSize)) _abandonRound(auditId, a, "pool exhausted", false);
    }

    function _lapseEscalation(uint256 auditId, Audit storage a) private {
        a.round = 0;
        feePoolWei += a.escalationBondWei;
        a.escalationBondWei = 0;
        emit EscalationLapsed(auditId);
    }

    // --- 8. hooks for Disputes -----------------------------------------------------------------

    /// @notice Record that party `slot` (0 = worker) of `round` lost a contest or an
    /// adjudication; returns its address for Disputes to slash. A party is slashed once per audit.
    function recordFault(uint256 auditId, uint8 roundIndex, uint8 slot) external onlyDisputes returns (address node) {
        Audit storage a = _audit(auditId);
        if (slot == 0) {
            if (a.workerSlashed) revert AlreadyHandled(auditId, slot);
            a.workerSlashed = true;
            return a.worker;
        }
        Member storage m = rounds[auditId][roundIndex].members[slot - 1];
        if (m.slashed) revert AlreadyHandled(auditId, slot);
        m.slashed = true;
        return m.node;
    }

    /// @notice Delivery (Disputes) moves the current round's commit deadline out to `until` (a
    /// claimed job's publication window, then a commit window), or with 0 decides the round as
    /// the worker's default: it never published the job a member claimed (docs/protocol.md §12).
    function onDelivery(uint256 auditId, uint64 until) external onlyDisputes {
        Audit storage a = _audit(auditId);
        Round storage r = rounds[auditId][a.round];
        if (r.phase != AuditCodes.COMMITTING) revert WrongPhase(r.phase);
        if (until == 0) {
            r.phase = AuditCodes.DECIDED;
            r.verdictBlock = uint64(block.number);
        } else if (until > r.commitDeadline) {
            r.commitDeadline = until;
        }
    }

    /// @notice What a published job must hash to: the worker's outputHash (input ‖ output), its
    /// sampling key and its token count P + N.
    function transcriptOf(uint256 auditId) external view returns (bytes32 outputHash, bytes32 samplingKey, uint256 tokens) {
        Audit storage a = _audit(auditId);
        return (a.workerOutputHash, a.samplingKey, uint256(a.inputTokens) + a.outputTokens);
    }

    function addPendingContest(uint256 auditId, int8 delta) external onlyDisputes {
        Audit storage a = _audit(auditId);
        a.pendingContests = uint16(int16(a.pendingContests) + delta);
    }

    /// @notice Disputes passes on slashed stake and bonds: `creditWei` to `to`, the rest to the pool.
    function depositCredit(address to, uint256 creditWei) external payable onlyDisputes {
        _credit(to, creditWei);
        feePoolWei += msg.value - creditWei;
    }

    // --- 9. credits ------------------------------------------------------------------------

    function claim() external nonReentrant {
        uint256 amount = credits[msg.sender];
        if (amount == 0) revert NothingToClaim();
        credits[msg.sender] = 0;
        emit Claimed(msg.sender, amount);
        (bool ok,) = msg.sender.call{value: amount}("");
        if (!ok) revert TransferFailed();
    }

    // --- views -----------------------------------------------------------------------------

    function hashReceipt(ReceiptData calldata r) public pure returns (bytes32) {
        // abi.encode of static values is their 32-byte words in order: two halves, concatenated,
        // are the EIP-712 encoding (one call with 15 values is too deep for the stack).
        bytes memory head = abi.encode(RECEIPT_TYPEHASH, r.jobHash, r.modelId, r.inputHash, r.outputHash, r.temperatureMilli, r.topK, r.topPPpm);
        bytes memory tail = abi.encode(r.seed, r.maxNewTokens, r.commitmentRoot, r.numPositions, r.inputTokens, r.outputTokens, r.worker);
        return keccak256(bytes.concat(head, tail));
    }

    function domainSeparator() external view returns (bytes32) {
        return _domainSeparatorV4();
    }

    function batchCount() external view returns (uint256) {
        return batches.length;
    }

    function getBatch(uint256 batchId) external view returns (Batch memory) {
        return _batch(batchId);
    }

    function getAudit(uint256 auditId) external view returns (AuditView memory v) {
        Audit storage a = _audit(auditId);
        Round storage r = rounds[auditId][a.round];
        return AuditView(a.worker, a.modelId, a.numPositions, a.outputTokens, a.round, r.phase, r.verdictBlock, r.challengeSeed, uint8(r.members.length));
    }

    function getAuditExtra(uint256 auditId)
        external
        view
        returns (uint64 batchId, uint32 index, address dispatcher, address escalator, uint8 verdict, bool workerSlashed, uint16 pendingContests, bool requested)
    {
        Audit storage a = _audit(auditId);
        return (a.batchId, a.index, a.dispatcher, a.escalator, a.verdict, a.workerSlashed, a.pendingContests, a.requested);
    }

    function getRound(uint256 auditId, uint8 roundIndex)
        external
        view
        returns (uint8 phase, uint64 commitDeadline, uint64 readyBlock, uint64 verdictBlock, bytes32 challengeSeed, bool workerOpened, address[] memory members)
    {
        Round storage r = rounds[auditId][roundIndex];
        return (r.phase, r.commitDeadline, r.readyBlock, r.verdictBlock, r.challengeSeed, r.workerOpened, _memberNodes(r));
    }

    function getParty(uint256 auditId, uint8 roundIndex, uint8 slot) external view returns (PartyView memory) {
        Audit storage a = _audit(auditId);
        Round storage r = rounds[auditId][roundIndex];
        if (slot == 0) return PartyView(a.worker, a.workerRoot, a.numPositions, r.workerOpeningHash, r.workerOpened, AuditCodes.NO_VOTE, a.workerSlashed);
        Member storage m = r.members[slot - 1];
        return PartyView(m.node, m.root, a.numPositions + 1, m.openingHash, m.opened, m.vote, m.slashed);
    }

    /// @notice The verdict the round's state gives now (final once settled).
    function currentVerdict(uint256 auditId) external view returns (uint8) {
        Audit storage a = _audit(auditId);
        return _verdictOf(a, rounds[auditId][a.round]);
    }

    /// @notice Settlement arithmetic, exposed for the spec's property tests.
    function computeSlashSplit(uint256 amountWei) external view returns (uint256 rewardWei, uint256 poolWei) {
        rewardWei = _rewardOf(amountWei);
        poolWei = amountWei - rewardWei;
    }

    // --- internals -------------------------------------------------------------------------

    function _batch(uint256 batchId) private view returns (Batch storage) {
        if (batchId >= batches.length) revert UnknownBatch(batchId);
        return batches[batchId];
    }

    function _audit(uint256 auditId) private view returns (Audit storage a) {
        a = audits[auditId];
        if (a.worker == address(0)) revert UnknownAudit(auditId);
    }

    function _markHandled(uint256 batchId, uint32 index) private {
        uint256 bit = uint256(1) << (index & 255);
        uint256 word = handledBits[batchId][index >> 8];
        if (word & bit != 0) revert AlreadyHandled(batchId, index);
        handledBits[batchId][index >> 8] = word | bit;
    }

    function _useReceipt(bytes32 receiptHash, uint256 scope) private {
        bytes32 key = keccak256(abi.encode(receiptHash, scope));
        if (receiptUsed[key]) revert ReceiptReplayed(receiptHash);
        receiptUsed[key] = true;
    }

    function _checkSigner(bytes32 receiptHash, bytes calldata signature, address expected) private view {
        (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecover(_hashTypedDataV4(receiptHash), signature);
        if (err != ECDSA.RecoverError.NoError || signer != expected) revert InvalidSignature(expected);
    }

    function _samplingKey(ReceiptData calldata r) private pure returns (bytes32) {
        return keccak256(abi.encode(r.temperatureMilli, r.topK, r.topPPpm, r.seed));
    }

    function _tally(Round storage r) private view returns (uint8 agree, uint8 disagree) {
        for (uint256 i = 0; i < r.members.length; i++) {
            Member storage m = r.members[i];
            if (!m.opened || m.slashed) continue;
            if (m.vote == AuditCodes.AGREE) agree++;
            else disagree++;
        }
    }

    function _verdictOf(Audit storage a, Round storage r) private view returns (uint8) {
        if (a.workerSlashed || !r.workerOpened) return AuditCodes.WORKER_DEFAULT;
        return _majorityOf(r);
    }

    function _majorityOf(Round storage r) private view returns (uint8) {
        (uint8 agree, uint8 disagree) = _tally(r);
        if (agree > disagree) return AuditCodes.PASS;
        if (disagree > agree) return AuditCodes.FAIL;
        return AuditCodes.TIE;
    }

    function _memberNodes(Round storage r) private view returns (address[] memory nodes) {
        nodes = new address[](r.members.length);
        for (uint256 i = 0; i < nodes.length; i++) {
            nodes[i] = r.members[i].node;
        }
    }

    function _rewardOf(uint256 amountWei) private view returns (uint256) {
        return amountWei * params.slashRewardBps / Params.BPS;
    }

    function _slash(uint256 auditId, address node, string memory reason) private returns (uint256 amount) {
        amount = registry.slash(node);
        emit PartySlashed(auditId, node, amount, reason);
    }

    function _slashDispatcher(uint256 batchId, address dispatcher, string memory reason) private {
        uint256 amount = registry.slash(dispatcher);
        emit DispatcherSlashed(batchId, dispatcher, amount, reason);
        _credit(msg.sender, _rewardOf(amount));
        feePoolWei += amount - _rewardOf(amount);
    }

    function _credit(address to, uint256 amountWei) private {
        if (amountWei == 0) return;
        credits[to] += amountWei;
        emit Credited(to, amountWei);
    }

    function _payFromPool(address to, uint256 amountWei) private {
        uint256 paid = amountWei < feePoolWei ? amountWei : feePoolWei;
        feePoolWei -= paid;
        _credit(to, paid);
    }

    function _unlockAll(Audit storage a) private {
        registry.unlock(a.worker);
        registry.unlock(a.dispatcher);
        for (uint256 i = 0; i < a.drawn.length; i++) {
            registry.unlock(a.drawn[i]);
        }
    }
}
