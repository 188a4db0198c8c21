"""The paper's committee bounds and the §13 table, closed form against the simulator.

Closed forms (each seat independent; a seat votes wrongly with probability w = (1−r) + r·μ:
adversarial, or honest and noisy):
- `tail(m, w)`: P(more than m/2 of m seats vote wrongly), the §13 table.
- E.1 (first round): sound for r > 1/(2(1−μ)²) (VeriLLM v4).
- E.2 (second round): m' > ln(1/ξ) / (2(r(1−μ) − 1/2)²) gives P(wrong majority) < ξ (Hoeffding).
The simulated side runs audits through `verillm.sim.montecarlo.run_cell` (spec sortition over a
sybil population, colluding adversary, no escalation) and counts wrong verdicts.
"""

import math

from verillm.spec.params import MAINNET
from verillm.sim.audit import Behaviour
from verillm.sim.inputs import Rate
from verillm.sim.montecarlo import run_cell
from verillm.sim.rules import FIRST_LANDING


def tail(m: int, w: float) -> float:
    """P(Binomial(m, w) > m/2), summed in log space (C(m, k) overflows a float past m ≈ 1,000)."""
    if w <= 0.0:
        return 0.0
    if w >= 1.0:
        return 1.0
    lw, lv = math.log(w), math.log1p(-w)
    return sum(math.exp(math.lgamma(m + 1) - math.lgamma(k + 1) - math.lgamma(m - k + 1) + k * lw + (m - k) * lv)
               for k in range(m // 2 + 1, m + 1))


def wrong_vote_probability(r: float, mu: float) -> float:
    return (1 - r) + r * mu


def e1_threshold(mu: float) -> float:
    return 1 / (2 * (1 - mu) ** 2)


def e2_size(r: float, mu: float, xi: float) -> int | None:
    """The smallest integer m' above the Hoeffding bound, made odd; None when r(1−μ) ≤ 1/2."""
    gap = r * (1 - mu) - 0.5
    if gap <= 0:
        return None
    m = math.floor(math.log(1 / xi) / (2 * gap * gap)) + 1
    return m if m % 2 else m + 1


def exact_size(r: float, mu: float, xi: float, limit: int = 2001) -> int | None:
    """The smallest odd m' whose exact binomial tail is below ξ."""
    w = wrong_vote_probability(r, mu)
    if w >= 0.5:
        return None  # no committee size amplifies a wrong-vote rate of one half or more
    for m in range(1, limit + 1, 2):
        if tail(m, w) < xi:
            return m
    return None


def simulate_wrong_verdict(r: float, mu: float, m: int, audits: int, nodes: int = 2000, seed: int = 0) -> Rate:
    """P(a committee of m passes a cheat) over the spec's sortition: the adversary (1 − r of the
    stake) votes AGREE, honest members DISAGREE with probability 1 − μ; nobody escalates."""
    preset = MAINNET.replace(COMMITTEE_SIZE=m)
    res = run_cell(preset, FIRST_LANDING, 1 - r, Behaviour(collude=True), audits, nodes=nodes,
                   dispatcher_adversarial=True, d=1 - mu, seed=seed)
    return Rate(res.escaped, res.audits)


def section13_table(audits: int, seed: int = 0) -> list[dict]:
    """The §13 table (m = 3, m' = 7, both) closed form and simulated, and economics-check §2a's
    m' for ξ = 10⁻⁶ and P(fail) at m' = 7 with μ = 0.03."""
    rows = []
    for r in (0.67, 0.80, 0.90, 0.95):
        w = wrong_vote_probability(r, 0.0)
        sim3 = simulate_wrong_verdict(r, 0.0, 3, audits, seed=seed)
        sim7 = simulate_wrong_verdict(r, 0.0, 7, audits, seed=seed + 1)
        sim7mu = simulate_wrong_verdict(r, 0.03, 7, audits, seed=seed + 2)
        rows.append({
            "r": r, "m3": tail(3, w), "m3_sim": sim3.value, "m3_sim_ci95": sim3.interval,
            "m7": tail(7, w), "m7_sim": sim7.value, "m7_sim_ci95": sim7.interval,
            "both": tail(3, w) * tail(7, w),
            "m_prime_hoeffding_1e-6": e2_size(r, 0.0, 1e-6), "m_prime_exact_1e-6": exact_size(r, 0.0, 1e-6),
            "m7_mu003": tail(7, wrong_vote_probability(r, 0.03)), "m7_mu003_sim": sim7mu.value,
        })
    return rows


def bounds_table(audits: int, seed: int = 0) -> list[dict]:
    """E.1 and E.2 checked: for several (r, μ), the wrong-verdict rate of growing committees
    (falls with m above the E.1 threshold), and the E.2 size's simulated failure against ξ."""
    rows = []
    for r, mu in ((0.5, 0.03), (0.52, 0.03), (0.6, 0.03), (0.7, 0.03), (0.8, 0.0), (0.9, 0.03)):
        xi = 1e-2
        m_e2 = e2_size(r, mu, xi)
        sims = {m: simulate_wrong_verdict(r, mu, m, audits, seed=seed + m) for m in (3, 9, 21)}
        e2 = simulate_wrong_verdict(r, mu, m_e2, audits, seed=seed + 101) if m_e2 and m_e2 <= 301 else None
        rows.append({
            "r": r, "mu": mu, "e1_threshold": e1_threshold(mu), "above_e1": r > e1_threshold(mu),
            **{f"m{m}_closed": tail(m, wrong_vote_probability(r, mu)) for m in sims},
            **{f"m{m}_sim": s.value for m, s in sims.items()},
            "xi": xi, "m_prime_e2": m_e2, "m_prime_exact": exact_size(r, mu, xi),
            "m_prime_e2_fail_closed": tail(m_e2, wrong_vote_probability(r, mu)) if m_e2 else None,
            "m_prime_e2_fail_sim": e2.value if e2 else None,
            "m_prime_e2_fail_sim_ci95": e2.interval if e2 else None,
        })
    return rows
