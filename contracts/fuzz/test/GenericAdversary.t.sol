// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import "./Ledger.sol";

/// The campaign's one target: every move the fuzzer makes goes through here, then the honest
/// duties run and the ledger reads the move's logs.
contract Handler is Ledger {
    uint256 public calls;

    constructor() {
        _load(vm.envOr("FUZZ_WORLD", string("world")));
        for (uint256 i = 0; i <= NODES; i++) {
            initialStake[i] = registry.getStake(actors[i].addr);
            initialCredit[i] = jobs.credits(actors[i].addr);
        }
        vm.recordLogs();
    }

    function setTotal() external {
        totalWei = _balances();
    }

    function _balances() internal view returns (uint256 sum) {
        for (uint256 i = 0; i < actors.length; i++) sum += actors[i].addr.balance;
        sum += address(registry).balance + address(jobs).balance + address(batches).balance + address(disputes).balance
            + address(delivery).balance + address(coverage).balance + address(this).balance;
    }

    uint256 internal dutiesBlock;
    bool internal dutiesActed; // the honest parties' last pass changed the chain: the next pass looks at every audit

    /// After a move: read its logs; the honest parties act when the chain changed (a new block, or
    /// the move landed and logged something), then their own logs are read.
    function _after(uint256 move_) internal {
        lastMove = move_;
        bool changed = _ledger() > 0;
        if (changed || block.number != dutiesBlock) {
            dutiesBlock = block.number;
            _duties(changed || dutiesActed);
            dutiesActed = _ledger() > 0;
            _check(); // the chain changed: the state invariants, latched (a move that reverted changed nothing)
        }
        calls += 1;
    }

    function _check() internal {
        if (violations > 0) return;
        string memory breach = this.floorBreach();
        if (bytes(breach).length == 0) breach = this.conservationBreach();
        if (bytes(breach).length > 0) _record(string.concat(breach, " (after ", _moveName(), ")"));
    }

    /// The generic adversary's move (see Adversary).
    function move(uint8 fn, uint256 seed, uint8 who) external {
        vm.recordLogs();
        _move(fn, seed, who);
        _after(1 + (uint256(fn) % FUNCTIONS) * 16 + who % IDENTITIES);
    }

    /// The colluders' seat move (see Adversary._coalitionMove).
    function coalition(uint256 seed) external {
        vm.recordLogs();
        _coalitionMove(seed);
        _after(type(uint256).max - 1);
    }

    /// An honest client's job (see Honest._serve).
    function serve(uint256 seed) external {
        vm.recordLogs();
        _serve(seed);
        _after(type(uint256).max);
    }

    /// Time passes: 1–3 blocks, or to a window edge of an audit or batch (its last block or the one after).
    function roll(uint256 seed) external {
        vm.recordLogs();
        lastMove = 0;
        uint256 target = block.number + 1 + seed % 3;
        if (seed % 4 == 0 && auditIds.length > 0) {
            uint256 a = auditIds[auditIds.length - 1 - (seed >> 8) % (auditIds.length < 6 ? auditIds.length : 6)];
            RoundState memory s = jobs.getRoundState(a, jobs.getAudit(a).round);
            uint64[8] memory edges = [s.deadlines.drawAfter, s.deadlines.drawBy, s.deadlines.commitBy, s.deadlines.challengeAfter,
                s.deadlines.workerOpenBy, s.deadlines.membersSealBy, s.deadlines.membersOpenBy, s.deadlines.disputeBy];
            uint256 edge = uint256(edges[(seed >> 16) % 8]) + (seed >> 24) % 2;
            if (edge > block.number && edge <= block.number + 40) target = edge;
        }
        // block by block: an honest node acts in every block (its duties never wait for a jump)
        while (block.number < target) {
            vm.roll(block.number + 1);
            vm.warp(block.timestamp + 1);
            if (block.number < target) {
                _duties(dutiesActed);
                dutiesActed = _ledger() > 0;
            }
        }
        _after(0);
    }

    // --- read by the invariants ---------------------------------------------------------------
    function floorBreach() external view returns (string memory) {
        for (uint256 i = 0; i < NODES; i++) {
            if (actors[i].role != HONEST) continue;
            uint256 now_ = registry.getStake(actors[i].addr) + jobs.credits(actors[i].addr);
            uint256 floor = initialStake[i] + initialCredit[i];
            floor = floor > allowed[i] ? floor - allowed[i] : 0;
            if (now_ < floor) {
                return string.concat("honest node ", vm.toString(i), " holds ", vm.toString(now_), " wei of stake and credit, below its floor ",
                    vm.toString(floor), " (lost outside any rule's bound)");
            }
        }
        return "";
    }

    function conservationBreach() external view returns (string memory) {
        uint256 sum = _balances();
        if (sum != totalWei + dealtWei) return string.concat("wei not conserved: ", vm.toString(sum), " now, ", vm.toString(totalWei), " at the start");
        uint256 stakes;
        for (uint256 i = 0; i < actors.length; i++) stakes += registry.getStake(actors[i].addr);
        if (address(registry).balance != stakes) {
            return string.concat("Registry holds ", vm.toString(address(registry).balance), " wei for ", vm.toString(stakes), " of stake");
        }
        uint256 owed;
        for (uint256 i = 0; i < actors.length; i++) owed += jobs.credits(actors[i].addr);
        (, bytes memory pool) = address(jobs).staticcall(abi.encodeWithSignature("feePoolWei()"));
        owed += abi.decode(pool, (uint256));
        if (address(jobs).balance < owed) {
            return string.concat("Jobs holds ", vm.toString(address(jobs).balance), " wei for ", vm.toString(owed), " of credits and pool");
        }
        return "";
    }

    function count(string calldata what) external view returns (uint256) {
        return counts[keccak256(bytes(what))];
    }

    function landedMoves() external view returns (uint256 total, uint256 landedTotal) {
        for (uint256 i = 0; i < FUNCTIONS; i++) {
            total += sent[i];
            landedTotal += landed[i];
        }
    }
}

