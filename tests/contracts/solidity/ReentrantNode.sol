// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// Test-only: a node (and challenger) contract that tries to re-enter Registry.withdraw and
/// Jobs.claim from its receive() while being paid. `reentered` records whether it got in.
contract ReentrantNode {
    address public immutable registry;
    address public immutable jobs;
    address public immutable disputes;
    bytes public reentry; // the call made from receive(), empty = none
    bool public reentered;
    uint256 public received;

    constructor(address registry_, address jobs_, address disputes_) {
        registry = registry_;
        jobs = jobs_;
        disputes = disputes_;
    }

    function register(uint256[4] calldata pk, uint256[2] calldata pop, bytes32 model) external payable {
        bytes32[] memory models = new bytes32[](1);
        models[0] = model;
        _call(registry, msg.value, abi.encodeWithSignature("register(uint256[4],uint256[2],string,bytes32[])", pk, pop, "http://attacker", models));
    }

    function deregister() external {
        _call(registry, 0, abi.encodeWithSignature("deregister()"));
    }

    function withdraw() external {
        reentry = abi.encodeWithSignature("withdraw()");
        _call(registry, 0, reentry);
    }

    function contest(uint256 auditId, uint8 round, uint8 slot, uint32[] calldata positions, uint16[] calldata layers) external payable {
        _call(disputes, msg.value, abi.encodeWithSignature("contest(uint256,uint8,uint8,uint32[],uint16[])", auditId, round, slot, positions, layers));
    }

    function claim() external {
        reentry = abi.encodeWithSignature("claim()");
        _call(jobs, 0, reentry);
    }

    receive() external payable {
        received += msg.value;
        if (reentry.length == 0) return;
        address target = keccak256(reentry) == keccak256(abi.encodeWithSignature("claim()")) ? jobs : registry;
        bytes memory data = reentry;
        delete reentry;
        (bool ok,) = target.call(data);
        reentered = ok;
    }

    function _call(address target, uint256 value, bytes memory data) private {
        (bool ok, bytes memory result) = target.call{value: value}(data);
        if (!ok) {
            assembly {
                revert(add(result, 32), mload(result))
            }
        }
    }
}
