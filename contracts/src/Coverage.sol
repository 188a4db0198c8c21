// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {ReceiptData, Receipts} from "./AuditTypes.sol";
import {Batches} from "./Batches.sol";
import {Blake3} from "./Blake3.sol";
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
///
/// Signed streams are enforced here too (docs/protocol.md §12 "Signed streams"): a worker signs
/// every prefix of the output it streams; one that signs a receipt, or another prefix, whose output
/// does not start with a prefix it signed for the same job has signed two outputs for one job, and
/// anyone holding both statements slashes it (`slashStreamEquivocation`).
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

    /// @notice What a worker signs about the first tokenCount tokens it streamed for a job
    /// (verillm/spec/stream.py), under the receipts' EIP-712 domain (the Jobs contract's).
    struct StreamPrefix {
        bytes32 jobHash;
        uint32 tokenCount;
        bytes32 prefixHash; // h_0 = 0, h_i = keccak256(0x1f ‖ h_{i-1} ‖ u32 token_i) over the output tokens
        address worker;
    }

    bytes32 public constant STREAM_PREFIX_TYPEHASH =
        keccak256("StreamPrefix(bytes32 jobHash,uint32 tokenCount,bytes32 prefixHash,address worker)");
    bytes1 private constant DOMAIN_TOKENS = 0x16; // verillm.spec.hashing.DOMAIN_TOKENS: a receipt's outputHash
    bytes1 private constant DOMAIN_STREAM_PREFIX = 0x1f; // verillm.spec.hashing.DOMAIN_STREAM_PREFIX (here, not in Params.Domains: one artifact changes)
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
    /// keccak256(worker ‖ jobHash) → slashed for equivocating on that job's stream (once per job).
    mapping(bytes32 => bool) public streamSlashed;

    event OmissionClaimed(
        uint256 indexed claimId, bytes32 indexed receiptHash, address indexed dispatcher, address claimant, uint64 batchByBlock, uint64 proveDeadline
    );
    event OmissionAnswered(uint256 indexed claimId, uint256 batchId, uint32 leafIndex, uint256 paidWei, uint256 refundedWei);
    event OmissionSlashed(uint256 indexed claimId, address indexed dispatcher, uint256 slashedWei);
    event StreamEquivocationSlashed(address indexed worker, bytes32 indexed jobHash, address indexed reporter, uint256 slashedWei);

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
    error NotEquivocation(string reason);
    error AlreadySlashed(address worker, bytes32 jobHash);

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

    /// @notice Slash a worker that signed two outputs for one job (anyone may; the caller gets
    /// slashRewardBps of the stake, the rest goes to the audit fee pool): `p` is a prefix it
    /// signed while streaming, and `r` its signed receipt for the same job, whose transcript
    /// `tokens` (P + N tokens of input ‖ output, u32 big-endian, hashing to r.outputHash) does not
    /// start its output with p's tokens: N < p.tokenCount, or the running hash of the first
    /// p.tokenCount output tokens is not p.prefixHash. Or `r` is left empty (worker 0) and `q` is
    /// a second prefix of the same job signed by the same worker, no shorter than `p`, whose
    /// tokens are `tokens` (hashing to q.prefixHash) and do not start with p's. Once per job.
    function slashStreamEquivocation(
        StreamPrefix calldata p,
        bytes calldata pSignature,
        ReceiptData calldata r,
        bytes calldata rSignature,
        StreamPrefix calldata q,
        bytes calldata qSignature,
        bytes calldata tokens
    ) external nonReentrant {
        bytes32 domain = batches.jobs().domainSeparator();
        _requireSigned(domain, _hashPrefix(p), pSignature, p.worker);
        bytes calldata output;
        if (r.worker != address(0)) {
            if (r.worker != p.worker || r.jobHash != p.jobHash) revert NotEquivocation("receipt of another worker or job");
            _requireSigned(domain, Receipts.hash(r), rSignature, p.worker);
            if (tokens.length != 4 * (uint256(r.inputTokens) + r.outputTokens)) revert NotEquivocation("transcript length");
            if (Blake3.hash(bytes.concat(DOMAIN_TOKENS, tokens)) != r.outputHash) revert NotEquivocation("transcript hash");
            output = tokens[4 * uint256(r.inputTokens):];
        } else {
            if (q.worker != p.worker || q.jobHash != p.jobHash) revert NotEquivocation("prefix of another worker or job");
            _requireSigned(domain, _hashPrefix(q), qSignature, p.worker);
            if (q.tokenCount < p.tokenCount || tokens.length != 4 * uint256(q.tokenCount)) revert NotEquivocation("prefix tokens");
            if (_runningHash(tokens) != q.prefixHash) revert NotEquivocation("prefix hash");
            output = tokens;
        }
        if (4 * uint256(p.tokenCount) <= output.length && _runningHash(output[:4 * uint256(p.tokenCount)]) == p.prefixHash) {
            revert NotEquivocation("the output starts with the signed prefix");
        }
        bytes32 key = keccak256(abi.encode(p.worker, p.jobHash));
        if (streamSlashed[key]) revert AlreadySlashed(p.worker, p.jobHash);
        streamSlashed[key] = true;
        uint256 slashed = registry.slash(p.worker);
        disputes.relayCredit{value: slashed}(msg.sender, slashed * slashRewardBps / Params.BPS);
        emit StreamEquivocationSlashed(p.worker, p.jobHash, msg.sender, slashed);
    }

    // --- views -----------------------------------------------------------------------------

    function hashStreamPrefix(StreamPrefix calldata p) external pure returns (bytes32) {
        return _hashPrefix(p);
    }

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

    function _hashPrefix(StreamPrefix calldata p) private pure returns (bytes32) {
        return keccak256(abi.encode(STREAM_PREFIX_TYPEHASH, p.jobHash, p.tokenCount, p.prefixHash, p.worker));
    }

    function _requireSigned(bytes32 domain, bytes32 structHash, bytes calldata signature, address signer) private pure {
        (address recovered, ECDSA.RecoverError err,) = ECDSA.tryRecover(keccak256(abi.encodePacked(hex"1901", domain, structHash)), signature);
        if (err != ECDSA.RecoverError.NoError || recovered != signer) revert BadSignature(signer);
    }

    /// @dev The stream's running hash of u32 big-endian tokens (verillm.spec.stream.compute_prefix_hash).
    function _runningHash(bytes calldata packed) private pure returns (bytes32 h) {
        for (uint256 i = 0; i < packed.length; i += 4) {
            h = keccak256(abi.encodePacked(DOMAIN_STREAM_PREFIX, h, bytes4(packed[i:i + 4])));
        }
    }

    function _open(uint256 claimId) private view returns (Claim storage c) {
        if (claimId == 0 || claimId > claimCount) revert UnknownClaim(claimId);
        c = claims[claimId];
        if (c.state != OPEN) revert ClaimResolved(claimId, c.state);
    }
}
