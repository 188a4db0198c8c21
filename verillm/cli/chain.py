"""`verillm chain ...`: deploy the protocol contracts, run a local anvil."""

import json
import signal
import time

import click
from eth_account import Account

from verillm.errors import ConfigError


@click.group()
def chain():
    """Deploy and inspect the protocol contracts."""


@chain.command()
@click.option("--rpc-url", required=True, help="JSON-RPC endpoint, e.g. http://127.0.0.1:8545")
@click.option("--preset", type=click.Choice(["minimal", "mainnet"]), default="minimal", show_default=True,
              help="protocol parameters the contracts are constructed with")
@click.option("--key", envvar="VERILLM_DEPLOYER_KEY", help="deployer private key, hex (or $VERILLM_DEPLOYER_KEY)")
@click.option("--out", type=click.Path(dir_okay=False), default="addresses.json", show_default=True,
              help="where to write the address book")
def deploy(rpc_url, preset, key, out):
    """Deploy the protocol contracts in order and write their addresses."""
    from verillm.chain import protocol
    from verillm.chain.backends import RpcChain
    from verillm.chain.deploy import deploy_plan
    from verillm.spec.params import get_preset

    if not key:
        raise ConfigError("no deployer key: pass --key HEX or set VERILLM_DEPLOYER_KEY")
    sender = _load_key(key)
    deployment = deploy_plan(RpcChain(rpc_url), get_preset(preset), sender, protocol.PROTOCOL_STEPS)
    deployment.save(out)
    click.echo(json.dumps({"out": out, "chain_id": deployment.chain_id, "addresses": deployment.addresses}, indent=2))


def _load_key(key: str):
    try:
        return Account.from_key(key)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"--key is not a secp256k1 private key in hex: {exc}") from None


@chain.command()
@click.option("--port", type=int, default=8545, show_default=True)
@click.option("--chain-id", type=int, default=31337, show_default=True)
@click.option("--block-time", type=float, default=None, help="seconds per block (default: one block per transaction)")
def anvil(port, chain_id, block_time):
    """Run a local anvil on 127.0.0.1 until interrupted."""
    from verillm.chain.anvil import AnvilConfig, AnvilProcess

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # SIGTERM stops anvil as Ctrl-C does (the with block's exit)
    with AnvilProcess(AnvilConfig(port=port, chain_id=chain_id, block_time_s=block_time)) as node:
        click.echo(f"anvil listening on {node.url} (chain id {chain_id}, pid {node.process.pid}); Ctrl-C or SIGTERM stops it")
        try:
            while node.process.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass


@chain.command("add-model")
@click.option("--rpc-url", envvar="VERILLM_RPC_URL", required=True, help="JSON-RPC endpoint [$VERILLM_RPC_URL].")
@click.option("--addresses", "addresses_path", envvar="VERILLM_ADDRESSES", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--key", envvar="VERILLM_DEPLOYER_KEY", required=True, help="The deployer's private key, hex [$VERILLM_DEPLOYER_KEY].")
@click.option("--node", "node_url", required=True, help="A node serving the model: its manifest is read from /v1/verillm/info.")
@click.option("--profile", "profile_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Tolerance profile JSON [default: the shipped one for the node's model and dtype].")
def add_model(rpc_url, addresses_path, key, node_url, profile_path):
    """(Deployment owner) Add a model and its calibrated thresholds to the Registry."""
    from eth_account import Account

    from verillm.chain import connect
    from verillm.chain.deploy import Deployment
    from verillm.chain.protocol import Protocol
    from verillm.spec.audit import OnchainModel
    from verillm.cli.node import _tx, fetch_node_info
    from verillm.spec.encoding import decode
    from verillm.engine.profiles import load_profile
    from verillm.spec.types import ModelManifest

    info = fetch_node_info(node_url)
    manifest = decode(ModelManifest, bytes.fromhex(info["model"]["manifest"][2:]))
    model_id = bytes.fromhex(info["model"]["model_id"][2:])
    profile = load_profile(_profile_alias(manifest.name) if profile_path is None else "", manifest.dtype, profile_path)
    protocol = Protocol(connect(rpc_url), Deployment.load(addresses_path))
    tx = protocol.add_model(Account.from_key(key), OnchainModel.from_profile(model_id, manifest, profile))
    click.echo(f"added model {manifest.name} 0x{model_id.hex()} ({manifest.dtype}, layers {list(manifest.committed_layers)}) ({_tx(tx)})")


def _profile_alias(name: str) -> str:
    """The shipped profiles are named by config alias (tiny, smollm2); manifests by model name."""
    for alias in ("smollm2", "tiny"):
        if alias in name.lower():
            return alias
    raise ConfigError(f"no shipped tolerance profile for model {name!r}: pass --profile (from `verillm calibrate`)")
