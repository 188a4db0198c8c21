// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import "./Base.sol";
import {BlsVrf} from "protocol/BlsVrf.sol";

/// The cast of the generic-adversary campaign and what each actor knows (issue 34; the world of
/// tests/contracts/generic_fuzz.py and four more nodes, loaded from world/ by
/// contracts/fuzz/make_world.py): twenty registered nodes (honest 0, 1, 3, 4, 6, 7, 12, 14, 16, 18;
/// the cheater 2; colluders 5, 8, 9, 10, 11, 13, 15, 17, 19 with 48% of the stake together with the
/// cheater: twenty so that a decider round, 5 fresh seats after 3 + 5 and any redraws, can be
/// drawn), the outsider, the six contracts, each trace's leaves and
/// Merkle proofs, and the pools of public values the adversary draws its arguments from.
contract Cast {
    Vm internal constant vm = Vm(VM_ADDRESS);

    uint8 internal constant HONEST = 0;
    uint8 internal constant CHEATER = 1;
    uint8 internal constant COLLUDER = 2;
    uint8 internal constant NODES = 20; // make_world.py's FORGE_EXTRA_NODES + 6
    uint8 internal constant OUTSIDER = NODES; // actors[NODES]
    uint8 internal constant IDENTITIES = 10; // the adversary's: colluders 5, 8, 9, 10, 11, 13, 15, 17, 19 and the outsider
    uint8 internal constant CHEATER_NODE = 2;

    struct Actor {
        address addr;
        uint256 key;
        uint256 vrfKey;
        uint8 role;
        uint256[4] vrfPublicKey;
        uint256[2] pop;
    }

    struct Trace {
        bytes32 root;
        uint32 numPositions;
        uint256 leafSize;
        bytes leaves;
        bytes32[][] proofs;
    }

    IRegistry public registry;
    IJobs public jobs;
    IBatches public batches;
    IDisputes public disputes;
    IDelivery public delivery;
    ICoverage public coverage;
    bytes32 public modelId;
    bytes32 internal inputHash;
    bytes32 internal transcriptHash;
    bytes internal transcript;
    uint32 internal promptLen;
    uint32 internal outputTokens;
    uint16[2] internal layers;

    uint256 internal minStakeWei;
    uint256 internal jobFeeWei;
    uint256 internal auditFeeWei;
    uint256 internal disputeBondWei;
    uint256 internal omissionBondWei;
    uint256 internal deliveryBondWei;
    uint256 internal memberPenaltyBps;
    uint256 internal receiptHorizon;
    uint256 internal batchBy;
    uint256 internal challengePositions;

    Actor[] internal actors; // 0..NODES-1 the nodes, NODES the outsider
    mapping(address => uint256) internal indexPlusOne;
    Trace internal honestWorker;
    Trace internal cheatWorker;
    Trace internal fabricated;
    Trace[] internal members;

    // --- the public pools (everything a watcher of the chain sees) ------------------------------
    uint256[] internal auditIds;
    uint256[] internal batchIds;
    uint256[] internal contestIds;
    uint256[] internal claimIds;
    uint256[] internal blockEdges; // window edges of live audits and batches (roll targets, block arguments)
    bytes32[] internal words; // roots, receipt hashes, seeds, seals seen
    bytes[] internal blobs; // signatures, openings, transcripts seen
    ReceiptData[] internal receiptsSeen;
    bytes[] internal receiptSigs;
    BatchPromise[] internal promisesSeen;
    bytes[] internal promiseSigs;

    function _load(string memory dir) internal {
        string memory j = vm.readFile(string.concat(dir, "/world.json"));
        registry = IRegistry(vm.parseJsonAddress(j, ".registry"));
        jobs = IJobs(vm.parseJsonAddress(j, ".jobs"));
        batches = IBatches(vm.parseJsonAddress(j, ".batches"));
        disputes = IDisputes(vm.parseJsonAddress(j, ".disputes"));
        delivery = IDelivery(vm.parseJsonAddress(j, ".delivery"));
        coverage = ICoverage(vm.parseJsonAddress(j, ".coverage"));
        modelId = vm.parseJsonBytes32(j, ".modelId");
        inputHash = vm.parseJsonBytes32(j, ".inputHash");
        transcriptHash = vm.parseJsonBytes32(j, ".transcriptHash");
        transcript = vm.parseJsonBytes(j, ".transcript");
        promptLen = uint32(vm.parseJsonUint(j, ".promptLen"));
        outputTokens = uint32(vm.parseJsonUint(j, ".outputTokens"));
        uint256[] memory l = vm.parseJsonUintArray(j, ".layers");
        layers = [uint16(l[0]), uint16(l[1])];
        minStakeWei = vm.parseJsonUint(j, ".params.minStakeWei");
        jobFeeWei = vm.parseJsonUint(j, ".params.jobFeeWei");
        auditFeeWei = vm.parseJsonUint(j, ".params.auditFeeWei");
        disputeBondWei = vm.parseJsonUint(j, ".params.disputeBondWei");
        omissionBondWei = vm.parseJsonUint(j, ".params.omissionClaimBondWei");
        deliveryBondWei = vm.parseJsonUint(j, ".params.deliveryClaimBondWei");
        memberPenaltyBps = vm.parseJsonUint(j, ".params.memberPenaltyBps");
        receiptHorizon = vm.parseJsonUint(j, ".params.receiptHorizonBlocks");
        batchBy = vm.parseJsonUint(j, ".params.batchByBlocks");
        challengePositions = vm.parseJsonUint(j, ".params.challengePositions");
        for (uint256 i = 0; i < NODES; i++) {
            _loadActor(j, string.concat(".nodes[", vm.toString(i), "]"));
        }
        _loadActor(j, ".outsider");
        _loadTrace(j, ".traces.honestWorker", honestWorker);
        _loadTrace(j, ".traces.cheatWorker", cheatWorker);
        _loadTrace(j, ".traces.fabricated", fabricated);
        for (uint256 i = 0; i < NODES; i++) {
            members.push();
            _loadTrace(j, string.concat(".traces.members[", vm.toString(i), "]"), members[i]);
        }
    }

    function _loadActor(string memory j, string memory at) private {
        Actor storage a = actors.push();
        a.addr = vm.parseJsonAddress(j, string.concat(at, ".address"));
        a.key = uint256(vm.parseJsonBytes32(j, string.concat(at, ".key")));
        a.vrfKey = vm.parseJsonUint(j, string.concat(at, ".vrfKey"));
        uint256[] memory pk = vm.parseJsonUintArray(j, string.concat(at, ".vrfPublicKey"));
        uint256[] memory pop = vm.parseJsonUintArray(j, string.concat(at, ".pop"));
        a.vrfPublicKey = [pk[0], pk[1], pk[2], pk[3]];
        a.pop = [pop[0], pop[1]];
        string memory role = actors.length <= NODES ? vm.parseJsonString(j, string.concat(at, ".role")) : "colluder";
        a.role = _eq(role, "honest") ? HONEST : _eq(role, "cheater") ? CHEATER : COLLUDER;
        indexPlusOne[a.addr] = actors.length;
    }

    function _loadTrace(string memory j, string memory at, Trace storage t) private {
        t.root = vm.parseJsonBytes32(j, string.concat(at, ".root"));
        t.numPositions = uint32(vm.parseJsonUint(j, string.concat(at, ".numPositions")));
        t.leafSize = vm.parseJsonUint(j, string.concat(at, ".leafSize"));
        t.leaves = vm.parseJsonBytes(j, string.concat(at, ".leaves"));
        uint256 count = t.leaves.length / t.leafSize;
        for (uint256 i = 0; i < count; i++) {
            t.proofs.push(vm.parseJsonBytes32Array(j, string.concat(at, ".proofs[", vm.toString(i), "]")));
        }
    }

    function _eq(string memory a, string memory b) private pure returns (bool) {
        return keccak256(bytes(a)) == keccak256(bytes(b));
    }

    // --- who is who ---------------------------------------------------------------------------
    /// Node index of `a`, or type(uint256).max for an address that is no node (the outsider included).
    function _index(address a) internal view returns (uint256) {
        uint256 i = indexPlusOne[a];
        return i == 0 || i > NODES ? type(uint256).max : i - 1;
    }

    function _isHonest(address a) internal view returns (bool) {
        uint256 i = _index(a);
        return i < NODES && actors[i].role == HONEST;
    }

    function _isColluder(address a) internal view returns (bool) {
        uint256 i = indexPlusOne[a];
        return i != 0 && actors[i - 1].role == COLLUDER;
    }

    // --- what a party computes ------------------------------------------------------------------
    function _sign(uint256 key, bytes32 digest) internal pure returns (bytes memory) {
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(key, digest);
        return abi.encodePacked(r, s, v);
    }

    function _signReceipt(uint256 key, ReceiptData memory r) internal view returns (bytes memory) {
        return _sign(key, keccak256(abi.encodePacked(hex"1901", jobs.domainSeparator(), batches.hashReceipt(r))));
    }

    function _signPromise(uint256 key, BatchPromise memory p) internal view returns (bytes memory) {
        return _sign(key, keccak256(abi.encodePacked(hex"1901", coverage.domainSeparator(), coverage.hashPromise(p))));
    }

    /// sk · H(message): the BLS-VRF proof the verifier pairs against sk · G2 (BlsVrf.verify).
    function _vrfProof(uint256 sk, bytes memory message) internal view returns (uint256[2] memory proof) {
        (uint256 x, uint256 y) = BlsVrf.hashToG1(BlsVrf.DOMAIN_VRF, message);
        uint256[3] memory input = [x, y, sk];
        bool ok;
        assembly {
            ok := staticcall(gas(), 0x07, input, 96, proof, 64)
        }
        require(ok, "ecMul");
    }

    function _receipt(uint256 worker, bytes32 root, uint32 numPositions, uint256 nonce) internal view returns (ReceiptData memory r) {
        r.jobHash = keccak256(abi.encodePacked("job", nonce, worker));
        r.modelId = modelId;
        r.inputHash = inputHash;
        r.outputHash = transcriptHash;
        r.topPPpm = 1_000_000;
        r.maxNewTokens = 16;
        r.commitmentRoot = root;
        r.numPositions = numPositions;
        r.inputTokens = promptLen;
        r.outputTokens = outputTokens;
        r.auditableUntilBlock = uint64(block.number + receiptHorizon);
        r.worker = actors[worker].addr;
    }

    /// A member's receipt for `auditId` over `t` (its job: the worker's transcript, one token out).
    function _memberReceipt(uint256 node, uint256 auditId, Trace storage t) internal view returns (ReceiptData memory r) {
        r.jobHash = keccak256(abi.encodePacked("member job", auditId, node));
        r.modelId = modelId;
        r.inputHash = transcriptHash;
        r.outputHash = bytes32(uint256(0x33));
        r.topPPpm = 1_000_000;
        r.maxNewTokens = 1;
        r.commitmentRoot = t.root;
        r.numPositions = t.numPositions;
        r.inputTokens = promptLen + outputTokens;
        r.outputTokens = 1;
        r.auditableUntilBlock = uint64(block.number + receiptHorizon);
        r.worker = actors[node].addr;
    }

    // --- the challenge and openings (verillm.spec.challenge, verillm.spec.commitment) ------------
    function _challengePositions(bytes32 seed) internal view returns (uint256[] memory drawn) {
        uint256 first = promptLen - 1;
        uint256 count = challengePositions;
        if (outputTokens <= count) {
            drawn = new uint256[](outputTokens);
            for (uint256 i = 0; i < outputTokens; i++) drawn[i] = first + i;
            return drawn;
        }
        drawn = new uint256[](count);
        uint256 n;
        for (uint32 j = 0; n < count; j++) {
            uint256 position = first + uint256(keccak256(abi.encodePacked(bytes1(0x10), seed, j))) % outputTokens;
            bool seen;
            for (uint256 k = 0; k < n; k++) if (drawn[k] == position) seen = true;
            if (!seen) drawn[n++] = position;
        }
    }

    /// The cells (position << 16 | layer) a party with `numPositions` opens, sorted.
    function _openedCells(bytes32 seed, uint256 numPositions) internal view returns (uint256[] memory cells) {
        uint256[] memory positions = _challengePositions(seed);
        uint256 first = promptLen - 1;
        bool[64] memory lastLayer; // by position
        bool[64] memory firstLayer;
        for (uint256 i = 0; i < positions.length; i++) {
            firstLayer[positions[i]] = true;
            lastLayer[positions[i]] = true;
        }
        for (uint256 p = first; p < first + outputTokens + 1 && p < numPositions; p++) lastLayer[p] = true;
        uint256 n;
        uint256[] memory out = new uint256[](128);
        for (uint256 p = 0; p < 64; p++) {
            if (firstLayer[p]) out[n++] = (p << 16) | layers[0];
            if (lastLayer[p]) out[n++] = (p << 16) | layers[1];
        }
        cells = new uint256[](n);
        for (uint256 i = 0; i < n; i++) cells[i] = out[i];
    }

    function _leafIndex(uint256 cell) internal view returns (uint256) {
        return (cell >> 16) * 2 + ((cell & 0xffff) == layers[0] ? 0 : 1);
    }

    function _leaf(Trace storage t, uint256 index) internal view returns (bytes memory leaf) {
        leaf = new bytes(t.leafSize);
        bytes storage all = t.leaves;
        for (uint256 i = 0; i < t.leafSize; i++) leaf[i] = all[index * t.leafSize + i];
    }

    mapping(bytes32 => bytes) internal openingCache; // keccak(root, seed) → the opening (built once)

    function _opening(Trace storage t, bytes32 seed) internal returns (bytes memory out) {
        bytes32 key = keccak256(abi.encode(t.root, seed));
        out = openingCache[key];
        if (out.length > 0) return out;
        uint256[] memory cells = _openedCells(seed, t.numPositions);
        bytes memory all = t.leaves;
        uint256 size = t.leafSize;
        out = new bytes(cells.length * size);
        for (uint256 i = 0; i < cells.length; i++) {
            uint256 from = _leafIndex(cells[i]) * size;
            for (uint256 k = 0; k < size; k++) out[i * size + k] = all[from + k];
        }
        openingCache[key] = out;
    }
}
