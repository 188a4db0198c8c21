"""Node keys: plain 0600 JSON or an eth-account keystore; refusals with reasons."""

import json
import os
import stat

import pytest
from click.testing import CliRunner
from eth_account import Account

from verillm.errors import ConfigError
from verillm.cli.keys import keys
from verillm.node.keys import load_node_key, new_node_key, read_key_file, write_key_file


def test_plain_key_round_trip_with_owner_only_permissions(tmp_path):
    key = new_node_key()
    path = tmp_path / "key.json"
    write_key_file(key, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_key_file(path) == key
    assert Account.from_key(key.private_key).address.lower() == key.address_hex
    with pytest.raises(ConfigError, match="already exists"):
        write_key_file(new_node_key(), path)
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        read_key_file(path)


def test_keystore_needs_its_password(tmp_path, monkeypatch):
    key = new_node_key()
    path = tmp_path / "keystore.json"
    write_key_file(key, path, password="correct horse")
    assert "crypto" in json.loads(path.read_text())
    with pytest.raises(ConfigError, match="set its password"):
        read_key_file(path)
    with pytest.raises(ConfigError, match="cannot decrypt"):
        read_key_file(path, "wrong")
    monkeypatch.setenv("NODE_PW", "correct horse")
    assert load_node_key(str(path), "NODE_PW") == key


def test_tampered_plain_key_is_refused(tmp_path):
    path = tmp_path / "key.json"
    write_key_file(new_node_key(), path)
    content = json.loads(path.read_text())
    content["address"] = "0x" + "11" * 20
    path.write_text(json.dumps(content))
    with pytest.raises(ConfigError, match="does not match"):
        read_key_file(path)
    with pytest.raises(ConfigError, match="does not exist"):
        read_key_file(tmp_path / "missing.json")


def test_keys_new_command(tmp_path):
    runner = CliRunner()
    result = runner.invoke(keys, ["new", "--out", str(tmp_path / "k.json")])
    assert result.exit_code == 0 and "plain JSON, mode 0600" in result.output
    address = result.output.split()[0]
    assert read_key_file(tmp_path / "k.json").address_hex == address
    result = runner.invoke(keys, ["new", "--out", str(tmp_path / "ks.json"), "--password-env", "PW"], env={"PW": "pw"})
    assert result.exit_code == 0 and "keystore" in result.output
    assert read_key_file(tmp_path / "ks.json", "pw").address_hex == result.output.split()[0]
    result = runner.invoke(keys, ["new", "--out", str(tmp_path / "x.json"), "--password-env", "UNSET_VAR"], env={})
    assert result.exit_code != 0 and "empty or unset" in result.output
