"""The studies behind docs/simulation.md: the strategy table, the economics-check reproductions
(§2a, §2c, §2e) and the before/after cells, each a list of JSON-ready rows."""

import numpy as np

from verillm.spec.params import get_preset
from verillm.sim.audit import Behaviour
from verillm.sim.engine import Scenario, run_scenario
from verillm.sim.montecarlo import run_cell
from verillm.sim.rules import RULES
from verillm.sim.strategies import STRATEGIES

TABLE_SHARES = (0.10, 0.33, 0.49)
GRIND_AUDITS = 1000
TABLE_STRATEGIES = ("cheat-always", "cheat-fraction", "cheat-unwatched", "collude", "collude-withhold",
                    "dispatcher-reroll", "withhold-jobs", "escalate-unheard", "stake-grind", "lazy", "grief-refuse", "grief-disagree", "grief-contest",
                    "withhold-openings", "worker-default", "flood-identities", "adaptive",
                    "appeal-griefer", "appeal-hunter", "settle-front-run", "silent-sybils")


def strategy_table(preset: str, hours: float, workers: int, jobs_per_s: float, seed: int = 0, rules=("before-coverage", "main"), strategies=TABLE_STRATEGIES,
                   shares=TABLE_SHARES, progress=None, **overrides) -> list[dict]:
    """Each strategy × adversary share × rule set, one engine run each."""
    rows = []
    for rules_name in rules:
        for q in shares:
            baseline = None
            for strategy in ("honest",) + tuple(strategies):
                sc = Scenario(preset=preset, rules=rules_name, strategy=strategy, adversary_share=q, workers=workers,
                              jobs_per_s=jobs_per_s, duration_s=hours * 3600, seed=seed, **overrides)
                row = table_row(run_scenario(sc))
                baseline = row["adversary_profit_per_identity_eth"] if baseline is None else baseline
                # what the strategy earns beyond playing honest with the same identities
                row["excess_per_identity_eth"] = row["adversary_profit_per_identity_eth"] - baseline
                rows.append(row)
                if progress:
                    progress(rows[-1])
    return rows


def table_row(r: dict) -> dict:
    sc = r["scenario"]
    det = r["detection_time_s"]
    return {
        "preset": sc["preset"], "rules": sc["rules"], "strategy": sc["strategy"], "q": sc["adversary_share"],
        "adversary_profit_per_identity_eth": r["adversary_profit_per_identity_eth"],
        "ev_per_cheated_job_eth": r["ev_per_cheated_job_eth"] if r["cheated_served"] else None,
        "p_audited_cheat_escapes": r["p_audited_cheat_escapes"],
        "cheated_served": r["cheated_served"], "cheated_unslashed": r["cheated_unslashed"],
        "honest_slashed_events": sum(r["honest_slashed"].values()), "honest_slashed_eth": r["honest_slashed_eth"],
        "honest_no_answer_penalties": r["honest_no_answer_penalties"],
        "honest_beyond_penalty_eth": r["honest_beyond_penalty_eth"], "adversary_appeals": r["adversary_appeals"],
        "adversary_silent_penalties": r["adversary_silent_penalties"], "unkeepable_omissions": r["unkeepable_omissions"],
        "abandoned": r["abandoned"], "audits_unstartable": r["audits_unstartable"],
        "flood_identities": r["flood_identities"],
        "detection_median_s": det["median"] if det else None,
        "audits": r["audits"],
    }


CELL_BEHAVIOURS = {
    "vote": Behaviour(collude=True),
    "withhold": Behaviour(collude=True, withhold=True),
    "grind": Behaviour(collude=True, starve=True),
    "stake-grind": Behaviour(collude=True, stake_grind=True),
    "escalate-unheard": Behaviour(collude=True, withhold=True, escalate_own_fail=True),
}


def cheat_cells(audits: int, nodes: int, shares=(0.10, 0.20, 0.33, 0.45), seed: int = 0, rules=None) -> list[dict]:
    """economics-check §2c, cheating worker (its own node dispatches): P(an audited cheat is not
    slashed), of which abandoned; E[honest members slashed] per audit; per rule set (``rules``:
    names, default all)."""
    rows = []
    preset = get_preset("mainnet")
    rule_sets = [RULES[n] for n in rules] if rules else list(RULES.values())
    for q in shares:
        for name, beh in CELL_BEHAVIOURS.items():
            for rules in rule_sets:
                n = min(audits, GRIND_AUDITS) if beh.stake_grind else audits  # each grinds up to thousands of draws
                res = run_cell(preset, rules, q, beh, n, nodes=nodes, dispatcher_adversarial=True, seed=seed)
                rows.append({"q": q, "strategy": name, "rules": rules.name, "audits": n,
                             "not_slashed": res.escaped / n, "not_slashed_ci95": res.rate("escaped").interval,
                             "abandoned": res.abandoned / n,
                             "honest_members_slashed_per_audit": res.honest_members_slashed / n,
                             "honest_slashed_eth_per_audit": res.honest_slashed_wei / 1e18 / n,
                             "grind_trials_median": float(np.median(res.grind_trials)) if res.grind_trials else None,
                             "grind_topup_eth_max": max(res.grind_topup_units) * 1e-9 if res.grind_topup_units else None})
    return rows


