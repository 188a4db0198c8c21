"""`verillm promise ...`: a client's side of batching promises (docs/protocol.md §12 "Batching
promises"). `verillm complete --json` prints a job's promise; `check` asks the dispatcher for the
receipt's inclusion proof and verifies it on-chain (verillm/client/promise.py); once its batchByBlock
has passed and the dispatcher cannot show the receipt in one of its batches, `claim` bonds a
claim (it runs `check` first and refuses when inclusion is proven: that claim would pay the
answer's gas out of its bond) and, after the proof window, `slash` slashes the dispatcher (the bond comes back with a
reward, as credit in Jobs: `Jobs.claim`)."""

import json
from pathlib import Path

import click

from verillm.errors import ConfigError


@click.group()
def promise():
    """Claim a batching promise that was not kept."""


def open_protocol(rpc_url: str, deployment_file: str):
    """Return the Protocol of the deployment in ``deployment_file`` on the chain at ``rpc_url``."""
    from verillm.chain.backends import RpcChain
    from verillm.chain.deploy import Deployment
    from verillm.chain.protocol import Protocol

    return Protocol(RpcChain(rpc_url), Deployment.load(deployment_file))


def _connect(rpc_url: str, deployment_file: str, key: str):
    from eth_account import Account

    if not key:
        raise ConfigError("no key: pass --key HEX or set VERILLM_CLIENT_KEY (it pays the bond)")
    try:
        sender = Account.from_key(key)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"--key is not a secp256k1 private key in hex: {exc}") from None
    return open_protocol(rpc_url, deployment_file), sender


def read_promise_file(path: str):
    """Return the SignedPromise in a file: `verillm complete --json` output or the promise alone."""
    from verillm.jsonsafe import load_json
    from verillm.wire import promise_from_json

    try:
        data = load_json(Path(path).read_bytes(), path)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    return promise_from_json(data.get("batch_promise", data) if isinstance(data, dict) else data)


_chain_options = [
    click.option("--rpc-url", required=True, envvar="VERILLM_RPC_URL", help="JSON-RPC endpoint of the chain"),
    click.option("--addresses", "--deployment", "deployment_file", envvar="VERILLM_ADDRESSES", required=True, type=click.Path(exists=True, dir_okay=False),
                 help="the deployment's address book (verillm chain deploy --out)"),
]
_check_options = [
    click.option("--node-url", default=None, help="the dispatcher's URL (default: the endpoint it registered)"),
    click.option("--timeout", "timeout_s", default=10.0, show_default=True, help="seconds to wait for the dispatcher"),
]
_options = _chain_options + [
    click.option("--key", envvar="VERILLM_CLIENT_KEY", help="claimant private key, hex (or $VERILLM_CLIENT_KEY)"),
]


def _with(options):
    def decorate(function):
        for option in reversed(options):
            function = option(function)
        return function
    return decorate


_with_options = _with(_options)


@promise.command()
@click.argument("promise_file", type=click.Path(exists=True, dir_okay=False))
@_with(_chain_options + _check_options)
def check(promise_file, rpc_url, deployment_file, node_url, timeout_s):
    """Is PROMISE_FILE's receipt provably batched? Fetch the dispatcher's inclusion proof and verify
    it on-chain: included, not_due, missing (past the block, no proof) or invalid."""
    from verillm.client.promise import check_inclusion
    from verillm.spec import promise as spec

    protocol = open_protocol(rpc_url, deployment_file)
    signed = read_promise_file(promise_file)
    spec.verify_promise_signature(signed, protocol.get_promise_domain())
    click.echo(json.dumps(check_inclusion(signed, protocol, node_url, timeout_s).to_json(), indent=2))


@promise.command()
@click.argument("promise_file", type=click.Path(exists=True, dir_okay=False))
@_with(_options + _check_options)
@click.option("--force", is_flag=True, help="claim even when the dispatcher proves inclusion (the answer's gas is then paid out of the bond)")
def claim(promise_file, rpc_url, deployment_file, key, node_url, timeout_s, force):
    """Claim that PROMISE_FILE's receipt was not batched by its block (bonds OMISSION_CLAIM_BOND_WEI).
    Runs `check` first and refuses when inclusion is proven, unless --force."""
    from verillm.errors import InvalidInput
    from verillm.client.promise import INCLUDED, check_inclusion
    from verillm.spec import promise as spec

    protocol, sender = _connect(rpc_url, deployment_file, key)
    signed = read_promise_file(promise_file)
    spec.verify_promise_signature(signed, protocol.get_promise_domain())
    head = protocol.chain.get_block_number()
    spec.verify_claim(signed.promise, head + 1, protocol.preset.OMISSION_CLAIM_WINDOW_BLOCKS)
    checked = check_inclusion(signed, protocol, node_url, timeout_s)
    if checked.status == INCLUDED and not force:
        raise InvalidInput(f"refusing to claim: the receipt is batched ({checked.detail}); the dispatcher would answer the claim "
                           f"with this proof and be paid its gas out of the {protocol.preset.OMISSION_CLAIM_BOND_WEI} wei bond (--force claims anyway)")
    tx = protocol.claim_omitted(sender, signed)
    state = protocol.get_omission_claim(tx.value)
    click.echo(json.dumps({"claim_id": tx.value, "prove_deadline": state["prove_deadline"], "bond_wei": protocol.preset.OMISSION_CLAIM_BOND_WEI,
                           "inclusion": checked.to_json(),
                           "next": f"after block {state['prove_deadline']}: verillm promise slash {tx.value}"}, indent=2))


@promise.command()
@click.argument("claim_id", type=int)
@_with_options
def slash(claim_id, rpc_url, deployment_file, key):
    """Slash the dispatcher of unanswered claim CLAIM_ID (after its proof window)."""
    protocol, sender = _connect(rpc_url, deployment_file, key)
    tx = protocol.slash_omission(sender, claim_id)
    click.echo(json.dumps({"claim_id": claim_id, "slashed_wei": tx.value, "claimant": protocol.get_omission_claim(claim_id)["claimant"]}, indent=2))
