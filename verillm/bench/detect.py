"""`verillm bench detect`: false rejections of honest audits and detection of every attack.

Honest: fresh jobs (seed "detect", never seen by calibration) through the noise matrix.
Attacks: each dishonest engine of `verillm.engine.attacks.ATTACKS` generates; jobs on which
the attack changed nothing (same output and commitment as an honest run) are counted as
`no_effect`, not as audits; an honest verifier (threads 2, batch 8) replays the rest; an attack counts as detected when the check rejects,
and as detected *for the right reason* when the rejection includes the attack's expected
kind (fingerprint, token or truncation). Every number comes from `compute_pair_check`, the
same code the network runs.
"""

import math
from collections import Counter

from verillm.bench.noise import (
    MEMBER_PARTY,
    EXACT_VERIFIER_CONFIGS_FULL,
    EXACT_VERIFIER_CONFIGS_SHORT,
    VERIFIER_CONFIGS_FULL,
    VERIFIER_CONFIGS_SHORT,
    WORKER_PARTY,
    EngineConfig,
    build_engine,
    run_honest_matrix,
)
from verillm.bench.tables import format_table
from verillm.bench.workloads import Workload, make_jobs
from verillm.engine.attacks import ATTACKS
from verillm.errors import InvalidInput
from verillm.engine.models import load_model
from verillm.engine.torch_engine import TorchEngine
from verillm.spec.params import MAINNET
from verillm.engine.profiles import get_model_profile
from verillm.verifier.local import check_pair, commit_runs, compute_member_jobs

ATTACK_VERIFIER = EngineConfig(threads=2, batch=8)
# A seed changes nothing in a greedy job, so that attack is run on sampled jobs only.
SAMPLED_ONLY_ATTACKS = {"wrong_seed"}


def compute_threshold_ratio(result, profile) -> float:
    """Return the largest (statistic / threshold) of a result: > 1 means a fingerprint rejection."""
    ratios = [0.0]
    for stats in result.measurement.layers if result.measurement else ():
        tolerance = profile.for_layer(stats.layer)
        ratios.append(_ratio(stats.max_error, tolerance.max_cell_error))
        if stats.cells >= profile.min_cells_for_rms:
            ratios.append(_ratio(stats.rms_error, tolerance.rms_error))
    return max(ratios)


def _ratio(value: float, threshold: float) -> float:
    # Exact mode's thresholds are 0: any nonzero error is infinitely far above them.
    if threshold == 0:
        return math.inf if value > 0 else 0.0
    return value / threshold


def compute_ratio_list(results, profile) -> list[float]:
    """Return every audit's largest statistic/threshold, sorted (4 significant digits).

    Scaling every threshold by s turns a ratio r into r/s, so one run gives the whole
    trade-off: false rejections = honest ratios > s, detections = attack ratios > s.
    """
    return sorted(float(f"{compute_threshold_ratio(r, profile):.4g}") for r in results)


def summarize_honest(audits, profile) -> dict:
    """Return the honest part of the report."""
    rejected = [a for a in audits if not a.result.accepted]
    by_config = Counter(f"{a.worker} -> {a.verifier}" for a in audits)
    return {
        "audits": len(audits),
        "false_rejections": len(rejected),
        "rejection_reasons": sorted({r.detail for a in rejected for r in a.result.reasons})[:20],
        "configurations": dict(sorted(by_config.items())),
        "max_threshold_ratio": max((compute_threshold_ratio(a.result, profile) for a in audits), default=0.0),
        "threshold_ratios": compute_ratio_list([a.result for a in audits], profile),
    }


def is_attack_effective(cheat_run, honest_run) -> bool:
    """Check if the dishonest run differs from the honest run of the same job at all.

    A job on which the attack changes nothing (e.g. a token substitution scheduled after the
    output already ended) is not an audit of cheating and is reported as `no_effect`.
    """
    same_output = cheat_run.trace.output_tokens == honest_run.trace.output_tokens
    return not same_output or cheat_run.commitment.root != honest_run.commitment.root


