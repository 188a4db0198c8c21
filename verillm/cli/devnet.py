"""`verillm devnet`: the options and the run; the network itself is verillm/devnet/."""

import shutil
import signal
import sys
import tempfile
from pathlib import Path

import click

from verillm.devnet.keep import compute_network_info, print_network, wait_until_interrupted, write_network_file
from verillm.devnet.network import LocalNetwork
from verillm.devnet.progress import prepare_model
from verillm.devnet.run import (CHEATERS, PROMPTS, Clock, JobTracker, _node_specs, _raise_interrupt, compute_gas_table, follow, print_replay_commands,
                                print_summary, retry_no_workers, send_jobs)
from verillm.devnet.windows import compute_timed_preset
from verillm.spec.params import MINIMAL


@click.command()
@click.option("--nodes", type=int, default=None, help="Node processes [default: 5, plus one per --cheater; 10 with two or more cheaters, so that a tie can be appealed].")
@click.option("--model", default="smollm2", show_default=True,
              help="tiny (a seeded random 4-layer model: gibberish text, no conversion; a run still takes 75-90 s on 2 cores, "
                   "mostly node start-up and audit windows), smollm2 (~100 s, plus about a minute to convert it the first time), "
                   "a Hugging Face directory or a GGUF file.")
@click.option("--profile-dir", default="profiles", show_default=True, help="Where `verillm calibrate --model PATH` wrote the model's tolerance profile.")
@click.option("--cheater", "cheaters", type=click.Choice(sorted(CHEATERS)), multiple=True,
              help="Make the last node dishonest; repeat for several (--cheater int8 --cheater lazy: a cheating worker and a lazy member).")
@click.option("--dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True, help="bf16: an exact-mode manifest (kernel class, zero tolerance).")
@click.option("--jobs", "job_count", type=int, default=None, help="Requests to send [default: 8, or one per node if more, so that every cheater serves a job].")
@click.option("--max-tokens", type=int, default=16, show_default=True)
@click.option("--chain", "chain_kind", type=click.Choice(["auto", "anvil", "embedded"]), default="auto", show_default=True)
@click.option("--block-time", type=float, default=1.0, show_default=True, help="Seconds per block.")
@click.option("--workdir", type=click.Path(file_okay=False), default=None, help="Keep keys, stores, logs here (default: a temp dir, removed).")
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True, help="Give up following jobs after this long.")
@click.option("--keep", is_flag=True, help="Leave the network up after the jobs (until Ctrl-C/SIGTERM); print endpoints, addresses and keys once, "
              "and write them to WORKDIR/network.json.")
@click.option("--stall", "stall_s", type=float, default=60.0, show_default=True, help="Say why, when no job changes state for this long.")
@click.option("--window-s", "window_s", type=float, default=120.0, show_default=True,
              help="Protocol deadlines in seconds (a committee's receipts, openings, proofs; the draw and start windows twice that), "
                   "converted to blocks at --block-time (verillm/devnet/windows.py): MINIMAL's 10-20 blocks are missed on a loaded machine.")
