// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ReceiptData, AuditRequest, ReceiptClaim, RoundState, PartyView, AuditView, Deadlines, Phase} from "protocol/AuditTypes.sol";

/// The cheatcodes the campaign uses (forge's, declared here instead of depending on forge-std).
interface Vm {
    struct Log {
        bytes32[] topics;
        bytes data;
        address emitter;
    }

    function prank(address sender) external;
    function roll(uint256 blockNumber) external;
    function warp(uint256 timestamp) external;
    function deal(address who, uint256 amountWei) external;
    function sign(uint256 privateKey, bytes32 digest) external pure returns (uint8 v, bytes32 r, bytes32 s);
    function loadAllocs(string calldata pathToAllocsJson) external;
    function readFile(string calldata path) external view returns (string memory);
    function parseJsonUint(string calldata json, string calldata key) external pure returns (uint256);
    function parseJsonAddress(string calldata json, string calldata key) external pure returns (address);
    function parseJsonBytes(string calldata json, string calldata key) external pure returns (bytes memory);
    function parseJsonBytes32(string calldata json, string calldata key) external pure returns (bytes32);
    function parseJsonBytes32Array(string calldata json, string calldata key) external pure returns (bytes32[] memory);
    function parseJsonUintArray(string calldata json, string calldata key) external pure returns (uint256[] memory);
    function parseJsonString(string calldata json, string calldata key) external pure returns (string memory);
    function toString(uint256 value) external pure returns (string memory);
    function recordLogs() external;
    function getRecordedLogs() external returns (Log[] memory);
    function envOr(string calldata name, uint256 defaultValue) external view returns (uint256);
    function envOr(string calldata name, string calldata defaultValue) external view returns (string memory);
}

address constant VM_ADDRESS = address(uint160(uint256(keccak256("hevm cheat code"))));

struct BatchPromise {
    bytes32 receiptHash;
    address dispatcher;
    uint64 batchByBlock;
}

struct StreamPrefix {
    bytes32 jobHash;
    uint32 tokenCount;
    bytes32 prefixHash;
    address worker;
}

struct CellPair {
    bytes workerLeaf;
    bytes32[] workerSiblings;
    bytes memberLeaf;
    bytes32[] memberSiblings;
}

struct PostedOpening {
    bytes leaves;
    uint32[] leafIndices;
}

struct Contest {
    uint64 auditId;
    uint8 round;
    uint8 slot;
    bool open;
    address challenger;
    uint64 deadline;
    uint256 bondWei;
    bytes32 cellsHash;
    bool answered;
    bool released;
}

interface IRegistry {
    function getStake(address node) external view returns (uint256);
    function isActive(address node) external view returns (bool);
    function topUp() external payable;
    function minStakeWei() external view returns (uint256);
}

interface IBatches {
    function postBatch(bytes32 root, uint32 count) external payable returns (uint256 batchId);
    function drawSeed(uint256 batchId) external view returns (bytes32);
    function drawAudit(uint256 batchId, uint256[2] calldata proof) external;
    function isAudited(uint256 batchId, uint32 index) external view returns (bool);
    function startAudit(uint256 batchId, uint32 index, ReceiptData calldata receipt, bytes calldata signature, bytes32[] calldata siblings)
        external payable;
    function hashReceipt(ReceiptData calldata r) external pure returns (bytes32);
    function batchCount() external view returns (uint256);
}

interface IJobs {
    function domainSeparator() external view returns (bytes32);
    function getAudit(uint256 auditId) external view returns (AuditView memory);
    function getRoundState(uint256 auditId, uint8 roundIndex) external view returns (RoundState memory);
    function getParty(uint256 auditId, uint8 roundIndex, uint8 slot) external view returns (PartyView memory);
    function credits(address who) external view returns (uint256);
    function drawRound(uint256 auditId) external;
    function postCommitteeReceipt(uint256 auditId, uint8 slot, ReceiptData calldata receipt, bytes calldata signature) external;
    function replaceMissing(uint256 auditId) external;
    function openWorker(uint256 auditId, bytes calldata leaves) external;
    function sealVote(uint256 auditId, uint8 slot, bytes32 seal) external;
    function openAndVote(uint256 auditId, uint8 slot, bytes calldata leaves, bool agree, bytes32 salt) external;
    function finalize(uint256 auditId) external;
    function settle(uint256 auditId) external;
}

interface IDisputes {
    function contestCount() external view returns (uint256);
    function getContest(uint256 contestId) external view returns (Contest memory);
    function answerContest(uint256 contestId, uint32[] calldata positions, uint16[] calldata layers, bytes calldata opening,
        uint256[] calldata leafIndices, bytes32[][] calldata siblings) external;
    function escalate(uint256 auditId) external payable;
    function resolveContest(uint256 contestId) external;
}

interface ICoverage {
    function hashPromise(BatchPromise calldata p) external pure returns (bytes32);
    function domainSeparator() external view returns (bytes32);
}

interface ICoverageAnswer {
    function proveIncluded(uint256 claimId, uint256 batchId, uint32 leafIndex, bytes32[] calldata siblings) external;
}

interface IDelivery {
    function publishTranscript(uint256 auditId, bytes calldata tokens, uint32 temperatureMilli, uint32 topK, uint32 topPPpm, uint64 seed)
        external;
    function slashUndelivered(uint256 auditId) external;
}
