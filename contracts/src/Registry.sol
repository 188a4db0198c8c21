// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {BlsVrf} from "./BlsVrf.sol";
import {Params, ProtocolParams} from "./Params.sol";
import {Sortition} from "./Sortition.sol";
import {StakeTree} from "./StakeTree.sol";

/// @notice Nodes (workers and dispatchers alike): stake, keys, endpoint, models served, and the
/// stake-weighted sortition that draws audit committees. Only the Jobs, Disputes and Coverage contracts
/// may slash or lock stake. A node is *active* (may post batches, serves jobs) while registered,
/// not deregistering and staked at least minStakeWei; a slash below that deactivates it until
/// it tops up. Draws do not read the live table: every change of a node's weight for a model
/// (register, topUp, updateModels, deregister, slash) takes effect for draws at the next epoch
/// (epochBlocks), and a draw reads the weights of a given epoch, fixed when the epoch begins,
/// before its seed exists (StakeTree: O(log n) draws and writes). A node that unbonded, was
/// slashed or fell below the minimum stake at or before a draw's seed block sits that draw out
/// (outBlock); one that did so after it keeps its seat: nothing after a seed block changes the
/// committee it draws.
contract Registry is ReentrancyGuard {
    struct Node {
        uint256 stakeWei;
        uint64 unbondingEndBlock; // 0 while not deregistering
        uint32 locks; // audits this node is a party to; withdrawal waits for 0
        bool registered;
        bool listed; // in the sortition lists of its models
        // The first block of its epoch in which it was slashed or left below the minimum stake,
        // one per epoch parity: the two epochs a draw may read (outBlock).
        uint64 outInEvenEpoch;
        uint64 outInOddEpoch;
        uint256[4] vrfPublicKey; // BN254 G2 point (EIP-197 word order)
        string endpoint;
        bytes32[] models;
    }

    struct ModelConfig {
        bool known;
        uint8 fingerprintDims;
        uint16 minCellsForRms;
        uint16[] committedLayers;
        uint32[] maxCellErrorPpb; // per committed layer, same order
        uint32[] rmsErrorPpb;
    }

    uint256 public constant MAX_MODELS_PER_NODE = 16;

    address public immutable deployer;
    uint256 public immutable minStakeWei;
    uint256 public immutable slashFractionBps;
    uint256 public immutable unbondingBlocks;
    uint256 public immutable epochBlocks;
    /// keccak256(abi.encode(params)): the parameters validated here, once, and checked by every
    /// other contract's constructor (one place validates the timeline: Params.validate).
    bytes32 public immutable paramsHash;
    address public jobs;
    address public batches;
    address public disputes;
    address public coverage; // the omission challenge (Coverage.sol): slashes and locks too
    address public delivery; // undelivered jobs (Delivery.sol): slashes a defaulting worker, nothing else

    mapping(address => Node) private nodes;
    /// The block a registered node last stopped being active (unbonded, or left below the minimum
    /// stake): a dispatcher may still post the batches it promised while active until they fall
    /// due (Batches.postBatch; docs/protocol.md §12 "Batching promises", Keepability).
    mapping(address => uint64) private inactiveFrom;
    using StakeTree for StakeTree.Tree;

    mapping(bytes32 => StakeTree.Tree) private trees; // per model: the sortition weights
    mapping(bytes32 => ModelConfig) private modelConfigs;

    event ModelAdded(bytes32 indexed modelId, uint16[] committedLayers, uint8 fingerprintDims);
    event Registered(address indexed node, uint256 stakeWei, string endpoint, bytes32[] models);
    event EndpointUpdated(address indexed node, string endpoint);
    event ModelsUpdated(address indexed node, bytes32[] models);
    event StakeAdded(address indexed node, uint256 amountWei, uint256 stakeWei);
    event Deregistered(address indexed node, uint256 unbondingEndBlock);
    event Withdrawn(address indexed node, uint256 amountWei);
    event Slashed(address indexed node, uint256 amountWei, uint256 stakeLeftWei, address by);

    error NotDeployer();
    error NotProtocol();
    error AlreadyBound();
    error AlreadyRegistered();
    error NotRegistered(address node);
    error StakeTooLow(uint256 givenWei, uint256 minWei);
    error InvalidProofOfPossession();
    error UnknownModel(bytes32 modelId);
    error ModelExists(bytes32 modelId);
    error InvalidModelConfig(string reason);
    error BadModelList(string reason);
    error Deregistering();
    error NotDeregistering();
    error StillUnbonding(uint256 untilBlock);
    error StakeLocked(uint32 audits);
    error TransferFailed();
    error EpochNotReadable(uint256 epoch, uint256 currentEpoch);

    modifier onlyDeployer() {
        if (msg.sender != deployer) revert NotDeployer();
        _;
    }

    modifier onlyProtocol() {
        _onlyProtocol();
        _;
    }

    function _onlyProtocol() private view {
        if (msg.sender != jobs && msg.sender != batches && msg.sender != disputes && msg.sender != coverage) revert NotProtocol();
    }

    constructor(ProtocolParams memory p) {
        Params.validate(p);
        paramsHash = keccak256(abi.encode(p));
        deployer = msg.sender;
        minStakeWei = p.minStakeWei;
        slashFractionBps = p.slashFractionBps;
        unbondingBlocks = p.unbondingBlocks;
        epochBlocks = p.epochBlocks;
    }

    // --- deployment ------------------------------------------------------------------------

    /// @notice Name the three contracts allowed to slash and lock, and Delivery, allowed only to
    /// slash (once, by the deployer).
    function bindProtocol(address jobs_, address batches_, address disputes_, address delivery_) external onlyDeployer {
        if (jobs != address(0)) revert AlreadyBound();
        jobs = jobs_;
        batches = batches_;
        disputes = disputes_;
        delivery = delivery_;
    }

    /// @notice Name the omission challenge contract, which may slash and lock too (once, by the deployer).
    function bindCoverage(address coverage_) external onlyDeployer {
        if (coverage != address(0)) revert AlreadyBound();
        coverage = coverage_;
    }

    /// @notice Add a model and its on-chain tolerance thresholds. A model's config never changes:
    /// a new calibration is a new manifest, hence a new model id.
    function addModel(
        bytes32 modelId,
        uint8 fingerprintDims,
        uint16 minCellsForRms,
        uint16[] calldata committedLayers,
        uint32[] calldata maxCellErrorPpb,
        uint32[] calldata rmsErrorPpb
    ) external onlyDeployer {
        if (modelConfigs[modelId].known) revert ModelExists(modelId);
        if (fingerprintDims == 0 || committedLayers.length == 0) revert InvalidModelConfig("no fingerprint dims or no committed layers");
        if (maxCellErrorPpb.length != committedLayers.length || rmsErrorPpb.length != committedLayers.length) {
            revert InvalidModelConfig("one threshold per committed layer");
        }
        for (uint256 i = 1; i < committedLayers.length; i++) {
            if (committedLayers[i] <= committedLayers[i - 1]) revert InvalidModelConfig("committed layers must increase");
        }
        modelConfigs[modelId] = ModelConfig(true, fingerprintDims, minCellsForRms, committedLayers, maxCellErrorPpb, rmsErrorPpb);
        emit ModelAdded(modelId, committedLayers, fingerprintDims);
    }

    // --- nodes -----------------------------------------------------------------------------

    /// @notice Register msg.sender with its stake (msg.value), BN254 VRF public key, a proof of
    /// possession of that key bound to msg.sender (BlsVrf.verifyPossession), an endpoint URL
    /// and the model ids it serves.
    function register(
        uint256[4] calldata vrfPublicKey,
        uint256[2] calldata possessionProof,
        string calldata endpoint,
        bytes32[] calldata models
    ) external payable nonReentrant {
        Node storage node = nodes[msg.sender];
        if (node.registered) revert AlreadyRegistered();
        if (msg.value < minStakeWei) revert StakeTooLow(msg.value, minStakeWei);
        _checkModels(models);
        if (!BlsVrf.verifyPossession(vrfPublicKey, msg.sender, possessionProof)) revert InvalidProofOfPossession();
        node.registered = true;
        node.stakeWei = msg.value;
        node.vrfPublicKey = vrfPublicKey;
        node.endpoint = endpoint;
        node.models = models;
        _list(node);
        _syncWeights(msg.sender, node);
        emit Registered(msg.sender, msg.value, endpoint, models);
    }

    function updateEndpoint(string calldata endpoint) external {
        _requireRegistered(msg.sender);
        nodes[msg.sender].endpoint = endpoint;
        emit EndpointUpdated(msg.sender, endpoint);
    }

    function updateModels(bytes32[] calldata models) external {
        Node storage node = _requireRegistered(msg.sender);
        if (node.unbondingEndBlock != 0) revert Deregistering();
        _checkModels(models);
        uint256 epoch = currentEpoch();
        for (uint256 i = 0; i < node.models.length; i++) {
            if (!_listed(models, node.models[i])) trees[node.models[i]].set(msg.sender, 0, epoch); // dropped
        }
        node.models = models;
        _syncWeights(msg.sender, node);
        emit ModelsUpdated(msg.sender, models);
    }

    /// @notice Add stake; a node slashed below the minimum becomes active again once topped up.
    function topUp() external payable {
        Node storage node = _requireRegistered(msg.sender);
        if (node.unbondingEndBlock != 0) revert Deregistering();
        node.stakeWei += msg.value;
        _list(node);
        _syncWeights(msg.sender, node);
        emit StakeAdded(msg.sender, msg.value, node.stakeWei);
    }

    /// @notice Leave ("unbond"): no batches from now, and no seat in any round whose committee
    /// seed block is this block or later (drawCommittee); the stake stays slashable until
    /// withdrawal, after unbondingBlocks ≥ the longest duty a leaver can still have
    /// (Params.timeline: leaverDutySpan).
    function deregister() external {
        Node storage node = _requireRegistered(msg.sender);
        if (node.unbondingEndBlock != 0) revert Deregistering();
        node.unbondingEndBlock = uint64(block.number + unbondingBlocks);
        _unlist(msg.sender, node);
        _syncWeights(msg.sender, node);
        emit Deregistered(msg.sender, node.unbondingEndBlock);
    }

    /// @notice Take the stake back after the unbonding period, once no audit holds it.
    function withdraw() external nonReentrant {
        Node storage node = _requireRegistered(msg.sender);
        if (node.unbondingEndBlock == 0) revert NotDeregistering();
        if (block.number < node.unbondingEndBlock) revert StillUnbonding(node.unbondingEndBlock);
        if (node.locks != 0) revert StakeLocked(node.locks);
        uint256 amount = node.stakeWei;
        delete nodes[msg.sender];
        delete inactiveFrom[msg.sender];
        emit Withdrawn(msg.sender, amount);
        (bool ok,) = msg.sender.call{value: amount}("");
        if (!ok) revert TransferFailed();
    }

    // --- protocol hooks (Jobs, Disputes, Coverage) ---------------------------------------------------

    /// @notice Slash slashFractionBps of `node`'s stake and send it to the calling contract,
    /// which pays the reward and books the rest.
    function slash(address node_) external nonReentrant returns (uint256 amountWei) {
        if (msg.sender != delivery) _onlyProtocol();
        return _take(node_, slashFractionBps, true);
    }

    /// @notice Take `bps` of `node`'s stake (a member's minority vote or missed opening: a
    /// penalty, not the slash of a provable lie) and send it to the calling contract.
    function penalize(address node_, uint256 bps) external onlyProtocol nonReentrant returns (uint256 amountWei) {
        return _take(node_, bps < slashFractionBps ? bps : slashFractionBps, false);
    }

    function _take(address node_, uint256 bps, bool isSlash) private returns (uint256 amountWei) {
        Node storage node = _requireRegistered(node_);
        amountWei = node.stakeWei * bps / Params.BPS;
        node.stakeWei -= amountWei;
        if (node.stakeWei < minStakeWei) _unlist(node_, node);
        // The new stake weighs from the next epoch, as every change does. A slashed node, or one
        // left below the minimum, sits out every draw seeded from this block on until then
        // (outBlock) and keeps the seats of draws seeded before: a slash after a seed block
        // cannot re-roll its committee. A penalty that leaves the minimum at stake excludes
        // nothing (a minority of honest members outvoted is not dropped from the epoch's draws).
        if (isSlash || node.stakeWei < minStakeWei) _recordOut(node);
        _syncWeights(node_, node);
        emit Slashed(node_, amountWei, node.stakeWei, msg.sender);
        (bool ok,) = msg.sender.call{value: amountWei}("");
        if (!ok) revert TransferFailed();
    }

    function lock(address node_) external onlyProtocol {
        _requireRegistered(node_).locks += 1;
    }

    function unlock(address node_) external onlyProtocol {
        Node storage node = nodes[node_];
        if (node.locks > 0) node.locks -= 1;
    }

    // --- views -----------------------------------------------------------------------------

    function isActive(address node_) public view returns (bool) {
        return nodes[node_].listed;
    }

    /// @notice The block `node_` stopped being active if it is registered and inactive now (it
    /// unbonded, or a slash or penalty left it below the minimum stake; the first such block
    /// since it was last active), else 0.
    function inactiveSince(address node_) external view returns (uint256) {
        Node storage n = nodes[node_];
        return n.registered && !n.listed ? inactiveFrom[node_] : 0;
    }

    function isRegistered(address node_) external view returns (bool) {
        return nodes[node_].registered;
    }

    /// @notice Whether `node_` is registered, and the block it unbonded in (0: it has not).
    function leaveOf(address node_) external view returns (bool registered, uint64 leftBlock) {
        Node storage n = nodes[node_];
        return (n.registered, _leftBlock(n));
    }

    function getNode(address node_)
        external
        view
        returns (uint256 stakeWei, uint64 unbondingEndBlock, uint32 locks, bool registered, bool active, string memory endpoint, bytes32[] memory models)
    {
        Node storage n = nodes[node_];
        return (n.stakeWei, n.unbondingEndBlock, n.locks, n.registered, n.listed, n.endpoint, n.models);
    }

    /// @notice The first block from which `node_` takes no seat in draws of `epoch` (0: none):
    /// the block it unbonded in, or the first block of `epoch` or later in which it was slashed
    /// or left below the minimum stake (its weight in `epoch` predates it). One in an earlier
    /// epoch is already in the weights `epoch` reads; a penalty that leaves the minimum is none.
    function outBlock(address node_, uint256 epoch) public view returns (uint256 out) {
        Node storage n = nodes[node_];
        out = _leftBlock(n);
        uint256[2] memory taken = [uint256(n.outInEvenEpoch), uint256(n.outInOddEpoch)];
        for (uint256 i = 0; i < 2; i++) {
            if (taken[i] != 0 && taken[i] / epochBlocks >= epoch && (out == 0 || taken[i] < out)) out = taken[i];
        }
    }

    function getVrfPublicKey(address node_) external view returns (uint256[4] memory) {
        return _requireRegistered(node_).vrfPublicKey;
    }

    function getStake(address node_) external view returns (uint256) {
        return nodes[node_].stakeWei;
    }

    function getModelConfig(bytes32 modelId) external view returns (ModelConfig memory) {
        if (!modelConfigs[modelId].known) revert UnknownModel(modelId);
        return modelConfigs[modelId];
    }

    function currentEpoch() public view returns (uint256) {
        return block.number / epochBlocks;
    }

    function epochOf(uint256 blockNumber) external view returns (uint256) {
        return blockNumber / epochBlocks;
    }

    /// @notice `node_`'s weight for `modelId` in draws of `epoch`: its stake if it was active and
    /// serving the model at the end of the epoch before (0 below the minimum stake); nothing
    /// during `epoch` changes it (outBlock says from when it sits out draws of `epoch`).
    /// Readable: the previous, the current and any later epoch.
    function weightAt(bytes32 modelId, address node_, uint256 epoch) public view returns (uint256) {
        _requireReadable(epoch, true);
        return trees[modelId].weightOf(node_, epoch);
    }

    /// @notice The model's sortition slots, in order, with their weights now (a node's current
    /// stake while active and serving the model, else 0); address(0) for an unused slot.
    function getModelNodes(bytes32 modelId) public view returns (address[] memory candidates, uint256[] memory stakesWei) {
        return getModelWeights(modelId, currentEpoch() + 1);
    }

    /// @notice The sortition table of `epoch`: slot owners in order and their weights (a slot
    /// reused by a new node weighed 0 in every readable epoch before it).
    function getModelWeights(bytes32 modelId, uint256 epoch) public view returns (address[] memory candidates, uint256[] memory weightsWei) {
        _requireReadable(epoch, true);
        return trees[modelId].table(epoch);
    }

    /// @notice Slots handed out for `modelId` and the Fenwick range (a power of two): a draw
    /// descends log2(capacity) levels.
    function getTreeSize(bytes32 modelId) external view returns (uint256 slots, uint256 capacity) {
        return (trees[modelId].slots, trees[modelId].capacity);
    }

    /// @notice Draw `size` distinct nodes serving `modelId`, none of them in `excluded`, with
    /// probability proportional to their weight in `epoch` (verillm.spec.audit.compute_committee
    /// over getModelWeights), and none out of it at or before `seedBlock` (outBlock: unbonded,
    /// slashed, or below the minimum stake): a pick that is out is excluded and the draw repeated
    /// (verillm.spec.audit.compute_round_committee). A node that leaves or is slashed before a
    /// seed exists takes no seat from it, and nobody can re-roll a committee after its seed block
    /// by leaving or by slashing one of its members: every input is fixed by then. Only the current and the previous epoch are readable (a node gone
    /// for two epochs may have withdrawn); a pool with fewer than `size` candidates reverts
    /// NotEnoughCandidates. O(size × log2(slots)) reads per pass (StakeTree.draw).
    function drawCommittee(
        bytes32 modelId,
        bytes32 seed,
        uint8 attempt,
        uint256 size,
        address[] calldata excluded,
        uint256 epoch,
        uint256 seedBlock
    ) external view returns (address[] memory chosen) {
        _requireReadable(epoch, false);
        address[] memory out = excluded;
        while (true) {
            chosen = trees[modelId].draw(seed, attempt, size, out, epoch);
            uint256 gone;
            for (uint256 i = 0; i < chosen.length; i++) {
                uint256 out_ = outBlock(chosen[i], epoch);
                if (out_ != 0 && out_ <= seedBlock) gone++;
            }
            if (gone == 0) return chosen;
            address[] memory more = new address[](out.length + gone);
            for (uint256 i = 0; i < out.length; i++) {
                more[i] = out[i];
            }
            uint256 k = out.length;
            for (uint256 i = 0; i < chosen.length; i++) {
                uint256 out_ = outBlock(chosen[i], epoch);
                if (out_ != 0 && out_ <= seedBlock) more[k++] = chosen[i];
            }
            out = more;
        }
    }

    /// @notice The pure sortition, exposed so tests compare it with the Python spec.
    function computeCommittee(bytes32 seed, uint8 attempt, uint256 size, address[] calldata candidates, uint256[] calldata weights)
        external
        pure
        returns (address[] memory)
    {
        return Sortition.draw(seed, attempt, size, candidates, weights);
    }

    // --- internals -------------------------------------------------------------------------

    function _leftBlock(Node storage n) private view returns (uint64) {
        return n.unbondingEndBlock == 0 ? 0 : uint64(n.unbondingEndBlock - unbondingBlocks);
    }

    function _requireRegistered(address node_) private view returns (Node storage node) {
        node = nodes[node_];
        if (!node.registered) revert NotRegistered(node_);
    }

    function _checkModels(bytes32[] calldata models) private view {
        if (models.length == 0 || models.length > MAX_MODELS_PER_NODE) revert BadModelList("serve between 1 and 16 models");
        for (uint256 i = 0; i < models.length; i++) {
            if (!modelConfigs[models[i]].known) revert UnknownModel(models[i]);
            for (uint256 j = 0; j < i; j++) {
                if (models[j] == models[i]) revert BadModelList("a model is listed twice");
            }
        }
    }

    function _listed(bytes32[] calldata models, bytes32 model) private pure returns (bool) {
        for (uint256 i = 0; i < models.length; i++) {
            if (models[i] == model) return true;
        }
        return false;
    }

    function _list(Node storage node) private {
        if (node.listed || node.stakeWei < minStakeWei || node.unbondingEndBlock != 0) return;
        node.listed = true;
    }

    function _unlist(address node_, Node storage node) private {
        if (!node.listed) return;
        node.listed = false;
        inactiveFrom[node_] = uint64(block.number);
    }

    function _requireReadable(uint256 epoch, bool laterToo) private view {
        uint256 now_ = currentEpoch();
        if ((epoch > now_ && !laterToo) || epoch + 1 < now_) revert EpochNotReadable(epoch, now_);
    }

    /// @dev Record the node's weight for each of its models, effective next epoch.
    function _syncWeights(address node_, Node storage node) private {
        uint256 weight = node.listed ? node.stakeWei : 0;
        uint256 epoch = currentEpoch();
        for (uint256 i = 0; i < node.models.length; i++) {
            trees[node.models[i]].set(node_, weight, epoch);
        }
    }

    /// @dev Keep the first block of this epoch in which `node` was slashed or left below the minimum.
    function _recordOut(Node storage node) private {
        uint256 epoch = currentEpoch();
        if (epoch % 2 == 0) {
            if (node.outInEvenEpoch == 0 || node.outInEvenEpoch / epochBlocks != epoch) node.outInEvenEpoch = uint64(block.number);
        } else if (node.outInOddEpoch == 0 || node.outInOddEpoch / epochBlocks != epoch) {
            node.outInOddEpoch = uint64(block.number);
        }
    }
}
