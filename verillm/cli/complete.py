"""`verillm complete`: one completion from a node, shown only as far as the client verified it.

The text is decoded here from the receipt's output tokens (never the node's text); the job is
compared with the request; the model is pinned by ``--model-id`` or the chain, the deployment by
``--chain-id``/``--jobs-address`` or the chain, never by the node under test; with ``--rpc-url``
the signer must be registered and staked for the model. What could not be checked is printed
as "not checked: …". A mismatch exits with code 2 naming it.

Without ``--rpc-url``, the chain a networked node names on /v1/verillm/info is used to tie the
signer to a network (registered, active and staked there; said to be the node's naming, which
``--rpc-url``/``--deployment`` pin instead). A receipt that nothing ties to any network — no pin,
and the node names no chain or its chain cannot be read — is shown, then exits with code 3
(`EXIT_UNTIED`): its signer may be a key made up for the occasion.

With ``--wait`` it then follows the job's verification on the node that answered (its dispatcher's
status route, verillm/client/phases.py), printing each phase as it happens with the contract deadline
it waits on and the time left to it (estimated from the node's seconds per block), until nothing can change
it: exit 0 final and passed (or never selected for audit), 4 the worker was slashed (the text shown
is proven wrong), 5 the audit ended deciding nothing (a tie, abandoned), 6 not final within
``--wait-timeout-s``. A failed wait outranks exit 3. With a chain (pinned or named), the final
outcome is checked on the contracts (verillm/client/outcome.py); a contradiction exits 2.
"""

import json
import sys
from pathlib import Path

import click

from verillm.errors import BadResponse, ConfigError, InvalidProof, StillPending, VerillmError
from verillm.spec.receipt import SigningDomain

from verillm.client import Client
from verillm.client.checks import compute_tokenizer_digest
from verillm.client.outcome import verify_final_on_chain
from verillm.client.phases import PASSED, SLASHED, compute_outcome
from verillm.cli.promise import open_protocol
from verillm.client.promise import verify_promise_on_receipt
from verillm.wire import from_hex, promise_to_json, receipt_to_json, to_hex

TINY_MANIFEST_NAME = "tiny-llama-seed0"


