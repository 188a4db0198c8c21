"""`verillm sim` end to end (small), and `verillm bench gas` node keys past 255."""

import json

import pytest
from click.testing import CliRunner

from verillm.cli import cli
from verillm.cli.bench_gas import _index_bytes, _vrf_seed
from verillm.errors import ConfigError
from verillm.sim.engine import Scenario, run_scenario


def test_sim_run_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "run.json"
    result = CliRunner().invoke(cli, ["sim", "run", "--workers", "40", "--hours", "1", "--jobs-per-s", "1", "--strategy", "collude",
                                      "--adversary-share", "0.3", "--rules", "issue-9", "--json", str(out)])
    assert result.exit_code == 0, result.output
    for metric in ("cheated_unslashed", "honest_slashed", "gas_per_job", "calls_per_block", "verification_share_gpu", "audit_latency_s"):
        assert metric in result.output
    report = json.loads(out.read_text())
    assert report["scenario"]["strategy"] == "collude" and report["rules"]["name"] == "issue-9"
    assert len(report["series"]["time_s"]) == len(report["series"]["locked_eth"]) > 10


@pytest.mark.parametrize("change", [{"strategy": "nope"}, {"rules": "nope"}, {"attack": "nope"}, {"workers": 5}, {"adversary_share": 1.5}])
def test_bad_scenarios_are_config_errors(change):
    with pytest.raises(ConfigError):
        run_scenario(Scenario(duration_s=60, **change))


def test_bench_gas_node_keys_are_distinct_past_255():
    keys = {_index_bytes(i) for i in range(2100)}
    seeds = {_vrf_seed(i) for i in range(2100)}
    assert len(keys) == len(seeds) == 2100
    assert _index_bytes(7) == bytes([7]) and _vrf_seed(7) == bytes([8]) * 32  # the first 255 keep their historical keys


def test_sim_replay_command_reports_the_agreement_table(anvil_installed, tmp_path):
    out = tmp_path / "replay.json"
    result = CliRunner().invoke(cli, ["sim", "replay", "--audits", "1", "--omissions", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "1/1 audits agree" in result.output and "2/2 omission claims agree (1 dispatchers slashed" in result.output
    report = json.loads(out.read_text())
    assert report["rules"] == "main" and report["mismatched"] == [] and report["rows"][0]["audits"] == 1
