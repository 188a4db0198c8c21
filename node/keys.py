"""The node's secp256k1 key: create, write, read.

Two file formats, told apart by their content:
- plain: ``{"address": "0x…", "private_key": "0x…"}``, written with mode 0600 (the default of
  `verillm keys new`; a daemon can start unattended);
- keystore: an eth-account V3 keystore (scrypt + AES-128-CTR), written when a password is
  given; the node reads the password from the variable named by ``identity.password_env``.
"""

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from eth_account import Account
from eth_keys import keys

from verillm import envs
from verillm.errors import ConfigError


@dataclass(frozen=True)
class NodeKey:
    """A secp256k1 private key and the Ethereum address it controls."""

    private_key: bytes
    address: bytes

    @property
    def address_hex(self) -> str:
        return "0x" + self.address.hex()


def compute_node_key(private_key: bytes) -> NodeKey:
    """Return the NodeKey of a 32-byte private key."""
    if len(private_key) != 32:
        raise ConfigError(f"a private key is 32 bytes, got {len(private_key)}")
    address = keys.PrivateKey(private_key).public_key.to_canonical_address()
    return NodeKey(private_key=private_key, address=address)


def new_node_key() -> NodeKey:
    """Return a fresh random key."""
    return compute_node_key(secrets.token_bytes(32))


def write_key_file(key: NodeKey, path: str | Path, password: str | None = None) -> None:
    """Write ``key`` to ``path`` with mode 0600: plain JSON, or a keystore if ``password`` is set."""
    path = Path(path)
    if path.exists():
        raise ConfigError(f"{path} already exists; refusing to overwrite a key")
    if password:
        content = Account.encrypt(key.private_key, password)
    else:
        content = {"address": key.address_hex, "private_key": "0x" + key.private_key.hex()}
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(content, handle, indent=2)
        handle.write("\n")


def read_key_file(path: str | Path, password: str | None = None) -> NodeKey:
    """Read a key written by `write_key_file`; keystores need ``password``."""
    path = Path(path)
    try:
        content = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"key file {path} does not exist; create one with `verillm keys new --out {path}`") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"key file {path} is not JSON: {exc}") from None
    if "crypto" in content or "Crypto" in content:
        return _read_keystore(path, content, password)
    if "private_key" not in content:
        raise ConfigError(f"key file {path} has neither private_key nor a keystore crypto section")
    return _read_plain(path, content)


def _read_plain(path: Path, content: dict) -> NodeKey:
    if os.stat(path).st_mode & 0o077:
        raise ConfigError(f"key file {path} is readable by others; run chmod 600 {path}")
    try:
        key = compute_node_key(bytes.fromhex(content["private_key"].removeprefix("0x")))
    except ValueError:
        raise ConfigError(f"key file {path}: private_key is not hex") from None
    if "address" in content and content["address"].lower() != key.address_hex:
        raise ConfigError(f"key file {path}: address {content['address']} does not match the private key")
    return key


def _read_keystore(path: Path, content: dict, password: str | None) -> NodeKey:
    if not password:
        raise ConfigError(f"key file {path} is an encrypted keystore; set its password in the environment")
    try:
        return compute_node_key(bytes(Account.decrypt(content, password)))
    except ValueError as exc:
        raise ConfigError(f"key file {path}: cannot decrypt ({exc})") from None


def load_node_key(key_file: str, password_env: str) -> NodeKey:
    """Read the node key named by the identity config."""
    return read_key_file(key_file, envs.get_secret(password_env))
