"""Audit-level Monte Carlo: many independent audits of one situation, over a sybil population.

This is how the simulator reproduces ../shared/notes/economics-check.md §2c/§2e (rules of the
first landing) and measures the same cells under the issue-9 rules. Each audit draws its
committee with the spec's sortition from a fresh seed; the adversary holds a share q of the
stake split into MIN_STAKE identities scattered through the Registry order.
"""

from dataclasses import dataclass

import numpy as np

from verillm.spec.hashing import keccak256
from verillm.spec.params import Preset
from verillm.spec.settlement import FAIL, PASS
from verillm.sim.audit import AuditContext, Behaviour, run_audit
from verillm.sim.inputs import Rate
from verillm.sim.rules import RuleSet
from verillm.sim.sortition import GWEI, Pool


def make_pool(nodes: int, adversary_share: float, min_stake_wei: int, rng: np.random.Generator, stake: str = "equal") -> Pool:
    """``nodes`` nodes; the adversary's identities (chosen at random positions) hold ``adversary_share``
    of the stake. ``stake``: "equal" (all at MIN_STAKE) or "lognormal" (honest stakes spread, σ = 1,
    the adversary splits into MIN_STAKE sybils, the cheapest way to hold seats)."""
    unit = min_stake_wei // GWEI if min_stake_wei >= GWEI else 1
    base = max(1, min_stake_wei // (GWEI if min_stake_wei >= GWEI else 1) // max(unit, 1))
    if stake == "equal":
        stakes = np.full(nodes, min_stake_wei // GWEI, dtype=np.int64)
        adversarial = np.zeros(nodes, dtype=bool)
        adversarial[rng.choice(nodes, size=int(round(adversary_share * nodes)), replace=False)] = True
        return Pool(stakes, adversarial)
    honest_stakes = (min_stake_wei // GWEI) * np.maximum(1.0, rng.lognormal(0.0, 1.0, nodes)).astype(np.int64)
    del base
    adversarial = np.zeros(nodes, dtype=bool)
    # sybils at MIN_STAKE replace honest nodes until the adversary holds its share
    order = rng.permutation(nodes)
    stakes = honest_stakes.copy()
    for k, node in enumerate(order):
        held = stakes[adversarial].sum()
        if held >= adversary_share * stakes.sum():
            break
        adversarial[node] = True
        stakes[node] = min_stake_wei // GWEI
    return Pool(stakes.astype(np.int64), adversarial)


@dataclass
class CellResult:
    audits: int
    escaped: int = 0
    abandoned: int = 0
    lapsed: int = 0
    escalated: int = 0
    honest_worker_slashed: int = 0
    honest_dispatcher_slashed: int = 0
    honest_members_slashed: int = 0
    honest_slashed_wei: int = 0
    honest_members_hunted: int = 0
    """Of the honest members slashed: by the adversary's cross-round hunts (`verillm.sim.appeals`)."""
    honest_hunted_wei: int = 0
    grind_trials: list | None = None
    grind_topup_units: list | None = None
    verdicts: dict | None = None

    def rate(self, name: str) -> Rate:
        return Rate(getattr(self, name), self.audits)


def run_cell(preset: Preset, rules: RuleSet, adversary_share: float, behaviour: Behaviour, audits: int, nodes: int = 1000,
             cheated: bool = True, worker_adversarial: bool = True, dispatcher_adversarial: bool = False,
             d: float = 1.0, mu: float = 0.0, offline: float = 0.0, seed: int = 0, pool: Pool | None = None) -> CellResult:
    """Run ``audits`` independent audits of one job and count the outcomes (over ``pool`` when given)."""
    rng = np.random.default_rng(seed)
    pool = pool or make_pool(nodes, adversary_share, preset.MIN_STAKE_WEI, rng)
    honest = np.flatnonzero(~pool.adversarial)
    adv = np.flatnonzero(pool.adversarial)
    ctx = AuditContext(preset, rules, pool, behaviour, d, mu, offline)
    res = CellResult(audits, grind_trials=[], grind_topup_units=[], verdicts={})
    for i in range(audits):
        worker = int(rng.choice(adv if worker_adversarial and len(adv) else honest))
        dispatcher = int(rng.choice(adv if dispatcher_adversarial and len(adv) else honest))
        seed_bytes = keccak256(b"verillm sim mc" + seed.to_bytes(8, "big") + i.to_bytes(8, "big"))
        out = run_audit(ctx, worker, dispatcher, cheated, seed_bytes, rng, audit_id=i)
        res.escaped += out.escaped
        res.abandoned += out.abandoned
        res.lapsed += out.lapsed_escalation
        res.escalated += out.escalated
        res.verdicts[out.verdict] = res.verdicts.get(out.verdict, 0) + 1
        res.honest_members_hunted += len(out.hunted_wei)
        res.honest_hunted_wei += sum(out.hunted_wei.values())
        for role, _node, wei in out.honest_slashed:
            res.honest_slashed_wei += wei
            res.honest_worker_slashed += role == "worker"
            res.honest_dispatcher_slashed += role == "dispatcher"
            res.honest_members_slashed += role == "member"
        if behaviour.stake_grind and out.grind_trials:
            res.grind_trials.append(out.grind_trials)
            res.grind_topup_units.append(out.grind_topup_units)
    return res


__all__ = ["make_pool", "run_cell", "CellResult", "PASS", "FAIL"]
