"""The canonical kernel form: one kernel class per model on every machine (issue 37).

Every reduction is an exact sum of float64 integers on a power-of-two grid, every elementwise
function is built from IEEE basic operations (`engine/canonical.py`, `engine/canonical_math.py`),
so the known-answer battery gives one digest whatever ISA ATen or oneDNN dispatch to, and a
worker on one setting and a member on another agree on whole traces bit for bit. The other
"machines" here are this one with `ATEN_CPU_CAPABILITY` / `ONEDNN_MAX_CPU_ISA` set in a
subprocess (both are read at process start); on a CPU with AVX-512 the AVX2 settings join them.
"""

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from verillm.engine import canonical
from verillm.engine.canonical_math import compute_canonical_exp, compute_canonical_silu_table, compute_canonical_sin_cos
from verillm.engine.kernel_class import compute_battery_tensor
from verillm.engine.models import load_model
from verillm.engine.profiles import select_profile
from verillm.engine.torch_engine import TorchEngine
from verillm.errors import ConfigError
from verillm.spec.commitment import JobTrace
from verillm.spec.job import compute_model_id
from verillm.spec.types import Job, SamplingParams
from verillm.verifier.local import Party, check_pair, commit_runs, compute_member_jobs

WORKER_SCRIPT = Path(__file__).with_name("kernel_class_worker.py")
WORKER, MEMBER = Party(b"\x57" * 32), Party(b"\x4d" * 32)


def has_cpu_flag(flag: str) -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.exists() and f" {flag} " in f" {cpuinfo.read_text().split('flags', 2)[1].splitlines()[0]} "


