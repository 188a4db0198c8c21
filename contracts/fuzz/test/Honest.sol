// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import "./Cast.sol";

/// The honest parties' duties, done after every move (as a node watching the chain does them:
/// docs/protocol.md §12 "Duties first"), and the loss ledger they are checked against
/// (tests/contracts/fuzz_ledger.py's LEDGER, docs/protocol.md §13 "Loss ledger").
///
/// Honest (and the cheater, which cheats only as a worker) as:
///   client + dispatcher  `serve`: a job of worker 0, 1 or the cheater, promised by dispatcher
///                        0, 1 or 3 (signed BatchPromise), batched `delay` blocks later, drawn with
///                        the dispatcher's VRF key, started
///   worker               opens its trace (the cheater its cheating one) once challenged, publishes
///                        its transcript when a seat claims it undelivered, appeals a FAIL of its
///                        honest job once, answers every contest of its data with Merkle proofs
///   member               posts its receipt, seals and opens a truthful vote (agree iff the worker
///                        opened the honest trace), answers contests of its data
///   anyone               draws rounds, replaces missing receipts, finalizes and settles when due
contract Honest is Cast {
    struct Job {
        uint256 auditId;
        uint8 worker;
        bool cheat;
        bool appealed;
    }

    struct Pending {
        uint8 worker;
        uint8 dispatcher;
        uint64 postAt;
        uint256 batchId; // + 1 once posted
        bool drawn;
        bool started;
        ReceiptData receipt;
        bytes sig;
    }

    struct Opened {
        bytes leaves;
        uint8 trace; // 0 honest worker, 1 cheat worker, 2 + i member trace of node i
    }

    mapping(bytes32 => uint256) internal batchOfReceipt; // an honest dispatcher's receipt hash → its batch id + 1

    Job[] internal jobsTracked;
    mapping(uint256 => uint256) internal jobOf; // audit id → index + 1 in jobsTracked
    Pending[] internal pending;
    uint256 internal pendingFrom;
    uint256 internal nonce;
    mapping(bytes32 => Opened) internal opened; // keccak(audit, round, slot) → what an honest party opened
    mapping(uint256 => uint256[]) internal contestCells; // contest id → cells (position << 16 | layer)
    uint256 internal contestsSeen;

    // --- the ledger ---------------------------------------------------------------------------
    uint256[NODES + 1] internal initialStake;
    uint256[NODES + 1] internal initialCredit;
    uint256[NODES + 1] internal allowed; // what the ledger's rules may have taken from honest node i so far
    uint256 public violations;
    string public firstViolation;
    mapping(uint256 => bool) internal convicted; // a cheat audit decided FAIL by an honest majority
    mapping(uint256 => bool) internal punished; // a take from the cheater in that audit
    uint256 public totalWei; // every actor's and contract's balance at the start
    mapping(bytes32 => uint256) public counts; // what happened (printed by the campaign's report)

    mapping(uint256 => string) internal history; // per audit: what the honest parties saw and did (named in a violation)

    function _note(uint256 a, string memory what) internal {
        if (bytes(history[a]).length > 480) return; // enough to read an audit's story by
        history[a] = string.concat(history[a], bytes(history[a]).length == 0 ? "" : "; ", what, "@", vm.toString(block.number));
    }

    function _record(string memory message) internal {
        if (violations == 0) firstViolation = message;
        violations += 1;
    }

    function _count(string memory what) internal {
        counts[keccak256(bytes(what))] += 1;
    }

    uint256[64] public sent; // per adversary function: moves sent
    uint256[64] public landed; // and moves that succeeded

    // --- the honest client and dispatcher ---------------------------------------------------
    function _serve(uint256 seed) internal {
        uint8[3] memory workers = [0, 1, CHEATER_NODE];
        uint8[3] memory dispatchers = [0, 1, 3];
        uint8 w = workers[seed % 3];
        uint8 d = dispatchers[(seed >> 8) % 3];
        // At most three audits in flight (an audited job costs ~5 M gas through its rounds: the
        // campaign's calls go to the adversary's search, not to re-running the happy path).
        if (!registry.isActive(actors[d].addr) || !registry.isActive(actors[w].addr) || pending.length - pendingFrom + live.length >= 3) {
            _count("honest:busy");
            return;
        }
        nonce += 1;
        Trace storage t = w == CHEATER_NODE ? cheatWorker : honestWorker;
        ReceiptData memory r = _receipt(w, t.root, t.numPositions, nonce);
        bytes memory sig = _signReceipt(actors[w].key, r);
        bytes32 h = batches.hashReceipt(r);
        BatchPromise memory p = BatchPromise(h, actors[d].addr, uint64(block.number + batchBy));
        promisesSeen.push(p);
        promiseSigs.push(_signPromise(actors[d].key, p));
        receiptsSeen.push(r);
        receiptSigs.push(sig);
        words.push(h);
        Pending storage q = pending.push();
        q.worker = w;
        q.dispatcher = d;
        q.postAt = uint64(block.number + (seed >> 16) % (batchBy * 2 / 3));
        q.receipt = r;
        q.sig = sig;
        _count("honest:served");
    }

    function _dispatch() internal {
        for (uint256 i = pendingFrom; i < pending.length; i++) {
            Pending storage q = pending[i];
            address d = actors[q.dispatcher].addr;
            if (q.batchId == 0 && block.number >= q.postAt) {
                bytes32 root = sha256(abi.encodePacked(bytes1(0x00), batches.hashReceipt(q.receipt)));
                vm.prank(d);
                try batches.postBatch{value: jobFeeWei}(root, 1) returns (uint256 id) {
                    q.batchId = id + 1;
                    batchOfReceipt[batches.hashReceipt(q.receipt)] = id + 1;
                    batchIds.push(id);
                    words.push(root);
                    blockEdges.push(block.number + 2);
                    _count("honest:batched");
                } catch {
                    _count("honest:batch refused");
                    q.started = true; // nothing more it can do: the promise's claim follows
                }
            } else if (q.batchId != 0 && !q.drawn) {
                try batches.drawSeed(q.batchId - 1) returns (bytes32 seed) {
                    uint256[2] memory proof = _vrfProof(actors[q.dispatcher].vrfKey, abi.encodePacked(seed));
                    vm.prank(d);
                    try batches.drawAudit(q.batchId - 1, proof) {
                        q.drawn = true;
                    } catch {
                        q.drawn = true; // drawn by someone else (a relay of its proof)
                    }
                } catch {}
            } else if (q.drawn && !q.started) {
                q.started = true;
                uint256 before = _auditCount();
                vm.prank(d);
                try batches.startAudit(q.batchId - 1, 0, q.receipt, q.sig, new bytes32[](0)) {
                    if (_auditCount() > before) {
                        jobsTracked.push(Job(before + 1, q.worker, q.worker == CHEATER_NODE, false));
                        jobOf[before + 1] = jobsTracked.length;
                        auditIds.push(before + 1);
                        _track(before + 1);
                        _note(before + 1, string.concat("started: worker ", vm.toString(uint256(q.worker)), " dispatcher ", vm.toString(uint256(q.dispatcher))));
                        _count("honest:started");
                    }
                } catch {
                    _count("honest:start refused");
                }
            }
            if (q.started && i == pendingFrom) pendingFrom++;
        }
    }

    function _auditCount() internal view returns (uint256 n) {
        (bool ok, bytes memory out) = address(jobs).staticcall(abi.encodeWithSignature("auditCount()"));
        require(ok);
        n = abi.decode(out, (uint256));
    }

    // --- every audit's duties ----------------------------------------------------------------
    uint256[] internal live; // audits not yet settled or abandoned (every audit: honest members sit in the adversary's too)
    mapping(uint256 => bool) internal isLive;

    function _track(uint256 a) internal {
        if (isLive[a]) return;
        isLive[a] = true;
        live.push(a);
    }

    mapping(uint256 => uint256) internal wakeAt; // audit → the next block a window of it opens or closes

    /// The duties due now. `all`: the chain changed (a move landed), so every live audit is looked
    /// at; otherwise (a new block and nothing else) only those with a window edge at this block.
    function _duties(bool all) internal {
        _dispatch();
        for (uint256 k = 0; k < live.length;) {
            if (!all && block.number < wakeAt[live[k]]) {
                k++;
                continue;
            }
            if (_auditDuties(live[k])) {
                k++;
            } else {
                isLive[live[k]] = false;
                live[k] = live[live.length - 1];
                live.pop();
            }
        }
        _answerContests();
    }

    /// The duties of audit `a` due now; false once it is over (settled or abandoned).
    function _auditDuties(uint256 a) internal returns (bool) {
        AuditView memory v = jobs.getAudit(a);
        if (v.phase == Phase.SETTLED || v.phase == Phase.ABANDONED) return false;
        RoundState memory s = jobs.getRoundState(a, v.round);
        Deadlines memory d = s.deadlines;
        uint64[8] memory edges = [d.drawAfter, d.drawBy, d.commitBy, d.challengeAfter, d.workerOpenBy, d.membersSealBy, d.membersOpenBy, d.disputeBy];
        uint256 wake = type(uint256).max;
        for (uint256 e = 0; e < 8; e++) {
            if (edges[e] + 1 > block.number && edges[e] + 1 < wake) wake = edges[e] + 1;
        }
        if (s.publishDeadline + 1 > block.number && s.publishDeadline + 1 < wake) wake = s.publishDeadline + 1;
        wakeAt[a] = wake == type(uint256).max ? block.number + 1 : wake;
        if (v.phase == Phase.DRAWING) {
            if (block.number > d.drawAfter && block.number <= d.drawBy && !s.privateDraw) _anyone(address(jobs), abi.encodeCall(IJobs.drawRound, (a)));
        } else if (v.phase == Phase.COMMITTING) {
            _commit(a, v, s);
        } else if (v.phase == Phase.OPENING) {
            _open(a, v, s);
        } else if (v.phase == Phase.DECIDED) {
            _decided(a, v, s);
        }
        return true;
    }

    function _anyone(address target, bytes memory call) internal returns (bool ok) {
        vm.prank(actors[0].addr);
        (ok,) = target.call(call);
    }

    function _commit(uint256 a, AuditView memory v, RoundState memory s) internal {
        if (s.publishDeadline != 0 && !s.published) {
            uint256 w = _index(v.worker);
            if (w < NODES && actors[w].role != COLLUDER && jobOf[a] != 0) {
                vm.prank(v.worker);
                try delivery.publishTranscript(a, transcript, 0, 0, 1_000_000, 0) {
                    _count("honest:published");
                } catch {}
            }
        }
        for (uint8 slot = 0; slot < s.members; slot++) {
            PartyView memory p = jobs.getParty(a, v.round, slot + 1);
            uint256 i = _index(p.node);
            if (p.root != bytes32(0) || i >= NODES || actors[i].role == COLLUDER) continue;
            ReceiptData memory r = _memberReceipt(i, a, members[i]);
            bytes memory sig = _signReceipt(actors[i].key, r);
            vm.prank(p.node);
            try jobs.postCommitteeReceipt(a, slot, r, sig) {
                _note(a, string.concat("receipt of ", vm.toString(i)));
                receiptsSeen.push(r);
                receiptSigs.push(sig);
            } catch {}
        }
        if (block.number > s.deadlines.commitBy) _anyone(address(jobs), abi.encodeCall(IJobs.replaceMissing, (a)));
    }

    function _key(uint256 a, uint8 round, uint8 slot) internal pure returns (bytes32) {
        return keccak256(abi.encode(a, round, slot));
    }

    function _open(uint256 a, AuditView memory v, RoundState memory s) internal {
        Deadlines memory d = s.deadlines;
        uint256 w = _index(v.worker);
        if (!s.workerOpened && block.number > d.challengeAfter && block.number <= d.workerOpenBy && w < NODES && actors[w].role != COLLUDER
                && jobOf[a] != 0) {
            Job storage job = jobsTracked[jobOf[a] - 1];
            bytes32 seed = v.challengeSeed;
            if (seed == bytes32(0)) {
                _anyone(address(jobs), abi.encodeWithSignature("drawChallenge(uint256)", a));
                seed = jobs.getAudit(a).challengeSeed;
            }
            if (seed != bytes32(0)) {
                bytes memory leaves = _opening(job.cheat ? cheatWorker : honestWorker, seed);
                vm.prank(v.worker);
                try jobs.openWorker(a, leaves) {
                    opened[_key(a, v.round, 0)] = Opened(leaves, job.cheat ? 1 : 0);
                    _note(a, "worker opened");
                    blobs.push(leaves);
                    s.workerOpened = true;
                } catch {}
            }
        }
        if (s.workerOpened) _vote(a, v, s);
        if (block.number > d.membersOpenBy || (s.opens == s.members && s.workerOpened)) {
            _anyone(address(jobs), abi.encodeCall(IJobs.finalize, (a)));
        }
    }

    function _vote(uint256 a, AuditView memory v, RoundState memory s) internal {
        bytes32 seed = jobs.getAudit(a).challengeSeed;
        if (seed == bytes32(0)) return;
        bytes32 honestHash = keccak256(_opening(honestWorker, seed));
        bool agree = jobs.getParty(a, v.round, 0).openingHash == honestHash;
        for (uint8 slot = 0; slot < s.members; slot++) {
            PartyView memory p = jobs.getParty(a, v.round, slot + 1);
            uint256 i = _index(p.node);
            if (i >= NODES || actors[i].role == COLLUDER || p.root != members[i].root || p.opened) continue;
            bytes memory leaves = _opening(members[i], seed);
            bytes32 salt = keccak256(abi.encode("salt", actors[i].key, a, v.round, slot));
            bytes32 seal = keccak256(abi.encodePacked(bytes1(0x1e), uint64(a), v.round, slot, agree ? uint8(1) : uint8(2), keccak256(leaves), salt));
            vm.prank(p.node);
            try jobs.sealVote(a, slot, seal) {
                words.push(seal);
            } catch {}
            vm.prank(p.node);
            try jobs.openAndVote(a, slot, leaves, agree, salt) {
                opened[_key(a, v.round, slot + 1)] = Opened(leaves, uint8(2 + i));
                _note(a, string.concat(vm.toString(i), agree ? " agreed" : " disagreed"));
                blobs.push(leaves);
            } catch {}
        }
    }

    function _decided(uint256 a, AuditView memory v, RoundState memory s) internal {
        uint256 j = jobOf[a];
        if (j != 0 && v.round == 0 && !jobsTracked[j - 1].appealed && !jobsTracked[j - 1].cheat && _currentVerdict(a) == 2) {
            jobsTracked[j - 1].appealed = true;
            vm.prank(v.worker);
            try disputes.escalate{value: disputeBondWei}(a) {
                _count("honest:appealed");
                _note(a, "worker appealed");
            } catch {
                _count("honest:appeal refused");
                _note(a, "appeal refused");
            }
            return;
        }
        if (block.number > s.deadlines.disputeBy && s.pendingContests == 0) _anyone(address(jobs), abi.encodeCall(IJobs.settle, (a)));
    }

    function _currentVerdict(uint256 a) internal view returns (uint8) {
        (, bytes memory out) = address(jobs).staticcall(abi.encodeWithSignature("currentVerdict(uint256)", a));
        return out.length == 32 ? abi.decode(out, (uint8)) : 0;
    }

    /// An honest dispatcher answers an omission claim of a receipt it batched: its Merkle proof.
    function _answerOmission(uint256 claimId, bytes32 receiptHash, address dispatcher) internal {
        claimIds.push(claimId);
        uint256 b = batchOfReceipt[receiptHash];
        if (!_isHonest(dispatcher) || b == 0) return;
        vm.prank(dispatcher);
        try ICoverageAnswer(address(coverage)).proveIncluded(claimId, b - 1, 0, new bytes32[](0)) {
            _count("honest:proved inclusion");
        } catch {
            _count("honest:inclusion refused");
        }
    }

    /// Every open contest of an honest party's (or the cheater's) data is answered with its proofs.
    function _answerContests() internal {
        uint256 n = disputes.contestCount();
        for (uint256 c = contestsSeen; c < n; c++) {
            Contest memory k = disputes.getContest(c);
            if (!k.open) continue;
            Opened storage o = opened[_key(k.auditId, k.round, k.slot)];
            if (o.leaves.length == 0) continue;
            Trace storage t = o.trace == 0 ? honestWorker : o.trace == 1 ? cheatWorker : members[o.trace - 2];
            uint256[] storage cells = contestCells[c];
            uint32[] memory positions = new uint32[](cells.length);
            uint16[] memory ls = new uint16[](cells.length);
            uint256[] memory indices = new uint256[](cells.length);
            bytes32[][] memory siblings = new bytes32[][](cells.length);
            bool ok = true;
            for (uint256 i = 0; i < cells.length; i++) {
                positions[i] = uint32(cells[i] >> 16);
                ls[i] = uint16(cells[i]);
                (indices[i], ok) = _positionInOpening(o.leaves, t.leafSize, positions[i], ls[i]);
                if (!ok) break;
                siblings[i] = t.proofs[_leafIndex(cells[i])];
            }
            if (!ok) continue; // a cell it never opened: the contest cannot be answered (nor should it have been accepted)
            vm.prank(jobs.getParty(k.auditId, k.round, k.slot).node);
            try disputes.answerContest(c, positions, ls, o.leaves, indices, siblings) {
                _count("honest:answered contest");
            } catch {}
        }
        while (contestsSeen < n && !disputes.getContest(contestsSeen).open) contestsSeen++;
    }

    function _positionInOpening(bytes storage leaves, uint256 size, uint32 position, uint16 layer) internal view returns (uint256, bool) {
        for (uint256 i = 0; i * size < leaves.length; i++) {
            uint256 at = i * size;
            uint32 p = uint32(uint8(leaves[at])) << 24 | uint32(uint8(leaves[at + 1])) << 16 | uint32(uint8(leaves[at + 2])) << 8 | uint32(uint8(leaves[at + 3]));
            uint16 l = uint16(uint8(leaves[at + 4])) << 8 | uint16(uint8(leaves[at + 5]));
            if (p == position && l == layer) return (i, true);
        }
        return (0, false);
    }
}