/// The world loaded and the handler deployed (shared by the campaign and the smoke test).
abstract contract WorldSetup {
    Vm internal constant vm = Vm(VM_ADDRESS);
    Handler internal handler;

    struct FuzzSelector {
        address addr;
        bytes4[] selectors;
    }

    function setUp() public {
        // FUZZ_WORLD: another world directory (the can-fail check's, built from a changed contract)
        string memory dir = vm.envOr("FUZZ_WORLD", string("world"));
        vm.loadAllocs(string.concat(dir, "/allocs.json"));
        string memory j = vm.readFile(string.concat(dir, "/world.json"));
        vm.roll(vm.parseJsonUint(j, ".blockNumber"));
        vm.warp(vm.parseJsonUint(j, ".timestamp"));
        handler = new Handler();
        handler.setTotal();
    }




    /// The ledger, the honest floors and conservation (see invariant_ledger).
    function _assertLedger() internal view {
        require(handler.violations() == 0, handler.firstViolation());
        string memory breach = handler.floorBreach();
        require(bytes(breach).length == 0, breach);
        breach = handler.conservationBreach();
        require(bytes(breach).length == 0, breach);
    }
}

/// The campaign: forge calls the handler's moves, `runs` × `depth` of them, and asserts the
/// invariant at the end of each run (the handler checks after every call: foundry.toml).
contract GenericAdversaryInvariant is WorldSetup {
    /// After each run: what it did, one line (the campaign's report sums them: scripts/forge_fuzz.py).
    function afterInvariant() public view {
        (uint256 moves, uint256 landedMoves) = handler.landedMoves();
        string memory line = string.concat("run: calls ", vm.toString(handler.calls()), " moves ", vm.toString(moves), " landed ",
            vm.toString(landedMoves), " served ", vm.toString(handler.count("honest:served")), " started ", vm.toString(handler.count("honest:started")),
            " settled ", vm.toString(handler.count("audit settled")), " appealed ", vm.toString(handler.count("honest:appealed")));
        line = string.concat(line, " contests-answered ", vm.toString(handler.count("honest:answered contest")), " inclusion-proved ",
            vm.toString(handler.count("honest:proved inclusion")), " deciders-drawn ", vm.toString(handler.count("decider drawn")),
            " deciders-settled ", vm.toString(handler.count("decider settled")), " deciders-abandoned ", vm.toString(handler.count("decider abandoned")));
        line = string.concat(line, " (pool-exhausted ", vm.toString(handler.count("decider abandoned: pool exhausted")), " never-drawn ",
            vm.toString(handler.count("decider abandoned: committee never drawn")), " members-missing ",
            vm.toString(handler.count("decider abandoned: members missing")), ") block ", vm.toString(block.number));
        address(0x000000000000000000636F6e736F6c652e6c6f67).staticcall(abi.encodeWithSignature("log(string)", line));
    }

    /// Weights (a selector listed twice is drawn twice as often): the adversary's moves 5 and its
    /// colluders' seat moves 2 of 11, time 3, an honest job 1.
    function targetSelectors() public view returns (FuzzSelector[] memory out) {
        out = new FuzzSelector[](1);
        bytes4[] memory s = new bytes4[](11);
        for (uint256 i = 0; i < 5; i++) s[i] = Handler.move.selector;
        s[5] = Handler.coalition.selector;
        s[6] = Handler.coalition.selector;
        for (uint256 i = 7; i < 10; i++) s[i] = Handler.roll.selector;
        s[10] = Handler.serve.selector;
        out[0] = FuzzSelector(address(handler), s);
    }

    function targetContracts() public view returns (address[] memory out) {
        out = new address[](1);
        out[0] = address(handler);
    }

    /// One invariant function (forge runs one campaign per invariant function): after every call,
    /// (1) no take from an honest party above its rule's bound and no convicted cheat keeping its
    /// stake (the ledger), (2) every honest node's stake + credit at or above its floor less what
    /// the ledger allowed, (3) wei conserved: every balance together is what it was (plus what the
    /// adversary was given for its moves), the Registry holds exactly the stakes, Jobs at least its
    /// credits and pool.
    function invariant_ledger() public view {
        _assertLedger();
    }

}
