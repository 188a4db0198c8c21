"""`verillm demo verify`: one honest and one cheating job on a real model, verdicts with reasons."""

import click

from verillm.bench.tables import DTYPES

DEMO_PROMPT = "What is the capital of France? Answer in one sentence."


def _describe(title: str, tokenizer, run, result) -> None:
    text = tokenizer.decode(list(run.trace.output_tokens), skip_special_tokens=True)
    click.echo(f"\n== {title}")
    click.echo(f"   output   : {text!r} ({len(run.trace.output_tokens)} tokens)")
    click.echo(f"   receipt  : job {run.receipt.job_hash.hex()[:16]}…  root {run.receipt.commitment_root.hex()[:16]}…  worker 0x{run.receipt.worker.hex()[:8]}…")
    for stats in result.measurement.layers if result.measurement else ():
        click.echo(f"   layer {stats.layer:>2}: max fingerprint error {stats.max_error:.2e} (position {stats.max_error_position}), RMS {stats.rms_error:.2e} over {stats.cells} cells")
    verdict = click.style("ACCEPT", fg="green") if result.accepted else click.style("REJECT", fg="red")
    click.echo(f"   verdict  : {verdict}")
    for reason in result.reasons:
        click.echo(f"     - [{reason.kind}] {reason.detail}")


@click.group()
def demo():
    """Demonstrations on a real model."""


@demo.command()
@click.option("--model", "model_name", default="smollm2", show_default=True, help="tiny, smollm2, a Hugging Face directory or a GGUF file.")
@click.option("--dtype", type=click.Choice(sorted(DTYPES)), default="fp32", show_default=True)
@click.option("--attack", default="int8", show_default=True, help="Which dishonest engine the cheater runs (see `verillm bench detect`).")
@click.option("--prompt", default=DEMO_PROMPT, show_default=True)
@click.option("--max-new-tokens", type=int, default=24, show_default=True)
def verify(model_name, dtype, attack, prompt, max_new_tokens):
    """Run an honest and a cheating worker on one prompt; audit both; print verdicts and why."""
    import sys

    from verillm.engine.attacks import ATTACKS
    from verillm.engine.models import load_model
    from verillm.engine.torch_engine import TorchEngine
    from verillm.errors import InvalidInput
    from verillm.engine.text import compute_chat_tokens
    from verillm.spec.job import compute_model_id
    from verillm.spec.params import MAINNET
    from verillm.engine.profiles import get_model_profile
    from verillm.spec.types import Job, SamplingParams
    from verillm.verifier.local import Party, check_pair, commit_runs, compute_member_jobs

    if attack not in ATTACKS:
        raise InvalidInput(f"unknown attack {attack!r}; known: {', '.join(ATTACKS)}")
    dtype = DTYPES[dtype]
    click.echo(f"loading {model_name} ({dtype}) …")
    model, tokenizer, manifest = load_model(model_name, dtype)
    profile = get_model_profile(model_name, manifest)
    ids = compute_chat_tokens(tokenizer, [{"role": "user", "content": prompt}])
    job = Job(compute_model_id(manifest), ids, SamplingParams(), max_new_tokens, b"\x00" * 32)
    click.echo(f"model id {compute_model_id(manifest).hex()[:16]}…, prompt {len(job.input_tokens)} tokens, committed layers {list(manifest.committed_layers)}")
    honest = TorchEngine(model, tokenizer, manifest)
    cheater = ATTACKS[attack].build(model, tokenizer, manifest)
    verifier = TorchEngine(model, tokenizer, manifest)
    rejected_honest = accepted_cheater = False
    for title, engine, party in (("honest worker", honest, Party(b"\x01" * 32)), (f"cheating worker ({attack}: {ATTACKS[attack].description})", cheater, Party(b"\x02" * 32))):
        worker_run = commit_runs([job], engine.run([job]), manifest, party)[0]
        member_job = compute_member_jobs([worker_run])[0]
        member_run = commit_runs([member_job], verifier.run([member_job]), manifest, Party(b"\x03" * 32))[0]
        result = check_pair(worker_run, member_run, manifest, profile, MAINNET.CHALLENGE_POSITIONS)
        _describe(title, tokenizer, worker_run, result)
        rejected_honest |= engine is honest and not result.accepted
        accepted_cheater |= engine is cheater and result.accepted
    sys.exit(1 if rejected_honest or accepted_cheater else 0)
