"""`verillm bench node --profile` and the daemon's loop-thread profiler (node/profiling.py), for real."""

import asyncio
import hashlib
import json
import signal

from click.testing import CliRunner

from verillm.cli import cli
from verillm.jsonsafe import load_json

from verillm.node.profiling import COMPONENT_ROOTS, PROFILE_ENV, LoopProfiler, compute_root_codes, install_profile_toggle


def test_every_component_root_resolves_to_a_function():
    codes = compute_root_codes()
    assert len(codes) == sum(len(roots) for roots in COMPONENT_ROOTS.values())
    assert set(codes.values()) == set(COMPONENT_ROOTS)


def test_the_profiler_charges_a_root_and_what_it_calls_to_its_component():
    body = json.dumps({"prompt": ["x" * 50] * 20_000}).encode()
    profiler = LoopProfiler(compute_root_codes())
    profiler.start()
    for _ in range(2):
        load_json(body)  # a component root: json.loads inside it is charged to it
    hashlib.sha256(bytes(20_000_000)).digest()  # no root encloses this C call: charged by its caller's module
    report = profiler.stop()
    components = report["components"]
    assert components["json decode + depth guard"] > 0.005
    assert components["other"] > 0.005
    assert report["corrected_cpu_s"] <= report["charged_cpu_s"] <= report["thread_cpu_s"]
    assert 0 < report["event_bias_s"] < 1e-4


def test_without_the_variable_no_signal_handler_is_installed(monkeypatch):
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    loop = asyncio.new_event_loop()
    try:
        assert install_profile_toggle(loop) is False
        assert loop.remove_signal_handler(signal.SIGUSR1) is False
    finally:
        loop.close()


def test_bench_node_profile_attributes_the_daemons_loop_thread(tmp_path):
    out = tmp_path / "node.json"
    args = ["bench", "node", "-c", "2", "-r", "4", "--prompt-tokens", "8", "--max-new-tokens", "4", "--profile", "--json", str(out)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["daemon"]["errors"] == report["in_process"]["errors"] == 0
    assert report["daemon_batches"]["jobs"] == 4
    assert report["daemon_threads"]["loop_thread_cpu_ms_per_job"] > 0 and report["client_cpu_ms_per_job"] > 0
    profile = report["loop_profile"]
    assert profile["jobs"] == 4
    components = profile["components_ms_per_job"]
    for name in ("sqlite receipt commit (synchronous=FULL)", "json decode + depth guard", "response build (text, receipt JSON, read token)",
                 "engine queue, batching, thread handoff", "aiohttp HTTP parse, routing, write"):
        assert components.get(name, 0) > 0, (name, components)
    assert 0 < profile["corrected_cpu_ms_per_job"] <= profile["profiled_loop_cpu_ms_per_job"]
    assert "event-loop thread by component" in result.output