def grief_cells(audits: int, nodes: int, shares=(0.10, 0.20, 0.33, 0.45), seed: int = 0) -> list[dict]:
    """economics-check §2c, honest worker griefed (colluders vote DISAGREE): P(honest worker slashed)."""
    rows = []
    preset = get_preset("mainnet")
    for q in shares:
        for dispatcher_adv in (False, True):
            for rules in RULES.values():
                # an adversarial dispatcher also starves honest seats (re-rolls), as economics-check modelled it
                res = run_cell(preset, rules, q, Behaviour(grief=True, starve=dispatcher_adv), audits, nodes=nodes, cheated=False,
                               worker_adversarial=False, dispatcher_adversarial=dispatcher_adv, seed=seed)
                rows.append({"q": q, "dispatcher": "adversarial" if dispatcher_adv else "honest", "rules": rules.name,
                             "honest_worker_slashed": res.honest_worker_slashed / audits,
                             "honest_members_slashed_per_audit": res.honest_members_slashed / audits})
    return rows


def liveness_cells(audits: int, nodes: int, seed: int = 0) -> list[dict]:
    """economics-check §2e: P(audit abandoned) and P(honest dispatcher slashed per 1k jobs)."""
    rows = []
    cases = [("members offline 5%", 0.0, 0.05, Behaviour()), ("members offline 10%", 0.0, 0.10, Behaviour()),
             ("adversary 10% never answers", 0.10, 0.0, Behaviour(refuse=True)),
             ("adversary 20% never answers", 0.20, 0.0, Behaviour(refuse=True)),
             ("adversary 33% never answers", 0.33, 0.0, Behaviour(refuse=True))]
    for label, q, offline, beh in cases:
        for preset_name in ("mainnet", "minimal"):
            preset = get_preset(preset_name)
            for rules in RULES.values():
                res = run_cell(preset, rules, q, beh, audits, nodes=nodes, cheated=False, worker_adversarial=False, offline=offline, seed=seed)
                p = res.abandoned / audits
                p_slash = res.honest_dispatcher_slashed / audits
                audits_per_1k = 1000 * preset.AUDIT_RATE_BPS / 10_000
                rows.append({"case": label, "preset": preset_name, "rules": rules.name, "p_abandoned": p,
                             "p_dispatcher_slashed_per_audit": p_slash,
                             "p_dispatcher_slashed_per_1k_jobs": 1 - (1 - p_slash) ** audits_per_1k})
    return rows


__all__ = ["strategy_table", "cheat_cells", "grief_cells", "liveness_cells", "STRATEGIES"]


FIXES = (
    # (label, strategy, q, rules before, change, scenario keyword arguments for both runs): main's findings
    ("omission: a 4x audit rate does not help", "cheat-unwatched", 0.10, "before-coverage",
     {"preset_overrides": (("AUDIT_RATE_BPS", 2000),)}, {}),
    ("omission: batchBy promise + non-inclusion challenge (Coverage.sol, landed: main)", "cheat-unwatched", 0.10, "before-coverage",
     {"rules": "main"}, {}),
    ("grief-disagree at 49%: escalation committee 31", "grief-disagree", 0.49, "main",
     {"preset_overrides": (("ESCALATION_COMMITTEE_SIZE", 31),)}, {}),
    ("grief-disagree at 33%: escalation committee 15", "grief-disagree", 0.33, "main",
     {"preset_overrides": (("ESCALATION_COMMITTEE_SIZE", 15),)}, {}),
    ("escalate-unheard at 33%: four redraws", "escalate-unheard", 0.33, "main",
     {"preset_overrides": (("MAX_COMMITTEE_REDRAWS", 4),)}, {}),
    ("escalate-unheard at 33%: a fresh committee after an unheard round", "escalate-unheard", 0.33, "main",
     {"rule_overrides": (("fresh_draws_after_abandon", 1),)}, {}),
    ("grief-contest, 5% downtime in 600 s outages: proof window 300 blocks (1 h)", "grief-contest", 0.10, "main",
     {"preset_overrides": (("PROOF_WINDOW_BLOCKS", 300),)}, {"offline": 0.05, "outage_s": 600.0}),
)


def fix_table(preset: str, hours: float, workers: int, jobs_per_s: float, seed: int = 0, progress=None) -> list[dict]:
    """Each positive-EV finding, before and after the proposed change, against honest play."""
    rows = []
    for label, strategy, q, rules, change, base in FIXES:
        common = dict(preset=preset, adversary_share=q, workers=workers, jobs_per_s=jobs_per_s, duration_s=hours * 3600, seed=seed, **base)
        after_kw = {"rules": rules, **change}
        result = {"fix": label, "strategy": strategy, "q": q, "rules_before": rules, "change": repr(change), "scenario": repr(base)}
        for tag, kw in (("before", {"rules": rules}), ("after", after_kw)):
            honest = table_row(run_scenario(Scenario(strategy="honest", **common, **kw)))
            row = table_row(run_scenario(Scenario(strategy=strategy, **common, **kw)))
            result[f"excess_{tag}_eth"] = row["adversary_profit_per_identity_eth"] - honest["adversary_profit_per_identity_eth"]
            result[f"honest_slashed_{tag}_eth"] = row["honest_slashed_eth"]
            result[f"p_escape_{tag}"] = row["p_audited_cheat_escapes"]
            result[f"unslashed_cheats_{tag}"] = row["cheated_unslashed"]
            result[f"honest_slashed_events_{tag}"] = row["honest_slashed_events"]
        rows.append(result)
        if progress:
            progress(result)
    return rows
