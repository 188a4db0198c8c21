"""`verillm audit ...`: replay one job's audit locally, or re-check every audit on a chain.

Exit codes: 0 the replay accepts / the chain is consistent; 1 the replay rejects / an
inconsistency was found; 2 the tool could not run (a VerillmError: missing evidence, unknown
model, unreachable node).
"""

import sys
import traceback
from contextlib import contextmanager

import click

from verillm.errors import VerillmError


@click.group()
def audit():
    """Audit tools: replay a job's audit from public data, re-check a chain's audits."""


@audit.command()
@click.argument("job_id")
@click.option("--node", "node_url", default=None, help="URL of the node that dispatched the job (its evidence route).")
@click.option("--token", default=None, help="The requester's read token (the token= of the completion's status_url); parties sign instead.")
@click.option("--db", "db_path", default=None, type=click.Path(dir_okay=False), help="That node's SQLite store, read-only.")
@click.option("--model", default="auto", show_default=True, help="tiny, smollm2, a Hugging Face directory or GGUF file, or auto (match the receipt's model id among the aliases).")
@click.option("--dtype", default="float32", show_default=True)
@click.option("--profile", "profile_path", default=None, type=click.Path(exists=True, dir_okay=False), help="Tolerance profile (default: the one calibrated for the model id in --profile-dir, else the shipped one).")
@click.option("--profile-dir", default="profiles", show_default=True, help="Where `verillm calibrate --model PATH` wrote profiles.")
@click.option("--round", "audit_index", default=-1, type=int, help="Which audit round of the evidence (default: the last).")
def replay(job_id, node_url, token, db_path, model, dtype, profile_path, profile_dir, audit_index):
    """Re-run a job's prefill here and compare with the worker's opened hidden states."""
    from verillm.engine.profiles import get_model_profile
    from verillm.wire import from_hex
    from verillm.verifier.replay import fetch_evidence, load_case, load_replay_engine, read_evidence, run_replay
    from verillm.verifier.report import format_replay

    if (node_url is None) == (db_path is None):
        raise click.UsageError("give exactly one of --node URL or --db PATH")
    job_hash = from_hex(job_id if job_id.startswith("0x") else "0x" + job_id, "JOB_ID", 32)
    evidence = fetch_evidence(node_url, job_hash, token=token) if node_url else read_evidence(db_path, job_hash)
    case = load_case(evidence, audit_index)
    name, engine = load_replay_engine(case.job.model_id, model, dtype)
    profile = get_model_profile(name, engine.manifest, profile_path, profile_dir)
    result = run_replay(case, name, engine, profile)
    click.echo(format_replay(result))
    sys.exit(0 if result.result.accepted and not result.signature.startswith("INVALID") else 1)


@audit.command("chain")
@click.option("--rpc-url", required=True, help="JSON-RPC endpoint of the chain.")
@click.option("--addresses", "addresses_path", required=True, type=click.Path(exists=True, dir_okay=False), help="Deployment address book (JSON).")
@click.option("--verbose", is_flag=True, help="List every consistent check too.")
def chain_audit(rpc_url, addresses_path, verbose):
    """Re-check every draw, audit, vote, verdict, slash and adjudication recorded on-chain."""
    from verillm.chain import connect
    from verillm.chain.deploy import Deployment
    from verillm.verifier.chain_audit import ChainAuditor
    from verillm.verifier.report import format_chain_audit

    auditor = ChainAuditor(connect(rpc_url), Deployment.load(addresses_path))
    with tool_failure():
        findings = auditor.run()
    shown = findings if verbose else [f for f in findings if f.severity != "ok"]
    checked = sum(1 for f in findings if f.severity == "ok")
    click.echo(format_chain_audit(shown, {**auditor.summary(), "consistent checks": checked}, auditor.states, auditor.caught))
    sys.exit(1 if any(f.severity == "inconsistent" for f in findings) else 0)


@contextmanager
def tool_failure():
    """Exit 2, not 1, when the auditor itself fails: 1 means "an inconsistency was found", and a
    crash found nothing. The traceback is printed whole (a bug to report, not a finding)."""
    try:
        yield
    except (VerillmError, click.ClickException):
        raise
    except Exception:
        traceback.print_exc()
        click.echo("error: the auditor failed before it could finish (a bug in the tool, not a finding about the chain)", err=True)
        sys.exit(2)
