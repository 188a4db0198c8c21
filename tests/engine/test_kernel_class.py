"""The kernel class is measured, not named: machines that compute other bits get another class
(so another model id, never one committee) or refuse; machines that compute the same bits
share it, and their honest audits pass bit for bit.

The other machine is this one with oneDNN held to an older ISA (ONEDNN_MAX_CPU_ISA, read at
process start): AVX512_CORE is a Skylake/Cascade Lake without AVX512-BF16, AVX2 a machine
without AVX-512. Under the old named class both kept this machine's name.
"""

import copy
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verillm.engine.kernel_class import compute_kernel_class, verify_kernel_class
from verillm.engine.models import load_model
from verillm.engine.profiles import select_profile
from verillm.engine.torch_engine import TorchEngine
from verillm.errors import ConfigError
from verillm.spec.commitment import JobTrace
from verillm.spec.job import compute_model_id
from verillm.spec.types import Job, SamplingParams
from verillm.verifier.local import Party, check_pair, commit_runs, compute_member_jobs

WORKER_SCRIPT = Path(__file__).with_name("kernel_class_worker.py")


def has_cpu_flag(flag: str) -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.exists() and f" {flag} " in f" {cpuinfo.read_text().split('flags', 2)[1].splitlines()[0]} "


def run_other_machine(tmp_path, model: str, isa: str, job_specs) -> dict:
    jobs_file, out = tmp_path / f"jobs-{isa}.json", tmp_path / f"out-{isa}.npz"
    jobs_file.write_text(json.dumps(job_specs))
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": isa}
    subprocess.run([sys.executable, str(WORKER_SCRIPT), model, str(jobs_file), str(out)], env=env, check=True, timeout=900)
    with np.load(out) as data:
        return {key: data[key] for key in data.files}


@pytest.fixture(scope="module")
def exact_tiny():
    return load_model("tiny", "bfloat16")


def test_the_class_is_the_battery_digest_and_a_manifest_of_another_class_is_refused(exact_tiny):
    model, tokenizer, manifest = exact_tiny
    assert manifest.kernel_class == compute_kernel_class(model, manifest.fingerprint_dims)
    assert manifest.kernel_class.startswith("cpu-kat")
    other = dataclasses.replace(manifest, kernel_class="cpu-kat1-000000000000000000000000")
    with pytest.raises(ConfigError, match=f"needs kernel class {other.kernel_class}; this machine computes {manifest.kernel_class}"):
        TorchEngine(model, tokenizer, other)
    with pytest.raises(ConfigError, match="cpu-kat1-0000"):
        load_model("tiny", "bfloat16", kernel_class=other.kernel_class)
    assert load_model("tiny", "bfloat16", kernel_class=manifest.kernel_class)[2] == manifest


def test_a_model_on_another_device_never_accepts_the_cpu_class(exact_tiny):
    model, _, manifest = exact_tiny
    elsewhere = copy.deepcopy(model).to("meta")  # a CUDA-resident model takes the same path (device type ≠ cpu)
    with pytest.raises(ConfigError, match="this meta model cannot compute a cpu class"):
        verify_kernel_class(manifest, elsewhere)


@pytest.mark.parametrize("isa", ["AVX512_CORE", "AVX2"])
def test_another_isa_gets_another_class_or_its_honest_audits_pass(tmp_path, exact_tiny, tiny_prompts, isa):
    model, tokenizer, manifest = exact_tiny
    specs = [[list(p), 10, t, 5] for p in tiny_prompts[:3] for t in (0, 900)]
    other = run_other_machine(tmp_path, "tiny", isa, specs)
    if "refused" in other:
        return  # it cannot run exact mode there: it never serves, never gets slashed
    if str(other["kernel_class"]) != manifest.kernel_class:
        other_manifest = dataclasses.replace(manifest, kernel_class=str(other["kernel_class"]))
        assert bytes.fromhex(str(other["model_id"])) == compute_model_id(other_manifest) != compute_model_id(manifest)
        return  # another model id: registered apart, never in one committee
    # Same class: the bits must really be the same; every honest audit across the pair passes.
    assert bytes.fromhex(str(other["model_id"])) == compute_model_id(manifest)
    jobs = [Job(compute_model_id(manifest), tuple(t), SamplingParams(temperature_milli=temp, seed=s), n, bytes([i]) * 32) for i, (t, n, temp, s) in enumerate(specs)]
    traces = [JobTrace(tuple(int(x) for x in other[f"tokens_{i}"]), other[f"fingerprints_{i}"], other[f"flags_{i}"]) for i in range(len(jobs))]
    worker_runs = commit_runs(jobs, traces, manifest, Party(b"\x57" * 32))
    member_jobs = compute_member_jobs(worker_runs)
    verifier = TorchEngine(model, tokenizer, manifest, max_batch_size=4, num_threads=2)
    member_runs = commit_runs(member_jobs, verifier.run(member_jobs), manifest, Party(b"\x4d" * 32))
    results = [check_pair(w, m, manifest, select_profile(manifest, "tiny"), 8) for w, m in zip(worker_runs, member_runs)]
    assert all(r.accepted for r in results), [r.reasons for r in results if not r.accepted]


@pytest.mark.smollm2
@pytest.mark.skipif(not has_cpu_flag("avx512_bf16"), reason="needs a CPU with AVX512-BF16 to emulate one without it")
def test_smollm2_on_a_cpu_without_avx512_bf16_gets_another_class_or_refuses(tmp_path, smollm2_prompts):
    # The case: 4 of 4 honest audits rejected under one class name. Now the battery
    # (K = 1536 and the 49,152-row head are among its shapes) tells the machines apart.
    other = run_other_machine(tmp_path, "smollm2", "AVX512_CORE", [[list(smollm2_prompts[0]), 4, 0, 0]])
    here = load_model("smollm2", "bfloat16")[2].kernel_class
    assert "refused" in other or str(other["kernel_class"]) != here
