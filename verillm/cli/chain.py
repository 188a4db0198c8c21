"""`verillm chain ...`: deploy the protocol contracts; and Foundry-style tools for a local dev chain
(`anvil` with its funded accounts printed, `fund` an address, `mine` past a block, an epoch
boundary or a node's unbonding).

Every command that sends a transaction says so on stderr ("waiting for the transaction …")
before it waits for its block: on a chain with 12 s blocks a command is otherwise silent.
"""

import json
import signal
import time

import click
from eth_account import Account

from verillm.errors import ConfigError, InvalidInput


def announce_transactions(chain) -> None:
    """Print a line on stderr for every transaction ``chain`` sends, before waiting for its block."""
    started = time.monotonic()

    def say(label: str) -> None:
        click.echo(f"[{time.monotonic() - started:5.1f}s] {label}: sent; waiting for the transaction to be mined …", err=True)

    chain.after_send = say


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
    target = RpcChain(rpc_url)
    announce_transactions(target)
    deployment = deploy_plan(target, get_preset(preset), sender, protocol.PROTOCOL_STEPS)
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
@click.option("--accounts", type=int, default=10, show_default=True, help="funded dev accounts")
@click.option("--balance", "balance_ether", type=int, default=10_000, show_default=True, help="ether in each")
def anvil(port, chain_id, block_time, accounts, balance_ether):
    """Run a local anvil on 127.0.0.1 until interrupted; print its funded dev accounts and keys."""
    from verillm.chain.anvil import AnvilConfig, AnvilProcess

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # SIGTERM stops anvil as Ctrl-C does (the with block's exit)
    config = AnvilConfig(port=port, chain_id=chain_id, block_time_s=block_time, accounts=accounts, balance_ether=balance_ether)
    with AnvilProcess(config) as node:
        click.echo(f"anvil listening on {node.url} (chain id {chain_id}, pid {node.process.pid}); Ctrl-C or SIGTERM stops it")
        click.echo(format_dev_accounts(accounts, balance_ether))
        try:
            while node.process.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass


def format_dev_accounts(count: int, balance_ether: int) -> str:
    """Return anvil's funded accounts as anvil prints them: index, address, private key (public test keys)."""
    from verillm.chain.backends import compute_anvil_accounts

    lines = [f"funded dev accounts ({balance_ether:,} ETH each; anvil's public test mnemonic: never use these keys on a real chain)"]
    lines += [f"  ({i}) {a.address}  key 0x{bytes(a.key).hex()}" for i, a in enumerate(compute_anvil_accounts(count))]
    lines.append("  account (0) is the usual deployer: OWNER_KEY=<its key> in docs/operators.md")
    return "\n".join(lines)


@chain.command()
@click.argument("address")
@click.argument("amount")
@click.option("--rpc-url", envvar="VERILLM_RPC_URL", required=True, help="JSON-RPC endpoint [$VERILLM_RPC_URL].")
@click.option("--key", envvar="VERILLM_FUNDER_KEY", default=None,
              help="Pay from this key [$VERILLM_FUNDER_KEY]; default: anvil's dev account (0) on a dev chain.")
def fund(address, amount, rpc_url, key):
    """Send AMOUNT ether (1.5, or 15wei) to ADDRESS: a faucet for a dev chain."""
    from web3 import Web3

    from verillm.chain import connect
    from verillm.chain.backends import compute_anvil_accounts
    from verillm.cli.node import parse_ether

    if not Web3.is_address(address):
        raise InvalidInput(f"ADDRESS: not an Ethereum address: {address!r}")
    target = connect(rpc_url)
    if key is None and not _is_dev_chain(target):
        raise ConfigError(f"chain {target.chain_id} at {rpc_url} has no known dev account (anvil's mnemonic is unfunded there): pass --key")
    sender = _load_key(key) if key else compute_anvil_accounts(1)[0]
    wei = parse_ether(amount, "AMOUNT")
    announce_transactions(target)
    receipt = target.transfer(sender, address, wei)
    click.echo(f"sent {wei / 1e18:g} ETH from {sender.address} to {Web3.to_checksum_address(address)} "
               f"(tx 0x{bytes(receipt['transactionHash']).hex()}); balance now {target.get_balance(address) / 1e18:g} ETH")


