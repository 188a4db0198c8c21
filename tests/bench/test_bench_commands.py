"""The benchmark and calibration commands, run for real on the tiny model at small sizes."""

import json

from click.testing import CliRunner

from verillm.cli import cli
from verillm.spec.policy import ToleranceProfile


def invoke(*args):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_calibrate_writes_a_profile_that_loads(tmp_path):
    out = tmp_path / "profile.json"
    output = invoke("calibrate", "--model", "tiny", "--jobs", "2", "--out", str(out))
    profile = ToleranceProfile.from_json(out.read_text())
    assert [t.layer for t in profile.layers] == [1, 2, 4]
    assert all(0 < t.max_cell_error < 1e-3 and 0 < t.rms_error <= t.max_cell_error for t in profile.layers)
    assert profile.provenance["honest_audits"] == 2 * 2 * 8
    for tolerance in profile.layers:
        bounds = profile.provenance["bounds"][str(tolerance.layer)]
        assert tolerance.max_cell_error >= 4.0 * bounds["max_cell_error"]["observed_max"] > 0
        assert tolerance.rms_error >= 4.0 * bounds["rms_error"]["observed_max"] > 0
    assert "honest cells per layer" in output and "tail bound" in output


def test_calibrate_check_passes_the_shipped_profile_and_flags_a_stale_one(tmp_path):
    import dataclasses

    from verillm.engine.models import load_model
    from verillm.engine.profiles import get_profile_path
    from verillm.spec.job import compute_model_id
    from verillm.engine.profiles import load_profile

    output = invoke("calibrate", "--model", "tiny", "--jobs", "2", "--check", "--profile-dir", str(tmp_path))
    assert "ok: 32 honest audits; worst: layer" in output and not list(tmp_path.iterdir())  # writes nothing
    # A profile fitted to some other engine: thresholds a tenth of the shipped ones, where the node looks first.
    shipped = load_profile("tiny", "float32")
    stale = dataclasses.replace(shipped, layers=tuple(dataclasses.replace(t, max_cell_error=t.max_cell_error / 10, rms_error=t.rms_error / 10) for t in shipped.layers))
    get_profile_path(tmp_path, compute_model_id(load_model("tiny", "float32")[2]), "float32").write_text(stale.to_json())
    result = CliRunner().invoke(cli, ["calibrate", "--model", "tiny", "--jobs", "2", "--check", "--profile-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "STALE: 32 honest audits" in result.output and f"recalibrate: verillm calibrate --model tiny --dtype fp32 --profile-dir {tmp_path.resolve()}" in result.output


def test_detect_reports_the_schema_and_catches_attacks(tmp_path):
    out = tmp_path / "detect.json"
    invoke("bench", "detect", "--model", "tiny", "--jobs", "1", "--attack-jobs", "2", "--attacks", "int8,truncate,wrong_seed", "--max-new-tokens", "8", "--json", str(out))
    report = json.loads(out.read_text())
    assert report["model"] == "tiny" and report["dtype"] == "float32"
    assert report["honest"]["audits"] == 2 * 8 and report["honest"]["false_rejections"] == 0
    assert set(report["attacks"]) == {"int8", "truncate", "wrong_seed"}
    for name, attack in report["attacks"].items():
        assert attack["audits"] == 2
        assert attack["detected"] == attack["detected_right_reason"] == 2, (name, attack)


def test_cost_reports_every_metric(tmp_path):
    out = tmp_path / "cost.json"
    invoke("bench", "cost", "--model", "tiny", "--prompt-tokens", "24", "--output-tokens", "16", "--repeats", "1", "--json", str(out))
    report = json.loads(out.read_text())
    for key in ("verify_over_generate", "commit_overhead", "bytes_per_token_per_layer", "check_ms_per_position", "prompt_tokens", "output_tokens"):
        assert key in report
    assert report["prompt_tokens"] == 24 and report["output_tokens"] == 16
    assert 0 < report["verify_over_generate"] < 1
    assert 2 < report["bytes_per_token_per_layer"] < 6
    assert 0 < report["check_ms_per_position"] < 50


def test_detect_in_exact_mode_has_zero_tolerance_and_catches_the_new_attacks(tmp_path):
    out = tmp_path / "detect-bf16.json"
    invoke("bench", "detect", "--model", "tiny", "--dtype", "bf16", "--jobs", "1", "--attack-jobs", "2", "--attacks", "kv_fp8,speculative", "--max-new-tokens", "8", "--json", str(out))
    report = json.loads(out.read_text())
    assert report["kernel_class"].startswith("cpu-kat") and report["dtype"] == "bfloat16"
    assert report["honest"]["audits"] == 2 * 8 and report["honest"]["false_rejections"] == 0
    assert report["honest"]["max_threshold_ratio"] == 0  # every honest leaf bit-identical
    assert any("attention=eager" in config for config in report["honest"]["configurations"])
    for name, attack in report["attacks"].items():
        assert attack["detected"] == attack["detected_right_reason"] == attack["audits"] > 0, (name, attack)


def test_cost_in_exact_mode_reports_overhead_and_regenerations(tmp_path):
    out = tmp_path / "cost-bf16.json"
    invoke("bench", "cost", "--model", "tiny", "--dtype", "bf16", "--prompt-tokens", "24", "--output-tokens", "16", "--repeats", "1", "--regeneration-jobs", "2", "--json", str(out))
    report = json.loads(out.read_text())
    assert report["mode"] == "exact" and report["retained_bytes_per_generated_token"] == 0
    assert report["exact_generate_s_b1"] > 0 and report["stock_generate_s_b8"] > 0 and 0 < report["verify_over_generate"] < 1
    for batch in ("b1", "b8"):
        rows = report["components"][batch]
        assert [r["component"] for r in rows] == ["stock", "linears", "attention", "capture", "commit"]
        assert abs(sum(r["over_stock"] for r in rows) - report[f"exact_overhead_{batch}"]) < 1e-9
    assert report["rebuild_positions"] == 1024 and report["rebuild_s_1024"] > 0
    assert report["regeneration_jobs"] == 2 and 0 <= report["regeneration_jobs_rate"] <= 1
    assert report["canonical_pass_overhead"] >= report["verify_over_generate"] * 0.99


def test_device_check_runs_every_step_on_the_cpu(tmp_path):
    """`bench device` (written for a lent GPU) dry-runs on the CPU: class, audits, timings, cross-device."""
    out = tmp_path / "device.json"
    output = invoke("bench", "device", "--device", "cpu", "--models", "tiny", "--audits", "3", "--cross-jobs", "2", "--prompt-tokens", "8", "--output-tokens", "4", "--repeats", "1", "--json", str(out))
    report = json.loads(out.read_text())
    exact = report["models"]["tiny"]["exact"]
    assert exact["kernel_class"].startswith("cpu-kat") and exact["audits"] == 3
    assert exact["false_rejections"] == 0 and exact["differing_positions"] == 0
    assert set(report["models"]["tiny"]["wall"]) == {"tolerance", "exact", "exact_over_stock"}
    cross = report["cross_device_fp32"]["cpu_worker_cpu_member"]
    assert cross["jobs"] == 2 and cross["rejected"] == 0 and 0 <= cross["largest_error_share_max"] < 1
    assert "cpu-kat" in output
