// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import "./Adversary.sol";

/// The loss ledger read from the logs of every move (tests/contracts/fuzz_ledger.py, the same
/// pairing): each `Registry.Slashed(node, amount, stakeLeft, by)` is paired with its rule's event
/// in the same move (Jobs.PartySlashed with its reason, Batches.DispatcherSlashed,
/// Coverage.OmissionSlashed, Delivery.DeliveryDefaulted, Disputes.ContestLost,
/// Disputes.Adjudicated); an honest node's take above its rule's bound is a violation.
contract Ledger is Adversary {
    bytes32 constant SLASHED = keccak256("Slashed(address,uint256,uint256,address)");
    bytes32 constant PARTY_SLASHED = keccak256("PartySlashed(uint256,address,uint256,string)");
    bytes32 constant DISPATCHER_SLASHED = keccak256("DispatcherSlashed(uint256,address,uint256,string)");
    bytes32 constant OMISSION_SLASHED = keccak256("OmissionSlashed(uint256,address,uint256)");
    bytes32 constant DELIVERY_DEFAULTED = keccak256("DeliveryDefaulted(uint256,address,uint256)");
    bytes32 constant CONTEST_LOST = keccak256("ContestLost(uint256,address,uint256)");
    bytes32 constant ADJUDICATED = keccak256("Adjudicated(uint256,uint8,uint8,address,bool,uint8)");
    bytes32 constant CONTRADICTED = keccak256("Contradicted(uint256,uint8,uint8,uint256)");
    bytes32 constant ROUND_DECIDED = keccak256("RoundDecided(uint256,uint8,uint8,uint8,uint8)");
    bytes32 constant CONTESTED = keccak256("Contested(uint256,uint256,uint8,uint8,address,uint32[],uint16[])");
    bytes32 constant AUDIT_STARTED = keccak256("AuditStarted(uint256,uint256,uint32,address,bytes32,uint32,bool)");
    bytes32 constant AUDIT_SETTLED = keccak256("AuditSettled(uint256,uint8)");
    bytes32 constant COMMITTEE_DRAWN = keccak256("CommitteeDrawn(uint256,uint8,uint8,address[])");
    bytes32 constant AUDIT_ABANDONED = keccak256("AuditAbandoned(uint256,uint8,string)");
    bytes32 constant OMISSION_CLAIMED = keccak256("OmissionClaimed(uint256,bytes32,address,address,uint64,uint64)");

    uint256 internal lastMove; // the move whose logs are being read: 1 + fn × 16 + identity for the adversary's, 0 roll, max serve

    function _moveName() internal view returns (string memory) {
        if (lastMove == 0) return "roll";
        if (lastMove == type(uint256).max) return "serve";
        if (lastMove == type(uint256).max - 1) return "coalition seat move";
        return string.concat("move ", vm.toString((lastMove - 1) / 16), " by identity ", vm.toString((lastMove - 1) % 16));
    }

    /// Reads the logs since the last call; returns how many there were.
    function _ledger() internal returns (uint256) {
        Vm.Log[] memory logs = vm.getRecordedLogs();
        for (uint256 i = 0; i < logs.length; i++) {
            bytes32 t0 = logs[i].topics.length > 0 ? logs[i].topics[0] : bytes32(0);
            if (t0 == SLASHED && logs[i].emitter == address(registry)) _take(logs, i);
            else if (t0 == CONTESTED) _contested(logs[i]);
            else if (t0 == ROUND_DECIDED && logs[i].emitter == address(jobs)) _decidedLog(logs[i]);
            else if (t0 == AUDIT_STARTED && logs[i].emitter == address(jobs)) {
                uint256 a = uint256(logs[i].topics[1]);
                if (jobOf[a] == 0 && (auditIds.length == 0 || auditIds[auditIds.length - 1] != a)) auditIds.push(a);
                _track(a);
            } else if (t0 == AUDIT_SETTLED && logs[i].emitter == address(jobs)) _settledLog(uint256(logs[i].topics[1]));
            else if ((t0 == COMMITTEE_DRAWN || t0 == AUDIT_ABANDONED) && logs[i].emitter == address(jobs)) _deciderLog(logs[i], t0);
            else if (t0 == OMISSION_CLAIMED && logs[i].emitter == address(coverage)) {
                _answerOmission(uint256(logs[i].topics[1]), logs[i].topics[2], address(uint160(uint256(logs[i].topics[3]))));
            }
        }
        vm.recordLogs();
        return logs.length;
    }

    function _contested(Vm.Log memory l) internal {
        uint256 c = uint256(l.topics[1]);
        (,, uint32[] memory positions, uint16[] memory ls) = abi.decode(l.data, (uint8, uint8, uint32[], uint16[]));
        delete contestCells[c];
        for (uint256 i = 0; i < positions.length; i++) contestCells[c].push(uint256(positions[i]) << 16 | ls[i]);
        contestIds.push(c);
    }

    function _seats(uint256 a, uint8 round) internal view returns (uint256 seats, uint256 bad) {
        RoundState memory s = jobs.getRoundState(a, round);
        seats = s.members;
        for (uint8 slot = 0; slot < seats; slot++) {
            if (_isColluder(jobs.getParty(a, round, slot + 1).node)) bad++;
        }
    }

    function _captured(uint256 a, uint8 round) internal view returns (bool) {
        (uint256 seats, uint256 bad) = _seats(a, round);
        return seats > 0 && 2 * bad >= seats;
    }

    /// How many of the audit's rounds (round 0, the appeal, its decider) the colluders hold at least half of.
    function _capturedRounds(uint256 a) internal view returns (uint256 n) {
        for (uint8 r = 0; r < 3; r++) if (_captured(a, r)) n++;
    }

    function _decidedLog(Vm.Log memory l) internal {
        uint256 a = uint256(l.topics[1]);
        (uint8 round, uint8 verdict, uint8 agree, uint8 disagree) = abi.decode(l.data, (uint8, uint8, uint8, uint8));
        (uint256 seats_, uint256 bad_) = _seats(a, round);
        _note(a, string.concat("round ", vm.toString(uint256(round)), " decided ", vm.toString(uint256(verdict)), " (", vm.toString(uint256(agree)), "-",
            vm.toString(uint256(disagree)), ", colluders ", vm.toString(bad_), "/", vm.toString(seats_), ")"));
        uint256 j = jobOf[a];
        if (j == 0 || !jobsTracked[j - 1].cheat || verdict != 2) return;
        (uint256 seats, uint256 bad) = _seats(a, round);
        if (2 * (seats - bad) > seats) convicted[a] = true;
    }

    /// Counts the decider rounds the campaign reaches (the report's "deciders" line): drawn, or
    /// abandoned in round 2 (nobody drew it, the pool could not staff it).
    function _deciderLog(Vm.Log memory l, bytes32 t0) internal {
        (uint8 round) = abi.decode(l.data, (uint8));
        if (round != 2) return;
        string memory what = "decider drawn";
        if (t0 == AUDIT_ABANDONED) {
            (, string memory reason) = abi.decode(l.data, (uint8, string));
            what = "decider abandoned";
            _count(string.concat("decider abandoned: ", reason));
        }
        _count(what);
        _note(uint256(l.topics[1]), what);
    }

    function _settledLog(uint256 a) internal {
        _count("audit settled");
        if (jobs.getAudit(a).round == 2) _count("decider settled");
        _note(a, "settled");
        // Issue 34: the verdict two rounds agree on is final, so a conviction by an honest round
        // is undone only when two other rounds were captured (the appeal and its decider).
        if (convicted[a] && !punished[a] && _capturedRounds(a) < 2 && registry.getStake(actors[CHEATER_NODE].addr) >= initialStake[CHEATER_NODE]) {
            _record(string.concat("convicted: the cheater's audit ", vm.toString(a), " was decided FAIL by an honest majority and settled; the cheater kept its stake (", _moveName(), ")"));
        }
    }

    /// The rule event of the take at `i`: (rule, audit id or max) of the same node (and amount).
    function _rule(Vm.Log[] memory logs, uint256 i, address node, uint256 amount) internal pure returns (string memory rule, uint256 audit) {
        audit = type(uint256).max;
        bool across;
        for (uint256 k = 0; k < logs.length; k++) if (logs[k].topics.length > 0 && logs[k].topics[0] == CONTRADICTED) across = true;
        // nearest after the Slashed log, else before it (Disputes emits Adjudicated before it slashes)
        for (uint256 step = 1; step < logs.length; step++) {
            for (uint256 dir = 0; dir < 2; dir++) {
                if (dir == 1 && step > i) continue;
                uint256 k = dir == 0 ? i + step : i - step;
                if (k >= logs.length || logs[k].topics.length < 3) continue;
                bytes32 t0 = logs[k].topics[0];
                if (address(uint160(uint256(logs[k].topics[2]))) != node) continue;
                if (t0 == PARTY_SLASHED) {
                    (uint256 amt, string memory reason) = abi.decode(logs[k].data, (uint256, string));
                    if (amt == amount) return (string.concat("Jobs.", reason), uint256(logs[k].topics[1]));
                } else if (t0 == DISPATCHER_SLASHED) {
                    (uint256 amt, string memory reason) = abi.decode(logs[k].data, (uint256, string));
                    if (amt == amount) return (string.concat("Batches.", reason), audit);
                } else if (t0 == OMISSION_SLASHED && abi.decode(logs[k].data, (uint256)) == amount) return ("Coverage.slashOmission", audit);
                else if (t0 == DELIVERY_DEFAULTED && abi.decode(logs[k].data, (uint256)) == amount) {
                    return ("Delivery.slashUndelivered", uint256(logs[k].topics[1]));
                } else if (t0 == CONTEST_LOST && abi.decode(logs[k].data, (uint256)) == amount) return ("Disputes.resolveContest", audit);
                else if (t0 == ADJUDICATED) {
                    return (across ? "Disputes.adjudicateAcrossRounds" : "Disputes.adjudicate", uint256(logs[k].topics[1]));
                }
            }
        }
        return ("unattributed", audit);
    }

    function _take(Vm.Log[] memory logs, uint256 i) internal {
        address node = address(uint160(uint256(logs[i].topics[1])));
        (uint256 amount, uint256 left,) = abi.decode(logs[i].data, (uint256, uint256, address));
        (string memory rule, uint256 a) = _rule(logs, i, node, amount);
        uint256 n = _index(node);
        if (n == CHEATER_NODE && a != type(uint256).max) punished[a] = true;
        if (!_isHonest(node)) return;
        uint256 bound = _bound(rule, a, amount + left);
        allowed[n] += bound;
        _count(string.concat("honest take:", rule));
        if (amount > bound) {
            allowed[n] += amount - bound; // reported once; the floor does not count it again
            _record(string.concat("ledger: honest node ", vm.toString(n), " lost ", vm.toString(amount), " wei to ", rule,
                a == type(uint256).max ? "" : string.concat(" (audit ", vm.toString(a), ": ", history[a], ")"), ", bound ", vm.toString(bound), " (", _moveName(), ")"));
        }
    }

    /// LEDGER's bound (tests/contracts/fuzz_ledger.py): 0, MEMBER_PENALTY_BPS of the stake for a
    /// minority vote, missed opening or overturn in a captured round, the stake when round 0 and a
    /// later round were captured (§13's priced framing residual: round 0 and the appeal, or round 0
    /// and the decider; a FAIL over round 0's PASS takes only the penalty).
    function _bound(string memory rule, uint256 a, uint256 stakeBefore) internal view returns (uint256) {
        if (a == type(uint256).max) return 0;
        bytes32 h = keccak256(bytes(rule));
        uint8 round = jobs.getAudit(a).round;
        if (h == keccak256("Jobs.missed opening or minority vote") || h == keccak256("Jobs.overturned")) {
            return _captured(a, round) || _capturedRounds(a) > 0 ? stakeBefore * memberPenaltyBps / 10_000 : 0;
        }
        if (h == keccak256("Jobs.failed audit")) {
            return _captured(a, 0) && _capturedRounds(a) >= 2 ? stakeBefore : 0;
        }
        return 0;
    }
}
