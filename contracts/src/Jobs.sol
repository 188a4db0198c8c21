// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {AuditCodes, AuditRequest, AuditView, Deadlines, PartyView, Phase, ReceiptData, Receipts, RoundState} from "./AuditTypes.sol";
import {Domains, Params, ProtocolParams} from "./Params.sol";
import {Registry} from "./Registry.sol";
import {Sortition} from "./Sortition.sol";

/// @notice The audit state machine (docs/protocol.md §12 "The audit state machine"): committees,
/// their receipts, the job-delivery claims, openings, votes, verdicts, escalation and settlement,
/// and the money (fee pool, credits). Each round is in one Phase; every external function names
/// the phase it runs in (`_at`) and the window it runs in (`_deadlines`, the round's deadlines
/// composed in one place), the way OpenZeppelin's Governor validates `state(id)`. Batches
/// (Batches.sol) open audits; Disputes adjudicates and relays delivery. The arithmetic is mirrored
/// by verillm/spec/audit.py and verillm/spec/settlement.py.
contract Jobs is ReentrancyGuard {
    struct Member {
        address node;
        uint8 vote;
        bool posted;
        bool opened;
        bool slashed;
        bool claimed; // claimed its verification job never came (Delivery)
        bool voteSealed; // sealed its vote (sealVote); openingHash holds the seal until it opens
        bytes32 root;
        bytes32 openingHash;
    }

    struct Round {
        bytes32 seed; // the committee seed: keccak256(0x1c ‖ u64 auditId ‖ u8 round ‖ blockhash(entered + delay))
        bytes32 challengeSeed;
        bytes32 workerOpeningHash;
        uint64 enteredBlock;
        uint64 commitDeadline;
        uint64 readyBlock; // when the last committee receipt arrived
        uint64 verdictBlock;
        uint64 epoch; // whose weights the round's draws read: the epoch it was entered in
        uint64 publishDeadline; // its one claim window (0: nobody claimed)
        uint8 attempt;
        uint8 receipts;
        uint8 opens;
        uint8 seals;
        Phase phase;
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
        bool published; // the transcript is public (Delivery): no claim after it, in any round
        uint64 auditableUntilBlock; // the receipt's horizon (a private start's claim, checked at the reveal)
        address worker;
        address dispatcher;
        address escalator;
        uint256 escalationBondWei;
        bytes32 modelId;
        bytes32 workerRoot; // this and the receipt's fields below: 0 until the receipt is on-chain (numPositions != 0)
        bytes32 workerOutputHash; // hash of input ‖ output: a member's verification job's input hash
        bytes32 samplingKey;
        bytes32 receiptHash;
        bytes32 drawCommitment; // keccak256(0x1d ‖ secret) while round 0 waits for its private draw (revealRound)
        address[] replaced; // members redrawn away (rare): with every round's seats, excluded from later draws and unlocked at the end
    }

    bytes32 private constant EIP712_DOMAIN_TYPEHASH = keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    /// @dev The EIP-712 domain receipts are signed in ("VeriLLM", "1", this chain, this contract),
    /// fixed at deployment (OpenZeppelin's EIP712 would add EIP-5267's eip712Domain() and a
    /// re-derivation after a chain fork: room this contract needs; a fork gets a fresh deployment).
    bytes32 private immutable domainSeparator_;
    Registry public immutable registry;
    address public immutable deployer;
    address public disputes;
    address public batches;
    address public delivery; // Delivery.sol: claims, publication, the worker's default (onClaim, onPublish, onUndelivered)
    ProtocolParams public params;
    /// @dev params.privateRevealGraceBlocks, kept where reading it costs no storage read: only a
    /// private draw's reveal and its lapse use it, and no other deadline moves (docs/gas.md).
    uint256 private immutable revealGraceBlocks;

    uint256 public auditCount;
    mapping(uint256 => Audit) private audits;
    mapping(uint256 => mapping(uint256 => Round)) private rounds;
    /// receipt hash → AuditCodes.RECEIPT_*: a worker's receipt enters one audit, whoever batches
    /// it (a second selected start is skipped, a second request refused); keccak256(member receipt
    /// hash ‖ audit id) → used: a member's receipt fills one seat.
    mapping(bytes32 => uint8) public receiptState;
    mapping(address => uint256) public credits;
    uint256 public feePoolWei;

    event AuditStarted(uint256 indexed auditId, uint256 indexed batchId, uint32 index, address indexed worker, bytes32 receiptHash, uint32 outputTokens, bool requested);
    event AuditSkipped(uint256 indexed batchId, uint32 index, bytes32 receiptHash);
    event CommitteeDrawn(uint256 indexed auditId, uint8 round, uint8 attempt, address[] members);
    event CommitteeReceiptPosted(uint256 indexed auditId, uint8 round, uint8 slot, address indexed member, bytes32 receiptHash, bytes32 commitmentRoot);
    event ChallengeDrawn(uint256 indexed auditId, uint8 round, bytes32 challengeSeed);
    event Opened(uint256 indexed auditId, uint8 round, uint8 slot, address indexed party, bytes32 openingHash, uint8 vote);
    event VoteSealed(uint256 indexed auditId, uint8 round, uint8 slot, address indexed member);
    event RoundDecided(uint256 indexed auditId, uint8 round, uint8 verdict, uint8 agree, uint8 disagree);
    event PrivateDrawMissed(uint256 indexed auditId, address indexed dispatcher);
    /// @notice The secret a private draw was made with: anyone can now re-derive its committee.
    event PrivateDrawRevealed(uint256 indexed auditId, bytes32 secret);
    event WorkerReceiptShown(uint256 indexed auditId, uint32 outputTokens);
    event EscalationStarted(uint256 indexed auditId, address indexed escalator);
    event EscalationLapsed(uint256 indexed auditId);
    event AuditAbandoned(uint256 indexed auditId, uint8 round, string reason);
    event AuditSettled(uint256 indexed auditId, uint8 verdict);
    event PartySlashed(uint256 indexed auditId, address indexed node, uint256 amountWei, string reason);
    event Credited(address indexed to, uint256 amountWei);
    event Claimed(address indexed to, uint256 amountWei);

    error NotDeployer();
    error NotProtocol();
    error NotActiveNode(address node);
    error UnknownAudit(uint256 auditId);
    error UnexpectedPhase(uint256 auditId, Phase actual, Phase expected);
    error TooEarly(uint256 untilBlock);
    error TooLate(uint256 sinceBlock);
    error InvalidSignature(address expected);
    error ReceiptReplayed(bytes32 receiptHash);
    error ReceiptExpired(uint256 closedAt);
    error ReceiptMismatch(string field);
    error NotParty(address caller);
    error AlreadyOpened();
    error SealMismatch(uint8 slot);
    error AlreadyHandled(uint256 auditId, uint8 what);
    error NothingToJudge(uint256 auditId);
    error AlreadyDrawn(uint256 auditId);
    error BadOpening(uint256 length, uint256 expected);
    error WorkerNotOpened();
    error ContestsPending(uint16 count);
    error ClaimStanding(uint256 publishDeadline);
    error AlreadyClaimed(uint8 slot);
    error AlreadyPublished(uint256 auditId);
    error JobDelivered(uint8 slot);
    error ClaimClosed(uint256 closedAt);
    error NoClaim(uint256 auditId);
    error WrongFee(uint256 givenWei, uint256 expectedWei);
    error NothingToClaim();
    error TransferFailed();
    error DrawFailed();
    error PrivateDraw(uint256 auditId);
    error InvalidSecret(uint256 auditId);
    error ReceiptNotOnChain(uint256 auditId);

    constructor(Registry registry_, ProtocolParams memory p) {
        domainSeparator_ = keccak256(abi.encode(EIP712_DOMAIN_TYPEHASH, keccak256("VeriLLM"), keccak256("1"), block.chainid, address(this)));
        if (keccak256(abi.encode(p)) != registry_.paramsHash()) revert Params.InvalidParams("not the Registry's parameters");
        registry = registry_;
        deployer = msg.sender;
        params = p;
        revealGraceBlocks = p.privateRevealGraceBlocks;
    }

    modifier onlyDisputes() {
        if (msg.sender != disputes) revert NotProtocol();
        _;
    }

    modifier onlyDelivery() {
        if (msg.sender != delivery) revert NotProtocol();
        _;
    }

    /// @notice Name the Disputes, Batches and Delivery contracts (once, by the deployer).
    function bindProtocol(address disputes_, address batches_, address delivery_) external {
        if (msg.sender != deployer || disputes != address(0)) revert NotDeployer();
        disputes = disputes_;
        batches = batches_;
        delivery = delivery_;
    }

    receive() external payable {
        if (msg.sender != address(registry)) revert NotProtocol(); // slashed stake only
    }

    /// @notice Add to the audit fee pool (Batches forwards every batch's job fees here).
    function fundPool() external payable {
        feePoolWei += msg.value;
    }

    // --- 1. opening an audit (from Batches) ---------------------------------------------------

    /// @notice Batches hands over a batched, proven receipt. The worker's signature, the signed
    /// lengths (numPositions = P + N − 1, P + N ≤ maxTranscriptTokens) and the receipt's state
    /// are checked here; the audit starts DRAWING: its committee is drawn from a blockhash after
    /// this block (drawRound), with the weights of this epoch. A selected job whose receipt
    /// another audit already owns, or whose worker left before the horizon, is skipped (id 0).
    /// A private start (q.drawCommitment ≠ 0, Batches.startPrivateAudit) hands over only what its
    /// draw needs — worker, model, horizon; every other field 0 — and shows the receipt with its
    /// reveal (revealRound): the receipt names the members' jobs (its outputHash is their input hash).
    function openAudit(AuditRequest calldata q, ReceiptData calldata receipt, bytes calldata signature)
        external
        payable
        returns (uint256 auditId)
    {
        if (msg.sender != batches) revert NotProtocol();
        _checkSigner(q.receiptHash, signature, receipt.worker);
        if (_isSkipped(q, receipt)) {
            emit AuditSkipped(q.batchId, q.index, q.receiptHash);
            _credit(q.dispatcher, msg.value); // a private start's bond back: nothing to reveal
            return 0;
        }
        receiptState[q.receiptHash] = AuditCodes.RECEIPT_AUDITED;
        auditId = _createAudit(q, receipt);
        // A request's fee joins the pool; a private start's bond is held apart (the pool's payments
        // cannot spend it) until its reveal pays it back or a missed reveal forfeits it to the pool.
        if (q.drawCommitment == bytes32(0)) {
            feePoolWei += msg.value;
            _acceptReceipt(audits[auditId], receipt);
        }
        emit AuditStarted(auditId, q.batchId, q.index, receipt.worker, q.receiptHash, receipt.outputTokens, !q.selected);
        _enterRound(auditId, 0);
    }

    /// @dev The signed lengths: at least one output token, no more than allowed, numPositions =
    /// P + N − 1, and P + N within the bound whose publication fits a block (Delivery).
    function _checkLengths(ReceiptData calldata receipt) private view {
        if (receipt.outputTokens == 0 || receipt.outputTokens > receipt.maxNewTokens || receipt.inputTokens == 0) {
            revert ReceiptMismatch("outputTokens");
        }
        uint256 tokens = uint256(receipt.inputTokens) + receipt.outputTokens;
        if (tokens > params.maxTranscriptTokens) revert ReceiptMismatch("transcript too long");
        if (tokens - 1 != receipt.numPositions) revert ReceiptMismatch("numPositions");
    }

    /// @dev A selected start is skipped (its dispatcher did its duty) when the receipt already
    /// has its audit or is expired: past the horizon it carries (auditableUntilBlock: the worker's
    /// duties for the job end there, whoever holds the receipt), or its worker left more than
    /// auditHorizonBlocks before the batch (the earlier of the two closes it). A request is
    /// refused then, and for a receipt whose requested audit lapsed.
    function _isSkipped(AuditRequest calldata q, ReceiptData calldata receipt) private view returns (bool) {
        (bool registered, uint64 left) = registry.leaveOf(receipt.worker);
        uint256 closedAt = uint256(left) + params.auditHorizonBlocks + 1; // the first batch block of a leaver that is too late
        bool expired = !registered || (left != 0 && q.postedBlock >= closedAt);
        if (block.number > receipt.auditableUntilBlock) (expired, closedAt) = (true, uint256(receipt.auditableUntilBlock) + 1);
        uint8 state = receiptState[q.receiptHash];
        bool taken = state == AuditCodes.RECEIPT_AUDITED || (!q.selected && state == AuditCodes.RECEIPT_LAPSED);
        if (!expired && !taken) return false;
        // A private start's expiry rests on its claim, unchecked until the reveal a skipped start
        // never has: it skips only a receipt proven taken, and is refused as a request is for an
        // expired one (start it with startAudit, whose skip reads the receipt): else a false claim
        // skipped a selected audit for free.
        if (q.selected && (q.drawCommitment == bytes32(0) || taken)) return true;
        if (!registered) revert NotActiveNode(receipt.worker);
        if (expired) revert ReceiptExpired(closedAt);
        revert ReceiptReplayed(q.receiptHash);
    }

    function _createAudit(AuditRequest calldata q, ReceiptData calldata claim) private returns (uint256 auditId) {
        auditId = ++auditCount;
        Audit storage a = audits[auditId];
        a.batchId = q.batchId;
        a.index = q.index;
        a.requested = !q.selected;
        a.auditableUntilBlock = claim.auditableUntilBlock;
        a.worker = claim.worker;
        a.dispatcher = q.dispatcher;
        a.modelId = claim.modelId;
        a.receiptHash = q.receiptHash;
        if (q.drawCommitment != bytes32(0)) a.drawCommitment = q.drawCommitment;
        registry.lock(claim.worker);
        registry.lock(q.dispatcher);
    }

    /// @dev The worker's receipt, checked (the batched one, signed, and what its start claimed:
    /// a private start shows it only at the reveal) and kept: what the rounds check members'
    /// receipts, openings and claims against.
    function _acceptReceipt(Audit storage a, ReceiptData calldata receipt) private {
        if (Receipts.hash(receipt) != a.receiptHash) revert ReceiptMismatch("not the started receipt");
        if (receipt.worker != a.worker || receipt.modelId != a.modelId || receipt.auditableUntilBlock != a.auditableUntilBlock) {
            revert ReceiptMismatch("not what the start claimed");
        }
        _checkLengths(receipt);
        Registry.ModelConfig memory model = registry.getModelConfig(receipt.modelId);
        a.numPositions = receipt.numPositions;
        a.outputTokens = receipt.outputTokens;
        a.inputTokens = receipt.inputTokens;
        a.workerOutputHash = receipt.outputHash;
        a.fingerprintDims = model.fingerprintDims;
        a.layerCount = uint16(model.committedLayers.length);
        a.workerRoot = receipt.commitmentRoot;
        a.samplingKey = _samplingKey(receipt);
    }

    /// @dev A private start's receipt, shown at the reveal or, after a missed reveal, by whoever holds it.
    function _showReceipt(uint256 auditId, Audit storage a, ReceiptData calldata receipt) private {
        _acceptReceipt(a, receipt);
        emit WorkerReceiptShown(auditId, receipt.outputTokens);
    }

    /// @dev A round starts DRAWING at this block, reading this epoch's weights.
    function _enterRound(uint256 auditId, uint8 roundIndex) private {
        Round storage r = rounds[auditId][roundIndex];
        r.phase = Phase.DRAWING;
        r.enteredBlock = uint64(block.number);
        r.epoch = uint64(registry.currentEpoch());
    }

    // --- 2. the committee draw ------------------------------------------------------------------

    /// @notice Draw the current round's committee (anyone may), in (entered + delay, entered +
    /// delay + draw]: seed keccak256(0x1c ‖ u64 auditId ‖ u8 round ‖ blockhash(entered + delay)),
    /// weights of the round's epoch, excluded the worker, the dispatcher, every member drawn
    /// before in the audit and every node that unbonded by the seed block. Its size: committeeSize
    /// in round 0, escalationCommitteeSize after. Too small a pool abandons the audit.
    function drawRound(uint256 auditId) external nonReentrant {
        (Audit storage a, Round storage r) = _at(auditId, Phase.DRAWING);
        if (a.drawCommitment != bytes32(0)) revert PrivateDraw(auditId);
        if (a.numPositions == 0) revert ReceiptNotOnChain(auditId);
        _drawRound(auditId, a, r, "");
    }

    /// @notice After a missed private draw (lapse), anyone holding the worker's receipt shows it
    /// (the client, the worker, the dispatcher back up), in the public draw's window: the audit goes
    /// on. Nobody showing it ends the round as a missed draw (its dispatcher slashed once, at the lapse).
    function supplyReceipt(uint256 auditId, ReceiptData calldata receipt) external {
        (Audit storage a, Round storage r) = _at(auditId, Phase.DRAWING);
        if (a.drawCommitment != bytes32(0)) revert PrivateDraw(auditId);
        if (a.numPositions != 0) revert AlreadyHandled(auditId, 0);
        // Before the window's last block: a draw must still fit after it (else its lapse would
        // slash the dispatcher a second time for a draw nobody could make).
        uint256 drawBy = _deadlines(r).drawBy;
        if (block.number >= drawBy) revert TooLate(drawBy);
        _showReceipt(auditId, a, receipt);
    }

    /// @notice The dispatcher's private draw of round 0 (docs/protocol.md §12 "Private draws"), in
    /// the same window, or late by revealBy at memberPenaltyBps of its stake: it reveals the
    /// secret it committed to at the start (before the seed block's hash existed, so it could not
    /// choose), the committee is drawn from
    /// keccak256(0x1c ‖ u64 auditId ‖ u8 0 ‖ blockhash(entered + delay) ‖ secret), and the receipts
    /// it collected from the members — who ran their jobs not knowing they were audits — are
    /// posted in the same transaction. A member learns its seat only once its receipt is on-chain.
    /// Seats without a receipt go on as after a public draw (a commit window from now).
    function revealRound(
        uint256 auditId,
        bytes32 secret,
        ReceiptData calldata workerReceipt,
        uint8[] calldata slots,
        ReceiptData[] calldata receipts,
        bytes[] calldata signatures
    ) external nonReentrant {
        (Audit storage a, Round storage r) = _at(auditId, Phase.DRAWING);
        if (msg.sender != a.dispatcher) revert NotParty(msg.sender);
        if (a.drawCommitment == bytes32(0) || keccak256(abi.encodePacked(Domains.DRAW_SECRET, secret)) != a.drawCommitment) revert InvalidSecret(auditId);
        if (slots.length != receipts.length || slots.length != signatures.length) revert ReceiptMismatch("a slot and signature per receipt");
        a.drawCommitment = bytes32(0);
        emit PrivateDrawRevealed(auditId, secret);
        _credit(a.dispatcher, _privateDrawBond()); // the bond of its start, back
        _showReceipt(auditId, a, workerReceipt);
        if (!_drawRound(auditId, a, r, abi.encodePacked(secret))) return;
        for (uint256 i = 0; i < slots.length; i++) {
            _postReceipt(auditId, a, r, slots[i], receipts[i], signatures[i]);
        }
    }

    /// @dev Draw the round in its window from its seed (`secret`: empty for a public draw); false
    /// when the pool was too small and the round was abandoned. A private draw may be revealed
    /// until revealBy: late, it is still the same draw (its seed was fixed by the secret committed
    /// before the seed block), so a late reveal re-rolls nothing and costs memberPenaltyBps, not the
    /// stake (docs/protocol.md §12 "Private draws"); only a reveal withheld past revealBy is re-rolled
    /// (lapse: the public fallback, the full slash).
    function _drawRound(uint256 auditId, Audit storage a, Round storage r, bytes memory secret) private returns (bool) {
        Deadlines memory d = _deadlines(r);
        _window(d.drawAfter, secret.length == 0 ? d.drawBy : d.drawBy + revealGraceBlocks); // a private draw: until revealBy
        r.seed = keccak256(abi.encodePacked(Domains.ROUND_SEED, uint64(auditId), a.round, blockhash(d.drawAfter), secret));
        uint8 size = a.round == 0 ? params.committeeSize : params.escalationCommitteeSize;
        bool drawn = _drawMembers(auditId, a, r, size, d.drawAfter);
        if (!drawn) _abandonRound(auditId, a, r, "pool exhausted", false);
        // After the draw: the penalty moves no seat of it.
        if (block.number > d.drawBy) feePoolWei += _penalize(auditId, a.dispatcher, "late private draw");
        return drawn;
    }

    /// @notice After a round's draw window passed undrawn (a private draw's: its reveal grace too;
    /// anyone may call): an escalation round
    /// LAPSES (bond to the pool; the audit settles its first round); a first round is ABANDONED,
    /// and when the batch's draw selected the job, its dispatcher — whose duty the draw was — is
    /// slashed (the caller rewarded). A requested job whose round lapsed may still be audited by a
    /// selected start, never requested again.
    function lapse(uint256 auditId) external nonReentrant {
        (Audit storage a, Round storage r) = _at(auditId, Phase.DRAWING);
        Deadlines memory d = _deadlines(r);
        // A private draw is still revealable (late, at a penalty) until revealBy = drawBy + grace: no re-roll before.
        uint256 by = a.drawCommitment != bytes32(0) ? d.drawBy + revealGraceBlocks : d.drawBy;
        if (block.number <= by) revert TooEarly(by + 1);
        if (a.drawCommitment != bytes32(0)) {
            _fallBackToPublicDraw(auditId, a, r);
            return;
        }
        // A decider nobody drew (round 2) is abandoned below like an escalation that cannot be
        // heard: neither of the two contradicting rounds decides alone.
        if (a.round == 1) {
            r.phase = Phase.LAPSED;
            a.round = 0;
            feePoolWei += a.escalationBondWei;
            a.escalationBondWei = 0;
            emit EscalationLapsed(auditId);
            return;
        }
        if (a.round == 2) {
            // (the decider: nobody slashed, the bond back)
        } else if (a.requested) {
            receiptState[a.receiptHash] = AuditCodes.RECEIPT_LAPSED;
        } else if (a.numPositions != 0) {
            // (Receipt unknown: a missed reveal nobody followed with the receipt; slashed once, at its lapse.)
            uint256 amount = _slash(auditId, a.dispatcher, "missed committee draw");
            _credit(msg.sender, _rewardOf(amount));
            feePoolWei += amount - _rewardOf(amount);
        }
        _abandonRound(auditId, a, r, "committee never drawn", false);
    }

    /// @dev A private draw its dispatcher never revealed: the dispatcher is slashed (the caller
    /// rewarded), its start's bond stays in the pool, and the round is drawn publicly instead, in a
    /// draw window from now, with the weights of the epoch it was entered in (the timeline counts
    /// this fallback: privateFallback), once anyone holding the worker's receipt shows it
    /// (supplyReceipt): a dispatcher cannot void its worker's audit by keeping its secret.
    function _fallBackToPublicDraw(uint256 auditId, Audit storage a, Round storage r) private {
        a.drawCommitment = bytes32(0);
        r.enteredBlock = uint64(block.number);
        emit PrivateDrawMissed(auditId, a.dispatcher);
        uint256 amount = _slash(auditId, a.dispatcher, "missed private draw");
        _credit(msg.sender, _rewardOf(amount));
        feePoolWei += amount - _rewardOf(amount) + _privateDrawBond(); // the start's bond, forfeited
    }

    /// @dev What a private start deposits (Batches: committeeSize × auditFeeWei, a request's fee).
    function _privateDrawBond() private view returns (uint256) {
        return uint256(params.committeeSize) * params.auditFeeWei;
    }

    /// @dev Draw `count` members into the round's empty (or not-yet-posted) slots; false (and
    /// nothing changed) when the round's epoch has too few candidates or is no longer readable.
    function _drawMembers(uint256 auditId, Audit storage a, Round storage r, uint8 count, uint256 seedBlock) private returns (bool) {
        address[] memory excluded = _everyParty(auditId, a);
        address[] memory chosen;
        try registry.drawCommittee(a.modelId, r.seed, r.attempt, count, excluded, r.epoch, seedBlock) returns (address[] memory c) {
            chosen = c;
        } catch (bytes memory reason) {
            // Only a pool that is really too small (or an epoch no longer readable: a redraw
            // called later than the timeline allows) ends the round; anything else (out of gas on
            // a starved call) reverts, so nobody can kill an audit by calling with too little gas.
            bytes4 code = reason.length >= 4 ? bytes4(reason) : bytes4(0);
            if (code != Sortition.NotEnoughCandidates.selector && code != Registry.EpochNotReadable.selector) revert DrawFailed();
            return false;
        }
        uint256 next;
        for (uint256 slot = 0; next < count; slot++) {
            if (slot == r.members.length) r.members.push();
            else if (r.members[slot].posted) continue;
            else a.replaced.push(r.members[slot].node); // still excluded and locked until the end
            r.members[slot] = Member(chosen[next], AuditCodes.NO_VOTE, false, false, false, false, false, bytes32(0), bytes32(0));
            registry.lock(chosen[next]);
            next++;
        }
        r.commitDeadline = uint64(block.number + params.commitWindowBlocks);
        r.phase = Phase.COMMITTING;
        emit CommitteeDrawn(auditId, a.round, r.attempt, _memberNodes(r));
        return true;
    }

    /// @dev A round that cannot fill ends the audit, nobody slashed, every lock released. An
    /// escalation that cannot be heard does not reinstate the verdict it disputes (a colluding
    /// FAIL would slash the honest worker): the audit is abandoned, the job's fees stay in the
    /// pool. The bond is refunded, unless the escalator is the dispatcher and the round lapsed
    /// for missing receipts: it had to send the round's jobs (docs/protocol.md §13).
    function _abandonRound(uint256 auditId, Audit storage a, Round storage r, string memory reason, bool withheld) private {
        emit AuditAbandoned(auditId, a.round, reason);
        r.phase = Phase.ABANDONED;
        if (a.round > 0) {
            uint256 bond = a.escalationBondWei;
            a.escalationBondWei = 0;
            if (withheld && a.escalator == a.dispatcher) feePoolWei += bond;
            else _credit(a.escalator, bond);
        }
        _unlockAll(auditId, a);
    }

    // --- 3. committee receipts and job delivery ------------------------------------------------

    /// @notice Post member `slot`'s signed receipt of its verification job (anyone may relay it:
    /// the member runs it as an ordinary job), by the commit deadline. It must be for the worker's
    /// model and sampling, one new token, over P + N positions, and its input must be the
    /// worker's input ‖ output: inputHash = the worker's outputHash.
    function postCommitteeReceipt(uint256 auditId, uint8 slot, ReceiptData calldata receipt, bytes calldata signature) external {
        (Audit storage a, Round storage r) = _at(auditId, Phase.COMMITTING);
        _postReceipt(auditId, a, r, slot, receipt, signature);
    }

    function _postReceipt(uint256 auditId, Audit storage a, Round storage r, uint8 slot, ReceiptData calldata receipt, bytes calldata signature) private {
        if (r.phase != Phase.COMMITTING) revert UnexpectedPhase(auditId, r.phase, Phase.COMMITTING);
        if (block.number > r.commitDeadline) revert TooLate(r.commitDeadline + 1);
        if (slot >= r.members.length) revert NotParty(receipt.worker);
        Member storage m = r.members[slot];
        if (m.posted) revert AlreadyOpened();
        if (receipt.worker != m.node) revert NotParty(receipt.worker);
        _checkVerificationReceipt(a, receipt);
        bytes32 receiptHash = Receipts.hash(receipt);
        _checkSigner(receiptHash, signature, m.node);
        // A member's receipt fills one seat of this audit (its input is this audit's transcript).
        bytes32 seat = keccak256(abi.encode(receiptHash, auditId));
        if (receiptState[seat] != AuditCodes.RECEIPT_FREE) revert ReceiptReplayed(receiptHash);
        receiptState[seat] = AuditCodes.RECEIPT_AUDITED;
        m.posted = true;
        m.root = receipt.commitmentRoot;
        r.receipts += 1;
        emit CommitteeReceiptPosted(auditId, a.round, slot, m.node, receiptHash, receipt.commitmentRoot);
        if (r.receipts == r.members.length) {
            r.phase = Phase.OPENING;
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

    /// @notice After the commit deadline, replace members whose receipt never came (nobody is
    /// slashed: a missing receipt cannot be pinned on the member rather than on whoever had to
    /// send it the job). After maxCommitteeRedraws redraws, or when the pool has nobody left,
    /// the audit is abandoned, nobody slashed. Refused while a claimed job stands unpublished:
    /// that round ends only by the worker's default (Delivery.slashUndelivered).
    function replaceMissing(uint256 auditId) external nonReentrant {
        (Audit storage a, Round storage r) = _at(auditId, Phase.COMMITTING);
        if (block.number <= r.commitDeadline) revert TooEarly(r.commitDeadline + 1);
        if (r.publishDeadline != 0 && !a.published) revert ClaimStanding(r.publishDeadline);
        if (r.attempt >= params.maxCommitteeRedraws) {
            _abandonRound(auditId, a, r, "members missing", true);
            return;
        }
        r.attempt += 1;
        uint8 missing = uint8(r.members.length - r.receipts);
        if (!_drawMembers(auditId, a, r, missing, _deadlines(r).drawAfter)) _abandonRound(auditId, a, r, "pool exhausted", true);
    }

    /// @notice Delivery relays member `slot`'s claim that its job never came: only a
    /// drawn member of the current round without a posted receipt, by the commit deadline, before
    /// the transcript is public. The round's first claim opens its one publication window (publish
    /// deadline = now + commit; the commit deadline moves to at least its end + commit); later
    /// claims join it, and after it only the worker's default (or a publication) ends the round.
    function onClaim(uint256 auditId, uint8 slot, address claimant) external onlyDelivery returns (uint8 roundIndex, uint64 publishDeadline) {
        (Audit storage a, Round storage r) = _at(auditId, Phase.COMMITTING);
        if (block.number > r.commitDeadline) revert ClaimClosed(r.commitDeadline + 1);
        if (a.published) revert AlreadyPublished(auditId);
        if (slot >= r.members.length || r.members[slot].node != claimant) revert NotParty(claimant);
        Member storage m = r.members[slot];
        if (m.posted) revert JobDelivered(slot);
        if (m.claimed) revert AlreadyClaimed(slot);
        if (r.publishDeadline == 0) {
            r.publishDeadline = uint64(block.number + params.commitWindowBlocks);
            _extendCommit(r, r.publishDeadline + params.commitWindowBlocks);
        } else if (block.number > r.publishDeadline) {
            revert ClaimClosed(r.publishDeadline + 1);
        }
        m.claimed = true;
        return (a.round, r.publishDeadline);
    }

    /// @notice Delivery relays the transcript's publication (checked there against the receipt):
    /// by the publish deadline of a claim; every member now has its job, and a commit window.
    function onPublish(uint256 auditId) external onlyDelivery {
        (Audit storage a, Round storage r) = _at(auditId, Phase.COMMITTING);
        if (r.publishDeadline == 0) revert NoClaim(auditId);
        if (a.published) revert AlreadyPublished(auditId);
        if (block.number > r.publishDeadline) revert TooLate(r.publishDeadline + 1);
        a.published = true;
        _extendCommit(r, block.number + params.commitWindowBlocks);
    }

    /// @notice Delivery relays the worker's default: a claim's publication window passed with
    /// nothing published. The round is decided as WORKER_DEFAULT; returns the worker to slash.
    function onUndelivered(uint256 auditId) external onlyDelivery returns (address worker) {
        (Audit storage a, Round storage r) = _at(auditId, Phase.COMMITTING);
        if (r.publishDeadline == 0 || a.published) revert NoClaim(auditId);
        if (block.number <= r.publishDeadline) revert TooEarly(r.publishDeadline + 1);
        a.workerSlashed = true;
        _decide(auditId, a, r);
        return a.worker;
    }

    function _extendCommit(Round storage r, uint256 until) private {
        if (until > r.commitDeadline) r.commitDeadline = uint64(until);
    }

    // --- 4. challenge, openings, votes -----------------------------------------------------

    /// @notice The round's challenge seed: keccak256(0x1a ‖ committee seed ‖ blockhash(ready
    /// block + auditDrawDelayBlocks)), drawn once in (ready + delay, ready + delay + open].
    /// Parties compute the challenged cells from it with verillm.spec.challenge.
    function drawChallenge(uint256 auditId) external returns (bytes32) {
        (Audit storage a, Round storage r) = _at(auditId, Phase.OPENING);
        if (r.challengeSeed != bytes32(0)) revert AlreadyDrawn(auditId);
        return _drawChallenge(auditId, a, r);
    }

    function _drawChallenge(uint256 auditId, Audit storage a, Round storage r) private returns (bytes32) {
        if (r.challengeSeed != bytes32(0)) return r.challengeSeed;
        Deadlines memory d = _deadlines(r);
        _window(d.challengeAfter, d.workerOpenBy);
        r.challengeSeed = keccak256(abi.encodePacked(Domains.CHALLENGE_SEED, r.seed, blockhash(d.challengeAfter)));
        emit ChallengeDrawn(auditId, a.round, r.challengeSeed);
        return r.challengeSeed;
    }

    /// @notice The worker posts its opening: the encoded leaves at the challenged cells, sorted
    /// by (position, layer), without proofs (calldata; the contract keeps their keccak256), by
    /// ready + delay + open. Proofs go on-chain only if someone contests (Disputes).
    function openWorker(uint256 auditId, bytes calldata leaves) external {
        (Audit storage a, Round storage r) = _at(auditId, Phase.OPENING);
        if (msg.sender != a.worker) revert NotParty(msg.sender);
        _drawChallenge(auditId, a, r); // the window: (ready + delay, ready + delay + open]
        if (r.workerOpened) revert AlreadyOpened();
        Deadlines memory d = _deadlines(r);
        if (block.number > d.workerOpenBy) revert TooLate(d.workerOpenBy + 1);
        _checkOpeningLength(a, leaves.length, 0);
        r.workerOpened = true;
        r.workerOpeningHash = keccak256(leaves);
        emit Opened(auditId, a.round, 0, msg.sender, r.workerOpeningHash, AuditCodes.NO_VOTE);
    }

    /// @notice A member seals its opening and its vote on the worker, after the worker opened, by
    /// ready + delay + 2·open: seal = keccak256(0x1e ‖ u64 auditId ‖ u8 round ‖ u8 slot ‖ u8 vote ‖
    /// keccak256(leaves) ‖ salt) (verillm.spec.audit.compute_vote_seal). Nobody sees a vote or an
    /// opening before every member has sealed its own or the seal window has closed: no copying.
    function sealVote(uint256 auditId, uint8 slot, bytes32 seal) external {
        (Audit storage a, Round storage r) = _at(auditId, Phase.OPENING);
        Member storage m = _seat(r, slot);
        if (!r.workerOpened) revert WorkerNotOpened();
        Deadlines memory d = _deadlines(r);
        if (block.number > d.membersSealBy) revert TooLate(d.membersSealBy + 1);
        if (m.voteSealed) revert AlreadyOpened();
        m.voteSealed = true;
        m.openingHash = seal;
        r.seals += 1;
        emit VoteSealed(auditId, a.round, slot + 1, msg.sender);
    }

    /// @notice A member opens what it sealed: its leaves and its vote (agree = within tolerance and
    /// every output token within margin), once every member has sealed or the seal window has
    /// closed, by ready + delay + 3·open. A seal never opened counts as a missed opening.
    function openAndVote(uint256 auditId, uint8 slot, bytes calldata leaves, bool agree, bytes32 salt) external {
        (Audit storage a, Round storage r) = _at(auditId, Phase.OPENING);
        Member storage m = _seat(r, slot);
        if (m.opened) revert AlreadyOpened();
        Deadlines memory d = _deadlines(r);
        if (r.seals < r.members.length && block.number <= d.membersSealBy) revert TooEarly(d.membersSealBy + 1);
        if (block.number > d.membersOpenBy) revert TooLate(d.membersOpenBy + 1);
        _checkOpeningLength(a, leaves.length, 1);
        uint8 vote = agree ? AuditCodes.AGREE : AuditCodes.DISAGREE;
        bytes32 openingHash = keccak256(leaves);
        // A member that never sealed holds openingHash 0, which no preimage matches.
        if (keccak256(abi.encodePacked(Domains.VOTE_SEAL, uint64(auditId), a.round, slot, vote, openingHash, salt)) != m.openingHash) {
            revert SealMismatch(slot);
        }
        m.opened = true;
        m.vote = vote;
        m.openingHash = openingHash;
        r.opens += 1;
        emit Opened(auditId, a.round, slot + 1, msg.sender, openingHash, vote);
    }

    function _seat(Round storage r, uint8 slot) private view returns (Member storage m) {
        if (slot >= r.members.length || r.members[slot].node != msg.sender) revert NotParty(msg.sender);
        return r.members[slot];
    }

    /// @notice Cells a party opens: k challenged positions × L layers plus the last layer at
    /// the N (worker) or N + 1 (member) token positions, k = min(N, challengePositions).
    function _checkOpeningLength(Audit storage a, uint256 length, uint256 extra) private view {
        uint256 k = a.outputTokens < params.challengePositions ? a.outputTokens : params.challengePositions;
        uint256 cells = k * (uint256(a.layerCount) - 1) + a.outputTokens + extra;
        uint256 expected = cells * (11 + 4 * uint256(a.fingerprintDims));
        if (length != expected) revert BadOpening(length, expected);
    }

    /// @notice Close the round once every member has opened its vote, or every seal is opened and
    /// the seal window has passed, or its windows have passed: the worker's at ready + delay + open,
    /// the members' two open windows later.
    function finalize(uint256 auditId) external {
        (Audit storage a, Round storage r) = _at(auditId, Phase.OPENING);
        Deadlines memory d = _deadlines(r);
        if (!r.workerOpened && block.number <= d.workerOpenBy) revert TooEarly(d.workerOpenBy + 1);
        if (r.workerOpened && r.opens < r.members.length && block.number <= d.membersOpenBy) revert TooEarly(d.membersOpenBy + 1);
        _decide(auditId, a, r);
    }

    function _decide(uint256 auditId, Audit storage a, Round storage r) private {
        r.phase = Phase.DECIDED;
        r.verdictBlock = uint64(block.number);
        (uint8 agree, uint8 disagree) = _tally(r);
        emit RoundDecided(auditId, a.round, _verdictOf(a, r), agree, disagree);
    }

    // --- 5. settlement -----------------------------------------------------------------------

    /// @notice After the dispute window, with no contest pending: slash and pay (see
    /// docs/protocol.md §12, "Verdict and settlement"). Rewards from slashes go to the members on the
    /// verdict's side; fees come from the pool.
    function settle(uint256 auditId) external nonReentrant {
        (Audit storage a, Round storage r) = _at(auditId, Phase.DECIDED);
        Deadlines memory d = _deadlines(r);
        if (block.number <= d.disputeBy) revert TooEarly(d.disputeBy + 1);
        if (a.pendingContests != 0) revert ContestsPending(a.pendingContests);
        uint8 own = _verdictOf(a, r);
        // Read before settling slashes anyone: the first round's majority as it was decided.
        uint8 firstMajority = _majorityOf(rounds[auditId][0]);
        // An appeal that decides the opposite of round 0's majority (PASS against FAIL) decides
        // nothing alone: a decider round (2) is drawn, and the verdict two rounds agree on is
        // final (docs/protocol.md §12 "Proportionality").
        if (a.round == 1 && own + firstMajority == AuditCodes.PASS + AuditCodes.FAIL) { // PASS against FAIL, either way
            a.round = 2;
            _enterRound(auditId, 2); // (seen as round 1's RoundDecided without an AuditSettled, then round 2's CommitteeDrawn)
            return;
        }
        // A decider's TIE: no two rounds agree; round 0's majority stands, a FAIL at the penalty.
        uint8 verdict = a.round == 2 && own == AuditCodes.TIE ? firstMajority : own;
        a.verdict = verdict;
        r.phase = Phase.SETTLED;
        // A FAIL takes the stake only when round 0's majority and the last round both fail the
        // worker (unappealed; the appeal agreeing; the decider agreeing after the appeal passed
        // it). Any other FAIL takes the penalty: one over a round-0 PASS or TIE (an honest round 0
        // outweighs later captured rounds), or round 0's left standing by a decider's TIE.
        _settleParties(auditId, a, verdict, verdict == AuditCodes.FAIL && !(own == AuditCodes.FAIL && firstMajority == AuditCodes.FAIL));
        _settleBond(a, verdict, firstMajority);
        _unlockAll(auditId, a);
        emit AuditSettled(auditId, verdict);
    }

    function _settleParties(uint256 auditId, Audit storage a, uint8 verdict, bool bareFail) private {
        address[] memory winners = new address[](_everyParty(auditId, a).length);
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
            // A FAIL round 0 and the last round do not both give, no evidence the contract checks
            // (docs/protocol.md §12 "Proportionality"): the penalty, not the slash.
            uint256 amount = bareFail
                ? _penalize(auditId, a.worker, "overturned")
                : _slash(auditId, a.worker, "failed audit");
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
        uint256 amount = _penalize(auditId, m.node, reason);
        reward = _rewardOf(amount);
        feePoolWei += amount - reward;
    }

    function _penalize(uint256 auditId, address node, string memory reason) private returns (uint256 amount) {
        amount = registry.penalize(node, params.memberPenaltyBps);
        emit PartySlashed(auditId, node, amount, reason);
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

    // --- 6. escalation (through Disputes) --------------------------------------------------

    /// @notice Disputes forwards a bonded escalation of a decided first round, by its dispute
    /// deadline: round 1 starts DRAWING (its committee is drawn like round 0's, larger and fresh).
    function startEscalation(uint256 auditId, address escalator) external payable onlyDisputes {
        (Audit storage a, Round storage r0) = _at(auditId, Phase.DECIDED);
        if (a.round != 0 || a.escalator != address(0)) revert AlreadyHandled(auditId, 1); // one escalation per audit
        if (!r0.workerOpened || a.workerSlashed) revert NothingToJudge(auditId);
        Deadlines memory d = _deadlines(r0);
        if (block.number > d.disputeBy) revert TooLate(d.disputeBy + 1);
        if (msg.value != params.disputeBondWei) revert WrongFee(msg.value, params.disputeBondWei);
        a.round = 1;
        a.escalator = escalator;
        a.escalationBondWei = msg.value;
        _enterRound(auditId, 1);
        emit EscalationStarted(auditId, escalator);
    }

    // --- 7. hooks for Disputes -----------------------------------------------------------------

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

    /// @notice Disputes, Batches and Delivery pass on slashed stake and bonds: `creditWei` to
    /// `to`, the rest to the pool.
    function depositCredit(address to, uint256 creditWei) external payable {
        if (msg.sender != disputes && msg.sender != batches && msg.sender != delivery) revert NotProtocol();
        _credit(to, creditWei);
        feePoolWei += msg.value - creditWei;
    }

    /// @notice Disputes pays out a bond it held in the pool: a member's answered contest, once the
    /// member is proven a liar (to the challenger) or can no longer be (to the member): Disputes.releaseBond.
    function creditFromPool(address to, uint256 amountWei) external onlyDisputes {
        feePoolWei -= amountWei;
        _credit(to, amountWei);
    }

    // --- 8. credits ------------------------------------------------------------------------

    function claim() external nonReentrant {
        uint256 amount = credits[msg.sender];
        if (amount == 0) revert NothingToClaim();
        credits[msg.sender] = 0;
        emit Claimed(msg.sender, amount);
        (bool ok,) = msg.sender.call{value: amount}("");
        if (!ok) revert TransferFailed();
    }

    // --- views -----------------------------------------------------------------------------

    function domainSeparator() external view returns (bytes32) {
        return domainSeparator_;
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
        returns (Phase phase, uint64 commitDeadline, uint64 readyBlock, uint64 verdictBlock, bytes32 challengeSeed, bool workerOpened, address[] memory members)
    {
        Round storage r = rounds[auditId][roundIndex];
        return (r.phase, r.commitDeadline, r.readyBlock, r.verdictBlock, r.challengeSeed, r.workerOpened, _memberNodes(r));
    }

    /// @notice A round's phase and every deadline it has (verillm.spec.audit.compute_round_deadlines).
    function getDeadlines(uint256 auditId, uint8 roundIndex) external view returns (Phase phase, Deadlines memory d) {
        Round storage r = rounds[auditId][roundIndex];
        return (r.phase, _deadlines(r));
    }

    /// @notice Round `roundIndex` as the state machine sees it: its phase, counts, delivery state
    /// and deadlines (verillm.spec.audit.compute_due_steps reads it to find the call that is due).
    function getRoundState(uint256 auditId, uint8 roundIndex) external view returns (RoundState memory s) {
        Audit storage a = _audit(auditId);
        Round storage r = rounds[auditId][roundIndex];
        return RoundState(
            r.phase, roundIndex, r.attempt, uint8(r.members.length), r.receipts, r.seals, r.opens, r.workerOpened, r.challengeSeed != bytes32(0),
            a.published, a.pendingContests, r.publishDeadline, r.phase == Phase.DRAWING && a.drawCommitment != bytes32(0), a.numPositions != 0,
            _deadlines(r)
        );
    }

    /// @notice Who claimed seat `slot` of round `key >> 8` (key = round << 8 | slot), or 0.
    function claimants(uint256 auditId, uint256 key) external view returns (address) {
        Member[] storage members = rounds[auditId][key >> 8].members;
        uint256 slot = key & 0xff;
        return slot < members.length && members[slot].claimed ? members[slot].node : address(0);
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

    // --- internals -------------------------------------------------------------------------

    /// @dev The guard of every function on an audit: its current round must be in `expected`.
    function _at(uint256 auditId, Phase expected) private view returns (Audit storage a, Round storage r) {
        a = _audit(auditId);
        r = rounds[auditId][a.round];
        if (r.phase != expected) revert UnexpectedPhase(auditId, r.phase, expected);
    }

    /// @dev The window (after, by]: TooEarly before, TooLate after.
    function _window(uint256 after_, uint256 by) private view {
        if (block.number <= after_) revert TooEarly(after_ + 1);
        if (block.number > by) revert TooLate(by + 1);
    }

    /// @dev Every deadline of a round, from the blocks it recorded (docs/protocol.md §12).
    function _deadlines(Round storage r) private view returns (Deadlines memory d) {
        uint64 delay = uint64(params.auditDrawDelayBlocks);
        uint64 open = uint64(params.openWindowBlocks);
        d.enteredBlock = r.enteredBlock;
        d.drawAfter = r.enteredBlock + delay;
        d.drawBy = d.drawAfter + uint64(params.drawWindowBlocks);
        d.commitBy = r.commitDeadline;
        if (r.readyBlock != 0) {
            d.challengeAfter = r.readyBlock + delay;
            d.workerOpenBy = d.challengeAfter + open;
            d.membersSealBy = d.workerOpenBy + open;
            d.membersOpenBy = d.membersSealBy + open;
        }
        d.verdictBlock = r.verdictBlock;
        if (r.verdictBlock != 0) d.disputeBy = r.verdictBlock + uint64(params.disputeWindowBlocks);
    }

    function _audit(uint256 auditId) private view returns (Audit storage a) {
        a = audits[auditId];
        if (a.worker == address(0)) revert UnknownAudit(auditId);
    }

    function _checkSigner(bytes32 receiptHash, bytes calldata signature, address expected) private view {
        (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecover(keccak256(abi.encodePacked(hex"1901", domainSeparator_, receiptHash)), signature);
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

    function _unlockAll(uint256 auditId, Audit storage a) private {
        address[] memory parties = _everyParty(auditId, a);
        for (uint256 i = 0; i < parties.length; i++) {
            registry.unlock(parties[i]);
        }
    }

    /// @dev The worker, the dispatcher, every seat of every round so far (the appeal's and the
    /// decider's too) and every member redrawn away: who a draw excludes and who is unlocked at
    /// the end (each locked once).
    function _everyParty(uint256 auditId, Audit storage a) private view returns (address[] memory parties) {
        uint256 k = 2 + a.replaced.length;
        for (uint256 ri = 0; ri < 3; ri++) {
            k += rounds[auditId][ri].members.length;
        }
        parties = new address[](k);
        parties[0] = a.worker;
        parties[1] = a.dispatcher;
        k = 2;
        for (uint256 ri = 0; ri < 3; ri++) {
            Member[] storage members = rounds[auditId][ri].members;
            for (uint256 i = 0; i < members.length; i++) {
                parties[k++] = members[i].node;
            }
        }
        for (uint256 i = 0; i < a.replaced.length; i++) {
            parties[k++] = a.replaced[i];
        }
    }
}
