// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {Batches} from "./Batches.sol";
import {Disputes} from "./Disputes.sol";
import {MerkleLib} from "./MerkleLib.sol";
import {CoverageParams, Params, ProtocolParams} from "./Params.sol";
import {Registry} from "./Registry.sol";

/// @notice Audit coverage is not voluntary (docs/protocol.md §12, "Batching promises"). With every
/// job its dispatcher returns a signed promise: the job's receipt hash will be a leaf of a batch
/// it posts by `batchByBlock`. A receipt never batched can never be audited, so a dispatcher that
/// cheats (or serves a cheating worker) and omits the receipt escapes every audit; here the
/// promise's holder claims the omission after batchByBlock with a bond, the dispatcher (or anyone)
/// answers within proofWindowBlocks with a Merkle proof of the leaf in one of its own batches
/// posted no later than batchByBlock (the dispatcher is then paid its answer's gas out of the
/// claimant's bond, the rest refunded), and an unanswered claim slashes the dispatcher (reward
/// and bond to the claimant). Nothing is stored
/// on-chain per job: a promise costs gas only when it is claimed.
contract Coverage is EIP712, ReentrancyGuard {
    /// @notice The signed promise (EIP-712, domain "VeriLLM" / "1" / chain id / this contract).
    struct BatchPromise {
        bytes32 receiptHash; // the receipt's EIP-712 struct hash: the batch leaf
        address dispatcher;
        uint64 batchByBlock; // the last block the batch holding it may be posted in
    }

    struct Claim {
        bytes32 receiptHash;
        address dispatcher;
        uint64 batchByBlock;
        address claimant;
        uint64 proveDeadline;
        uint8 state;
    }

    bytes32 public constant PROMISE_TYPEHASH = keccak256("BatchPromise(bytes32 receiptHash,address dispatcher,uint64 batchByBlock)");
    uint8 public constant OPEN = 1;
    uint8 public constant ANSWERED = 2;
    uint8 public constant SLASHED = 3;

    Batches public immutable batches;
    Registry public immutable registry;
    Disputes public immutable disputes;
    uint256 public immutable batchByBlocks; // what a promise gives (read by nodes and clients; a claim checks the signature, not the span)
    uint256 public immutable claimWindowBlocks;
    uint256 public immutable claimBondWei;
    uint256 public immutable answerGas; // gas units an answer is paid for (CoverageParams.omissionAnswerGas)
    uint256 public immutable proofWindowBlocks;
    uint256 public immutable slashRewardBps;

    uint256 public claimCount;
    mapping(uint256 => Claim) private claims;
    /// promise struct hash → its claim id (0: never claimed). One claim per promise, ever.
    mapping(bytes32 => uint256) public claimOf;

    event OmissionClaimed(
        uint256 indexed claimId, bytes32 indexed receiptHash, address indexed dispatcher, address claimant, uint64 batchByBlock, uint64 proveDeadline
    );
    event OmissionAnswered(uint256 indexed claimId, uint256 batchId, uint32 leafIndex, uint256 paidWei, uint256 refundedWei);
    event OmissionSlashed(uint256 indexed claimId, address indexed dispatcher, uint256 slashedWei);

    error WrongBond(uint256 givenWei, uint256 expectedWei);
    error BadSignature(address expected);
    error TooEarly(uint256 untilBlock);
    error ClaimClosed(uint256 closedAt);
    error AlreadyClaimed(uint256 claimId);
    error UnknownClaim(uint256 claimId);
    error ClaimResolved(uint256 claimId, uint8 state);
    error ProofWindowClosed(uint256 closedAt);
    error ProofWindowOpen(uint256 untilBlock);
    error ForeignBatch(uint256 batchId, address dispatcher);
    error BatchTooLate(uint256 postedBlock, uint256 batchByBlock);
    error InvalidMerkleProof();
    error NotRegistry();

    constructor(Batches batches_, Registry registry_, Disputes disputes_, ProtocolParams memory p, CoverageParams memory c)
        EIP712("VeriLLM", "1")
    {
        if (keccak256(abi.encode(p)) != registry_.paramsHash()) revert Params.InvalidParams("not the Registry's parameters");
        Params.validateCoverage(p, c);
        batches = batches_;
        registry = registry_;
        disputes = disputes_;
        batchByBlocks = c.batchByBlocks;
        claimWindowBlocks = c.omissionClaimWindowBlocks;
        claimBondWei = c.omissionClaimBondWei;
        answerGas = c.omissionAnswerGas;
        proofWindowBlocks = p.proofWindowBlocks;
        slashRewardBps = p.slashRewardBps;
    }

    /// @dev Slashed stake arrives from the Registry; bonds only through claimOmitted.
    receive() external payable {
        if (msg.sender != address(registry)) revert NotRegistry();
    }

    /// @notice Claim that a promised receipt was not batched in time (anyone holding the signed
    /// promise may), with omissionClaimBondWei, in the blocks (batchByBlock, batchByBlock +
    /// omissionClaimWindowBlocks]. Locks the dispatcher's stake until the claim is resolved.
    function claimOmitted(BatchPromise calldata p, bytes calldata signature) external payable nonReentrant returns (uint256 claimId) {
        if (msg.value != claimBondWei) revert WrongBond(msg.value, claimBondWei);
        if (block.number <= p.batchByBlock) revert TooEarly(uint256(p.batchByBlock) + 1);
        if (block.number > uint256(p.batchByBlock) + claimWindowBlocks) revert ClaimClosed(uint256(p.batchByBlock) + claimWindowBlocks + 1);
        bytes32 promiseHash = hashPromise(p);
        if (claimOf[promiseHash] != 0) revert AlreadyClaimed(claimOf[promiseHash]);
        (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecover(_hashTypedDataV4(promiseHash), signature);
        if (err != ECDSA.RecoverError.NoError || signer != p.dispatcher) revert BadSignature(p.dispatcher);
        registry.lock(p.dispatcher); // reverts NotRegistered: a node that left has nothing to slash
        claimId = ++claimCount;
        claimOf[promiseHash] = claimId;
        uint64 deadline = uint64(block.number + proofWindowBlocks);
        claims[claimId] = Claim(p.receiptHash, p.dispatcher, p.batchByBlock, msg.sender, deadline, OPEN);
        emit OmissionClaimed(claimId, p.receiptHash, p.dispatcher, msg.sender, p.batchByBlock, deadline);
    }

    /// @notice Answer a claim (anyone may: batches and their leaves are the dispatcher's to show):
    /// the receipt hash is leaf `leafIndex` of batch `batchId`, posted by the promising dispatcher
    /// no later than batchByBlock. The dispatcher is credited its answer's cost, answerGas at this
    /// transaction's gas price, capped at the bond, and the claimant the rest of its bond: a
    /// dispatcher that hides its inclusion proof off-chain to draw claims gains nothing but the
    /// gas it spends answering them, and a griefer still pays for the answer it forces.
    function proveIncluded(uint256 claimId, uint256 batchId, uint32 leafIndex, bytes32[] calldata siblings) external nonReentrant {
        Claim storage c = _open(claimId);
        if (block.number > c.proveDeadline) revert ProofWindowClosed(uint256(c.proveDeadline) + 1);
        Batches.Batch memory b = batches.getBatch(batchId);
        if (b.dispatcher != c.dispatcher) revert ForeignBatch(batchId, b.dispatcher);
        if (b.postedBlock > c.batchByBlock) revert BatchTooLate(b.postedBlock, c.batchByBlock);
        if (!MerkleLib.isValidProof(MerkleLib.leafHash(abi.encodePacked(c.receiptHash)), leafIndex, b.count, siblings, b.root)) {
            revert InvalidMerkleProof();
        }
        c.state = ANSWERED;
        registry.unlock(c.dispatcher);
        // tx.gasprice is the effective price (base fee + tip): a proposer that answers its own
        // claim recycles the tip, which only the cap at the bond bounds (docs/protocol.md §13).
        uint256 cost = answerGas * tx.gasprice;
        uint256 paid = cost < claimBondWei ? cost : claimBondWei;
        uint256 refunded = claimBondWei - paid;
        if (paid != 0) disputes.relayCredit{value: paid}(c.dispatcher, paid);
        if (refunded != 0) disputes.relayCredit{value: refunded}(c.claimant, refunded);
        emit OmissionAnswered(claimId, batchId, leafIndex, paid, refunded);
    }

    /// @notice After an unanswered proof window, slash the dispatcher (anyone may call): the
    /// claimant gets its bond back and slashRewardBps of the slashed stake, the rest goes to the
    /// audit fee pool, all as credit in Jobs.
    function slashOmission(uint256 claimId) external nonReentrant {
        Claim storage c = _open(claimId);
        if (block.number <= c.proveDeadline) revert ProofWindowOpen(uint256(c.proveDeadline) + 1);
        c.state = SLASHED;
        registry.unlock(c.dispatcher);
        uint256 slashed = registry.slash(c.dispatcher);
        disputes.relayCredit{value: slashed + claimBondWei}(c.claimant, claimBondWei + slashed * slashRewardBps / Params.BPS);
        emit OmissionSlashed(claimId, c.dispatcher, slashed);
    }

    // --- views -----------------------------------------------------------------------------

    function hashPromise(BatchPromise calldata p) public pure returns (bytes32) {
        return keccak256(abi.encode(PROMISE_TYPEHASH, p.receiptHash, p.dispatcher, p.batchByBlock));
    }

    function domainSeparator() external view returns (bytes32) {
        return _domainSeparatorV4();
    }

    function getClaim(uint256 claimId) external view returns (Claim memory) {
        if (claimId == 0 || claimId > claimCount) revert UnknownClaim(claimId);
        return claims[claimId];
    }

    function _open(uint256 claimId) private view returns (Claim storage c) {
        if (claimId == 0 || claimId > claimCount) revert UnknownClaim(claimId);
        c = claims[claimId];
        if (c.state != OPEN) revert ClaimResolved(claimId, c.state);
    }
}
