"""Cost of commitments on vLLM: throughput lost to capture, and verification over generation.

One engine, one job (batch 1, greedy, `prompt_tokens` in / `output_tokens` out):
- plain: the capture hooks removed, vLLM generating on its own (its greedy step is the spec's);
- committed: hooks installed, the trace collected and its Merkle commitment built;
- verify: the verification job (prompt ‖ output, 1 new token) on the same engine, committed.
Each is timed `repeats` times, alternating, and the median is reported.

    commit_overhead      = 1 − (tokens/s committed) / (tokens/s plain)
    capture_busy_share   = time inside the capture hooks and sampler / committed generation time
                           (the capture's own cost, measured inside vLLM's worker; on a loaded
                           machine it is steadier than the difference of two wall times)
    verify_over_generate = verify time / committed generation time
    *_cpu                = the same from CPU time of vLLM's worker process + this process

Run: `python -m verillm.engine.vllm_bench --model smollm2 --prompt-tokens 512 --output-tokens 512`
(in the vLLM environment), or call `measure_vllm_cost` (what `verillm bench cost --engine vllm`
does). Prints a table and one JSON line.
"""

import argparse
import json
import statistics
import time

from verillm.engine.models import TINY_CORPUS
from verillm.errors import ConfigError
from verillm.spec.commitment import compute_commitment
from verillm.spec.job import compute_verification_job
from verillm.spec.types import Job, SamplingParams


