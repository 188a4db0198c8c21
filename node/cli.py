"""`verillm node ...` and `verillm keys ...`: run the daemon, show its config, make a key."""

import asyncio
import contextlib
import dataclasses
import logging
import os

import click

from verillm.node.config import NodeConfig, get_field_docs, load_config
from verillm.node.keys import new_node_key, write_key_file


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


from verillm.commands.node_admin import add_admin_commands  # noqa: E402 (register | stake | top-up | models | unbond | withdraw | status)

add_admin_commands(node)


@click.group()
def keys():
    """Create node keys."""


@keys.command("new")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Where to write the key (refuses to overwrite).")
@click.option("--password-env", default=None, help="Encrypt as an eth-account keystore with the password in this variable.")
def keys_new(out, password_env):
    """Write a new secp256k1 key: plain JSON (mode 0600), or a keystore with --password-env."""
    password = None
    if password_env:
        password = os.environ.get(password_env)
        if not password:
            raise click.UsageError(f"--password-env {password_env}: the variable is empty or unset")
    key = new_node_key()
    write_key_file(key, out, password)
    kind = "eth-account V3 keystore" if password else "plain JSON, mode 0600"
    click.echo(f"{key.address_hex}  written to {out} ({kind})")