@click.option("--soak", is_flag=True, help="Instead of --jobs: steady load for --minutes, RSS and open fds of every node sampled (verillm/devnet/soak.py).")
@click.option("--minutes", "soak_minutes", type=float, default=30.0, show_default=True, help="--soak: how long to send requests.")
@click.option("--soak-interval", "soak_interval_s", type=float, default=10.0, show_default=True, help="--soak: seconds between requests.")
@click.option("--soak-json", "soak_json", type=click.Path(dir_okay=False), default=None, help="--soak: write the report (and every sample) here.")
def devnet(nodes, model, profile_dir, cheaters, dtype, job_count, max_tokens, chain_kind, block_time, workdir, timeout_s, keep, stall_s,
           window_s, soak, soak_minutes, soak_interval_s, soak_json):
    """Run a local VeriLLM network end to end: serve, batch, audit, vote, settle, slash."""
    say = Clock()
    specs = _node_specs(nodes, cheaters)
    # Node 0 routes round-robin and the cheaters are the last nodes: with fewer jobs than nodes a
    # cheating worker would never serve one (10 nodes with two cheaters, issue 34).
    job_count = job_count if job_count is not None else max(8, len(specs))
    temporary = workdir is None
    directory = Path(workdir or tempfile.mkdtemp(prefix="verillm-devnet-"))
    for signum in (signal.SIGINT, signal.SIGTERM):  # also when started with SIGINT ignored (a background job)
        signal.signal(signum, _raise_interrupt)
    click.echo(f"VeriLLM devnet: {len(specs)} nodes, model {model}, {dtype}, preset minimal, workdir {directory}")
    dtype = {"fp32": "float32", "bf16": "bfloat16"}[dtype]
    preset = compute_timed_preset(MINIMAL, block_time, window_s)
    click.echo(f"windows: commit/open {preset.COMMIT_WINDOW_BLOCKS}, draw {preset.DRAW_WINDOW_BLOCKS}, start {preset.START_WINDOW_BLOCKS} blocks "
               f"({window_s:g} s at {block_time:g} s a block)")
    net = LocalNetwork(directory, specs, model=model, dtype=dtype, preset=preset, chain=chain_kind, block_time_s=block_time, log=say, profile_dir=profile_dir)
    kept = False
    try:
        prepare_model(model, say)
        net.start()
        net.wait_gateway_sees_all()
        first_block = net.protocol.deployment.start_block
        say(f"all {len(specs)} nodes serve; sending {job_count} requests through node 0 ({net.gateway_url})")
        tracker = JobTracker(net, say)
        soak_problems = []
        if soak:
            from verillm.devnet.soak import run_soak

            _, soak_problems = run_soak(net, tracker, soak_minutes, soak_interval_s, 2, max_tokens, timeout_s, 10.0, soak_json, PROMPTS, retry_no_workers)
        else:
            send_jobs(net, tracker, job_count, max_tokens)
            follow(tracker, timeout_s, stall_s)
        say("every job settled; reading the gas of every protocol transaction for the summary…")
        problems = print_summary(net, tracker, compute_gas_table(net, first_block), say.elapsed()) + soak_problems
        problems += audit_chain(net, say)
        print_replay_commands(net, tracker)
        if keep:
            _report(problems)
            info = compute_network_info(net, tracker.jobs)  # read once (it asks the gateway for its model's name)
            print_network(info, write_network_file(net, info))
            kept = True
            wait_until_interrupted(net, say)
    except KeyboardInterrupt:
        if kept:  # the way a kept network is meant to end
            click.echo("\nstopping the network", err=True)
            sys.exit(0)
        click.echo("\ninterrupted: stopping every node", err=True)
        sys.exit(130)
    finally:
        net.stop()
        if temporary:
            shutil.rmtree(directory, ignore_errors=True)
        if kept:
            click.echo("stopped: every node and the chain", err=True)
    if not _report(problems):
        sys.exit(1)


def audit_chain(net: LocalNetwork, say) -> list[str]:
    """Run `verillm audit chain` over the run: every rule the auditor re-derives must agree with
    what the contracts did (a difference is a problem of this run); print who was caught."""
    from verillm.verifier.chain_audit import ChainAuditor

    say("re-checking every audit from the chain alone (verillm audit chain)")
    auditor = ChainAuditor(net.protocol.chain, net.protocol.deployment)
    findings = auditor.run()
    bad = [f for f in findings if f.severity == "inconsistent"]
    checked = sum(1 for f in findings if f.severity == "ok")
    click.echo(f"\n  chain audit: {checked} consistent checks, {len(bad)} inconsistencies; caught by the contracts:")
    for line in auditor.caught or ["nobody"]:
        click.echo(f"    {line}")
    return [f"verillm audit chain: {f.subject}: {f.detail}" for f in bad]


def _report(problems: list[str]) -> bool:
    if problems:
        click.echo("\nunexpected outcome:\n  " + "\n  ".join(problems), err=True)
        return False
    click.echo("\nevery job settled as the protocol says it should")
    return True
