"""`verillm model ...`: what model id a directory of weights is, before serving it.

    verillm model inspect ~/models/Qwen2.5-0.5B-Instruct     # manifest + model id to register
    verillm model tiny-checkpoint --family qwen2 /tmp/tiny-qwen2   # a tiny local test checkpoint
"""

import dataclasses
import json

import click

from verillm.bench.tables import DTYPES


def compute_manifest_fields(manifest) -> dict:
    """Return the manifest as JSON-ready fields (bytes as 0x hex, tuples as lists)."""
    fields = {}
    for field in dataclasses.fields(manifest):
        value = getattr(manifest, field.name)
        fields[field.name] = "0x" + value.hex() if isinstance(value, bytes) else list(value) if isinstance(value, tuple) else value
    return fields


def _profile_line(model: str, manifest, model_id: bytes, profile_dir: str) -> str:
    from verillm.engine.profiles import find_profile, get_profile_path, is_tolerance_mode
    from verillm.errors import ProfileMissing

    if not is_tolerance_mode(manifest):
        return "none needed (exact mode)"
    try:
        profile = find_profile(model, model_id, manifest.dtype, profile_dir)
    except ProfileMissing as exc:
        return f"MISSING: {str(exc).split('calibrate it first: ')[-1]}"
    where = get_profile_path(profile_dir, model_id, manifest.dtype)
    return f"{where.resolve()}" if where.is_file() else f"shipped for {profile.model}"


@click.group()
def model():
    """Inspect local model files: manifest, model id, profile."""


@model.command()
@click.argument("path")
@click.option("--dtype", type=click.Choice(sorted(DTYPES)), default="fp32", show_default=True, help="Compute dtype (part of the model id).")
@click.option("--preset", default="mainnet", show_default=True, help="Protocol preset (sets the fingerprint dims).")
@click.option("--profile-dir", default="profiles", show_default=True, help="Where the node looks for calibrated profiles.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
def inspect(path, dtype, preset, profile_dir, as_json):
    """Print the manifest derived from PATH (alias, HF directory or GGUF) and its model id."""
    from verillm.engine.families import get_family
    from verillm.engine.models import load_model
    from verillm.spec.encoding import encode
    from verillm.spec.job import compute_model_id
    from verillm.spec.params import get_preset

    loaded, tokenizer, manifest = load_model(path, DTYPES[dtype], get_preset(preset))
    model_id = compute_model_id(manifest)
    report = {
        "model_id": "0x" + model_id.hex(),
        "family": get_family(loaded.config),
        "manifest": compute_manifest_fields(manifest),
        "manifest_encoded": "0x" + encode(manifest).hex(),
        "stop_token_strings": tokenizer.convert_ids_to_tokens(list(manifest.stop_tokens)),
        "profile": _profile_line(path, manifest, model_id, profile_dir),
    }
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"model id   {report['model_id']}")
    click.echo(f"family     {report['family']}")
    for name, value in report["manifest"].items():
        click.echo(f"  {name:<26} {value}")
    click.echo(f"  {'(stop tokens)':<26} {report['stop_token_strings']}")
    click.echo(f"profile    {report['profile']}")


@model.command("tiny-checkpoint")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--family", default="qwen2", show_default=True, help="Architecture family (llama, qwen2, gemma2, phi3, qwen2_moe, mixtral, ...).")
@click.option("--seed", type=int, default=0, show_default=True)
def tiny_checkpoint(directory, family, seed):
    """Write a tiny random checkpoint of FAMILY as a Hugging Face directory (for trying the path flow)."""
    from verillm.engine.tiny_checkpoints import save_tiny_checkpoint

    click.echo(f"wrote {save_tiny_checkpoint(family, directory, seed)}")
