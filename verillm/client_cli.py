"""`verillm complete`: one completion from a node, with its receipt checked offline."""

import json

import click

from verillm.spec.receipt import SigningDomain

from verillm.client import Client, verify_receipt
from verillm.node.wire import from_hex, promise_to_json, receipt_to_json, to_hex


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
@click.option("--json", "as_json", is_flag=True, help="Print the completion and receipt as JSON.")
def complete(prompt, url, model, chat, max_tokens, temperature, top_p, top_k, seed, audit, model_id, chain_id, jobs_address, as_json):
    """Complete PROMPT on a node and check the receipt's signature and model offline."""
    client = Client(url)
    options = dict(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, audit=audit)
    if chat:
        completion = client.chat([{"role": "user", "content": prompt}], model=model, **options)
    else:
        completion = client.complete(prompt, model=model, **options)
    expected = from_hex(model_id, "--model-id", 32) if model_id else _reported_model_id(client, completion.model)
    domain = SigningDomain(chain_id=chain_id, verifying_contract=from_hex(jobs_address, "--jobs-address", 20))
    worker = verify_receipt(completion.receipt, domain, model_id=expected, job=completion.job, output_tokens=completion.tokens)
    if as_json:
        body = {"text": completion.text, "tokens": list(completion.tokens), "finish_reason": completion.finish_reason,
                "job_hash": to_hex(completion.job_hash), "status_url": completion.status_url, "receipt": receipt_to_json(completion.receipt)}
        if completion.promise is not None:  # what `verillm promise claim` takes if the receipt is never batched
            body["batch_promise"] = promise_to_json(completion.promise)
        click.echo(json.dumps(body, indent=2))
        return
    click.echo(completion.text)
    click.echo(f"\n[receipt ok: job {to_hex(completion.job_hash)} signed by {worker}; status {completion.status_url}]", err=True)


def _reported_model_id(client: Client, name: str) -> bytes:
    for model in client.models():
        if model["id"] == name:
            return from_hex(model["verillm"]["model_id"], "model_id", 32)
    raise click.ClickException(f"the node does not list model {name!r}")
