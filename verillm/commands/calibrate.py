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
def calibrate(model_name, dtype, job_count, safety_factor, out_path, profile_dir):
    """Measure honest noise over the engine matrix and write thresholds with a stated margin."""
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
