// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import "./Honest.sol";

/// The generic adversary (issue 34 "The method"): each move, one of its identities (colluders 5,
/// 8, 9, 10, 11, or the unregistered outsider) calls ANY non-view external function of the six
/// contracts — 52 entry points over all 45 of them, protocol-only hooks and owner functions included — with arguments drawn
/// from what is public (audit, batch, contest and claim ids seen; every actor's address; roots,
/// receipt hashes, seeds and seals; signatures, openings and transcripts; receipts and promises
/// seen; blocks at window edges) or from what the colluders can compute themselves (their own
/// signatures, VRF proofs, receipts over a fabricated trace or a copy of an honest one, sealed votes
/// they coordinate, contested cells, adjudication pairs from public openings). It is told no
/// attack: which function, which arguments and which sender are the fuzzer's choice.
contract Adversary is Honest {
    struct Sealed {
        uint256 auditId;
        uint8 slot;
        bytes leaves;
        bool agree;
        bytes32 salt;
        address node;
    }

    Sealed[] internal sealedVotes;
    mapping(bytes32 => uint8) internal coalitionVote; // keccak(audit, round) → 1 agree, 2 disagree
    mapping(uint256 => uint256) internal batchReceipt; // batch id → index + 1 in receiptsSeen (a batch of one)

    uint256 internal constant FUNCTIONS = 52;
    uint256 public dealtWei; // given to the adversary's identities for their moves (the conservation check adds it)

    function _pick(uint256 seed, uint256 salt) internal pure returns (uint256) {
        return uint256(keccak256(abi.encode(seed, salt)));
    }

    function _sender(uint8 who) internal view returns (address) {
        uint8[IDENTITIES] memory ids = [5, 8, 9, 10, 11, 13, 15, 17, 19, OUTSIDER];
        return actors[ids[who % IDENTITIES]].addr;
    }

    function _fromPool(uint256[] storage pool, uint256 r) internal view returns (uint256) {
        if (pool.length == 0 || r % 8 == 0) return (r >> 8) % 4; // sometimes an id nobody used
        if (r % 8 < 5) return pool[pool.length - 1 - (r >> 8) % (pool.length < 4 ? pool.length : 4)]; // a recent one
        return pool[(r >> 8) % pool.length];
    }

    function _audit(uint256 r) internal view returns (uint256) {
        return _fromPool(auditIds, r);
    }

    function _uint(uint256 r) internal view returns (uint256) {
        uint256 k = r % 7;
        if (k == 0) return _audit(r >> 3);
        if (k == 1) return _fromPool(batchIds, r >> 3);
        if (k == 2) return _fromPool(contestIds, r >> 3);
        if (k == 3) return _value(r >> 3);
        if (k == 4) return _block(r >> 3);
        if (k == 5) return (r >> 3) % 3;
        return r >> 3;
    }

    function _block(uint256 r) internal view returns (uint256) {
        if (blockEdges.length == 0 || r % 3 == 0) return block.number + (r >> 2) % 40;
        return blockEdges[(r >> 2) % blockEdges.length];
    }

    function _value(uint256 r) internal view returns (uint256) {
        uint256[9] memory v =
            [0, jobFeeWei, 2 * jobFeeWei, 3 * auditFeeWei, disputeBondWei, omissionBondWei, deliveryBondWei, minStakeWei, 1];
        return v[r % 9];
    }

    function _addr(uint256 r) internal view returns (address) {
        uint256 k = r % (NODES + 4);
        if (k <= NODES) return actors[k].addr;
        address[3] memory c = [address(jobs), address(disputes), address(0)];
        return c[k - NODES - 1];
    }

    function _word(uint256 r) internal view returns (bytes32) {
        if (words.length == 0 || r % 5 == 0) return bytes32(r >> 3);
        return words[(r >> 3) % words.length];
    }

    function _blob(uint256 r) internal view returns (bytes memory) {
        uint256 k = r % 6;
        if (k == 0) return "";
        if (k == 1) return transcript;
        if (blobs.length == 0) return abi.encodePacked(r);
        return blobs[(r >> 3) % blobs.length];
    }

    function _receiptAt(uint256 r) internal view returns (ReceiptData memory rec, bytes memory sig) {
        if (receiptsSeen.length == 0) return (rec, "");
        uint256 i = (r >> 4) % receiptsSeen.length;
        rec = receiptsSeen[i];
        sig = receiptSigs[i];
        if (r % 16 == 0) rec.auditableUntilBlock = uint64(_block(r >> 8)); // one field changed
        if (r % 16 == 1) rec.commitmentRoot = fabricated.root;
    }

    function _cells(uint256 auditId, uint256 r) internal view returns (uint32[] memory positions, uint16[] memory ls) {
        bytes32 seed = _view(auditId).challengeSeed;
        uint256[] memory cells = _openedCells(seed, 16);
        uint256 n = 1 + r % (cells.length < 4 ? cells.length : 4);
        positions = new uint32[](n);
        ls = new uint16[](n);
        for (uint256 i = 0; i < n; i++) {
            uint256 c = cells[_pick(r, i) % cells.length];
            positions[i] = uint32(c >> 16);
            ls[i] = uint16(c);
        }
    }

    function _words32(uint256 r) internal view returns (bytes32[] memory out) {
        out = new bytes32[](r % 3);
        for (uint256 i = 0; i < out.length; i++) out[i] = _word(_pick(r, i));
    }

    /// One move of the generic adversary: function `fn` (mod 45) of the six contracts, sent by
    /// identity `who`, its arguments drawn from `seed`. Its success or revert is the contracts'.
    function _move(uint256 fn, uint256 seed, uint8 who) internal {
        address sender = _sender(who);
        fn %= FUNCTIONS;
        (address target, bytes memory data, uint256 value) =
            fn < 15 ? _jobsCall(fn, seed, sender) : fn < 25 ? _disputesCall(fn - 15, seed, sender) : fn < 36
                ? _registryCall(fn - 25, seed) : _otherCall(fn - 36, seed, sender);
        if (target == address(0)) return;
        vm.deal(sender, sender.balance + value); // a colluder can always afford a move: its cost is what the contracts keep
        dealtWei += value;
        vm.prank(sender);
        (bool ok,) = target.call{value: value}(data);
        sent[fn] += 1;
        if (ok) {
            landed[fn] += 1;
            _afterMove(fn, seed, sender);
        }
    }

    function _afterMove(uint256 fn, uint256 seed, address sender) internal {
        if (fn == 36) {
            // postBatch of a colluder's own receipt (see _otherCall)
            uint256 id = batches.batchCount() - 1;
            batchIds.push(id);
            batchReceipt[id] = receiptsSeen.length; // the receipt pushed by the move
            blockEdges.push(block.number + 2);
        }
        seed; sender;
    }

    /// The audit's view, or an empty one for an id no audit has (the adversary's arguments may be anything).
    function _view(uint256 auditId) internal view returns (AuditView memory v) {
        try jobs.getAudit(auditId) returns (AuditView memory got) {
            v = got;
        } catch {}
    }

    function _seat(uint256 auditId, address sender) internal view returns (bool found, uint8 round, uint8 slot, PartyView memory p) {
        AuditView memory v = _view(auditId);
        round = v.round;
        for (uint8 s = 0; s < v.committeeSize; s++) {
            p = jobs.getParty(auditId, round, s + 1);
            if (p.node == sender) return (true, round, s, p);
        }
    }

    function _jobsCall(uint256 fn, uint256 seed, address sender) internal returns (address, bytes memory data, uint256 value) {
        uint256 a = _audit(_pick(seed, 1));
        uint256 r2 = _pick(seed, 2);
        if (fn == 0) data = abi.encodeWithSignature("drawRound(uint256)", a);
        else if (fn == 1) data = abi.encodeWithSignature("drawChallenge(uint256)", a);
        else if (fn == 2) data = abi.encodeWithSignature("finalize(uint256)", a);
        else if (fn == 3) data = abi.encodeWithSignature("settle(uint256)", a);
        else if (fn == 4) data = abi.encodeWithSignature("replaceMissing(uint256)", a);
        else if (fn == 5) data = abi.encodeWithSignature("lapse(uint256)", a);
        else if (fn == 6) data = abi.encodeWithSignature("claim()");
        else if (fn == 7 && r2 % 4 != 0) return _coalition(7, a, r2);
        else if (fn == 7) data = _colluderReceipt(a, r2, sender);
        else if (fn == 8) data = abi.encodeWithSignature("openWorker(uint256,bytes)", a, _workerOpening(a, r2));
        else if (fn == 9 && r2 % 4 != 0) return _coalition(9, a, r2);
        else if (fn == 9) data = _colluderSeal(a, r2, sender);
        else if (fn == 10) {
            if (sealedVotes.length > 0 && r2 % 4 != 0) return _coalition(10, a, r2);
            data = abi.encodeWithSignature("openAndVote(uint256,uint8,bytes,bool,bytes32)", a, uint8(r2 % 3), _blob(r2), r2 % 2 == 0, _word(r2 >> 8));
        } else if (fn == 11) {
            (ReceiptData memory rec,) = _receiptAt(r2);
            data = abi.encodeWithSignature("supplyReceipt(uint256,(bytes32,bytes32,bytes32,bytes32,uint32,uint32,uint32,uint64,uint32,bytes32,uint32,uint32,uint32,uint64,address))", a, rec);
        } else if (fn == 12) {
            data = abi.encodeWithSignature("fundPool()");
            value = _value(r2);
        } else if (fn == 13) {
            data = abi.encodeWithSignature("depositCredit(address,uint256)", _addr(r2), _value(r2 >> 8));
            value = _value(r2 >> 16);
        } else {
            uint256 k = r2 % 6;
            if (k == 0) data = abi.encodeWithSignature("creditFromPool(address,uint256)", _addr(r2 >> 8), _value(r2 >> 16));
            else if (k == 1) data = abi.encodeWithSignature("onClaim(uint256,uint8,address)", a, uint8(r2 >> 8), _addr(r2 >> 16));
            else if (k == 2) data = abi.encodeWithSignature("onPublish(uint256)", a);
            else if (k == 3) data = abi.encodeWithSignature("onUndelivered(uint256)", a);
            else if (k == 4) data = abi.encodeWithSignature("addPendingContest(uint256,int8)", a, int8(r2 % 2 == 0 ? int8(1) : int8(-1)));
            else data = abi.encodeWithSignature("recordFault(uint256,uint8,uint8)", a, uint8(r2 >> 8) % 2, uint8(r2 >> 16) % 4);
            if (k == 5 && r2 % 3 == 0) data = abi.encodeWithSignature("startEscalation(uint256,address)", a, _addr(r2 >> 24));
        }
        return (address(jobs), data, value);
    }

    function _workerOpening(uint256 a, uint256 r) internal returns (bytes memory) {
        bytes32 seed = _view(a).challengeSeed;
        if (seed == bytes32(0) || r % 3 == 0) return _blob(r);
        return _opening(r % 3 == 1 ? fabricated : honestWorker, seed);
    }

    function _disputesCall(uint256 fn, uint256 seed, address sender) internal view returns (address, bytes memory data, uint256 value) {
        uint256 a = _audit(_pick(seed, 1));
        uint256 r2 = _pick(seed, 2);
        uint8 round = uint8(r2 % 2);
        if (fn == 0) {
            data = abi.encodeWithSignature("escalate(uint256)", a);
            value = r2 % 5 == 0 ? _value(r2 >> 8) : disputeBondWei;
        } else if (fn == 1 || fn == 2) {
            (uint32[] memory positions, uint16[] memory ls) = _cells(a, r2 >> 8);
            data = abi.encodeWithSignature("contest(uint256,uint8,uint8,uint32[],uint16[])", a, round, uint8((r2 >> 4) % 4), positions, ls);
            value = disputeBondWei;
        } else if (fn == 3) data = abi.encodeWithSignature("resolveContest(uint256)", _fromPool(contestIds, r2));
        else if (fn == 4) data = abi.encodeWithSignature("releaseBond(uint256)", _fromPool(contestIds, r2));
        else if (fn == 5) data = abi.encodeWithSignature("penalizeSilentSeat(uint256,uint8,uint8,uint8)", a, round, uint8(r2 >> 8) % 2, uint8(r2 >> 16) % 5);
        else if (fn == 6) {
            data = abi.encodeWithSignature("relayCredit(address,uint256)", _addr(r2 >> 8), _value(r2 >> 16));
            value = _value(r2 >> 24);
        } else if (fn == 7) data = _adjudicate(a, round, r2);
        else if (fn == 8) data = _adjudicateAcross(a, r2);
        else {
            // answerContest with a public opening and the proofs of the trace it came from
            uint256 c = _fromPool(contestIds, r2);
            (uint32[] memory positions, uint16[] memory ls) = _cells(a, r2 >> 8);
            uint256[] memory idx = new uint256[](positions.length);
            bytes32[][] memory sib = new bytes32[][](positions.length);
            for (uint256 i = 0; i < positions.length; i++) sib[i] = fabricated.proofs[_leafIndex(uint256(positions[i]) << 16 | ls[i])];
            data = abi.encodeWithSignature("answerContest(uint256,uint32[],uint16[],bytes,uint256[],bytes32[][])", c, positions, ls, _blob(r2 >> 4), idx, sib);
        }
        sender;
        return (address(disputes), data, value);
    }

    /// Pairs of (worker leaf, member leaf) at the cells every round checks, each from the trace a
    /// party's public opening came from (or the colluders' fabricated one), with its proof.
    function _pairs(uint256 a, uint8 round, uint8 slot, uint8 otherRound, uint8 otherSlot, uint256 r) internal view returns (CellPair[] memory cells) {
        Trace storage w = _traceOf(a, otherRound, otherSlot, r);
        Trace storage m = _traceOf(a, round, slot, r >> 4);
        uint256 n = 1 + r % outputTokens;
        cells = new CellPair[](n);
        for (uint256 i = 0; i < n; i++) {
            uint256 cell = (uint256(promptLen - 1 + (i + r) % outputTokens) << 16) | layers[1];
            uint256 li = _leafIndex(cell);
            cells[i] = CellPair(_leaf(w, li), w.proofs[li], _leaf(m, li), m.proofs[li]);
        }
    }

    function _traceOf(uint256 a, uint8 round, uint8 slot, uint256 r) internal view returns (Trace storage) {
        Opened storage o = opened[_key(a, round, slot)];
        if (o.leaves.length == 0 || r % 5 == 0) return slot == 0 && r % 2 == 0 ? honestWorker : fabricated;
        return o.trace == 0 ? honestWorker : o.trace == 1 ? cheatWorker : members[o.trace - 2];
    }

    function _adjudicate(uint256 a, uint8 round, uint256 r) internal view returns (bytes memory) {
        uint8 slot = uint8(1 + r % 3);
        CellPair[] memory cells = _pairs(a, round, slot, round, 0, r >> 8);
        Opened storage o = opened[_key(a, round, slot)];
        bytes memory leaves = o.leaves.length > 0 ? o.leaves : _blob(r >> 16);
        uint32[] memory idx = new uint32[](r % 4);
        for (uint256 i = 0; i < idx.length; i++) idx[i] = uint32(_pick(r, i) % 26);
        return abi.encodeWithSignature("adjudicate(uint256,uint8,uint8,(bytes,bytes32[],bytes,bytes32[])[],(bytes,uint32[]))", a, round, slot, cells,
            PostedOpening(leaves, idx));
    }

    function _adjudicateAcross(uint256 a, uint256 r) internal view returns (bytes memory) {
        uint8 slot = uint8(1 + r % 3);
        uint8 appealSlot = uint8(1 + (r >> 4) % 5);
        CellPair[] memory cells = _pairs(a, 0, slot, 1, appealSlot, r >> 8);
        return abi.encodeWithSignature("adjudicateAcrossRounds(uint256,uint8,uint8,(bytes,bytes32[],bytes,bytes32[])[])", a, slot, appealSlot, cells);
    }

    function _registryCall(uint256 fn, uint256 seed) internal view returns (address, bytes memory data, uint256 value) {
        uint256 r = _pick(seed, 3);
        bytes32[] memory models = new bytes32[](r % 3 == 0 ? 0 : 1);
        if (models.length > 0) models[0] = r % 5 == 0 ? _word(r) : modelId;
        if (fn == 0) {
            Actor storage o = actors[OUTSIDER];
            data = abi.encodeWithSignature("register(uint256[4],uint256[2],string,bytes32[])", o.vrfPublicKey, o.pop, "http://outsider", models);
            value = r % 4 == 0 ? _value(r >> 8) : minStakeWei;
        } else if (fn == 1) data = abi.encodeWithSignature("deregister()");
        else if (fn == 2) data = abi.encodeWithSignature("withdraw()");
        else if (fn == 3) {
            data = abi.encodeWithSignature("topUp()");
            value = _value(r);
        } else if (fn == 4) data = abi.encodeWithSignature("updateEndpoint(string)", "http://elsewhere");
        else if (fn == 5) data = abi.encodeWithSignature("updateModels(bytes32[])", models);
        else if (fn == 6) data = abi.encodeWithSignature("lock(address)", _addr(r));
        else if (fn == 7) data = abi.encodeWithSignature("unlock(address)", _addr(r));
        else if (fn == 8) data = abi.encodeWithSignature("penalize(address,uint256)", _addr(r), r >> 8);
        else if (fn == 9) data = abi.encodeWithSignature("slash(address)", _addr(r));
        else {
            uint256 k = r % 3;
            if (k == 0) data = abi.encodeWithSignature("bindCoverage(address)", _addr(r >> 8));
            else if (k == 1) data = abi.encodeWithSignature("bindProtocol(address,address,address,address)", _addr(r >> 8), _addr(r >> 16), _addr(r >> 24), _addr(r >> 32));
            else data = abi.encodeWithSignature("addModel(bytes32,uint8,uint16,uint16[],uint32[],uint32[])", _word(r), uint8(2), uint16(4), new uint16[](0), new uint32[](0), new uint32[](0));
        }
        return (address(registry), data, value);
    }

    function _otherCall(uint256 fn, uint256 seed, address sender) internal returns (address target, bytes memory data, uint256 value) {
        uint256 r = _pick(seed, 4);
        uint256 i = _index(sender);
        if (fn == 0) {
            // a colluder's own job, batched: its receipt over the fabricated trace or a copy of the honest worker's
            if (i >= NODES) return (address(0), "", 0);
            nonce += 1;
            Trace storage t = r % 2 == 0 ? fabricated : honestWorker;
            ReceiptData memory rec = _receipt(i, t.root, honestWorker.numPositions, nonce);
            bytes memory sig = _signReceipt(actors[i].key, rec);
            receiptsSeen.push(rec);
            receiptSigs.push(sig);
            words.push(batches.hashReceipt(rec));
            return (address(batches), abi.encodeWithSignature("postBatch(bytes32,uint32)", sha256(abi.encodePacked(bytes1(0x00), batches.hashReceipt(rec))), uint32(1)), jobFeeWei);
        }
        uint256 b = _fromPool(batchIds, r);
        if (fn == 1) {
            // drawAudit: its own VRF proof when the batch is a colluder's, else a proof it can make (on its key)
            uint256[2] memory proof;
            try batches.drawSeed(b) returns (bytes32 seed_) {
                proof = _vrfProof(actors[i < NODES ? i : OUTSIDER].vrfKey, abi.encodePacked(seed_));
            } catch {}
            return (address(batches), abi.encodeWithSignature("drawAudit(uint256,uint256[2])", b, proof), 0);
        }
        if (fn == 2 || fn == 3) {
            // startAudit of a batch's receipt (requested: pays the fee), or of any receipt seen
            (ReceiptData memory rec, bytes memory sig) = _receiptAt(r >> 8);
            if (batchReceipt[b] != 0 && r % 2 == 0) {
                rec = receiptsSeen[batchReceipt[b] - 1];
                sig = receiptSigs[batchReceipt[b] - 1];
            }
            return (address(batches), abi.encodeWithSignature("startAudit(uint256,uint32,(bytes32,bytes32,bytes32,bytes32,uint32,uint32,uint32,uint64,uint32,bytes32,uint32,uint32,uint32,uint64,address),bytes,bytes32[])", b, uint32(r % 3 == 0 ? 1 : 0), rec, sig, _words32(r >> 16)), fn == 2 ? 3 * auditFeeWei : 0);
        }
        if (fn == 4) return (address(batches), abi.encodeWithSignature("slashMissedDraw(uint256)", b), 0);
        if (fn == 5) return (address(batches), abi.encodeWithSignature("slashMissedStart(uint256,uint32)", b, uint32(r % 2)), 0);
        if (fn == 6) {
            // a promise a colluding client holds (an honest dispatcher's), claimed as omitted
            if (promisesSeen.length == 0) return (address(0), "", 0);
            uint256 k = (r >> 8) % promisesSeen.length;
            return (address(coverage), abi.encodeWithSignature("claimOmitted((bytes32,address,uint64),bytes)", promisesSeen[k], promiseSigs[k]), r % 6 == 0 ? _value(r >> 16) : omissionBondWei);
        }
        if (fn == 7) return (address(coverage), abi.encodeWithSignature("proveIncluded(uint256,uint256,uint32,bytes32[])", (r >> 8) % 4, b, uint32(0), new bytes32[](0)), 0);
        if (fn == 8) return (address(coverage), abi.encodeWithSignature("slashOmission(uint256)", (r >> 8) % (promisesSeen.length + 1)), 0);
        uint256 a = _audit(r >> 8);
        (bool found,, uint8 slot,) = _seat(a, sender);
        if (fn == 9) return (address(delivery), abi.encodeWithSignature("claimUndelivered(uint256,uint8)", a, found ? slot : uint8(r % 3)), r % 6 == 0 ? _value(r >> 16) : deliveryBondWei);
        if (fn == 10) {
            bytes memory tokens = r % 3 == 0 ? _blob(r >> 4) : transcript;
            return (address(delivery), abi.encodeWithSignature("publishTranscript(uint256,bytes,uint32,uint32,uint32,uint64)", a, tokens, uint32(0), uint32(0), uint32(r % 5 == 0 ? 0 : 1_000_000), uint64(0)), 0);
        }
        if (fn == 11) return (address(delivery), abi.encodeWithSignature("slashUndelivered(uint256)", a), 0);
        if (fn == 12) return (address(delivery), abi.encodeWithSignature("releaseClaimBonds(uint256,uint8)", a, uint8(r % 2)), 0);
        if (fn == 13) {
            bytes32 secret = bytes32(r >> 8);
            (ReceiptData memory rec, bytes memory sig) = _receiptAt(r >> 16);
            return (address(batches), abi.encodeWithSignature("startPrivateAudit(uint256,uint32,bytes32,(address,bytes32,uint64),bytes,bytes32[],bytes32)", b, uint32(0), batches.hashReceipt(rec), ReceiptClaim(rec.worker, rec.modelId, rec.auditableUntilBlock), sig, new bytes32[](0), keccak256(abi.encodePacked(bytes1(0x1d), secret))), 3 * auditFeeWei);
        }
        if (fn == 14) {
            (ReceiptData memory rec,) = _receiptAt(r >> 16);
            return (address(jobs), abi.encodeWithSignature("revealRound(uint256,bytes32,(bytes32,bytes32,bytes32,bytes32,uint32,uint32,uint32,uint64,uint32,bytes32,uint32,uint32,uint32,uint64,address),uint8[],(bytes32,bytes32,bytes32,bytes32,uint32,uint32,uint32,uint64,uint32,bytes32,uint32,uint32,uint32,uint64,address)[],bytes[])", a, bytes32(r >> 8), rec, new uint8[](0), new ReceiptData[](0), new bytes[](0)), 0);
        }
        return (address(coverage), _streamCall(r), 0);
    }

    function _streamCall(uint256 r) internal view returns (bytes memory) {
        StreamPrefix memory p = StreamPrefix(_word(r), uint32(r % 10), _word(r >> 8), _addr(r >> 16));
        StreamPrefix memory q = StreamPrefix(_word(r >> 40), uint32(r % 7), _word(r >> 48), _addr(r >> 56));
        ReceiptData memory rec;
        if (receiptsSeen.length > 0) rec = receiptsSeen[(r >> 80) % receiptsSeen.length];
        bytes[4] memory b = [_blob(r >> 24), _blob(r >> 32), _blob(r >> 64), _blob(r >> 72)];
        return abi.encodeWithSignature(
            "slashStreamEquivocation((bytes32,uint32,bytes32,address),bytes,(bytes32,bytes32,bytes32,bytes32,uint32,uint32,uint32,uint64,uint32,bytes32,uint32,uint32,uint32,uint64,address),bytes,(bytes32,uint32,bytes32,address),bytes,bytes)",
            p, b[0], rec, b[1], q, b[2], b[3]);
    }

    /// A colluder's receipt for its seat: over a fabricated trace, or a copy of its honest one.
    function _colluderReceipt(uint256 a, uint256 r2, address sender) internal returns (bytes memory) {
        (bool found,, uint8 slot,) = _seat(a, sender);
        if (!found) slot = uint8(r2 % 3);
        uint256 i = _index(sender);
        ReceiptData memory rec = _memberReceipt(i < NODES ? i : 5, a, i < NODES && r2 % 3 == 0 ? members[i] : fabricated);
        rec.worker = sender;
        bytes memory sig = _signReceipt(actors[i < NODES ? i : OUTSIDER].key, rec);
        if (r2 % 7 == 0) (rec, sig) = _receiptAt(r2);
        receiptsSeen.push(rec);
        receiptSigs.push(sig);
        return abi.encodeWithSignature("postCommitteeReceipt(uint256,uint8,(bytes32,bytes32,bytes32,bytes32,uint32,uint32,uint32,uint64,uint32,bytes32,uint32,uint32,uint32,uint64,address),bytes)", a, slot, rec, sig);
    }

    /// A sealed vote the colluders coordinate (agree or not) over their data, remembered for openAndVote.
    function _colluderSeal(uint256 a, uint256 r2, address sender) internal returns (bytes memory) {
        (bool found, uint8 round, uint8 slot, PartyView memory p) = _seat(a, sender);
        bytes32 seed_ = _view(a).challengeSeed;
        if (!found || seed_ == bytes32(0)) return abi.encodeWithSignature("sealVote(uint256,uint8,bytes32)", a, uint8(r2 % 3), _word(r2));
        uint256 i = _index(sender);
        Sealed memory v;
        v.leaves = _opening(p.root == members[i].root ? members[i] : fabricated, seed_);
        // the coalition's vote in this round: the first colluder to seal picks it, the others follow it 9 times in 10
        bytes32 ballot = keccak256(abi.encode(a, round));
        if (coalitionVote[ballot] == 0) coalitionVote[ballot] = r2 % 2 == 0 ? 1 : 2;
        v.agree = r2 % 10 == 9 ? coalitionVote[ballot] != 1 : coalitionVote[ballot] == 1;
        v.salt = bytes32(r2);
        v.auditId = a;
        v.slot = slot;
        v.node = sender;
        bytes32 seal = keccak256(abi.encodePacked(bytes1(0x1e), uint64(a), round, slot, v.agree ? uint8(1) : uint8(2), keccak256(v.leaves), v.salt));
        sealedVotes.push(v);
        words.push(seal);
        return abi.encodeWithSignature("sealVote(uint256,uint8,bytes32)", a, slot, seal);
    }

    /// The coalition moves as one adversary with many identities: every colluder seated in the
    /// audit's current round posts its receipt (7), seals the coalition's vote (9), or every vote it
    /// sealed is opened (10) — one transaction per identity, in this move.
    function _coalition(uint256 fn, uint256 a, uint256 r2) internal returns (address, bytes memory, uint256) {
        AuditView memory v = _view(a);
        bool any;
        if (fn == 10) {
            uint256 n = sealedVotes.length;
            for (uint256 k = n; k > 0 && k + 16 > n; k--) {
                Sealed storage s = sealedVotes[k - 1];
                vm.prank(s.node);
                (bool ok,) = address(jobs).call(abi.encodeWithSignature("openAndVote(uint256,uint8,bytes,bool,bytes32)", s.auditId, s.slot, s.leaves, s.agree, s.salt));
                if (ok) {
                    blobs.push(s.leaves);
                    any = true;
                }
            }
        } else {
            for (uint8 slot = 0; slot < v.committeeSize; slot++) {
                address node = jobs.getParty(a, v.round, slot + 1).node;
                if (!_isColluder(node)) continue;
                bytes memory data = fn == 7 ? _colluderReceipt(a, r2 + slot, node) : _colluderSeal(a, r2 + slot, node);
                vm.prank(node);
                (bool ok,) = address(jobs).call(data);
                any = any || ok;
            }
        }
        sent[fn] += 1;
        if (any) landed[fn] += 1;
        return (address(0), "", 0);
    }

    /// The colluders' seat move (about a fifth of the adversary's moves, as in the Python harness):
    /// in a live audit whose current round seats a colluder, what its phase allows — receipts while
    /// committing, seals then openings while opening — by every seated colluder (see _coalition).
    function _coalitionMove(uint256 seed) internal {
        uint256 n = live.length;
        for (uint256 k = 0; k < n; k++) {
            uint256 a = live[(seed + k) % n];
            AuditView memory v = _view(a);
            bool seated;
            bool unsealed;
            for (uint8 slot = 0; slot < v.committeeSize; slot++) {
                PartyView memory p = jobs.getParty(a, v.round, slot + 1);
                if (!_isColluder(p.node)) continue;
                seated = true;
                if (p.openingHash == bytes32(0)) unsealed = true;
            }
            if (!seated) continue;
            if (v.phase == Phase.COMMITTING) _coalition(7, a, seed >> 8);
            else if (v.phase == Phase.OPENING) _coalition(unsealed && (seed >> 4) % 4 != 0 ? 9 : 10, a, seed >> 8);
            else continue;
            return;
        }
    }
}
