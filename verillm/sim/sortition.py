"""Committee sortition at network scale, equal draw for draw to `verillm.spec.audit.compute_committee`.

The spec walks the candidate list in Python (O(n) per draw; the contract descends a Fenwick
stake tree to the same slot, `verillm.spec.stake_tree`). Here the
same draw values (`compute_draw_value`, keccak) pick through a numpy cumulative sum. Stakes
are held in integer units of ``unit_wei`` (1 gwei by default); with stakes that are multiples
of the unit, r_wei < cum·unit ⟺ ⌊r_wei / unit⌋ < cum, so the pick is the spec's exactly
(`tests/sim/test_sortition.py` asserts it against `compute_committee`).
"""

from dataclasses import dataclass

import numpy as np

from verillm.errors import InvalidInput
from verillm.spec.audit import compute_draw_value

GWEI = 10**9


@dataclass
class Pool:
    """The nodes serving one model, in Registry order."""

    stake_units: np.ndarray
    """int64 stake of each node in ``unit_wei``."""
    adversarial: np.ndarray
    """bool: the node belongs to the adversary."""
    unit_wei: int = GWEI
    trace: list | None = None
    """When a list: every draw is recorded as (seed, attempt, size, weights in wei, chosen), so a
    test can replay the simulator's draws through the contract's `computeCommittee`."""

    def __post_init__(self):
        if self.stake_units.dtype != np.int64 or len(self.stake_units) != len(self.adversarial):
            raise InvalidInput("stake_units must be int64, one per node, like adversarial")

    @property
    def size(self) -> int:
        return len(self.stake_units)

    def stake_wei(self, node: int) -> int:
        return int(self.stake_units[node]) * self.unit_wei


def draw_committee(pool: Pool, seed: bytes, attempt: int, size: int, excluded, weights: np.ndarray | None = None) -> list[int]:
    """Return ``size`` node indices drawn like `compute_committee` (excluded nodes weigh 0)."""
    w = (pool.stake_units if weights is None else weights).copy()
    if len(excluded):
        w[np.fromiter(excluded, dtype=np.int64)] = 0
    chosen = []
    for i in range(size):
        cum = np.cumsum(w)
        total = int(cum[-1]) if len(cum) else 0
        if total == 0:
            raise InvalidInput(f"not enough candidates: wanted {size}, drew {i}")
        r_units = (compute_draw_value(seed, attempt, i) % (total * pool.unit_wei)) // pool.unit_wei
        picked = int(np.searchsorted(cum, r_units, side="right"))
        chosen.append(picked)
        w[picked] = 0
    if pool.trace is not None:
        start = (pool.stake_units if weights is None else weights).copy()
        if len(excluded):
            start[np.fromiter(excluded, dtype=np.int64)] = 0
        pool.trace.append((seed, attempt, size, [int(x) * pool.unit_wei for x in start], tuple(chosen)))
    return chosen
