"""`verillm complete`: one completion from a node, with its receipt checked offline."""

import json

import click

from verillm.errors import InvalidProof
from verillm.spec.receipt import SigningDomain, compute_receipt_hash

from verillm.client import Client, verify_receipt
from verillm.cli.promise import open_protocol
from verillm.client.promise import verify_promise_on_receipt
from verillm.wire import from_hex, promise_to_json, receipt_to_json, to_hex


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
@click.option("--model-id", default=None, help="Expected model id (0x…); default: the id the node reports.")
@click.option("--chain-id", type=int, default=31337, show_default=True, help="Receipt signing domain: chain id.")
@click.option("--jobs-address", default="0x" + "00" * 20, show_default=True, help="Receipt signing domain: Jobs contract.")
@click.option("--rpc-url", default=None, envvar="VERILLM_RPC_URL", help="With --deployment: take the signing domain from the chain and check the batching promise's deadline against its head.")
@click.option("--deployment", "deployment_file", default=None, type=click.Path(exists=True, dir_okay=False), help="The deployment's address book (verillm chain deploy --out).")
@click.option("--json", "as_json", is_flag=True, help="Print the completion and receipt as JSON.")
def complete(prompt, url, model, chat, max_tokens, temperature, top_p, top_k, seed, audit, model_id, chain_id, jobs_address, rpc_url, deployment_file, as_json):
    """Complete PROMPT on a node and check the receipt's signature and model offline; with
    --rpc-url and --deployment, also check the batching promise against the chain's head (a
    backdated or far promise is refused now, while that can still be told)."""
    if (rpc_url is None) != (deployment_file is None):
        raise click.UsageError("--rpc-url and --deployment go together")
    client = Client(url)
    options = dict(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, audit=audit)
    if chat:
        completion = client.chat([{"role": "user", "content": prompt}], model=model, **options)
    else:
        completion = client.complete(prompt, model=model, **options)
    expected = from_hex(model_id, "--model-id", 32) if model_id else _reported_model_id(client, completion.model)
    protocol = open_protocol(rpc_url, deployment_file) if rpc_url else None
    if protocol is not None:
        domain = SigningDomain(protocol.chain.chain_id, from_hex(protocol.jobs.address, "Jobs address", 20))
    else:
        domain = SigningDomain(chain_id=chain_id, verifying_contract=from_hex(jobs_address, "--jobs-address", 20))
    worker = verify_receipt(completion.receipt, domain, model_id=expected, job=completion.job, output_tokens=completion.tokens)
    promise_note = _check_promise(completion, protocol)
    if as_json:
        body = {"text": completion.text, "tokens": list(completion.tokens), "finish_reason": completion.finish_reason,
                "job_hash": to_hex(completion.job_hash), "status_url": completion.status_url, "receipt": receipt_to_json(completion.receipt)}
        if completion.promise is not None:  # what `verillm promise claim` takes if the receipt is never batched
            body["batch_promise"] = promise_to_json(completion.promise)
        body["promise_check"] = promise_note
        click.echo(json.dumps(body, indent=2))
        return
    click.echo(completion.text)
    click.echo(f"\n[receipt ok: job {to_hex(completion.job_hash)} signed by {worker}; status {completion.status_url}]", err=True)
    click.echo(f"[promise: {promise_note}]", err=True)


def _check_promise(completion, protocol) -> str:
    """Return what was checked of the completion's batching promise (raise when it fails)."""
    if protocol is None:
        return "deadline not checked (no --rpc-url/--deployment)" if completion.promise else "none (a node without a chain)"
    if completion.promise is None:
        raise InvalidProof("the node sent no batching promise: nothing binds its dispatcher to batch this receipt")
    head = verify_promise_on_receipt(completion.promise, compute_receipt_hash(completion.receipt), protocol)
    return f"ok: {completion.promise.promise.batch_by_block - head} blocks to batch it (due by block {completion.promise.promise.batch_by_block}, head {head})"


def _reported_model_id(client: Client, name: str) -> bytes:
    for model in client.models():
        if model["id"] == name:
            return from_hex(model["verillm"]["model_id"], "model_id", 32)
    raise click.ClickException(f"the node does not list model {name!r}")
