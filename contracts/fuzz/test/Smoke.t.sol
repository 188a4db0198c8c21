// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import "./GenericAdversary.t.sol";

/// A fixed sequence through the handler (no fuzzing): the actors work (honest jobs are batched,
/// drawn, started, audited and settled while the adversary moves) and the ledger holds.
contract SmokeTest is WorldSetup {
    function _log(string memory what, uint256 v) internal view {
        address(0x000000000000000000636F6e736F6c652e6c6f67).staticcall(abi.encodeWithSignature("log(string,uint256)", what, v));
    }

    function test_actors_work_and_the_ledger_holds() public {
        uint256 g = gasleft();
        for (uint256 i = 0; i < 400; i++) {
            if (i % 10 == 0) handler.serve(i * 977);
            else if (i % 3 == 0) handler.roll(i * 31);
            else handler.move(uint8(i * 7), i * 1000003, uint8(i));
        }
        _log("gas per call", (g - gasleft()) / 400);
        require(handler.count("honest:started") > 0, "no honest job was started");
        require(handler.count("audit settled") > 0, "no audit settled");
        (, uint256 landed) = handler.landedMoves();
        require(landed > 0, "no adversary move landed");
        _assertLedger();
    }
}
