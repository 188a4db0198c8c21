// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Domains} from "./Params.sol";
import {Sortition} from "./Sortition.sol";

/// @notice One model's sortition weights: a Fenwick (binary indexed) tree of stake sums over
/// slots, each node holding its slot while it is weighted (verillm.spec.stake_tree).
/// Every leaf and every tree cell keeps three versions of its value, indexed by the epoch `e`
/// of its last write: effective in e − 1, in e, and from e + 1 on. A write in epoch E sets the
/// value from E + 1 on (changes weigh at the next epoch), so the current and the previous epoch
/// (the only ones a draw may read) stay readable in O(log n) reads, and a write costs O(log n).
/// Nothing lowers a readable version, a slash neither: an epoch's weights are fixed when it
/// begins, before any seed a draw of it reads (a node slashed since sits out the draws seeded
/// after its slash: Registry.outBlock). A slot whose three versions are all 0 (its
/// node left two epochs ago) is reused by the next node that needs one, so departed identities
/// cost a draw nothing; the tree's depth is log2 of the most slots ever held at once.
library StakeTree {
    /// One storage word holds what a draw reads in the steady state (the epoch and the values
    /// from it on); `previous` is read only in the epoch after a write.
    struct Versioned {
        uint32 epoch; // of the last write
        uint112 next; // effective from epoch + 1 on
        uint112 current; // effective in epoch
        uint112 previous; // effective in epoch − 1
    }

    struct Tree {
        uint32 slots; // slots handed out, 1-based
        uint32 capacity; // a power of two ≥ slots (0 while empty): the Fenwick range
        uint64 freeHead; // queue of slots whose node's weight went to 0, oldest first
        uint64 freeTail;
        mapping(uint256 => Versioned) sums; // Fenwick cell i: Σ leaves in (i − lowbit(i), i]
        mapping(uint256 => Versioned) leaves;
        mapping(uint256 => address) owners;
        mapping(address => uint256) slotOf;
        mapping(uint256 => uint256) freeQueue;
    }

    /// Same signature as Registry.EpochNotReadable: one selector for Jobs to recognise.
    error EpochNotReadable(uint256 epoch, uint256 currentEpoch);
    error WeightOverflow();

    uint256 private constant REUSE_CHECKS = 2; // queue entries a new slot examines (bounded gas)

    // --- reads -----------------------------------------------------------------------------

    function read(Versioned storage v, uint256 epoch) internal view returns (uint256) {
        uint256 last = v.epoch;
        if (epoch > last) return v.next;
        if (epoch == last) return v.current;
        if (epoch + 1 == last) return v.previous;
        revert EpochNotReadable(epoch, last);
    }

    function total(Tree storage t, uint256 epoch) internal view returns (uint256) {
        return t.capacity == 0 ? 0 : read(t.sums[t.capacity], epoch);
    }

    function weightOf(Tree storage t, address node, uint256 epoch) internal view returns (uint256) {
        uint256 slot = t.slotOf[node];
        return slot == 0 ? 0 : read(t.leaves[slot], epoch);
    }

    /// @notice Every slot's node (address(0) for a slot never used) and its weight in `epoch`.
    function table(Tree storage t, uint256 epoch) internal view returns (address[] memory nodes, uint256[] memory weights) {
        nodes = new address[](t.slots);
        weights = new uint256[](t.slots);
        for (uint256 i = 0; i < nodes.length; i++) {
            nodes[i] = t.owners[i + 1];
            weights[i] = read(t.leaves[i + 1], epoch);
        }
    }

    /// @notice Draw `size` distinct nodes, none in `excluded`, with probability proportional to
    /// their weight in `epoch`: exactly Sortition.draw over the slot table (a slot's weight 0 for
    /// the excluded), but each pick descends the tree, subtracting the weight of the excluded and
    /// of the nodes drawn so far where the walk passes them. O(size · log2(capacity) ·
    /// (excluded + size)) reads and comparisons, whatever the number of departed nodes.
    function draw(Tree storage t, bytes32 seed, uint8 attempt, uint256 size, address[] memory excluded, uint256 epoch)
        internal
        view
        returns (address[] memory chosen)
    {
        uint256 remaining = total(t, epoch);
        uint256[] memory outSlots = new uint256[](excluded.length + size);
        uint256[] memory outWeights = new uint256[](excluded.length + size);
        uint256 out;
        for (uint256 i = 0; i < excluded.length; i++) {
            uint256 slot = t.slotOf[excluded[i]];
            if (slot == 0 || _contains(outSlots, out, slot)) continue;
            uint256 w = read(t.leaves[slot], epoch);
            if (w == 0) continue;
            (outSlots[out], outWeights[out]) = (slot, w);
            out++;
            remaining -= w;
        }
        chosen = new address[](size);
        for (uint256 i = 0; i < size; i++) {
            if (remaining == 0) revert Sortition.NotEnoughCandidates(size, i);
            uint256 r = uint256(keccak256(abi.encodePacked(Domains.SORTITION, seed, attempt, uint32(i)))) % remaining;
            uint256 slot = _pick(t, epoch, r, outSlots, outWeights, out);
            uint256 w = read(t.leaves[slot], epoch);
            chosen[i] = t.owners[slot];
            (outSlots[out], outWeights[out]) = (slot, w);
            out++;
            remaining -= w;
        }
    }

    /// @dev The first slot whose running weight (out-of-play slots at 0) exceeds r: Fenwick
    /// binary lifting; cell pos + step covers the slots (pos, pos + step].
    function _pick(Tree storage t, uint256 epoch, uint256 r, uint256[] memory outSlots, uint256[] memory outWeights, uint256 out)
        private
        view
        returns (uint256)
    {
        uint256 pos;
        for (uint256 step = uint256(t.capacity) >> 1; step > 0; step >>= 1) {
            uint256 nxt = pos + step;
            uint256 v = read(t.sums[nxt], epoch);
            for (uint256 k = 0; k < out; k++) {
                if (outSlots[k] > pos && outSlots[k] <= nxt) v -= outWeights[k];
            }
            if (v <= r) {
                pos = nxt;
                r -= v;
            }
        }
        return pos + 1;
    }

    function _contains(uint256[] memory slots, uint256 count, uint256 slot) private pure returns (bool) {
        for (uint256 k = 0; k < count; k++) {
            if (slots[k] == slot) return true;
        }
        return false;
    }

    // --- writes ----------------------------------------------------------------------------

    /// @notice Set `node`'s weight from the next epoch on to `weight`; the readable epochs keep
    /// theirs (a draw's weights are fixed before its seed exists).
    function set(Tree storage t, address node, uint256 weight, uint256 epoch) internal {
        if (epoch > type(uint32).max) revert WeightOverflow();
        uint256 slot = t.slotOf[node];
        if (slot == 0) {
            if (weight == 0) return;
            slot = _allocate(t, node, epoch);
        }
        Versioned memory before = _rolled(t.leaves[slot], epoch);
        Versioned memory after_ = Versioned(uint32(epoch), _u112(weight), before.current, before.previous);
        t.leaves[slot] = after_;
        _addPath(t, slot, epoch, before, after_);
        if (weight == 0 && before.next != 0) t.freeQueue[t.freeTail++] = slot;
    }

    /// @dev Add the leaf's change (after − before, per version) to every cell above it.
    function _addPath(Tree storage t, uint256 slot, uint256 epoch, Versioned memory before, Versioned memory after_) private {
        for (uint256 i = slot; i <= t.capacity; i += i & (~i + 1)) {
            Versioned memory c = _rolled(t.sums[i], epoch);
            c.next = _u112(uint256(c.next) + after_.next - before.next);
            c.current = _u112(uint256(c.current) + after_.current - before.current);
            c.previous = _u112(uint256(c.previous) + after_.previous - before.previous);
            t.sums[i] = c;
        }
    }

    /// @dev A slot for `node`: the oldest queued slot whose versions are all 0 (no readable epoch
    /// weighs its old node), else a new one; the Fenwick range doubles when full (the new top
    /// cell sums everything, the cells between cover only new, empty slots).
    function _allocate(Tree storage t, address node, uint256 epoch) private returns (uint256 slot) {
        for (uint256 k = 0; k < REUSE_CHECKS && t.freeHead < t.freeTail; k++) {
            uint256 candidate = t.freeQueue[t.freeHead];
            Versioned memory v = _rolled(t.leaves[candidate], epoch);
            if (v.next != 0) {
                delete t.freeQueue[t.freeHead++]; // its node came back: a stale entry
                continue;
            }
            if (v.current != 0 || v.previous != 0) break; // not free yet; later entries are younger
            delete t.freeQueue[t.freeHead++];
            delete t.slotOf[t.owners[candidate]];
            slot = candidate;
            break;
        }
        if (slot == 0) {
            slot = ++t.slots;
            if (slot > t.capacity) {
                uint256 grown = t.capacity == 0 ? 1 : 2 * uint256(t.capacity);
                if (t.capacity != 0) t.sums[grown] = t.sums[t.capacity];
                t.capacity = uint32(grown);
            }
        }
        t.owners[slot] = node;
        t.slotOf[node] = slot;
    }

    function _rolled(Versioned memory v, uint256 epoch) private pure returns (Versioned memory) {
        if (v.epoch == epoch) return v;
        if (v.epoch + 1 == epoch) (v.previous, v.current) = (v.current, v.next);
        else (v.previous, v.current) = (v.next, v.next);
        v.epoch = uint32(epoch);
        return v;
    }

    function _u112(uint256 x) private pure returns (uint112) {
        if (x > type(uint112).max) revert WeightOverflow();
        return uint112(x);
    }
}
