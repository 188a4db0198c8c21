// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {BlsVrf} from "./BlsVrf.sol";
import {Params, ProtocolParams} from "./Params.sol";
import {Sortition} from "./Sortition.sol";

/// @notice Nodes (workers and dispatchers alike): stake, keys, endpoint, models served, and the
/// stake-weighted sortition that draws audit committees. Only the Jobs and Disputes contracts
/// may slash or lock stake. A node is *active* (drawable, may post batches) while registered,
/// not deregistering and staked at least minStakeWei; a slash below that deactivates it until
/// it tops up.
contract Registry is ReentrancyGuard {
    struct Node {
        uint256 stakeWei;
        uint64 unbondingEndBlock; // 0 while not deregistering
        uint32 locks; // audits this node is a party to; withdrawal waits for 0
        bool registered;
        bool listed; // in the sortition lists of its models
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
    address public jobs;
    address public disputes;

    mapping(address => Node) private nodes;
    mapping(bytes32 => address[]) private modelNodes;
    mapping(bytes32 => mapping(address => uint256)) private modelSlotPlusOne;
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

    modifier onlyDeployer() {
        if (msg.sender != deployer) revert NotDeployer();
        _;
    }

    modifier onlyProtocol() {
        if (msg.sender != jobs && msg.sender != disputes) revert NotProtocol();
        _;
    }

    constructor(ProtocolParams memory p) {
        Params.validate(p);
        deployer = msg.sender;
        minStakeWei = p.minStakeWei;
        slashFractionBps = p.slashFractionBps;
        unbondingBlocks = p.unbondingBlocks;
    }

    // --- deployment ------------------------------------------------------------------------

    /// @notice Name the two contracts allowed to slash and lock (once, by the deployer).
    function bindProtocol(address jobs_, address disputes_) external onlyDeployer {
        if (jobs != address(0)) revert AlreadyBound();
        jobs = jobs_;
        disputes = disputes_;
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
        _list(msg.sender, node);
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
        _unlist(msg.sender, node);
        node.models = models;
        _list(msg.sender, node);
        emit ModelsUpdated(msg.sender, models);
    }

    /// @notice Add stake; a node slashed below the minimum becomes active again once topped up.
    function topUp() external payable {
        Node storage node = _requireRegistered(msg.sender);
        if (node.unbondingEndBlock != 0) revert Deregistering();
        node.stakeWei += msg.value;
        _list(msg.sender, node);
        emit StakeAdded(msg.sender, msg.value, node.stakeWei);
    }

    /// @notice Leave: no new draws or batches from now; stake stays slashable until withdrawal.
    function deregister() external {
        Node storage node = _requireRegistered(msg.sender);
        if (node.unbondingEndBlock != 0) revert Deregistering();
        node.unbondingEndBlock = uint64(block.number + unbondingBlocks);
        _unlist(msg.sender, node);
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
        emit Withdrawn(msg.sender, amount);
        (bool ok,) = msg.sender.call{value: amount}("");
        if (!ok) revert TransferFailed();
    }

    // --- protocol hooks (Jobs, Disputes) ---------------------------------------------------

    /// @notice Slash slashFractionBps of `node`'s stake and send it to the calling contract,
    /// which pays the reward and books the rest.
    function slash(address node_) external onlyProtocol nonReentrant returns (uint256 amountWei) {
        Node storage node = _requireRegistered(node_);
        amountWei = node.stakeWei * slashFractionBps / Params.BPS;
        node.stakeWei -= amountWei;
        if (node.stakeWei < minStakeWei) _unlist(node_, node);
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

    function isRegistered(address node_) external view returns (bool) {
        return nodes[node_].registered;
    }

    function getNode(address node_)
        external
        view
        returns (uint256 stakeWei, uint64 unbondingEndBlock, uint32 locks, bool registered, bool active, string memory endpoint, bytes32[] memory models)
    {
        Node storage n = nodes[node_];
        return (n.stakeWei, n.unbondingEndBlock, n.locks, n.registered, n.listed, n.endpoint, n.models);
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

    /// @notice Active nodes serving `modelId`, in sortition order, with their stakes.
    function getModelNodes(bytes32 modelId) public view returns (address[] memory candidates, uint256[] memory stakesWei) {
        candidates = modelNodes[modelId];
        stakesWei = new uint256[](candidates.length);
        for (uint256 i = 0; i < candidates.length; i++) {
            stakesWei[i] = nodes[candidates[i]].stakeWei;
        }
    }

    /// @notice Draw `size` distinct active nodes serving `modelId`, none of them in `excluded`,
    /// with probability proportional to stake (verillm.spec.audit.compute_committee).
    function drawCommittee(bytes32 modelId, bytes32 seed, uint8 attempt, uint256 size, address[] calldata excluded)
        external
        view
        returns (address[] memory)
    {
        (address[] memory candidates, uint256[] memory weights) = getModelNodes(modelId);
        for (uint256 i = 0; i < candidates.length; i++) {
            for (uint256 j = 0; j < excluded.length; j++) {
                if (candidates[i] == excluded[j]) weights[i] = 0;
            }
        }
        return Sortition.draw(seed, attempt, size, candidates, weights);
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

    function _list(address node_, Node storage node) private {
        if (node.listed || node.stakeWei < minStakeWei || node.unbondingEndBlock != 0) return;
        node.listed = true;
        for (uint256 i = 0; i < node.models.length; i++) {
            bytes32 model = node.models[i];
            modelNodes[model].push(node_);
            modelSlotPlusOne[model][node_] = modelNodes[model].length;
        }
    }

    function _unlist(address node_, Node storage node) private {
        if (!node.listed) return;
        node.listed = false;
        for (uint256 i = 0; i < node.models.length; i++) {
            bytes32 model = node.models[i];
            address[] storage list = modelNodes[model];
            uint256 slot = modelSlotPlusOne[model][node_] - 1;
            address last = list[list.length - 1];
            list[slot] = last;
            modelSlotPlusOne[model][last] = slot + 1;
            list.pop();
            delete modelSlotPlusOne[model][node_];
        }
    }
}
