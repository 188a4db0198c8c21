"""`verillm keys new`: make a node key."""


import click

from verillm import envs
from verillm.node.keys import new_node_key, write_key_file


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
        password = envs.get_secret(password_env)
        if not password:
            raise click.UsageError(f"--password-env {password_env}: the variable is empty or unset")
    key = new_node_key()
    write_key_file(key, out, password)
    kind = "eth-account V3 keystore" if password else "plain JSON, mode 0600"
    click.echo(f"{key.address_hex}  written to {out} ({kind})")
