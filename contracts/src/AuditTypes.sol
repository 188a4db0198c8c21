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
    address worker;
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
    uint8 phase;
    uint64 verdictBlock;
    bytes32 challengeSeed; // of the current round, 0 until drawn
    uint8 committeeSize; // of the current round
}

library AuditCodes {
    // phases of the current round
    uint8 internal constant NONE = 0;
    uint8 internal constant COMMITTING = 1; // committee posting receipts
    uint8 internal constant OPENING = 2; // challenge drawn from a later blockhash; openings and votes
    uint8 internal constant DECIDED = 3; // votes counted; dispute window running
    uint8 internal constant ESCALATING = 4; // bond posted; waiting for the escalation committee draw
    uint8 internal constant SETTLED = 5;
    uint8 internal constant ABANDONED = 6; // the committee never filled (members missing or pool exhausted): nobody slashed

    // votes
    uint8 internal constant NO_VOTE = 0;
    uint8 internal constant AGREE = 1;
    uint8 internal constant DISAGREE = 2;

    // verdicts
    uint8 internal constant PASS = 1; // majority agrees with the worker
    uint8 internal constant FAIL = 2; // majority disagrees
    uint8 internal constant TIE = 3; // no majority among the votes cast: nobody slashed for votes
    uint8 internal constant WORKER_DEFAULT = 4; // the worker missed its opening or lost a contest
}
