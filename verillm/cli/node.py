"""`verillm node ...`: run the daemon, show its config, and an operator's on-chain life cycle.

`run` and `config` start and describe the daemon. `register | stake | top-up | models | unbond |
withdraw | status` act on any EVM chain's JSON-RPC (`--rpc-url`), signed with the node's own key
(`--key-file`, the file the daemon uses), on the deployment named by `--addresses` (the address
book `verillm chain deploy` wrote). Each option also reads a `VERILLM_*` variable, and
`--config node.toml` supplies all three from the node's own config.

Every write goes through `verillm.chain.protocol.Protocol` (the same bindings the devnet and
the dispatcher use) and prints what changed; `status` prints the node's standing and why it
cannot serve (node/dispatcher/readiness.py).
"""

import asyncio
import contextlib
import dataclasses
import json
import logging
import urllib.request
from dataclasses import dataclass

import click

from verillm import envs
from verillm.errors import ConfigError, InvalidInput

from verillm.node.config import NodeConfig, get_field_docs, load_config


def _config_options(command):
    """Options shared by `node run` and `node config`: the file, shortcuts and generic --set."""
    options = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file."),
        click.option("--host", help="Shortcut for --set server.host=…"),
        click.option("--port", type=int, help="Shortcut for --set server.port=…"),
        click.option("--model", help="Shortcut for --set engine.model=…"),
        click.option("--dtype", help="Shortcut for --set engine.dtype=…"),
        click.option("--store", "store_path", help="Shortcut for --set store.path=…"),
        click.option("--key-file", help="Shortcut for --set identity.key_file=…"),
        click.option("--set", "overrides", multiple=True, metavar="SECTION.FIELD=VALUE", help="Override any field (repeatable)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _load(config_path, host, port, model, dtype, store_path, key_file, overrides) -> NodeConfig:
    shortcuts = {"server.host": host, "server.port": port, "engine.model": model, "engine.dtype": dtype, "store.path": store_path, "identity.key_file": key_file}
    flags = [f"{name}={value}" for name, value in shortcuts.items() if value is not None]
    return load_config(config_path, overrides=flags + list(overrides))


@click.group()
def node():
    """Run and inspect the worker node daemon."""


@node.command()
@_config_options
@click.option("--log-level", default="INFO", show_default=True, help="Python logging level.")
def run(log_level, **options):
    """Start the node daemon (precedence: defaults < TOML file < VERILLM_* env < flags)."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger(__name__).info("starting the node: importing the engine and the chain stack ...")
    from verillm.node.app import run_node

    config = _load(**options)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_node(config))


@node.command("config")
@_config_options
def show_config(**options):
    """Print the effective configuration as TOML, each field with its docstring."""
    click.echo(compute_config_toml(_load(**options)))


def compute_config_toml(config: NodeConfig) -> str:
    """Return ``config`` as a commented TOML document."""
    lines = []
    for section in dataclasses.fields(NodeConfig):
        part = getattr(config, section.name)
        docs = get_field_docs(type(part))
        lines += [f"# {type(part).__doc__.strip()}", f"[{section.name}]"]
        for field in dataclasses.fields(part):
            lines += [f"# {docs.get(field.name, '')}", f"{field.name} = {_toml_value(getattr(part, field.name))}"]
        lines.append("")
    return "\n".join(lines)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)

@dataclass
class Operator:
    """The chain, the deployment's bindings and the node's key, as the options name them."""

    protocol: object
    key: object  # verillm.node.keys.NodeKey

    @property
    def account(self):
        from eth_account import Account

        return Account.from_key(self.key.private_key)

    @property
    def address(self) -> str:
        return self.account.address


def _options(command):
    options = [
        click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="The node's TOML config: rpc URL (chain.rpc_url), key (identity.key_file), address book (dispatcher.deployment_file)."),
        click.option("--rpc-url", envvar="VERILLM_RPC_URL", default=None, help="JSON-RPC endpoint of the chain [$VERILLM_RPC_URL]."),
        click.option("--addresses", "addresses_path", envvar="VERILLM_ADDRESSES", default=None, type=click.Path(dir_okay=False),
                     help="Address book from `verillm chain deploy` [$VERILLM_ADDRESSES]."),
        click.option("--key-file", envvar="VERILLM_KEY_FILE", default=None, type=click.Path(dir_okay=False),
                     help="The node's key file (`verillm keys new`) [$VERILLM_KEY_FILE]."),
        click.option("--password-env", default="VERILLM_KEY_PASSWORD", show_default=True, help="Variable holding a keystore's password."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def load_operator(config_path, rpc_url, addresses_path, key_file, password_env) -> Operator:
    """Resolve the options (flags over the config file) and connect."""
    from verillm.chain import connect
    from verillm.chain.deploy import Deployment
    from verillm.chain.protocol import Protocol
    from verillm.node.keys import read_key_file

    if config_path:
        from verillm.node.config import load_config

        config = load_config(config_path)
        rpc_url = rpc_url or config.chain.rpc_url
        key_file = key_file or config.identity.key_file
        addresses_path = addresses_path or config.dispatcher.deployment_file
    missing = [name for name, value in (("--rpc-url", rpc_url), ("--addresses", addresses_path), ("--key-file", key_file)) if not value]
    if missing:
        raise ConfigError(f"missing {', '.join(missing)} (or --config node.toml naming them)")
    from verillm.cli.chain import announce_transactions

    key = read_key_file(key_file, envs.get_secret(password_env))
    chain = connect(rpc_url)
    announce_transactions(chain)
    return Operator(Protocol(chain, Deployment.load(addresses_path)), key)


def parse_ether(value: str, name: str) -> int:
    """Return wei for an amount in ether ("1.5") or in wei ("1500000000000000000wei")."""
    from decimal import Decimal, InvalidOperation

    try:
        wei = int(value[:-3]) if value.endswith("wei") else int(Decimal(value) * 10**18)
    except (InvalidOperation, ValueError):
        raise InvalidInput(f"{name}: expected an amount in ether (1.5) or wei (15wei), got {value!r}") from None
    if wei <= 0:
        raise InvalidInput(f"{name}: must be positive, got {value!r}")
    return wei


def parse_model_id(value: str) -> bytes:
    raw = value[2:] if value.startswith("0x") else value
    try:
        model_id = bytes.fromhex(raw)
    except ValueError:
        raise InvalidInput(f"--model-id: not hex: {value!r}") from None
    if len(model_id) != 32:
        raise InvalidInput(f"--model-id: expected 32 bytes, got {len(model_id)}")
    return model_id


def fetch_node_info(url: str) -> dict:
    """Return a running node's /v1/verillm/info (its served model and manifest)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/v1/verillm/info", timeout=10) as response:
            return json.load(response)
    except OSError as exc:
        raise ConfigError(f"cannot read {url}/v1/verillm/info: {exc}; is the node running?") from None


def resolve_models(model_ids: tuple[str, ...], node_url: str | None) -> list[bytes]:
    """The model ids given, else the one the node at ``node_url`` serves."""
    if model_ids:
        return [parse_model_id(m) for m in model_ids]
    if not node_url:
        raise InvalidInput("name the models: --model-id 0x… (repeatable), or --node URL of the running node to use its model")
    return [bytes.fromhex(fetch_node_info(node_url)["model"]["model_id"][2:])]


def _eth(wei: int) -> str:
    return f"{wei / 1e18:g} ETH"


def _tx(tx) -> str:
    return f"tx 0x{bytes(tx.receipt['transactionHash']).hex()}, {tx.gas_used:,} gas"


@node.command("register")
@_options
@click.option("--endpoint", required=True, help="The node's public URL, where dispatchers send jobs (its server.public_url).")
@click.option("--stake", default=None, help="Stake in ether [default: the protocol's minimum].")
@click.option("--model-id", "model_ids", multiple=True, help="Model id to serve, 0x… (repeatable) [default: what the node at --endpoint serves].")
def register(endpoint, stake, model_ids, **options):
    """Register this node: stake, BN254 VRF key (from the node key), endpoint and models."""
    from verillm.node.dispatcher.chainio import compute_vrf_secret_key

    operator = load_operator(**options)
    protocol = operator.protocol
    stake_wei = parse_ether(stake, "--stake") if stake else protocol.preset.MIN_STAKE_WEI
    models = resolve_models(model_ids, endpoint)
    if protocol.get_node(operator.address)["registered"]:
        raise InvalidInput(f"{operator.address} is already registered: use `verillm node top-up` / `models` / `status`")
    tx = protocol.register(operator.account, compute_vrf_secret_key(operator.key), endpoint, models, stake_wei)
    click.echo(f"registered {operator.address}: stake {_eth(stake_wei)}, endpoint {endpoint}, models "
               f"{', '.join('0x' + m.hex() for m in models)} ({_tx(tx)})")


@node.command("top-up")
@_options
@click.option("--amount", required=True, help="Stake to add, in ether.")
def top_up(amount, **options):
    """Add stake (a node slashed below the minimum is active again once topped up)."""
    operator = load_operator(**options)
    tx = operator.protocol.top_up(operator.account, parse_ether(amount, "--amount"))
    click.echo(f"staked {amount} ETH more: stake now {_eth(operator.protocol.get_node(operator.address)['stake_wei'])} ({_tx(tx)})")


stake = click.Command("stake", params=top_up.params, callback=top_up.callback,
                      help="Add stake to a registered node (the same as top-up).")
node.add_command(stake)


@node.command("models")
@_options
@click.option("--model-id", "model_ids", multiple=True, help="Model id to declare, 0x… (repeatable); replaces the declared set.")
@click.option("--node", "node_url", default=None, help="Declare the model the node at this URL serves.")
def models(model_ids, node_url, **options):
    """Declare the models this node serves (each must be added to the Registry by the owner)."""
    operator = load_operator(**options)
    chosen = resolve_models(model_ids, node_url)
    tx = operator.protocol.update_models(operator.account, chosen)
    click.echo(f"{operator.address} declares {', '.join('0x' + m.hex() for m in chosen)} ({_tx(tx)})")


@node.command("unbond")
@_options
@click.option("--store", "store_path", default=None, type=click.Path(dir_okay=False),
              help="The node's store (SQLite) [default: the --config file's store.path]: unbond first stops the node "
                   "promising and waits until every receipt it promised is in a posted batch.")
@click.option("--flush-timeout", default=600.0, show_default=True, type=float,
              help="Seconds to wait for the node to post its promised receipts before giving up (nothing is sent then).")
def unbond(store_path, flush_timeout, **options):
    """Leave: stop promising (the node refuses new client jobs), wait until every promised receipt
    is in a posted batch, then deregister: no seat in a round seeded from now; the stake stays
    slashable until withdrawn, and the node must stay up until its last duty ends (printed)."""
    from verillm.spec.params import compute_leaver_schedule

    operator = load_operator(**options)
    if store_path is None and options.get("config_path"):
        from verillm.node.config import load_config

        store_path = load_config(options["config_path"]).store.path
    if store_path is None:
        click.echo("no node store (--config or --store): the node is not told to stop promising; it may still post what it "
                   f"promised until block unbond + {operator.protocol.preset.AUDIT_HORIZON_BLOCKS}", err=True)
    else:
        _flush_promises(operator, store_path, flush_timeout)
    tx = operator.protocol.deregister(operator.account)
    end = operator.protocol.get_node(operator.address)["unbonding_end_block"]
    plan = compute_leaver_schedule(tx.receipt["blockNumber"], operator.protocol.preset)
    wait = _blocks_in_time(end - tx.receipt["blockNumber"], compute_block_interval_s(operator.protocol.chain))
    click.echo(f"{operator.address} deregistered: withdraw from block {end} on ({wait}), once no audit holds the stake ({_tx(tx)})")
    click.echo(f"  keep the node up until block {plan.duties_end_block}: drawn at most until block {plan.seated_until_block}, "
               f"its receipts auditable until block {plan.last_start_block}")


def _flush_promises(operator, store_path: str, timeout_s: float) -> None:
    """Tell the node at ``store_path`` to make no new promise and post what it promised; wait until
    every promised receipt is in a batch posted on-chain (the node's batcher posts it at once)."""
    import time
    from pathlib import Path

    from verillm.node.store.dispatcher_tables import DispatcherTables
    from verillm.node.store.store import open_store

    if not Path(store_path).exists():
        raise InvalidInput(f"--store {store_path}: no node store there (is it the path the node runs with?)")
    tables = DispatcherTables(open_store(store_path).db)
    tables.set_leaving(operator.protocol.chain.get_block_number())
    click.echo(f"{operator.address} is leaving: the node takes no new job; waiting for its promised receipts to be posted", err=True)
    deadline = time.monotonic() + timeout_s
    while (waiting := tables.count_unposted_promises()) > 0:
        if time.monotonic() > deadline:
            raise ConfigError(f"{waiting} promised receipts are still not in a posted batch after {timeout_s:g} s: is the node "
                              "running with this store? Nothing was sent; run `verillm node unbond` again")
        time.sleep(0.2)
    click.echo("every promised receipt is in a posted batch", err=True)


@node.command("withdraw")
@_options
@click.option("--drive", is_flag=True, help="First make the due permissionless calls (drawRound, lapse, replaceMissing, slashUndelivered, drawChallenge, finalize, settle) on every open audit that locks the stake.")
def withdraw(drive, **options):
    """Take the stake back after the unbonding period (and, with --drive, once the audits that
    lock it have been pushed to their end: nobody else may make those calls)."""
    operator = load_operator(**options)
    node = operator.protocol.get_node(operator.address)
    head = operator.protocol.chain.get_block_number()
    if node["registered"] and node["unbonding_end_block"] and head < node["unbonding_end_block"]:
        raise InvalidInput(f"still unbonding: block {head}, withdrawal from block {node['unbonding_end_block']} "
                           f"({node['unbonding_end_block'] - head} blocks to go)")
    if drive:
        _drive_locks(operator)
    tx = operator.protocol.withdraw(operator.account)
    click.echo(f"withdrew {_eth(tx.value)} to {operator.address} ({_tx(tx)})")


def _drive_locks(operator) -> None:
    """Drive the audits locking the operator's stake; raise InvalidInput naming what still holds it."""
    from verillm.chain.drive import drive_locking_audits

    report = drive_locking_audits(operator.protocol, operator.account)
    for audit_id, step in report.sent:
        click.echo(f"audit {audit_id}: {step}")
    if report.locks:
        held = (f"open audits {', '.join(map(str, report.waiting))} (no permissionless step is due yet)" if report.waiting
                else "no open audit this address is a party to: an omission claim against it as a dispatcher?")
        raise InvalidInput(f"the stake is still locked by {report.locks} (held by {held}); run `verillm node withdraw --drive` again later")


def _stay_up_until(protocol, node: dict) -> int | None:
    """The block a leaving node's duties end (docs/protocol.md §12 "Stake locks and unbonding"); None while it has not unbonded."""
    from verillm.spec.params import compute_leaver_schedule

    if not node["unbonding_end_block"]:
        return None
    return compute_leaver_schedule(node["unbonding_end_block"] - protocol.preset.UNBONDING_BLOCKS, protocol.preset).duties_end_block


@node.command("status")
@_options
@click.option("--node", "node_url", default=None, help="The node's URL: check its served model too.")
@click.option("--model-id", default=None, help="Check for this model (default: the node's at --node, else each declared one).")
@click.option("--json", "as_json", is_flag=True)
def status(node_url, model_id, as_json, **options):
    """The node's standing on-chain (stake, locks, unbonding, endpoint, models) and why it cannot serve."""
    from verillm.node.dispatcher.readiness import compute_serving_reasons, read_serving_state

    operator = load_operator(**options)
    protocol = operator.protocol
    node = protocol.get_node(operator.address)
    if model_id:
        wanted = [parse_model_id(model_id)]
    elif node_url:
        wanted = resolve_models((), node_url)
    else:
        wanted = node["models"]
    reasons = sorted({r for m in wanted for r in compute_serving_reasons(read_serving_state(protocol, operator.address, m))})
    if not wanted:
        reasons = compute_serving_reasons(read_serving_state(protocol, operator.address, b"\x00" * 32))[:1] or ["no model declared"]
    body = {"address": operator.address, "balance_wei": protocol.chain.get_balance(operator.address),
            "registered": node["registered"], "active": node["active"], "stake_wei": node["stake_wei"],
            "min_stake_wei": protocol.preset.MIN_STAKE_WEI, "locks": node["locks"],
            "unbonding_end_block": node["unbonding_end_block"], "block": protocol.chain.get_block_number(),
            "stay_up_until_block": _stay_up_until(protocol, node),
            "endpoint": node["endpoint"], "models": ["0x" + m.hex() for m in node["models"]],
            "ready": not reasons, "reasons": reasons,
            "keep_traces": compute_trace_keeping(protocol.chain.get_block_number(), protocol.preset),
            "leaving": compute_leave_advice(node, protocol.chain.get_block_number(), protocol.preset)}
    body["block_interval_s"] = compute_block_interval_s(protocol.chain)
    body["stake_share"] = {"0x" + m.hex(): compute_stake_share(protocol, m, operator.address) for m in node["models"]}
    if not node["registered"]:
        body["withdrawn"] = _last_withdrawal(protocol, operator.address)
    if as_json:
        click.echo(json.dumps(body, indent=2))
        return
    click.echo(f"node {body['address']}  balance {_eth(body['balance_wei'])}  block {body['block']}")
    if body.get("withdrawn"):
        w = body["withdrawn"]
        click.echo(f"  withdrawn in block {w['block']}: {_eth(w['amount_wei'])} returned; not registered (register again to serve)")
    unbonding = "-" if not body["unbonding_end_block"] else \
        f"{body['unbonding_end_block']} ({_blocks_in_time(body['unbonding_end_block'] - body['block'], body['block_interval_s'])})"
    click.echo(f"  registered {body['registered']}  active {body['active']}  stake {_eth(body['stake_wei'])} "
               f"(minimum {_eth(body['min_stake_wei'])})  locks {body['locks']}  unbonding until {unbonding}")
    click.echo(f"  endpoint {body['endpoint'] or '-'}  models {', '.join(body['models']) or '-'}")
    for model, share in body["stake_share"].items():
        click.echo(f"  {share:.0%} of the listed stake of model {model[:10]}…: about that share of its committee seats")
    if body["stay_up_until_block"]:
        click.echo(f"  unbonding: keep the node up until block {body['stay_up_until_block']} (its last audit duty)")
    click.echo("  ready to serve" if not reasons else "  cannot serve:\n" + "\n".join(f"    - {r}" for r in reasons))
    click.echo(f"  traces: {body['keep_traces']['rule']}")
    if body["leaving"]:
        click.echo(f"  leaving: {body['leaving']['advice']}")


BLOCK_INTERVAL_SAMPLE_BLOCKS = 64


def compute_stake_share(protocol, model_id: bytes, address: str) -> float:
    """This node's share of the stake listed for ``model_id`` (committees are drawn by stake)."""
    nodes, stakes = protocol.get_model_nodes(model_id)
    mine = sum(s for n, s in zip(nodes, stakes) if n.lower() == address.lower())
    return mine / sum(stakes) if sum(stakes) else 0.0


def compute_block_interval_s(chain) -> float | None:
    """Seconds per block over the last 64 blocks (None on a chain this young); 0 on a chain that
    mines on demand (anvil's automine), where a block count says nothing about time."""
    head = chain.get_block_number()
    if head < BLOCK_INTERVAL_SAMPLE_BLOCKS:
        return None
    newest, oldest = chain.get_block(head)["timestamp"], chain.get_block(head - BLOCK_INTERVAL_SAMPLE_BLOCKS)["timestamp"]
    return (newest - oldest) / BLOCK_INTERVAL_SAMPLE_BLOCKS


def _blocks_in_time(blocks: int, interval_s: float | None) -> str:
    if blocks <= 0:
        return "passed"
    if not interval_s:
        return f"{blocks} blocks to go; the chain mines on demand" if interval_s == 0 else f"{blocks} blocks to go"
    seconds = blocks * interval_s
    span = f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"
    return f"{blocks} blocks, about {span} at the last {BLOCK_INTERVAL_SAMPLE_BLOCKS} blocks' pace"


def _last_withdrawal(protocol, address: str) -> dict | None:
    """The node's last `Withdrawn` (block, amount), found by its indexed address; None if it never withdrew."""
    from verillm.chain.events import get_events

    start = protocol.deployment.start_block
    events = [e for e in get_events(protocol.chain, [protocol.registry], start, names={"Withdrawn"})
              if e.args["node"].lower() == address.lower()]
    return {"block": events[-1].block_number, "amount_wei": events[-1].args["amountWei"]} if events else None


def compute_trace_keeping(head: int, preset) -> dict:
    """Until when this node must keep each job's trace (docs/operators.md "Retention"): its
    receipt's auditable_until_block (signed: head + RECEIPT_HORIZON_BLOCKS) + the audit span;
    a job signed now, until ``until_block``."""
    from verillm.spec.params import compute_timeline

    t = compute_timeline(preset)
    until = head + t.receipt_duty_span
    return {"audit_span_blocks": t.audit_span, "receipt_duty_span_blocks": t.receipt_duty_span, "until_block": until,
            "rule": f"keep each job's trace until its receipt's auditable_until_block + {t.audit_span} blocks "
                    f"({t.receipt_duty_span} blocks after signing: a job signed now, until block {until})"}


def compute_leave_advice(node: dict, head: int, preset) -> dict | None:
    """When a node that unbonds may stop its daemon without being penalised (docs/operators.md),
    from its leaver schedule (`verillm.spec.params.compute_leaver_schedule`, `Params.timeline`).

    After `unbond` no round seeded at or after its unbond block draws it (Registry.drawCommittee),
    but redraws of rounds seeded before may still seat it until ``seated_until_block``, and then it
    must open and vote (a missed opening is penalised). Its own receipts can be audited from
    batches posted by unbond + AUDIT_HORIZON_BLOCKS, so audits of them can start until
    ``last_start_block``. Every open audit it is a party to locks its stake. As a dispatcher, the
    batching promises it signed can be claimed until about its withdrawal block (BATCH_BY_BLOCKS
    + OMISSION_CLAIM_WINDOW_BLOCKS < UNBONDING_BLOCKS), and an unanswered claim is slashed: a
    dispatcher stops only once it has withdrawn.
    """
    from verillm.spec.params import compute_leaver_schedule

    if not node["registered"] or not node["unbonding_end_block"]:
        return None
    end = node["unbonding_end_block"]
    schedule = compute_leaver_schedule(end - preset.UNBONDING_BLOCKS, preset)
    drawable_until = schedule.seated_until_block
    quiet_after = max(drawable_until, schedule.last_start_block)
    worker_may_stop = head > quiet_after and node["locks"] == 0
    advice = (f"committees may seat it until block {drawable_until} (redraws of rounds seeded before it left); audits of its receipts "
              f"may start until block {schedule.last_start_block}; {node['locks']} open audits lock its stake; its duties end by block "
              f"{schedule.duties_end_block}; withdraw from block {end}. A worker-only node may stop after block {quiet_after} with no locks "
              f"({'now' if worker_may_stop else 'not yet'}); a dispatcher keeps running until `verillm node withdraw --drive` succeeds "
              f"(claims on its batching promises)")
    return {"drawable_until_block": drawable_until, "last_start_block": schedule.last_start_block, "duties_end_block": schedule.duties_end_block,
            "withdraw_from_block": end, "locks": node["locks"], "worker_may_stop": worker_may_stop, "advice": advice}
