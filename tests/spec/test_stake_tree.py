"""verillm.spec.stake_tree: the three-version weights against a per-epoch history, and the Fenwick
pick against the sortition's linear walk (the contract side: tests/contracts/test_sortition_scale.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verillm.errors import InvalidInput
from verillm.spec import audit
from verillm.spec.stake_tree import (Versioned, compute_capacity, compute_fenwick_pick, compute_read, compute_rolled,
                                     compute_write)


class History:
    """The naive model: a node's weight in every epoch, rewritten by each change."""

    def __init__(self):
        self.values: dict[int, int] = {}  # every epoch up to the last write
        self.last = -1
        self.tail = 0  # the value of every epoch after the last write

    def at(self, epoch: int) -> int:
        return self.values.get(epoch, self.tail)

    def write(self, epoch: int, weight: int) -> None:
        for e in range(self.last + 1, epoch + 1):
            self.values[e] = self.tail
        self.tail, self.last = weight, epoch


OPS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 100)), max_size=25)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_versioned_weights_equal_the_per_epoch_history(ops):
    v, history, epoch = Versioned(), History(), 0
    for gap, weight in ops:
        epoch += gap
        before = {e: compute_read(v, e) for e in (epoch - 1, epoch) if e >= 0 and e + 1 >= v.epoch}
        v = compute_write(v, epoch, weight)
        history.write(epoch, weight)
        assert all(compute_read(v, e) == w for e, w in before.items()), "a write changed a readable epoch"
        for e in (epoch - 1, epoch, epoch + 1, epoch + 5):
            if e >= 0:
                assert compute_read(v, e) == history.at(e), (ops, e)
        later = epoch + 1  # a read at a later epoch sees the same values once rolled
        assert compute_read(compute_rolled(v, later), later - 1) == history.at(later - 1)


def test_an_epoch_two_writes_back_is_not_readable():
    v = compute_write(compute_write(Versioned(), 5, 10), 7, 20)
    assert compute_read(v, 6) == 10 and compute_read(v, 8) == 20
    with pytest.raises(InvalidInput, match="no longer readable"):
        compute_read(v, 5)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=70), st.data())
def test_fenwick_pick_equals_the_linear_walk(weights, data):
    if sum(weights) == 0:
        weights = weights + [1]
    r = data.draw(st.integers(0, sum(weights) - 1))
    assert compute_fenwick_pick(weights, r) == audit._walk(r, list(weights))


def test_capacity_is_the_next_power_of_two():
    assert [compute_capacity(n) for n in (0, 1, 2, 3, 4, 5, 8, 9, 10_000)] == [0, 1, 2, 4, 4, 8, 8, 16, 16_384]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 5), st.lists(st.integers(1, 60), max_size=6), st.integers(0, 8), st.integers(1, 60))  # block 0: genesis
def test_out_block_is_fixed_at_the_seed_block(left, takes, epoch, seed):
    """`compute_out_block` (Registry.outBlock) as the draw uses it: whether a node is out of a draw
    of ``epoch`` seeded at ``seed`` never changes with a take after ``seed`` (nobody re-rolls a
    committee by slashing one of its members), and a take at or before it in ``epoch`` or later
    always puts the node out (a slashed node sits out the draws seeded after its slash)."""
    epoch_blocks = 10
    left_block = left * 7  # 0: has not unbonded
    firsts: dict[int, int] = {}  # the contract keeps the first take of each epoch (two, by parity)
    for t in sorted(takes):
        firsts.setdefault(t // epoch_blocks, t)
    kept = [b for e, b in firsts.items() if e in (epoch, epoch + 1)]  # what the two parity slots hold then
    out = audit.compute_out_block(left_block, kept, epoch, epoch_blocks)
    before = [b for b in kept if b <= seed]
    assert (0 < out <= seed) == (0 < left_block <= seed or any(b // epoch_blocks >= epoch for b in before))
    assert (0 < out <= seed) == (0 < audit.compute_out_block(left_block, before, epoch, epoch_blocks) <= seed)
