"""What the devnet says while it waits: its --help tells the truth about tiny's run time, and the
stall watch speaks up when nothing moves, naming what it could find out."""

import time
from dataclasses import dataclass, field

import pytest
from click.testing import CliRunner

from verillm.cli.devnet import devnet
from verillm.devnet.progress import StallWatch, prepare_model


def test_devnet_help_gives_measured_times_not_seconds():
    text = " ".join(CliRunner().invoke(devnet, ["--help"]).output.split())
    assert "seconds instead of minutes" not in text
    assert "75-90 s" in text and "--keep" in text and "--stall" in text


@dataclass
class _Network:
    """What StallWatch reads of a LocalNetwork: its processes and node 0's URL (nothing listens here)."""

    gateway_url: str = "http://127.0.0.1:9"
    nodes: list = field(default_factory=list)


def test_stall_watch_reports_once_per_period_and_only_after_no_change():
    lines = []
    watch = StallWatch(_Network(), lines.append, stall_s=0.2)
    watch.check("a")
    watch.check("a")
    assert lines == []
    time.sleep(0.25)
    watch.check("a")
    watch.check("a")  # not again within the period
    assert len(lines) == 1 and lines[0].startswith("no progress for") and "the gateway does not answer" in lines[0]
    watch.check("b")  # progress resets the clock
    watch.check("b")
    assert len(lines) == 1


def test_prepare_model_says_nothing_to_convert_for_tiny():
    lines = []
    prepare_model("tiny", lines.append)
    assert lines == []


@pytest.mark.slow
def test_prepare_model_says_it_converts_smollm2_once(tmp_path, monkeypatch):
    monkeypatch.setenv("VERILLM_CACHE_DIR", str(tmp_path))  # an empty cache: the real conversion runs (about a minute)
    lines = []
    prepare_model("smollm2", lines.append)
    assert lines[0].startswith("converting SmolLM2 once") and lines[1].startswith("converted SmolLM2 in")
    lines.clear()
    prepare_model("smollm2", lines.append)
    assert len(lines) == 1 and lines[0].startswith("SmolLM2-135M-Instruct: cached fp32 weights")