def get_isa_settings() -> list[dict[str, str]]:
    """The ISA settings this CPU allows besides its best (the test process): no SIMD in ATen, oneDNN at SSE4.1,
    and on an AVX-512 machine ATen and oneDNN at AVX2."""
    settings = [{"ATEN_CPU_CAPABILITY": "default"}, {"ONEDNN_MAX_CPU_ISA": "SSE41"}]
    if has_cpu_flag("avx512f"):
        settings += [{"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}]
    return settings


def run_in_setting(tmp_path, model: str, setting: dict[str, str], job_specs, weights: torch.nn.Module | None = None) -> dict:
    """Run the worker script under ``setting``; ``weights``: a model whose weights it runs (the seeded tiny model's
    init draws other values without SIMD, so the test hands its weights over: the kernels are what is compared)."""
    name = "-".join(f"{k}={v}" for k, v in setting.items())
    jobs_file, out, state = tmp_path / f"jobs-{name}.json", tmp_path / f"out-{name}.npz", tmp_path / "weights.pt"
    jobs_file.write_text(json.dumps(job_specs))
    extra = []
    if weights is not None:
        torch.save(weights.state_dict(), state)
        extra = [str(state)]
    env = {**os.environ, **setting, "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, str(WORKER_SCRIPT), model, str(jobs_file), str(out), "canonical", *extra], env=env, check=True, timeout=1800)
    with np.load(out) as data:
        return {key: data[key] for key in data.files}


@pytest.fixture(scope="module")
def canonical_tiny():
    return load_model("tiny", "bfloat16", mode="canonical")


def _audit_across(model, tokenizer, manifest, specs, other, profile_name):
    """The other setting's traces as a worker's, this process as the member: every check must pass, every leaf equal."""
    model_id = compute_model_id(manifest)
    jobs = [Job(model_id, tuple(t), SamplingParams(temperature_milli=temp, seed=s), n, bytes([i]) * 32) for i, (t, n, temp, s) in enumerate(specs)]
    traces = [JobTrace(tuple(int(x) for x in other[f"tokens_{i}"]), other[f"fingerprints_{i}"], other[f"flags_{i}"]) for i in range(len(jobs))]
    here = TorchEngine(model, tokenizer, manifest, max_batch_size=2, num_threads=2).run(jobs)
    for mine, theirs in zip(here, traces, strict=True):  # whole traces, bit for bit (decode here with batch 2, 2 threads)
        assert mine.output_tokens == theirs.output_tokens
        assert mine.fingerprints.tobytes() == theirs.fingerprints.tobytes() and mine.flags.tobytes() == theirs.flags.tobytes()
    worker_runs = commit_runs(jobs, traces, manifest, WORKER)
    member_jobs = compute_member_jobs(worker_runs)
    verifier = TorchEngine(model, tokenizer, manifest, max_batch_size=4, num_threads=1)
    member_runs = commit_runs(member_jobs, verifier.run(member_jobs), manifest, MEMBER)
    results = [check_pair(w, m, manifest, select_profile(manifest, profile_name), 8) for w, m in zip(worker_runs, member_runs)]
    assert all(r.accepted for r in results), [r.reasons for r in results if not r.accepted]
    assert all(layer.max_error == 0 for r in results for layer in r.measurement.layers)


@pytest.mark.parametrize("setting", get_isa_settings(), ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_the_canonical_class_is_one_digest_under_every_isa_setting_and_audits_across_them_pass(tmp_path, canonical_tiny, tiny_prompts, setting):
    model, tokenizer, manifest = canonical_tiny
    assert manifest.kernel_class.startswith("canon1-kat1-")
    specs = [[list(p), 12, t, 5] for p in tiny_prompts[:3] for t in (0, 900)]
    other = run_in_setting(tmp_path, "tiny", setting, specs, weights=model)
    assert "refused" not in other, str(other.get("refused"))
    if "ATEN_CPU_CAPABILITY" in setting:  # the setting took effect: ATen really dispatched elsewhere
        assert str(other["cpu_capability"]).lower() == setting["ATEN_CPU_CAPABILITY"]
    assert str(other["kernel_class"]) == manifest.kernel_class
    assert bytes.fromhex(str(other["model_id"])) == compute_model_id(manifest)
    _audit_across(model, tokenizer, manifest, specs, other, "tiny")


def test_the_per_machine_form_stays_selectable_and_a_class_names_its_form(canonical_tiny):
    model, tokenizer, manifest = canonical_tiny
    machine = load_model("tiny", "bfloat16")[2]
    assert machine.kernel_class.startswith("cpu-kat1-") and compute_model_id(machine) != compute_model_id(manifest)
    assert load_model("tiny", "bfloat16", kernel_class=manifest.kernel_class)[2] == manifest  # a pinned class selects its form
    with pytest.raises(ConfigError, match="runs the machine kernels"):
        load_model("tiny", "bfloat16", mode="exact", kernel_class=manifest.kernel_class)
    with pytest.raises(ConfigError, match="this machine computes canon1-kat1-"):
        TorchEngine(model, tokenizer, dataclasses.replace(manifest, kernel_class="canon1-kat1-000000000000000000000000"))
    with pytest.raises(ConfigError, match="bf16 kernels"):
        load_model("tiny", "float32", mode="canonical")


def test_canonical_linear_sums_are_exact_and_rows_do_not_depend_on_the_batch():
    k, n = 1536, 96
    weight = compute_battery_tensor("t-w", (n, k), -12, 2)  # wide exponents: many values off the fp32 accumulation grid
    x = compute_battery_tensor("t-x", (40, k), -10, 6)
    out = canonical.compute_canonical_linear(x, weight)
    x_int, x_grid = canonical.compute_on_grid(x, canonical.X_BITS)
    w_int, w_grid = canonical.compute_on_grid(weight, canonical.compute_weight_bits(k))
    exact = (x_int.to(torch.int64) @ w_int.to(torch.int64).T).double() * x_grid * w_grid.T  # int64: exact by definition
    assert torch.equal(out, exact.float().to(torch.bfloat16))
    reversed_k = canonical.compute_canonical_linear(x.flip(-1), weight.flip(-1))  # another summation order
    assert torch.equal(reversed_k.view(torch.int16), out.view(torch.int16))
    threads = torch.get_num_threads()
    for rows in (slice(0, 1), slice(3, 5), slice(7, 40)):
        torch.set_num_threads(1)
        try:
            alone = canonical.compute_canonical_linear(x[rows].clone(), weight)
        finally:
            torch.set_num_threads(threads)  # later tests compare this process's engine with daemons at the default
        assert torch.equal(alone.view(torch.int16), out[rows].view(torch.int16))
    assert canonical.compute_weight_bits(576) == 23 and canonical.compute_weight_bits(1 << 13) == 20
    with pytest.raises(ConfigError, match="inner dimensions"):
        canonical.compute_weight_bits(1 << 22)


def test_canonical_norm_and_fingerprint_do_not_depend_on_order_or_batch():
    hidden = compute_battery_tensor("t-h", (33, 576), -8, 5)
    weight = compute_battery_tensor("t-nw", (576,), -2, 1)
    norm = canonical.compute_canonical_rms_norm(hidden, weight, 1e-5)
    permutation = torch.randperm(576, generator=torch.Generator().manual_seed(1))
    assert torch.equal(canonical.compute_canonical_rms_norm(hidden[:, permutation], weight[permutation], 1e-5).view(torch.int16), norm[:, permutation].view(torch.int16))
    assert torch.equal(canonical.compute_canonical_rms_norm(hidden[5:6], weight, 1e-5).view(torch.int16), norm[5:6].view(torch.int16))
    stock = (hidden.float() * torch.rsqrt(hidden.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(torch.bfloat16) * weight
    assert (norm.float() - stock.float()).abs().max() <= 2.0**-7 * stock.float().abs().max()  # the same function, rounded once
    projection = compute_battery_tensor("t-p", (576, 64), -3, 0, torch.float32)
    fingerprints = canonical.compute_canonical_fingerprints(hidden, projection)
    assert torch.equal(canonical.compute_canonical_fingerprints(hidden[:, permutation], projection[permutation]), fingerprints)
    assert torch.equal(canonical.compute_canonical_fingerprints(hidden[7:9], projection), fingerprints[7:9])
    reference = (hidden.double() @ projection.double()) / hidden.double().norm(dim=-1, keepdim=True)
    assert float((fingerprints.double() - reference).abs().max()) < 1e-5


def test_canonical_functions_are_accurate_and_nan_has_one_encoding():
    x = torch.arange(200_001, dtype=torch.float64).mul_(745.0 / 200_000).sub_(745.0)
    got, want = compute_canonical_exp(x), torch.exp(x)
    assert float(((got - want).abs() / want.clamp_min(1e-300))[x > -700].max()) < 1e-15 and float(got[x < -700].abs().max()) == 0.0
    assert compute_canonical_exp(torch.tensor([-math.inf, 0.0, 800.0], dtype=torch.float64)).tolist() == [0.0, 1.0, math.inf]
    angles = torch.arange(100_000, dtype=torch.float64).mul_(0.731)
    sin, cos = compute_canonical_sin_cos(angles)
    assert float((sin - angles.sin()).abs().max()) < 1e-11 and float((cos - angles.cos()).abs().max()) < 1e-11
    table = compute_canonical_silu_table()
    inputs = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    finite = inputs.float().isfinite()
    stock = torch.nn.functional.silu(inputs.float()).to(torch.bfloat16)
    assert float((table.float() - stock.float())[finite].abs().max()) == 0.0 or (table.view(torch.int16) == stock.view(torch.int16))[finite].float().mean() > 0.999
    assert set(table.view(torch.int16)[inputs.float().isnan()].tolist()) == {0x7FC0}


def test_a_model_with_no_canonical_form_is_refused_and_left_unpatched(canonical_tiny):
    model, _, _ = canonical_tiny
    mlp = model.get_decoder().layers[-1].mlp  # the last module visited: everything before it was patched
    original = mlp.act_fn
    mlp.act_fn = torch.nn.GELU()
    try:
        with pytest.raises(ConfigError, match="SiLU activation only"):
            with canonical.canonical_modules(model):
                pass
    finally:
        mlp.act_fn = original
    assert not any("forward" in m.__dict__ for m in model.modules())
    assert all(type(m.act_fn).__name__ != "CanonicalSiLU" for m in model.modules() if hasattr(m, "act_fn"))


@pytest.mark.slow
@pytest.mark.smollm2
@pytest.mark.parametrize("setting", get_isa_settings()[:1], ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_smollm2_canonical_class_is_one_digest_and_audits_across_settings_pass(tmp_path, smollm2_prompts, setting):
    model, tokenizer, manifest = load_model("smollm2", "bfloat16", mode="canonical")
    specs = [[list(smollm2_prompts[0]), 8, 0, 0], [list(smollm2_prompts[1]), 8, 900, 3]]
    other = run_in_setting(tmp_path, "smollm2", setting, specs)
    assert str(other["kernel_class"]) == manifest.kernel_class
    _audit_across(model, tokenizer, manifest, specs, other, "smollm2")
