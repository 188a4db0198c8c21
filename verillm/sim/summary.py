"""The numbers a run reports (one flat dict, JSON-ready) from a finished `Simulation`."""

from dataclasses import asdict

import numpy as np

from verillm.sim.inputs import PAPER_GPU_VERIFY_OVER_GENERATE, Rate, load_cost

WEI = 10**18


def summarize(sim, wall_s: float) -> dict:
    t, s, preset = sim.t, sim.s, sim.preset
    adversaries = int(sim.pool.adversarial.sum())
    profit_wei = t.adversary_savings_wei + t.adversary_credits_wei - t.adversary_slashed_wei
    caught = Rate(t.cheated_audits_caught, t.cheated_audited)
    p_slash = caught.value if t.cheated_audited else 1.0
    ev_per_cheat_eth = (sim.gain_wei - sim.a * p_slash * preset.MIN_STAKE_WEI) / WEI
    esc_share = t.escalations / t.audits if t.audits else 0.0
    seats_per_audit = preset.COMMITTEE_SIZE + esc_share * preset.ESCALATION_COMMITTEE_SIZE
    cpu_ratio = load_cost().verify_over_generate
    return {
        "scenario": asdict(s),
        "rules": asdict(sim.rules),
        "detection_d": sim.d, "false_vote_mu": sim.mu,
        "jobs": t.jobs, "audits": t.audits, "audits_unstartable": t.audits_unstartable,
        "flood_identities": sim.flood_identities,
        "cheated_served": t.cheated_served,
        "cheated_unslashed": t.cheated_served - t.cheated_audits_caught,
        "cheated_omitted_from_batches": t.cheated_omitted,
        "cheated_audited": t.cheated_audited,
        "cheated_audits_caught": t.cheated_audits_caught,
        "p_audited_cheat_escapes": 1 - p_slash if t.cheated_audited else None,
        "p_audited_cheat_escapes_ci95": list(_flip(caught.interval)) if t.cheated_audited else None,
        "abandoned": t.abandoned, "escalations": t.escalations, "lapsed_escalations": t.lapsed_escalations,
        "honest_slashed": dict(t.honest_slashed_events), "honest_slashed_eth": t.honest_slashed_wei / WEI,
        "honest_no_answer_penalties": t.honest_no_answer_penalised,
        "honest_beyond_penalty_eth": t.honest_beyond_penalty_wei / WEI,
        "honest_silent_penalty_eth": t.honest_silent_penalty_wei / WEI,
        "adversary_silent_penalties": t.adversary_silent_penalties,
        "adversary_appeals": t.adversary_appeals,
        "unkeepable_omissions": t.unkeepable_omissions,
        "adversary_identities": adversaries,
        "adversary_profit_eth": profit_wei / WEI,
        "adversary_profit_per_identity_eth": profit_wei / WEI / adversaries if adversaries else 0.0,
        "adversary_savings_eth": t.adversary_savings_wei / WEI,
        "adversary_slashed_eth": t.adversary_slashed_wei / WEI,
        "adversary_fees_and_rewards_eth": t.adversary_credits_wei / WEI,
        "ev_per_cheated_job_eth": ev_per_cheat_eth,
        "honest_fees_and_rewards_eth": t.honest_credits_wei / WEI,
        "detection_time_s": _quantiles(t.detection_s),
        "audit_latency_s": _quantiles(t.latencies_s),
        "locked_stake_eth": {"mean": float(np.mean(sim.series["locked_eth"])), "max": float(np.max(sim.series["locked_eth"]))},
        "gas_per_job": t.gas / t.jobs if t.jobs else 0.0,
        "gas_per_audit": sim.gas_model.audit_path(s.workers, preset.COMMITTEE_SIZE),
        "start_audit_gas": sim.gas_model.start_audit_gas(s.workers),
        "largest_nodes_within_block_gas": sim.gas_model.largest_nodes(),
        "calls_per_block": t.tx_count / max(1, len(sim.series["time_s"]) and s.duration_s / s.block_s),
        "verification_share_gpu": sim.a * seats_per_audit * PAPER_GPU_VERIFY_OVER_GENERATE,
        "verification_share_cpu": sim.a * seats_per_audit * cpu_ratio,
        "verify_over_generate": {"gpu_paper": PAPER_GPU_VERIFY_OVER_GENERATE, "cpu_measured": cpu_ratio},
        "wall_s": wall_s,
        "series": sim.series,
    }


def _flip(interval):
    low, high = interval
    return 1 - high, 1 - low


def _quantiles(values) -> dict | None:
    if not values:
        return None
    v = np.asarray(values, dtype=float)
    return {"n": len(v), "median": float(np.median(v)), "p90": float(np.quantile(v, 0.9)), "max": float(v.max())}
