// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// A test-only contract for the chain layer's tests: state, events, every kind of revert.
contract ChainProbe {
    error ValueTooLow(uint256 required, uint256 sent);
    error NotOwner(address caller);

    event Stored(address indexed who, uint256 indexed slot, uint256 value);
    event Paid(address indexed from, uint256 amount);

    address public immutable owner;
    uint256 public immutable minValueWei;
    mapping(uint256 => uint256) public values;
    uint256 public count;

    constructor(uint256 minValueWei_) {
        owner = msg.sender;
        minValueWei = minValueWei_;
    }

    function store(uint256 slot, uint256 value) external {
        values[slot] = value;
        count += 1;
        emit Stored(msg.sender, slot, value);
    }

    function pay() external payable {
        if (msg.value < minValueWei) revert ValueTooLow(minValueWei, msg.value);
        emit Paid(msg.sender, msg.value);
    }

    function onlyOwner() external view returns (bool) {
        if (msg.sender != owner) revert NotOwner(msg.sender);
        return true;
    }

    function failWithMessage(string calldata message) external pure {
        require(false, message);
    }

    function failWithPanic(uint256 divisor) external pure returns (uint256) {
        return 1 / divisor;
    }

    function blockInfo() external view returns (uint256 number, uint256 timestamp) {
        return (block.number, block.timestamp);
    }
}
