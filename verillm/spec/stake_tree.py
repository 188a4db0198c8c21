"""Sortition weights as `contracts/src/StakeTree.sol` keeps them: three versions per value and a
Fenwick tree over slots.

A (model, node) weight, and every Fenwick cell summing weights, keeps three versions indexed by
the epoch ``e`` of its last write: effective in e − 1, in e, and from e + 1 on. A write in epoch E
sets the value from E + 1 on; nothing changes a readable version (E − 1 and E), a slash neither,
so an epoch's weights are fixed when it begins. The draw itself is `verillm.spec.audit.compute_committee`
over the slot table (`Registry.getModelWeights`): the tree only finds the same slot in
O(log2 slots) reads (`compute_fenwick_pick` equals the linear walk, tested).
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace

from verillm.errors import InvalidInput


@dataclass(frozen=True)
class Versioned:
    """One value's three versions (`StakeTree.Versioned`)."""

    epoch: int = 0
    next: int = 0
    current: int = 0
    previous: int = 0


def compute_rolled(v: Versioned, epoch: int) -> Versioned:
    """Return ``v`` re-indexed at ``epoch`` (≥ its last write), same values per absolute epoch."""
    if epoch < v.epoch:
        raise InvalidInput(f"epoch {epoch} is before the last write ({v.epoch})")
    if epoch == v.epoch:
        return v
    if epoch == v.epoch + 1:
        return Versioned(epoch, v.next, v.next, v.current)
    return Versioned(epoch, v.next, v.next, v.next)


def compute_read(v: Versioned, epoch: int) -> int:
    """Return the value effective in ``epoch`` (`StakeTree.read`)."""
    if epoch > v.epoch:
        return v.next
    if epoch == v.epoch:
        return v.current
    if epoch + 1 == v.epoch:
        return v.previous
    raise InvalidInput(f"epoch {epoch} is no longer readable (last write in {v.epoch})")


def compute_write(v: Versioned, epoch: int, weight: int) -> Versioned:
    """Return ``v`` after a write in ``epoch``: ``weight`` from epoch + 1 on, the readable
    versions as they were."""
    return replace(compute_rolled(v, epoch), next=weight)


def compute_capacity(slots: int) -> int:
    """Return the Fenwick range for ``slots`` slots: the least power of two ≥ slots (0 if none)."""
    return 0 if slots == 0 else 1 << (slots - 1).bit_length()


def compute_fenwick_cells(weights: Sequence[int]) -> list[int]:
    """Return the Fenwick cells over ``weights`` (slot i + 1 = weights[i]), index 0 unused."""
    capacity = compute_capacity(len(weights))
    cells = [0] * (capacity + 1)
    for slot, weight in enumerate(weights, start=1):
        i = slot
        while i <= capacity:
            cells[i] += weight
            i += i & -i
    return cells


def compute_fenwick_pick(weights: Sequence[int], r: int) -> int:
    """Return the index of the first weight whose running sum exceeds ``r`` (r < Σ weights), by
    binary lifting over the Fenwick cells as `StakeTree._pick` descends them."""
    if not 0 <= r < sum(weights):
        raise InvalidInput("r must lie within the total weight")
    cells = compute_fenwick_cells(weights)
    pos, step = 0, compute_capacity(len(weights)) >> 1
    while step:
        if cells[pos + step] <= r:
            pos += step
            r -= cells[pos]
        step >>= 1
    return pos
