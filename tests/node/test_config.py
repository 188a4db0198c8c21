"""Node configuration: defaults, TOML → env → flags precedence, clear errors, documented fields."""

import dataclasses
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from verillm.errors import ConfigError
from verillm.cli.node import compute_config_toml, node
from verillm.node.config import SECTIONS, NodeConfig, get_field_docs, load_config

OPS_CONFIG = Path(__file__).parents[2] / "ops" / "node.toml"


def test_every_field_has_a_default_and_a_docstring():
    for name, factory in SECTIONS.items():
        section = factory()
        docs = get_field_docs(type(section))
        for field in dataclasses.fields(section):
            assert field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING, f"{name}.{field.name}"
            assert docs.get(field.name, "").strip(), f"{name}.{field.name} has no docstring"
    assert set(get_field_docs(NodeConfig)) == set(SECTIONS)


def test_precedence_file_then_env_then_flags(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text('[server]\nport = 9001\nhost = "0.0.0.0"\n[queue]\nbatch_wait_ms = 5\n[auth]\nallowed_senders = ["0x' + "ab" * 20 + '"]\n')
    environ = {"VERILLM_SERVER_PORT": "9002", "VERILLM_ENGINE_DTYPE": "bfloat16", "VERILLM_QUEUE_BATCH_WAIT_MS": "7.5"}
    config = load_config(path, environ=environ, overrides=["server.port=9003"])
    assert config.server.port == 9003  # flag beats env beats file
    assert config.server.host == "0.0.0.0"  # file beats default
    assert config.engine.dtype == "bfloat16"  # env beats default
    assert config.queue.batch_wait_ms == 7.5
    assert config.auth.allowed_senders == ("0x" + "ab" * 20,)
    assert load_config(path, environ={}).server.port == 9001
    assert load_config(None, environ={}) == NodeConfig()


@pytest.mark.parametrize(
    "toml, environ, overrides, message",
    [
        ("[server]\nport = 'eighty'\n", {}, [], "[server] port: expected int"),
        ("[servr]\nport = 1\n", {}, [], "unknown section [servr]"),
        ("[server]\nprot = 1\n", {}, [], "unknown field server.prot"),
        ("port = 1\n", {}, [], "must be a [table]"),
        ("[server\n", {}, [], "not valid TOML"),
        ("", {"VERILLM_QUEUE_MAX_QUEUED_JOBS": "many"}, [], "environment VERILLM_QUEUE_MAX_QUEUED_JOBS: expected int"),
        ("", {}, ["server.port"], "expected section.field=value"),
        ("", {}, ["server.port=70000"], "server.port must be in 0..65535"),
        ("", {}, ["queue.max_queued_jobs=0"], "queue.max_queued_jobs must be at least 1"),
        ("", {}, ["chain.jobs_address=0x12"], "chain.jobs_address"),
        ("", {}, ["store.synchronous=OFF"], "store.synchronous"),
        ("[limits]\nmax_new_tokens = true\n", {}, [], "expected int"),
    ],
)
def test_bad_values_name_their_source(tmp_path, toml, environ, overrides, message):
    path = tmp_path / "node.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ, overrides=overrides)
    assert message in str(caught.value)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.toml", environ={})


def test_ops_example_documents_every_field_and_loads():
    text = OPS_CONFIG.read_text()
    data = tomllib.loads(text)
    for name, factory in SECTIONS.items():
        fields = {f.name for f in dataclasses.fields(factory())}
        assert set(data.get(name, {})) == fields, f"ops/node.toml [{name}] must list exactly {sorted(fields)}"
    load_config(OPS_CONFIG, environ={})


def test_node_config_command_prints_loadable_toml(tmp_path):
    result = CliRunner().invoke(node, ["config", "--port", "8123", "--set", "engine.dtype=bfloat16"], env={})
    assert result.exit_code == 0, result.output
    path = tmp_path / "printed.toml"
    path.write_text(result.output)
    config = load_config(path, environ={})
    assert config.server.port == 8123 and config.engine.dtype == "bfloat16"
    assert compute_config_toml(config).strip() == result.output.strip()


def test_a_deeply_nested_config_value_is_a_config_error_not_a_crash(tmp_path):
    """Found by the config fuzzer: tomllib recursed into RecursionError (a segfault once py_ecc raised the limit)."""
    import verillm.node.app  # noqa: F401  (imports py_ecc, which raises the recursion limit to 100,000)

    path = tmp_path / "node.toml"
    path.write_text("[server]\nhost = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match="deeper than 16"):
        load_config(path, environ={})
    sections = "".join(f"[{name}]\n" for name in SECTIONS) * 1 + "[auth]\nallowed_senders = [" + ", ".join(['"0x' + "11" * 20 + '"'] * 30) + "]\n"
    path.write_text(sections.replace("[auth]\n", "", 1))
    assert len(load_config(path, environ={}).auth.allowed_senders) == 30  # many brackets, shallow: accepted
