"""`verillm devnet --model <HF directory>` end to end (slow, ~2 min on 2 cores): a locally built
tiny Qwen2 checkpoint, calibrated by path, served by five node processes, one of them running
the int8 attack. The command checks the outcome on the chain: every honest job verified, the
cheater slashed, no honest node slashed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from verillm.engine.tiny_checkpoints import save_tiny_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("anvil_installed")]
VERILLM = str(Path(sys.executable).parent / "verillm")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_devnet_from_a_directory_slashes_an_int8_cheater(tmp_path):
    model = save_tiny_checkpoint("qwen2", tmp_path / "tiny-qwen2")
    refused = subprocess.run([VERILLM, "devnet", "--model", str(model), "--profile-dir", str(tmp_path / "profiles"), "--jobs", "1", "--workdir", str(tmp_path / "refused")],
                             capture_output=True, text=True, timeout=600, env=ENV)
    assert refused.returncode != 0 and "verillm calibrate --model" in refused.stdout + refused.stderr
    subprocess.run([VERILLM, "calibrate", "--model", str(model), "--jobs", "4", "--profile-dir", str(tmp_path / "profiles")], check=True, capture_output=True, timeout=600, env=ENV)
    run = subprocess.run([VERILLM, "devnet", "--model", str(model), "--profile-dir", str(tmp_path / "profiles"), "--cheater", "int8", "--jobs", "6", "--workdir", str(tmp_path / "devnet")],
                         capture_output=True, text=True, timeout=900, env=ENV)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "every job settled as the protocol says it should" in run.stdout