def run_attack(name, model, tokenizer, manifest, jobs, profile, verifier) -> dict:
    """Run one attack on ``jobs`` and audit every job with the honest ``verifier``."""
    spec = ATTACKS[name]
    cheater = spec.build(model, tokenizer, manifest, max_batch_size=8)
    # The honest twin runs exactly as the cheater does (threads, batch): thread count alone
    # changes fingerprint bits, and only a real difference may count as the attack's effect.
    twin = TorchEngine(model, tokenizer, manifest, max_batch_size=8)
    worker_runs = commit_runs(jobs, cheater.run(jobs), manifest, WORKER_PARTY)
    honest_runs = commit_runs(jobs, twin.run(jobs), manifest, WORKER_PARTY)
    effective = [w for w, h in zip(worker_runs, honest_runs, strict=True) if is_attack_effective(w, h)]
    member_jobs = compute_member_jobs(effective)
    member_runs = commit_runs(member_jobs, verifier.run(member_jobs), manifest, MEMBER_PARTY)
    results = [check_pair(w, m, manifest, profile, MAINNET.CHALLENGE_POSITIONS) for w, m in zip(effective, member_runs, strict=True)]
    kinds = Counter(kind for r in results for kind in r.reason_kinds)
    return {
        "audits": len(results),
        "detected": sum(not r.accepted for r in results),
        "detected_right_reason": sum(spec.category in r.reason_kinds for r in results),
        "no_effect": len(jobs) - len(effective),
        "expected_reason": spec.category,
        "reasons": dict(kinds),
        "min_threshold_ratio": min((compute_threshold_ratio(r, profile) for r in results), default=0.0),
        "threshold_ratios": compute_ratio_list(results, profile),
        "description": spec.description,
    }


def run_detection(model_name, dtype, job_count, attack_job_count, max_new_tokens, attack_names, profile_path, seed_name, progress, mode=None) -> dict:
    """Run the whole detection benchmark and return its report (``mode``: see `load_model`)."""
    progress(f"loading {model_name} ({dtype})…")
    model, tokenizer, manifest = load_model(model_name, dtype, mode=mode)
    profile = get_model_profile(model_name, manifest, profile_path)
    if seed_name == "calibration":
        raise InvalidInput("the detection benchmark must not reuse the calibration jobs")
    honest_jobs = make_jobs(Workload("honest", job_count, max_new_tokens), model_name, manifest, tokenizer, seed_name)
    if manifest.kernel_class:
        verifiers = EXACT_VERIFIER_CONFIGS_FULL if model_name == "tiny" else EXACT_VERIFIER_CONFIGS_SHORT
    else:
        verifiers = VERIFIER_CONFIGS_FULL if model_name == "tiny" else VERIFIER_CONFIGS_SHORT
    audits = run_honest_matrix(model, tokenizer, manifest, honest_jobs, profile, MAINNET.CHALLENGE_POSITIONS, verifier_configs=verifiers, progress=progress)
    verifier = build_engine(model, tokenizer, manifest, ATTACK_VERIFIER)
    attacks = {}
    for name in list(ATTACKS) if attack_names is None else attack_names:
        workload = Workload(f"attack-{name}", attack_job_count, max_new_tokens, sampled_only=name in SAMPLED_ONLY_ATTACKS)
        jobs = make_jobs(workload, model_name, manifest, tokenizer, f"{seed_name}-attack-{name}")
        progress(f"attack {name}: {len(jobs)} jobs…")
        attacks[name] = run_attack(name, model, tokenizer, manifest, jobs, profile, verifier)
        progress(f"attack {name}: {attacks[name]['detected']}/{attacks[name]['audits']} detected")
    return {
        "model": model_name,
        "dtype": dtype,
        "kernel_class": manifest.kernel_class or None,
        "seed": seed_name,
        "max_new_tokens": max_new_tokens,
        "challenge_positions": MAINNET.CHALLENGE_POSITIONS,
        "profile": {"model": profile.model, "dtype": profile.dtype, "provenance": profile.provenance.get("command")},
        "honest": summarize_honest(audits, profile),
        "attacks": attacks,
    }


def summarize_detection(report: dict) -> str:
    """Return the report as tables."""
    honest = report["honest"]
    lines = [
        f"{report['model']} {report['dtype']}: {honest['audits']} honest audits, {honest['false_rejections']} false rejections "
        f"(largest statistic/threshold seen: {honest['max_threshold_ratio']:.3g})",
    ]
    rows = [
        [name, a["audits"], a["detected"], a["detected_right_reason"], a["no_effect"], a["expected_reason"], a["min_threshold_ratio"], ", ".join(f"{k}:{v}" for k, v in sorted(a["reasons"].items()))]
        for name, a in report["attacks"].items()
    ]
    lines.append(format_table(["attack", "audits", "detected", "right reason", "no effect", "expected", "min stat/threshold", "reasons seen"], rows))
    return "\n".join(lines)
