"""`verillm audit ...`: replay one job's audit locally, or re-check every audit on a chain.

Exit codes: 0 the replay accepts / the chain is consistent; 1 the replay rejects / an
inconsistency was found; 2 the tool could not run (a VerillmError: missing evidence, unknown
model, unreachable node).
"""

import dataclasses
import sys
import time
import traceback
from contextlib import contextmanager

import click

from verillm import envs
from verillm.errors import VerillmError


@click.group()
def audit():
    """Audit tools: replay a job's audit from a node's records, re-check a chain's audits."""


@audit.command()
@click.argument("job_id")
@click.option("--node", "node_url", default=None, help="URL of the node that dispatched the job (its evidence route).")
@click.option("--token", default=None, help="The requester's read token: the token= of the completion's status_url (`verillm devnet` prints each job's).")
@click.option("--key-file", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Read as a party of the job's audit, or as the node's own operator: a signed read with this key (instead of --token).")
@click.option("--db", "db_path", default=None, type=click.Path(dir_okay=False), help="That node's SQLite store, read-only.")
@click.option("--addresses", "addresses_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The deployment's address book: the receipt's signature is checked in its EIP-712 domain (chain id, Jobs). "
                   "Without it, --node uses the domain the node reports and --db checks no signature.")
@click.option("--model", default="auto", show_default=True, help="tiny, smollm2, a Hugging Face directory or GGUF file, or auto (match the receipt's model id among the aliases).")
@click.option("--dtype", default="float32", show_default=True)
@click.option("--profile", "profile_path", default=None, type=click.Path(exists=True, dir_okay=False), help="Tolerance profile (default: the one calibrated for the model id in --profile-dir, else the shipped one).")
@click.option("--profile-dir", default="profiles", show_default=True, help="Where `verillm calibrate --model PATH` wrote profiles.")
@click.option("--round", "audit_index", default=-1, type=int, help="Which audit round of the evidence (default: the last).")
@click.option("--rpc-url", default=None, help="With --addresses: read what the chain decided for the audit (each round's verdict, the votes "
                                              "that counted, every slash with rule and amount, who was paid) and say whether the replay agrees.")
def replay(job_id, node_url, token, key_file, db_path, addresses_path, model, dtype, profile_path, profile_dir, audit_index, rpc_url):
    """Re-run a job's prefill here, compare with the worker's opened hidden states, and set the verdict beside the chain's."""
    from verillm.engine.profiles import get_model_profile
    from verillm.wire import from_hex
    from verillm.verifier.replay import load_case, load_replay_engine, run_replay
    from verillm.verifier.report import NOT_READ, format_replay

    if (node_url is None) == (db_path is None):
        raise click.UsageError("give exactly one of --node URL or --db PATH")
    if token and key_file:
        raise click.UsageError("give --token (the requester) or --key-file (a party's signed read), not both")
    if rpc_url and not addresses_path:
        raise click.UsageError("--rpc-url needs --addresses: the deployment whose events say what the chain decided")
    say = Progress()
    job_hash = from_hex(job_id if job_id.startswith("0x") else "0x" + job_id, "JOB_ID", 32)
    evidence = _read_evidence(job_hash, node_url, token, key_file, db_path, say)
    case = load_case(evidence, audit_index)
    if addresses_path:
        case = dataclasses.replace(case, signing_domain=compute_signing_domain(addresses_path))
    say(f"loading the model (receipt's model id 0x{case.job.model_id.hex()[:12]}…, {dtype}); the first load of a model takes tens of seconds")
    name, engine = load_replay_engine(case.job.model_id, model, dtype)
    profile = get_model_profile(name, engine.manifest, profile_path, profile_dir)
    say(f"loaded {name}; recomputing the prefill of {case.prompt_len + len(case.output_tokens)} tokens and comparing the challenged cells")
    with tool_failure():
        result = run_replay(case, name, engine, profile)
    chain = _read_chain_decision(rpc_url, addresses_path, case, say) if rpc_url and case.audit_id is not None else NOT_READ
    say("done")
    click.echo(format_replay(result, chain))
    sys.exit(0 if result.result.accepted and not result.signature.startswith("INVALID") else 1)


def _read_chain_decision(rpc_url: str, addresses_path: str, case, say):
    """What the chain decided for the replayed audit (`verifier.chain_outcome.read_audit_outcome`)."""
    from verillm.chain import connect
    from verillm.chain.deploy import Deployment
    from verillm.spec.receipt import compute_receipt_hash
    from verillm.verifier.chain_outcome import read_audit_outcome

    say(f"reading what the chain decided for audit {case.audit_id} at {rpc_url}")
    deployment = Deployment.load(addresses_path)
    return read_audit_outcome(connect(rpc_url), deployment, case.audit_id, compute_receipt_hash(case.receipt))


class Progress:
    """Progress lines on stderr, stamped with the seconds since the command started (stdout stays the report)."""

    def __init__(self):
        self.start = time.monotonic()

    def __call__(self, line: str) -> None:
        click.echo(f"[{time.monotonic() - self.start:5.1f}s] {line}", err=True)


def _read_evidence(job_hash: bytes, node_url, token, key_file, db_path, say) -> dict:
    from verillm.verifier.replay import fetch_evidence, read_evidence

    if db_path:
        say(f"reading the evidence of job 0x{job_hash.hex()[:12]}… from {db_path}")
        return read_evidence(db_path, job_hash)
    say(f"fetching the evidence of job 0x{job_hash.hex()[:12]}… from {node_url}")
    headers = compute_signed_read_headers(node_url, job_hash, key_file) if key_file else {}
    return fetch_evidence(node_url, job_hash, token=token, headers=headers)


def compute_signing_domain(addresses_path: str):
    """Return the receipts' EIP-712 domain of a deployment: its chain id and its Jobs contract."""
    from verillm.chain.deploy import Deployment
    from verillm.errors import ConfigError
    from verillm.spec.receipt import SigningDomain

    deployment = Deployment.load(addresses_path)
    if "Jobs" not in deployment.addresses:
        raise ConfigError(f"{addresses_path} names no Jobs contract: {sorted(deployment.addresses)}")
    return SigningDomain(deployment.chain_id, bytes.fromhex(deployment.addresses["Jobs"][2:]))


def compute_signed_read_headers(node_url: str, job_hash: bytes, key_file: str) -> dict[str, str]:
    """Return the headers of a signed read of the job's evidence by ``key_file``'s owner (node/envelope.py; checked by node/api/access.py)."""
    from verillm.cli.node import fetch_node_info
    from verillm.node.envelope import compute_read_headers
    from verillm.node.keys import read_key_file

    recipient = bytes.fromhex(fetch_node_info(node_url)["worker"][2:])
    path = f"/v1/verillm/audits/0x{job_hash.hex()}/evidence"
    return compute_read_headers(path, read_key_file(key_file, envs.get_secret("VERILLM_KEY_PASSWORD")), recipient)


@audit.command("chain")
@click.option("--rpc-url", required=True, help="JSON-RPC endpoint of the chain.")
@click.option("--addresses", "addresses_path", required=True, type=click.Path(exists=True, dir_okay=False), help="Deployment address book (JSON).")
@click.option("--verbose", is_flag=True, help="List every consistent check too.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object instead of the report: the counts, every audit's outcome (votes, each counted or a proven lie; "
                   "every slash with node, role, amount in wei, the contract's rule), the caught lines and every finding.")
def chain_audit(rpc_url, addresses_path, verbose, as_json):
    """Re-check every draw, audit, vote, verdict, slash and adjudication recorded on-chain."""
    import json

    from verillm.chain import connect
    from verillm.chain.deploy import Deployment
    from verillm.verifier.chain_audit import ChainAuditor
    from verillm.verifier.chain_outcome import compute_report_json
    from verillm.verifier.report import format_chain_audit

    say = Progress()
    deployment = Deployment.load(addresses_path)
    say(f"reading the deployment's events from block {deployment.start_block} at {rpc_url}")
    auditor = ChainAuditor(connect(rpc_url), deployment)
    say(f"re-checking {len(auditor.named('AuditDrawn'))} draws and {len(auditor.named('AuditStarted'))} audits "
        f"({len(auditor.events)} events; every committee re-derived from the Registry's past state)")
    with tool_failure():
        findings = auditor.run()
    if as_json:
        click.echo(json.dumps(compute_report_json(auditor, findings if verbose else [f for f in findings if f.severity != "ok"], findings), indent=2))
    else:
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
