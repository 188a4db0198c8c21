"""`verillm calibrate`: derive a tolerance profile from honest runs."""

import sys

import click

from verillm.bench.tables import DTYPES, format_table


@click.command()
@click.option("--model", "model_name", default="tiny", show_default=True, help="tiny, smollm2, a Hugging Face directory or a GGUF file.")
@click.option("--dtype", type=click.Choice(sorted(DTYPES)), default="fp32", show_default=True)
@click.option("--jobs", "job_count", type=int, default=None, help="Honest jobs (default: 48 tiny, 32 smollm2).")
@click.option("--safety-factor", type=float, default=None, help="Threshold >= factor x honest maximum (default 4 fp32, 2 bf16); a tail fit may raise it.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None, help="Where to write the profile JSON [default: PROFILE_DIR/<model id>-<dtype>.json, where the node looks].")
@click.option("--profile-dir", default="profiles", show_default=True, help="The node's engine.profile_dir (used when --out is not given).")
@click.option("--check", is_flag=True, help="Write nothing: measure today's honest noise against the profile the node would use; exit 1 when it reaches half a threshold (stale).")
def calibrate(model_name, dtype, job_count, safety_factor, out_path, profile_dir, check):
    """Measure honest noise over the engine matrix and write thresholds with a stated margin
    (or, with --check, tell whether the existing profile still fits this engine)."""
    from pathlib import Path

    from verillm.bench.calibration import DEFAULT_SAFETY_FACTOR, compute_profile
    from verillm.bench.noise import VERIFIER_CONFIGS_FULL, VERIFIER_CONFIGS_SHORT, compute_permissive_profile, run_honest_matrix
    from verillm.bench.workloads import Workload, make_jobs
    from verillm.engine.models import load_model
    from verillm.engine.profiles import get_profile_path
    from verillm.spec.job import compute_model_id
    from verillm.spec.params import MAINNET

    dtype = DTYPES[dtype]
    # Calibration is for tolerance mode; exact-mode manifests have thresholds of 0 by definition.
    model, tokenizer, manifest = load_model(model_name, dtype, mode="tolerance")
    count = job_count or (48 if model_name == "tiny" else 32)
    jobs = make_jobs(Workload("calibration", count), model_name, manifest, tokenizer, "calibration")
    verifiers = VERIFIER_CONFIGS_FULL if model_name == "tiny" else VERIFIER_CONFIGS_SHORT
    progress = lambda line: click.echo(line, err=True)  # noqa: E731
    audits = run_honest_matrix(model, tokenizer, manifest, jobs, compute_permissive_profile(manifest), MAINNET.CHALLENGE_POSITIONS, verifier_configs=verifiers, progress=progress)
    if check:
        _report_check(model_name, manifest, audits, profile_dir)
        return
    factor = safety_factor or DEFAULT_SAFETY_FACTOR[dtype]
    command = " ".join(["verillm calibrate"] + sys.argv[2:])
    profile = compute_profile(model_name if model_name in ("tiny", "smollm2") else manifest.name, dtype, audits, factor, command)
    profile.provenance["model_id"] = "0x" + compute_model_id(manifest).hex()
    out_path = out_path or get_profile_path(profile_dir, compute_model_id(manifest), dtype)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(profile.to_json())
    bounds = profile.provenance["bounds"]
    rows = [[layer, stat, b["observed_max"], b["factor_bound"], b["tail_bound"] if b["tail_bound"] is not None else "-", b["threshold"], b["binding"]]
            for layer, by_stat in bounds.items() for stat, b in by_stat.items()]
    click.echo(format_table(["layer", "statistic", "honest max", "factor bound", "tail bound", "threshold", "binds"], rows))
    click.echo(f"{len(audits)} honest audits; {profile.provenance['confidence']}")
    click.echo(f"wrote {out_path}")


def _report_check(model_name: str, manifest, audits, profile_dir: str) -> None:
    """Print today's honest maxima against the profile the node would load; exit 1 when stale."""
    from verillm.bench.calibration import STALE_RATIO, compute_profile_check
    from verillm.engine.profiles import compute_calibrate_command, find_profile
    from verillm.spec.job import compute_model_id

    profile = find_profile(model_name, compute_model_id(manifest), manifest.dtype, profile_dir)
    rows = compute_profile_check(profile, audits)
    click.echo(format_table(["layer", "statistic", "honest max today", "threshold", "ratio"], [[r["layer"], r["statistic"], r["honest_max"], r["threshold"], r["ratio"]] for r in rows]))
    worst = max(rows, key=lambda r: r["ratio"])
    verdict = f"{len(audits)} honest audits; worst: layer {worst['layer']} {worst['statistic']} at {worst['ratio']:.2f} of its threshold (profile: {profile.provenance.get('command', 'no provenance')})"
    if worst["ratio"] > STALE_RATIO:
        click.echo(f"STALE: {verdict}, above {STALE_RATIO}; recalibrate: {compute_calibrate_command(model_name, manifest.dtype, profile_dir)}")
        sys.exit(1)
    click.echo(f"ok: {verdict}")