def _is_dev_chain(target) -> bool:
    """anvil's dev account (0) holds ether here: anvil (any chain id) or a chain that funds its mnemonic."""
    from verillm.chain.backends import compute_anvil_accounts

    return target.get_balance(compute_anvil_accounts(1)[0].address) > 0


@chain.command()
@click.option("--rpc-url", envvar="VERILLM_RPC_URL", required=True, help="JSON-RPC endpoint of a dev chain (anvil) [$VERILLM_RPC_URL].")
@click.option("--blocks", type=int, default=None, help="Mine this many blocks.")
@click.option("--to-block", type=int, default=None, help="Mine until the head is this block.")
@click.option("--next-epoch", is_flag=True, help="Mine to the first block of the next stake epoch (registrations and stake changes weigh from then): needs --addresses.")
@click.option("--past-unbonding", "unbonding_address", default=None, help="Mine until the node at this address may withdraw (its unbonding ended): needs --addresses.")
@click.option("--addresses", "addresses_path", envvar="VERILLM_ADDRESSES", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Address book (for --next-epoch and --past-unbonding) [$VERILLM_ADDRESSES].")
def mine(rpc_url, blocks, to_block, next_epoch, unbonding_address, addresses_path):
    """(Dev chains) Mine blocks now: a number, up to a block, to the next epoch, or past a node's unbonding."""
    from verillm.chain import connect
    from verillm.chain.backends import MINE_CHUNK_BLOCKS

    chosen = [name for name, value in (("--blocks", blocks), ("--to-block", to_block), ("--next-epoch", next_epoch or None),
                                       ("--past-unbonding", unbonding_address)) if value is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --blocks N, --to-block B, --next-epoch, --past-unbonding ADDRESS")
    target = connect(rpc_url)
    head = target.get_block_number()
    goal = head + blocks if blocks is not None else to_block if to_block is not None else _protocol_goal(target, addresses_path, next_epoch, unbonding_address)
    if goal < head:
        raise InvalidInput(f"the head is already block {head}, past {goal}")
    def report(now: int, to: int) -> None:
        if to - head > MINE_CHUNK_BLOCKS:  # a long mine says where it is (each step is one RPC call)
            click.echo(f"  head {now} of {to} ({now - head} of {to - head} blocks)", err=True)

    landed = target.mine_to(goal, progress=report)
    click.echo(f"mined {landed - head} blocks: head {landed}")


def _protocol_goal(target, addresses_path, next_epoch: bool, unbonding_address: str | None) -> int:
    from web3 import Web3

    from verillm.chain.deploy import Deployment
    from verillm.chain.protocol import Protocol

    if not addresses_path:
        raise ConfigError("--next-epoch and --past-unbonding read the Registry: pass --addresses (or $VERILLM_ADDRESSES)")
    protocol = Protocol(target, Deployment.load(addresses_path))
    if next_epoch:
        epoch_blocks = protocol.registry.call("epochBlocks")
        return (target.get_block_number() // epoch_blocks + 1) * epoch_blocks
    end = protocol.get_node(Web3.to_checksum_address(unbonding_address))["unbonding_end_block"]
    if not end:
        raise InvalidInput(f"{unbonding_address} is not unbonding: run `verillm node unbond` first")
    return end


@chain.command("add-model")
@click.option("--rpc-url", envvar="VERILLM_RPC_URL", required=True, help="JSON-RPC endpoint [$VERILLM_RPC_URL].")
@click.option("--addresses", "addresses_path", envvar="VERILLM_ADDRESSES", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--key", envvar="VERILLM_DEPLOYER_KEY", required=True, help="The deployer's private key, hex [$VERILLM_DEPLOYER_KEY].")
@click.option("--node", "node_url", required=True, help="A node serving the model: its manifest is read from /v1/verillm/info.")
@click.option("--profile", "profile_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Tolerance profile JSON [default: PROFILE_DIR/<model id>-<dtype>.json, else the shipped one for the node's model].")
@click.option("--profile-dir", default="profiles", show_default=True, help="Where `verillm calibrate --profile-dir` wrote the model's profile.")
def add_model(rpc_url, addresses_path, key, node_url, profile_path, profile_dir):
    """(Deployment owner) Add a model and its calibrated thresholds to the Registry."""
    from eth_account import Account

    from verillm.chain import connect
    from verillm.chain.deploy import Deployment
    from verillm.chain.protocol import Protocol
    from verillm.spec.audit import OnchainModel
    from verillm.cli.node import _tx, fetch_node_info
    from verillm.spec.encoding import decode
    from verillm.spec.job import compute_model_id
    from verillm.spec.types import ModelManifest

    info = fetch_node_info(node_url)
    manifest = decode(ModelManifest, bytes.fromhex(info["model"]["manifest"][2:]))
    model_id = bytes.fromhex(info["model"]["model_id"][2:])
    if compute_model_id(manifest) != model_id:
        raise InvalidInput(f"{node_url} reports model id 0x{model_id.hex()}, but its manifest hashes to 0x{compute_model_id(manifest).hex()}")
    deployment = Deployment.load(addresses_path)
    profile = compute_add_model_profile(manifest, model_id, deployment.preset, profile_path, profile_dir)
    protocol = Protocol(connect(rpc_url), deployment)
    announce_transactions(protocol.chain)
    tx = protocol.add_model(Account.from_key(key), OnchainModel.from_profile(model_id, manifest, profile))
    click.echo(f"added model {manifest.name} 0x{model_id.hex()} ({manifest.dtype}, layers {list(manifest.committed_layers)}) ({_tx(tx)})")


def compute_add_model_profile(manifest, model_id: bytes, preset_name: str, profile_path: str | None, profile_dir: str):
    """The tolerance profile the owner registers for the node's model: ``--profile``; else the one
    `verillm calibrate --profile-dir` wrote for this model id; else a shipped alias's (tiny,
    smollm2) whose manifest hashes to this model id. The manifest's name is no guide: a model
    loaded from files is named by family and shape (SmolLM2: `llama-30x576-…`)."""
    from verillm.engine.profiles import get_profile_path, get_shipped_profile_alias, load_profile
    from verillm.spec.policy import ToleranceProfile

    if profile_path is not None:
        return load_profile("", manifest.dtype, profile_path)
    calibrated = get_profile_path(profile_dir, model_id, manifest.dtype)
    if calibrated.is_file():
        return ToleranceProfile.from_json(calibrated.read_text())
    for alias in ("tiny", "smollm2"):
        if get_shipped_profile_alias(alias, manifest.dtype) == alias and _compute_alias_model_id(alias, manifest.dtype, preset_name) == model_id:
            return load_profile(alias, manifest.dtype)
    raise ConfigError(f"no tolerance profile for model {manifest.name} 0x{model_id.hex()} ({manifest.dtype}): none at {calibrated}, "
                      "and no shipped model has this id; pass --profile (from `verillm calibrate`) or --profile-dir")


def _compute_alias_model_id(alias: str, dtype: str, preset_name: str) -> bytes:
    from verillm.engine.models import load_model
    from verillm.spec.job import compute_model_id
    from verillm.spec.params import get_preset

    click.echo(f"loading {alias} ({dtype}) to compare its model id with the node's …", err=True)
    return compute_model_id(load_model(alias, dtype, get_preset(preset_name))[2])
