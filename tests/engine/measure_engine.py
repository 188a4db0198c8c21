"""Measure the reference engine: prefill time, decode time per token, capture overhead, and
decode-vs-prefill fingerprint noise per committed layer. Not a test (pytest does not collect it).

    .venv/bin/python tests/engine/measure_engine.py --model tiny --prompt 512 --new 128
    .venv/bin/python tests/engine/measure_engine.py --model smollm2 --prompt 128 --new 64 --dtypes float32,bfloat16
    (--clock cpu: process CPU time instead of wall time; steadier when other jobs share the cores)

Prints a table and one JSON line. Capture overhead = 1 − (tokens/s with capture) / (tokens/s
without), from the best of ``--repeats`` interleaved runs of each.
"""

import argparse
import dataclasses
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

from verillm.engine.models import load_model  # noqa: E402
from verillm.engine.torch_engine import TorchEngine  # noqa: E402
from verillm.spec.job import compute_verification_job  # noqa: E402
from verillm.spec.types import Job, SamplingParams  # noqa: E402


def build_engines(name: str, dtype: str, threads: int):
    model, tokenizer, manifest = load_model(name, dtype)
    # A stop token the model never emits, so every run decodes exactly --new tokens.
    manifest = dataclasses.replace(manifest, stop_tokens=(manifest.vocab_size - 1,))
    return [TorchEngine(model, tokenizer, manifest, num_threads=threads, capture=capture) for capture in (True, False)]


SAMPLING = SamplingParams()


def make_job(engine, prompt_len: int, new_tokens: int) -> Job:
    rng = np.random.default_rng(0)
    tokens = tuple(int(t) for t in rng.integers(4, engine.manifest.vocab_size - 1, prompt_len))
    return Job(model_id=engine.model_id, input_tokens=tokens, sampling=SAMPLING, max_new_tokens=new_tokens, nonce=b"\x00" * 32)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
CLOCK = CLOCKS["wall"]


def time_run(engine, job) -> float:
    start = CLOCK()
    engine.run([job])
    return CLOCK() - start


def measure_speed(engines, prompt_len: int, new_tokens: int, repeats: int) -> dict:
    capture, plain = engines
    full, one = make_job(capture, prompt_len, new_tokens), make_job(capture, prompt_len, 1)
    best = {key: float("inf") for key in ("prefill_on", "prefill_off", "full_on", "full_off")}
    for _ in range(repeats):
        best["prefill_on"] = min(best["prefill_on"], time_run(capture, one))
        best["prefill_off"] = min(best["prefill_off"], time_run(plain, dataclasses.replace(one, model_id=plain.model_id)))
        best["full_on"] = min(best["full_on"], time_run(capture, full))
        best["full_off"] = min(best["full_off"], time_run(plain, dataclasses.replace(full, model_id=plain.model_id)))
    decode_on = (best["full_on"] - best["prefill_on"]) / (new_tokens - 1)
    decode_off = (best["full_off"] - best["prefill_off"]) / (new_tokens - 1)
    return {
        "prefill_s": best["prefill_on"],
        "prefill_no_capture_s": best["prefill_off"],
        "decode_ms_per_token": 1000 * decode_on,
        "decode_no_capture_ms_per_token": 1000 * decode_off,
        "decode_capture_overhead": 1 - decode_off / decode_on,
        "end_to_end_capture_overhead": 1 - best["full_off"] / best["full_on"],
    }


def measure_noise(engine, prompt_len: int, new_tokens: int) -> list[float]:
    job = make_job(engine, prompt_len, new_tokens)
    trace = engine.run([job])[0]
    replay = engine.run([compute_verification_job(job, trace.output_tokens, b"\x01" * 32)])[0]
    shared = trace.num_positions
    return [float(v) for v in np.abs(replay.fingerprints[:shared] - trace.fingerprints).max(axis=(0, 2))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="cpu: process CPU time, steadier on a shared box with --threads 1")
    parser.add_argument("--temperature-milli", type=int, default=0, help="0 = greedy; > 0 samples with top-k 50")
    global CLOCK, SAMPLING
    args = parser.parse_args()
    CLOCK = CLOCKS[args.clock]
    if args.temperature_milli:
        SAMPLING = SamplingParams(temperature_milli=args.temperature_milli, top_k=50, seed=1)
    results = []
    for dtype in args.dtypes.split(","):
        engines = build_engines(args.model, dtype, args.threads)
        row = {"model": args.model, "dtype": dtype, "prompt": args.prompt, "new": args.new, "threads": args.threads, "clock": args.clock, "temperature_milli": args.temperature_milli}
        row.update(measure_speed(engines, args.prompt, args.new, args.repeats))
        row["decode_vs_prefill_max_abs_df"] = dict(zip(map(str, engines[0].manifest.committed_layers), measure_noise(engines[0], args.prompt, args.new)))
        results.append(row)
    for row in results:
        print(
            f"{row['model']:8} {row['dtype']:9} P={row['prompt']} N={row['new']} threads={row['threads']} clock={row['clock']} T={row['temperature_milli']}m  "
            f"prefill {row['prefill_s'] * 1000:.1f} ms (no capture {row['prefill_no_capture_s'] * 1000:.1f})  "
            f"decode {row['decode_ms_per_token']:.2f} ms/tok (no capture {row['decode_no_capture_ms_per_token']:.2f})  "
            f"overhead decode {100 * row['decode_capture_overhead']:.1f}% end-to-end {100 * row['end_to_end_capture_overhead']:.1f}%  "
            f"max|Δf| {row['decode_vs_prefill_max_abs_df']}"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
