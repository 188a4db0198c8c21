"""ops/: the dashboard, alerts and scrape config name only metrics the node exports; the unit runs the CLI."""

import configparser
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from prometheus_client import generate_latest

from verillm.cli.node import node
from verillm.node.metrics import NodeMetrics

OPS = Path(__file__).parents[2] / "ops"
METRIC_NAME = re.compile(r"\bverillm_[a-z0-9_]+")


def exported_names() -> set[str]:
    """Every sample name a fresh node exports (histogram _bucket/_sum/_count, counter _total included)."""
    text = generate_latest(NodeMetrics().registry).decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_dashboard_uses_exported_metrics():
    dashboard = json.loads((OPS / "grafana" / "verillm-node.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(dashboard["panels"]) >= 10 and dashboard["uid"] == "verillm-node"
    used = {name for expr in exprs for name in METRIC_NAME.findall(expr)}
    assert used <= exported_names(), used - exported_names()
    families = {re.sub(r"_(bucket|sum|count|total)$", "", n) for n in exported_names() if n.startswith("verillm_") and not n.endswith("_created")}
    shown = {re.sub(r"_(bucket|sum|count|total)$", "", n) for n in used}
    assert families - shown <= {"verillm_node_opened_cells"}, f"metrics without a panel: {families - shown}"


def test_alert_rules_use_exported_metrics():
    rules = yaml.safe_load((OPS / "prometheus" / "alerts.yml").read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    assert all(rule.get("alert") and rule.get("annotations", {}).get("summary") for group in rules["groups"] for rule in group["rules"])
    used = {name for expr in exprs for name in METRIC_NAME.findall(expr)}
    assert used and used <= exported_names(), used - exported_names()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_accepts_config_and_rules():
    for args in (["check", "config", str(OPS / "prometheus" / "prometheus.yml")], ["check", "rules", str(OPS / "prometheus" / "alerts.yml")]):
        result = subprocess.run(["promtool", *args], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_systemd_unit_runs_the_node_command():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read_string((OPS / "systemd" / "verillm-node.service").read_text())
    exec_start = unit["Service"]["ExecStart"].split()
    assert exec_start[1:4] == ["node", "run", "--config"]
    assert unit["Service"]["KillSignal"] == "SIGTERM"
    result = CliRunner().invoke(node, ["run", "--help"])
    assert result.exit_code == 0 and "--config" in result.output
