"""`verillm bench ...`: benchmarks that print a table and write JSON.

detect and cost live here; gas (contracts) and node (daemon load) live beside their code
and are loaded lazily like the top-level subcommands.
"""

import os

import click

from verillm.bench.tables import DTYPES, format_table, write_json
from verillm.cli import LazyGroup

EXTERNAL = {
    "gas": "verillm.cli.bench_gas:gas",
    "node": "verillm.bench.node:node_bench",
    "store-sync": "verillm.bench.node:store_sync_bench",
    "devnet-load": "verillm.devnet.load:devnet_load_bench",
    "duties": "verillm.devnet.duties:duties_bench",
    "stream-signing": "verillm.bench.stream_signing:stream_signing_bench",
}


@click.group(cls=LazyGroup, lazy=EXTERNAL)
def bench():
    """Benchmarks: detection, cost, gas, node throughput."""


@bench.command()
@click.option("--model", "model_name", default="tiny", show_default=True, help="tiny, smollm2, a Hugging Face directory or a GGUF file.")
@click.option("--prompts", "prompt_count", type=int, default=8, show_default=True, help="Fixed chat prompts (at most 8).")
@click.option("--max-new-tokens", type=int, default=64, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def agreement(model_name, prompt_count, max_new_tokens, json_path):
    """Exact kernels (per machine and canonical) vs stock bf16: greedy tokens and perplexity on a fixed text."""
    from verillm.bench.agreement import measure_agreement
    from verillm.engine.models import load_model

    model, tokenizer, manifest = load_model(model_name, "bfloat16", mode="canonical")
    report = measure_agreement(model, tokenizer, manifest, prompt_count, max_new_tokens)
    rows = [[k, v] for k, v in report.items() if not isinstance(v, dict)]
    rows += [[f"{form}.{k}", v] for form in ("machine", "canonical") for k, v in report[form].items()]
    click.echo(format_table(["metric", "value"], rows))
    write_json(json_path, report)


@bench.command()
@click.option("--model", "model_name", default="tiny", show_default=True, help="tiny, smollm2, a Hugging Face directory or a GGUF file.")
@click.option("--dtype", type=click.Choice(sorted(DTYPES)), default="fp32", show_default=True)
@click.option("--prompt-tokens", type=int, default=None, help="Default 512 tiny, 256 smollm2.")
@click.option("--output-tokens", type=int, default=None, help="Default 512 tiny, 256 smollm2.")
@click.option("--repeats", type=int, default=None, help="Interleaved repeats; medians are reported (default 7 tiny, 3 smollm2).")
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads; times are process CPU time, exact with 1.")
@click.option("--engine", "engine_kind", type=click.Choice(["torch", "vllm"]), default="torch", show_default=True, help="vllm needs the vLLM environment (make test-vllm builds .venv-vllm).")
@click.option("--mode", type=click.Choice(["exact", "canonical", "tolerance"]), default=None, help="Verification mode (default: exact for bf16, tolerance for fp32); canonical: exact with the canonical kernels (one class on every machine).")
@click.option("--batches", "batch_sizes", default="1,8", show_default=True, help="Exact mode: batch sizes of the component table.")
@click.option("--regeneration-jobs", type=int, default=None, help="Exact mode: jobs decoded with stock kernels to measure the canonical-pass design's regenerations (default 64 tiny, 16 smollm2; 0 skips).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def cost(model_name, dtype, prompt_tokens, output_tokens, repeats, threads, engine_kind, mode, batch_sizes, regeneration_jobs, json_path):
    """Verification cost, commitment overhead, retained bytes, check time (batch 1)."""
    import torch

    if engine_kind == "vllm":
        from verillm.engine.vllm_bench import measure_vllm_cost

        tiny = model_name == "tiny"
        report = measure_vllm_cost(model_name, prompt_tokens or (512 if tiny else 256), output_tokens or (512 if tiny else 256), dtype=DTYPES[dtype], repeats=repeats or 3)
        report = {"model": model_name, "dtype": DTYPES[dtype], "engine": "vllm", **{k: v for k, v in report.items() if not isinstance(v, (list, dict))}}
        click.echo(format_table(["metric", "value"], [[k, v] for k, v in report.items()]))
        write_json(json_path, report)
        return

    from verillm.bench.cost import measure_cost
    from verillm.engine.models import load_model
    from verillm.engine.profiles import get_model_profile

    if threads:
        torch.set_num_threads(threads)
    dtype = DTYPES[dtype]
    model, tokenizer, manifest = load_model(model_name, dtype, mode=mode)
    tiny = model_name == "tiny"
    if manifest.kernel_class:
        from verillm.bench.cost_exact import measure_exact_cost

        report = measure_exact_cost(
            model, tokenizer, manifest, model_name, prompt_tokens or (512 if tiny else 256), output_tokens or (512 if tiny else 256),
            repeats or (7 if tiny else 3), (64 if tiny else 16) if regeneration_jobs is None else regeneration_jobs,
            tuple(int(b) for b in batch_sizes.split(",")),
        )
        report = {"model": model_name, "dtype": dtype, "engine": "torch", "clock": "process_cpu", "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), **report}
        click.echo(format_table(["metric", "value"], [[k, v] for k, v in report.items() if not isinstance(v, (list, dict))]))
        for batch, rows in report["components"].items():
            click.echo(f"\ncomponents at batch {batch[1:]} (each step adds to the one above; +x over stock, share of the overhead)")
            click.echo(format_table(["component", "cpu_s", "+x", "share"], [[r["component"], r["cpu_s"], r["over_stock"], r["share"]] for r in rows]))
        write_json(json_path, report)
        return
    report = measure_cost(
        model, tokenizer, manifest, get_model_profile(model_name, manifest),
        prompt_tokens or (512 if tiny else 256), output_tokens or (512 if tiny else 256), repeats or (7 if tiny else 3),
    )
    report = {"model": model_name, "dtype": dtype, "engine": "torch", "clock": "process_cpu", "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), **report}
    click.echo(format_table(["metric", "value"], [[k, v] for k, v in report.items()]))
    write_json(json_path, report)


@bench.command()
@click.option("--model", "model_name", default="tiny", show_default=True, help="tiny, smollm2, a Hugging Face directory or a GGUF file.")
@click.option("--dtype", type=click.Choice(sorted(DTYPES)), default="fp32", show_default=True)
@click.option("--jobs", "job_count", type=int, default=None, help="Honest jobs; each is audited under every worker x verifier config (default 64 tiny = 1024 audits, 25 smollm2 = 200).")
@click.option("--attack-jobs", type=int, default=None, help="Jobs per attack (default 32 tiny, 16 smollm2).")
@click.option("--max-new-tokens", type=int, default=32, show_default=True)
@click.option("--attacks", "attack_names", default=None, help="Comma-separated subset of attacks (default: all; 'none': honest audits only).")
@click.option("--profile", "profile_path", type=click.Path(exists=True, dir_okay=False), default=None, help="Tolerance profile (default: the shipped one).")
@click.option("--seed", "seed_name", default="detect", show_default=True, help="Names the job set; change it for a fresh, independent sample.")
@click.option("--mode", type=click.Choice(["exact", "canonical", "tolerance"]), default=None, help="Verification mode (default: exact for bf16, tolerance for fp32); canonical: exact with the canonical kernels (one class on every machine).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def detect(model_name, dtype, job_count, attack_jobs, max_new_tokens, attack_names, profile_path, seed_name, mode, json_path):
    """Honest false rejections over the noise matrix and detection of every attack."""
    from verillm.bench.detect import run_detection, summarize_detection

    dtype = DTYPES[dtype]
    tiny = model_name == "tiny"
    names = None if not attack_names else [] if attack_names == "none" else attack_names.split(",")
    report = run_detection(
        model_name, dtype, job_count or (64 if tiny else 25), attack_jobs or (32 if tiny else 16),
        max_new_tokens, names, profile_path, seed_name, progress=lambda line: click.echo(line, err=True), mode=mode,
    )
    click.echo(summarize_detection(report))
    write_json(json_path, report)


@bench.command()
@click.option("--model", "model_name", default="tiny", show_default=True, help="tiny, smollm2, a Hugging Face directory or a GGUF file.")
@click.option("--audits", "audit_count", type=int, default=1000, show_default=True, help="Fresh honest audits (the issue-21 bar: 10,000 tiny, 500 smollm2).")
@click.option("--max-new-tokens", type=int, default=24, show_default=True)
@click.option("--long-prompt-tokens", type=int, default=700, show_default=True, help="Longest prompt drawn (5% of jobs are past 512 tokens).")
@click.option("--seed", "seed_name", default="audits", show_default=True, help="Names the job set; change it for a fresh, independent sample.")
@click.option("--threads", "thread_counts", default="1,2", show_default=True, help="Torch thread counts the batches draw from.")
@click.option("--chunk", type=int, default=64, show_default=True, help="Audits per round (jobs drawn, run, checked; the JSON is rewritten after each).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
@click.option("--mode", type=click.Choice(["exact", "canonical"]), default="exact", show_default=True, help="The kernel form: per machine (exact) or canonical.")
def audits(model_name, audit_count, max_new_tokens, long_prompt_tokens, seed_name, thread_counts, chunk, json_path, mode):
    """Fresh honest bf16 exact-mode audits: false rejections and differing positions (both must be 0)."""
    from verillm.bench.audits import run_honest_audits
    from verillm.engine.models import load_model

    model, tokenizer, manifest = load_model(model_name, "bfloat16", mode=mode)
    threads = tuple(int(t) for t in thread_counts.split(","))
    report = run_honest_audits(
        model, tokenizer, manifest, model_name, audit_count, max_new_tokens, seed_name, long_prompt_tokens,
        progress=lambda line: click.echo(line, err=True), chunk=chunk, threads=threads, on_chunk=lambda partial: write_json(json_path, partial),
    )
    click.echo(format_table(["metric", "value"], [[k, v] for k, v in report.items() if not isinstance(v, (list, dict))]))
    write_json(json_path, report)
    if report["false_rejections"] or report["differing_positions"]:
        raise SystemExit(1)


@bench.command()
@click.option("--device", default="cuda", show_default=True, help="The accelerator to measure (cpu runs the same steps, for a dry run).")
@click.option("--models", "shape_names", default="tiny,smollm2-shape", show_default=True, help="Seeded model shapes: tiny, smollm2-shape (SmolLM2-135M's shapes, tiny vocabulary).")
@click.option("--audits", "audit_count", type=int, default=200, show_default=True, help="Fresh honest exact audits per model on the device.")
@click.option("--cross-jobs", type=int, default=64, show_default=True, help="fp32 tiny jobs run on the device and verified on the CPU, and the reverse (0 skips).")
@click.option("--prompt-tokens", type=int, default=256, show_default=True)
@click.option("--output-tokens", type=int, default=256, show_default=True)
@click.option("--repeats", type=int, default=3, show_default=True, help="Timed repeats per row; medians are reported.")
@click.option("--seed", "seed_name", default="device", show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def device(device, shape_names, audit_count, cross_jobs, prompt_tokens, output_tokens, repeats, seed_name, json_path):
    """The reference engine on a GPU: kernel class, exact audits, cross-device tolerance, wall-time ratios."""
    from verillm.bench.device import run_device_check, summarize_device_check

    report = run_device_check(
        device, tuple(shape_names.split(",")), audit_count, cross_jobs, seed_name, prompt_tokens, output_tokens, repeats,
        progress=lambda line: click.echo(line, err=True),
    )
    click.echo(summarize_device_check(report))
    write_json(json_path, report)
