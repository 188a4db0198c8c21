"""The shipped example config serves the real model: a newcomer's first completion is text, not
the seeded tiny model's gibberish."""

from pathlib import Path

from verillm.node.config import load_config

OPS_CONFIG = Path(__file__).parents[2] / "ops" / "node.toml"


def test_ops_node_toml_serves_smollm2_by_default():
    assert load_config(OPS_CONFIG, environ={}).engine.model == "smollm2"