@click.command()
@click.argument("prompt")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, envvar="VERILLM_URL", help="Node URL.")
@click.option("--model", default=None, help="Model name (default: the node's only model).")
@click.option("--chat", is_flag=True, help="Send PROMPT as a user message through the chat template.")
@click.option("--max-tokens", type=int, default=32, show_default=True)
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--top-p", type=float, default=None)
@click.option("--top-k", type=int, default=None)
@click.option("--seed", type=int, default=None)
@click.option("--audit", is_flag=True, help="Ask the dispatcher to audit this job (the committee's fee applies).")
@click.option("--model-id", default=None, help="Pin the model id (0x…); without it (or --rpc-url) the model is 'not checked'.")
@click.option("--chain-id", type=int, default=None, help="Pin the receipt signing domain: chain id (with --jobs-address).")
@click.option("--jobs-address", default=None, help="Pin the receipt signing domain: the Jobs contract (with --chain-id).")
@click.option("--rpc-url", default=None, envvar="VERILLM_RPC_URL", help="With --addresses: the deployment pins the domain, the signer must be staked for a registered model, and the batching promise is checked against the head.")
@click.option("--addresses", "--deployment", "deployment_file", default=None, type=click.Path(exists=True, dir_okay=False), help="The deployment's address book (verillm chain deploy --out).")
@click.option("--tokenizer", default="auto", show_default=True, help="Tokenizer that decodes the signed tokens: 'auto' (tiny, or the cached smollm2, when the model's manifest names its digest), a Hugging Face directory, or 'none'.")
@click.option("--timeout-s", type=float, default=600.0, show_default=True, help="Total deadline of the call, bodies included.")
@click.option("--json", "as_json", is_flag=True, help="Print the completion, receipt and checks as JSON.")
@click.option("--stream", is_flag=True, help="Print the text as the worker streams it, each delta once its signature over the tokens so far checks; then the receipt.")
@click.option("--wait", is_flag=True, help="Then follow the job's verification, printing each phase and its estimated time left, until it is final (exit 0 passed, 4 slashed, 5 undecided, 6 timeout).")
@click.option("--wait-timeout-s", type=float, default=1800.0, show_default=True, help="How long --wait follows the job before it exits 6.")
@click.option("--poll-s", type=float, default=1.0, show_default=True, help="How often --wait reads the job's status.")
def complete(prompt, url, model, chat, max_tokens, temperature, top_p, top_k, seed, audit, model_id, chain_id, jobs_address,
             rpc_url, deployment_file, tokenizer, timeout_s, as_json, stream, wait, wait_timeout_s, poll_s):
    """Complete PROMPT on a node and show what the client verified of it (see docs/sdk.md)."""
    if (rpc_url is None) != (deployment_file is None):
        raise click.UsageError("--rpc-url and --addresses go together")
    if (chain_id is None) != (jobs_address is None):
        raise click.UsageError("--chain-id and --jobs-address go together (the receipt's signing domain)")
    protocol = open_protocol(rpc_url, deployment_file) if rpc_url else None
    domain = SigningDomain(chain_id, from_hex(jobs_address, "--jobs-address", 20)) if chain_id is not None else None
    pins = dict(model_id=from_hex(model_id, "--model-id", 32) if model_id else None, domain=domain, protocol=protocol)
    with Client(url, timeout_s=timeout_s, **pins) as probe:
        info = probe.info()
        held = resolve_tokenizer(tokenizer, info.manifest)
    tie = "your --rpc-url and --deployment" if protocol is not None else None
    if protocol is None and info.chain is not None:
        pins["protocol"], tie = open_named_chain(info.chain)
        protocol = pins["protocol"]
    options = dict(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, audit=audit)
    if stream and held is None:
        raise click.UsageError("--stream shows decoded text: the node's tokenizer is not known here (give --tokenizer)")
    with Client(url, timeout_s=timeout_s, tokenizer=held, **pins) as client:
        if stream:
            completion = _stream(client, prompt, chat, model, options, show=not as_json)
        elif chat:
            completion = client.chat([{"role": "user", "content": prompt}], model=model, **options)
        else:
            completion = client.complete(prompt, model=model, **options)
    promise_note = _check_promise(completion, protocol)
    network_note = compute_network_note(completion, protocol, tie)
    body = compute_json(completion, promise_note) | {"network": network_note, "tied_to_network": protocol is not None}
    if not as_json:
        if not stream:  # streamed: the text is on the screen already, delta by delta
            click.echo(completion.text if completion.text is not None else f"(output tokens, not decoded) {list(completion.tokens)}")
        click.echo(f"\n[receipt: job {to_hex(completion.job_hash)} signed by {completion.worker}; status {completion.status_url}]", err=True)
        for line in completion.verification.lines():
            click.echo(f"[{line}]", err=True)
        click.echo(f"[promise: {promise_note}]", err=True)
        click.echo(f"[network: {network_note}]", err=True)
    code = EXIT_UNTIED if protocol is None else 0
    if wait:
        waited = wait_for_final(url, completion, timeout_s, wait_timeout_s, poll_s, protocol)
        body["verification"] = waited
        code = waited["exit_code"] or code
    if as_json:
        click.echo(json.dumps(body, indent=2))
    if code:
        sys.exit(code)  # click returns a ctx.exit code under standalone_mode=False (verillm.cli.main): exit here


def _stream(client, prompt: str, chat: bool, model, options: dict, show: bool):
    """Stream the completion, echoing each checked delta as it comes; return the verified `Completion`."""
    messages = [{"role": "user", "content": prompt}] if chat else None
    items = client.stream(None if chat else prompt, messages=messages, model=model, **options)
    completion = None
    for item in items:
        if isinstance(item, str):
            if show:
                click.echo(item, nl=False)
        else:
            completion = item
    if show:
        click.echo()
    return completion


EXIT_UNTIED = 3
"""Exit status of a completion shown whose signer nothing ties to a network (no pin, no chain named)."""
EXIT_SLASHED = 4
"""--wait: the worker was slashed for this job (failed its audit, or defaulted): the text shown is proven wrong."""
EXIT_UNDECIDED = 5
"""--wait: the audit ended deciding nothing about the worker (a tie, or abandoned: the committee never filled)."""
EXIT_STILL_PENDING = 6
"""--wait: the job was not final within --wait-timeout-s."""
OUTCOME_EXITS = {PASSED: 0, SLASHED: EXIT_SLASHED}