def build_bench_prompt(engine, prompt_tokens: int) -> tuple[int, ...]:
    """Return ``prompt_tokens`` token ids of plain English text (the fixed corpus, repeated)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(engine.model_dir)
    ids = tokenizer.encode(TINY_CORPUS, add_special_tokens=False)
    stops = set(engine.manifest.stop_tokens)
    ids = [t for t in ids if t not in stops]
    repeated = (ids * (prompt_tokens // len(ids) + 1))[:prompt_tokens]
    return tuple(repeated)


def _timed(action) -> tuple[float, object]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def _cpu_timed(engine, action) -> tuple[float, float, object]:
    """Return (wall s, CPU s of vLLM's worker process + this process, result) of ``action``.

    CPU time counts only our processes' cycles, so it is steadier than wall time on a shared
    machine (vLLM's scheduler process is not counted; it does the same work in both modes).
    """
    worker_before, main_before = engine.worker_info()["process_cpu_s"], time.process_time()
    wall, result = _timed(action)
    cpu = engine.worker_info()["process_cpu_s"] - worker_before + time.process_time() - main_before
    return wall, cpu, result


def _run_committed(engine, job: Job):
    trace = engine.run([job])[0]
    compute_commitment(trace, tuple(engine.manifest.committed_layers))
    return trace


def _timed_plain(engine, job: Job) -> tuple[float, float, object]:
    """Time ``job`` with the hooks removed (installing/removing them is outside the timing)."""
    engine.set_capture(False)
    try:
        return _cpu_timed(engine, lambda: engine.run([job])[0])
    finally:
        engine.set_capture(True)


def measure_engine_cost(engine, prompt_tokens: int, output_tokens: int, repeats: int = 3) -> dict:
    """Measure ``engine`` (a capturing VllmEngine) on one greedy job; see the module doc."""
    if repeats < 1:
        raise ConfigError("repeats must be at least 1")
    job = Job(engine.model_id, build_bench_prompt(engine, prompt_tokens), SamplingParams(), output_tokens, b"\x00" * 32)
    _run_committed(engine, job)  # warm-up: first-call allocations and lazy imports
    wall = {"plain": [], "committed": [], "verify": []}
    cpu = {"plain": [], "committed": [], "verify": []}
    busy, prompt_flags = [], []
    for _ in range(repeats):
        plain_wall, plain_cpu, plain_trace = _timed_plain(engine, job)  # leaves a fresh capture installed: busy_s = 0
        committed_wall, committed_cpu, trace = _cpu_timed(engine, lambda: _run_committed(engine, job))
        info = engine.worker_info()
        busy.append(info["capture_busy_s"])
        prompt_flags.append(info["capture_prompt_flags_s"])
        if plain_trace.output_tokens != trace.output_tokens:
            raise ConfigError("plain and committed runs emitted different tokens; the comparison would be meaningless")
        verification = compute_verification_job(job, trace.output_tokens, b"\x01" * 32)
        verify_wall, verify_cpu, _ = _cpu_timed(engine, lambda: _run_committed(engine, verification))
        for name, w, c in (("plain", plain_wall, plain_cpu), ("committed", committed_wall, committed_cpu), ("verify", verify_wall, verify_cpu)):
            wall[name].append(w)
            cpu[name].append(c)
    generated = len(trace.output_tokens)
    plain_s, committed_s, verify_s = (statistics.median(wall[name]) for name in ("plain", "committed", "verify"))
    plain_cpu, committed_cpu, verify_cpu = (statistics.median(cpu[name]) for name in ("plain", "committed", "verify"))
    busy_s, prompt_flags_s = statistics.median(busy), statistics.median(prompt_flags)
    return {
        "prompt_tokens": prompt_tokens,
        "output_tokens": generated,
        "repeats": repeats,
        "generate_plain_s": plain_s,
        "generate_committed_s": committed_s,
        "verify_s": verify_s,
        "tokens_per_s_plain": generated / plain_s,
        "tokens_per_s_committed": generated / committed_s,
        "commit_overhead": 1 - plain_s / committed_s,
        "verify_over_generate": verify_s / committed_s,
        "verify_over_plain_generate": verify_s / plain_s,
        "generate_plain_cpu_s": plain_cpu,
        "generate_committed_cpu_s": committed_cpu,
        "verify_cpu_s": verify_cpu,
        "commit_overhead_cpu": 1 - plain_cpu / committed_cpu,
        "verify_over_generate_cpu": verify_cpu / committed_cpu,
        "capture_busy_s": busy_s,
        "capture_busy_share": busy_s / committed_s,
        "capture_prompt_flags_s": prompt_flags_s,
        "capture_per_step_ms": 1000 * (busy_s - prompt_flags_s) / generated,
        "samples_wall_s": wall,
        "samples_cpu_s": cpu,
        "samples_capture_busy_s": busy,
    }


def measure_vllm_cost(model: str = "tiny", prompt_tokens: int = 512, output_tokens: int = 512, dtype: str = "float32", repeats: int = 3, **engine_kw) -> dict:
    """Start a vLLM engine for ``model`` and measure it (see the module doc); returns a dict.

    Keys include "verify_over_generate" and "commit_overhead" (fractions, not percent).
    """
    import vllm

    from verillm.engine.vllm_engine import build_vllm_engine

    engine_kw.setdefault("max_batch_size", 1)
    engine_kw.setdefault("max_model_len", prompt_tokens + output_tokens + 8)
    engine = build_vllm_engine(model, dtype, **engine_kw)
    try:
        result = measure_engine_cost(engine, prompt_tokens, output_tokens, repeats)
        info = engine.worker_info()
    finally:
        engine.close()
    return {"engine": "vllm", "model": model, "dtype": dtype, "device": "cpu", "vllm_version": vllm.__version__, "worker_torch_threads": info["torch_threads"], **result}


def format_table(result: dict) -> str:
    """Return the human-readable table for one measurement."""
    rows = [
        ("model / dtype", f"{result['model']} / {result['dtype']} on {result['device']} (vLLM {result['vllm_version']}, {result['worker_torch_threads']} worker thread(s))"),
        ("job", f"batch 1, greedy, {result['prompt_tokens']} in / {result['output_tokens']} out, median of {result['repeats']}"),
        ("generate, plain vLLM", f"{result['generate_plain_s']:.3f} s  ({result['tokens_per_s_plain']:.2f} tok/s)"),
        ("generate, captured + committed", f"{result['generate_committed_s']:.3f} s  ({result['tokens_per_s_committed']:.2f} tok/s)"),
        ("commit overhead (throughput lost)", f"{100 * result['commit_overhead']:.2f} %"),
        ("  time inside hooks + sampler", f"{result['capture_busy_s']:.3f} s  ({100 * result['capture_busy_share']:.2f} % of committed generation)"),
        ("    of which prompt-position logits + flags", f"{result['capture_prompt_flags_s']:.3f} s"),
        ("    the rest, per engine step", f"{result['capture_per_step_ms']:.3f} ms"),
        ("verify (prefill replay, committed)", f"{result['verify_s']:.3f} s"),
        ("verify / generate", f"{100 * result['verify_over_generate']:.2f} %"),
        ("CPU s (worker + main): plain / committed / verify", f"{result['generate_plain_cpu_s']:.3f} / {result['generate_committed_cpu_s']:.3f} / {result['verify_cpu_s']:.3f}"),
        ("commit overhead, CPU time", f"{100 * result['commit_overhead_cpu']:.2f} %"),
        ("verify / generate, CPU time", f"{100 * result['verify_over_generate_cpu']:.2f} %"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", choices=["tiny", "smollm2"])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--output-tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu-threads", default=None, help="VLLM_CPU_OMP_THREADS_BIND, e.g. 0-1 (default: vLLM's auto)")
    args = parser.parse_args(argv)
    result = measure_vllm_cost(args.model, args.prompt_tokens, args.output_tokens, args.dtype, args.repeats, cpu_threads=args.cpu_threads)
    print(format_table(result))
    print(json.dumps(result))


if __name__ == "__main__":  # vLLM starts its engine process with spawn: keep the guard
    main()
