// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @notice The signed receipt of verillm/spec/receipt.py, as calldata.
struct ReceiptData {
    bytes32 jobHash;
    bytes32 modelId;
    bytes32 inputHash;
    bytes32 outputHash;
    uint32 temperatureMilli;
    uint32 topK;
    uint32 topPPpm;
    uint64 seed;
    uint32 maxNewTokens;
    bytes32 commitmentRoot;
    uint32 numPositions;
    uint32 inputTokens; // P
    uint32 outputTokens; // N; numPositions = P + N − 1
    uint64 auditableUntilBlock; // the last block an audit of it may start in (the worker's head + receiptHorizonBlocks)
    address worker;
}

/// @notice The phase of one audit round (docs/protocol.md §12 "The audit state machine";
/// verillm.spec.audit.Phase holds the same codes). Every external function of Jobs names the one
/// phase it runs in (Jobs._at: `UnexpectedPhase(auditId, actual, expected)` otherwise) and the
/// window it runs in (Jobs._deadlines, mirrored by verillm.spec.audit.compute_round_deadlines).
enum Phase {
    NONE, // no such round
    COMMITTING, // committee drawn, its receipts due
    OPENING, // every receipt in: challenge, the worker's opening, sealed votes, their openings
    DECIDED, // votes counted (or the worker defaulted); the dispute window runs
    DRAWING, // entered (start or escalation): the committee is drawn from a blockhash after entry
    SETTLED, // terminal: slashes and fees booked, locks released
    ABANDONED, // terminal: the committee never filled (or was never drawn): nobody slashed but a dispatcher that skipped its draw
    LAPSED // terminal for an escalation round nobody drew: the audit settles its first round
}

/// @notice What a private start says of the worker's receipt without showing it (Batches.startPrivateAudit):
/// the receipt itself would name the member's job (its outputHash is that job's input hash). The
/// worker is proven by its signature over the receipt hash; the model and the horizon are bound to
/// that hash when the dispatcher reveals the receipt with the draw (Jobs.revealRound), and a
/// dispatcher that claimed them falsely cannot reveal: it is slashed at the lapse.
struct ReceiptClaim {
    address worker;
    bytes32 modelId;
    uint64 auditableUntilBlock;
}

/// @notice What Batches hands Jobs to open an audit of a batched receipt.
struct AuditRequest {
    uint64 batchId;
    uint32 index;
    address dispatcher;
    uint64 postedBlock;
    bool selected; // the batch's VRF draw picked it (false: requested and paid for)
    bytes32 receiptHash;
    bytes32 drawCommitment; // keccak256(0x1d ‖ secret): its dispatcher draws round 0 privately (Jobs.revealRound); 0: publicly
}

/// @notice A round's deadlines, composed in one place (Jobs._deadlines). A window "(a, b]" opens
/// the block after a and closes after b; 0 = not yet known.
struct Deadlines {
    uint64 enteredBlock; // E: the start or the escalation
    uint64 drawAfter; // E + delay: the seed block of the committee draw
    uint64 drawBy; // E + delay + draw
    uint64 commitBy; // the current commit deadline (redraws, claims and publication move it)
    uint64 challengeAfter; // R + delay, R = the last receipt's block
    uint64 workerOpenBy; // R + delay + open
    uint64 membersSealBy; // R + delay + 2 × open: members seal their votes (after the worker opened)
    uint64 membersOpenBy; // R + delay + 3 × open: members open what they sealed (once all sealed, or after membersSealBy)
    uint64 verdictBlock; // V
    uint64 disputeBy; // V + dispute
}

/// @notice A round as the state machine sees it (Jobs.getRoundState): what decides which call is
/// due next (verillm.spec.audit.compute_due_steps).
struct RoundState {
    Phase phase;
    uint8 round;
    uint8 attempt;
    uint8 members;
    uint8 receipts;
    uint8 seals;
    uint8 opens;
    bool workerOpened;
    bool challengeDrawn;
    bool published;
    uint16 pendingContests;
    uint64 publishDeadline; // the round's claim window (0: no claim)
    bool privateDraw; // DRAWING, and only the dispatcher may draw it (revealRound): by drawBy, or late by revealBy at the penalty
    bool receiptKnown; // the worker's receipt is on-chain (false: a private start before its reveal, or a missed reveal nobody supplied)
    Deadlines deadlines;
}

/// @notice The receipt's EIP-712 struct hash (verillm.spec.receipt.compute_receipt_hash).
library Receipts {
    bytes32 internal constant TYPEHASH = keccak256(
        "Receipt(bytes32 jobHash,bytes32 modelId,bytes32 inputHash,bytes32 outputHash,"
        "uint32 temperatureMilli,uint32 topK,uint32 topPPpm,uint64 seed,"
        "uint32 maxNewTokens,bytes32 commitmentRoot,uint32 numPositions,uint32 inputTokens,uint32 outputTokens,"
        "uint64 auditableUntilBlock,address worker)"
    );

    function hash(ReceiptData calldata r) internal pure returns (bytes32) {
        // abi.encode of static values is their 32-byte words in order: two halves, concatenated,
        // are the EIP-712 encoding (one call with 16 values is too deep for the stack).
        bytes memory head = abi.encode(TYPEHASH, r.jobHash, r.modelId, r.inputHash, r.outputHash, r.temperatureMilli, r.topK, r.topPPpm);
        bytes memory tail =
            abi.encode(r.seed, r.maxNewTokens, r.commitmentRoot, r.numPositions, r.inputTokens, r.outputTokens, r.auditableUntilBlock, r.worker);
        return keccak256(bytes.concat(head, tail));
    }
}

/// @notice What Disputes reads about one party (slot 0 = the worker, slot i = member i − 1)
/// of one audit round.
struct PartyView {
    address node;
    bytes32 root;
    uint32 numPositions;
    bytes32 openingHash;
    bool opened;
    uint8 vote;
    bool slashed;
}

/// @notice What Disputes reads about an audit.
struct AuditView {
    address worker;
    bytes32 modelId;
    uint32 numPositions;
    uint32 outputTokens;
    uint8 round;
    Phase phase;
    uint64 verdictBlock;
    bytes32 challengeSeed; // of the current round, 0 until drawn
    uint8 committeeSize; // of the current round
}

library AuditCodes {
    // votes
    uint8 internal constant NO_VOTE = 0;
    uint8 internal constant AGREE = 1;
    uint8 internal constant DISAGREE = 2;

    // verdicts
    uint8 internal constant PASS = 1; // majority agrees with the worker
    uint8 internal constant FAIL = 2; // majority disagrees
    uint8 internal constant TIE = 3; // no majority among the votes cast: nobody slashed for votes
    uint8 internal constant WORKER_DEFAULT = 4; // the worker missed its opening, lost a contest or withheld a claimed job

    // receipt states (Jobs.receiptState): at most one committee per receipt, whoever batches it
    uint8 internal constant RECEIPT_FREE = 0;
    uint8 internal constant RECEIPT_AUDITED = 1; // an audit owns it
    uint8 internal constant RECEIPT_LAPSED = 2; // its requested audit was never drawn: a selected start may still audit it
}