def wait_for_final(url: str, completion, timeout_s: float, wait_timeout_s: float, poll_s: float, protocol=None) -> dict:
    """Follow the job's verification on ``url`` until final, printing each phase to stderr as it happens;
    with ``protocol``, check the final outcome on the contracts (InvalidProof: exit 2); return the
    phases, the last status body, the outcome, what the chain showed and the exit code it calls for."""
    phases = []
    with Client(url, timeout_s=timeout_s) as client:
        try:
            for phase in client.watch(completion, timeout_s=wait_timeout_s, poll_s=poll_s):
                phases.append({"phase": phase.name, "detail": phase.detail, "head": phase.head, "final": phase.final, "deadline": phase.deadline,
                               "phase_ends_block": phase.phase_ends_block, "seconds_left": phase.seconds_left, "final_by_block": phase.final_by_block})
                click.echo(f"[phase: {phase.line()}]", err=True)
        except StillPending as exc:
            click.echo(f"[phase: not final after {wait_timeout_s:g} s: {exc}; exit {EXIT_STILL_PENDING}]", err=True)
            return {"phases": phases, "status": None, "outcome": "still_pending", "exit_code": EXIT_STILL_PENDING}
    outcome = compute_outcome(phase.status)
    if protocol is not None:
        checked = "checked on chain " + verify_final_on_chain(phase.status, completion, protocol, url)
    else:
        checked = "not checked on chain (no chain to read): the dispatcher's word"
    click.echo(f"[outcome: {checked}]", err=True)
    return {"phases": phases, "status": phase.status, "outcome": outcome, "outcome_check": checked,
            "exit_code": OUTCOME_EXITS.get(outcome, EXIT_UNDECIDED)}


def open_named_chain(chain) -> tuple[object, str | None]:
    """Return (the Protocol of the chain a node names, how it was tied), or (None, why not) when it cannot be read."""
    from verillm.chain.backends import RpcChain
    from verillm.chain.deploy import Deployment
    from verillm.chain.protocol import Protocol

    try:
        deployment = Deployment(**chain.deployment)
    except TypeError as exc:
        raise BadResponse(f"/v1/verillm/info names a chain whose deployment is malformed: {exc}") from None
    try:
        return Protocol(RpcChain(chain.rpc_url), deployment), f"the chain the node names ({chain.rpc_url})"
    except (VerillmError, OSError, ValueError) as exc:  # unreachable or not that chain: the signer stays untied, exit 3
        return None, f"the node names {chain.rpc_url}, which could not be read ({type(exc).__name__}: {exc})"


def compute_network_note(completion, protocol, tie: str | None) -> str:
    """Say what ties the receipt's signer to a network, and whose word that rests on."""
    if protocol is not None:
        note = f"signer {completion.worker} checked on chain {protocol.chain.chain_id}, Registry {protocol.registry.address}, via {tie}"
        return note if tie.startswith("your") else note + "; pin it yourself with --rpc-url and --deployment"
    why = tie or "no --rpc-url/--deployment, and the node names no chain"
    return (f"not tied to any network: nothing shows the signer {completion.worker} is a staked node ({why}); "
            f"exit {EXIT_UNTIED}")


def compute_json(completion, promise_note: str) -> dict:
    """The --json body: the verified completion, its receipt, what was and was not checked."""
    body = {"text": completion.text, "tokens": list(completion.tokens), "finish_reason": completion.finish_reason,
            "job_hash": to_hex(completion.job_hash), "status_url": completion.status_url, "receipt": receipt_to_json(completion.receipt),
            "checked": list(completion.verification.checked), "not_checked": list(completion.verification.not_checked)}
    if completion.promise is not None:  # what `verillm promise claim` takes if the receipt is never batched
        body["batch_promise"] = promise_to_json(completion.promise)
    body["promise_check"] = promise_note
    return body


def resolve_tokenizer(choice: str, manifest):
    """The tokenizer named by --tokenizer; with 'auto', the known one whose digest is the manifest's, else None."""
    if choice == "none":
        return None
    if choice != "auto":
        return _load_directory(Path(choice))
    for candidate in _auto_candidates(manifest):
        tokenizer = candidate()
        if tokenizer is not None and compute_tokenizer_digest(tokenizer) == manifest.tokenizer_digest:
            return tokenizer
    return None


def _auto_candidates(manifest):
    if manifest.name == TINY_MANIFEST_NAME:
        from verillm.engine.models import build_tiny_tokenizer

        yield build_tiny_tokenizer
    from verillm.engine.checkpoints import get_smollm2_directory

    directory = get_smollm2_directory()
    if (directory / "tokenizer.json").exists():
        yield lambda: _load_directory(directory)


def _load_directory(path: Path):
    if not path.is_dir():
        raise ConfigError(f"--tokenizer {path}: not a Hugging Face directory (or 'auto', 'none')")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def _check_promise(completion, protocol) -> str:
    """Return what was checked of the completion's batching promise (raise when it fails)."""
    if protocol is None:
        return "not checked: its deadline (no --rpc-url/--addresses)" if completion.promise else "none (a node without a chain)"
    if completion.promise is None:
        raise InvalidProof("the node sent no batching promise: nothing binds its dispatcher to batch this receipt")
    head = verify_promise_on_receipt(completion.promise, completion.receipt, protocol)
    return (f"checked: {completion.promise.promise.batch_by_block - head} blocks to batch it (due by block {completion.promise.promise.batch_by_block}, "
            f"head {head}); the receipt is auditable until block {completion.receipt.auditable_until_block}")
