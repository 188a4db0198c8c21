"""Time to first token through a node's streaming API (`verillm bench node`'s TTFT section).

C streaming `/v1/completions` requests at once (the same batch the throughput pass sends),
R/C times: per request, the time from sending it to the first SSE chunk that carries text,
and to the last chunk (the one with the receipt). Real streaming makes the first much
smaller than the second; a node that sends everything at the end makes them equal.
"""

import asyncio
import json
import time

import aiohttp


async def stream_one(session: aiohttp.ClientSession, url: str, model: str, prompt: list[int], max_new_tokens: int) -> tuple[float, float]:
    """Return (seconds to the first text chunk, seconds to the last chunk) of one streamed completion."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0, "stream": True}
    started, first = time.perf_counter(), None
    async with session.post(url + "/v1/completions", json=body) as response:
        response.raise_for_status()
        async for raw in response.content:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"stream error: {chunk['error']}")
            if first is None and any(c.get("text") for c in chunk.get("choices", [])):
                first = time.perf_counter() - started
    total = time.perf_counter() - started
    return (total if first is None else first), total


async def measure_ttft(session: aiohttp.ClientSession, url: str, model: str, prompts: list[list[int]], concurrency: int,
                       max_new_tokens: int) -> dict:
    """Stream ``prompts``, ``concurrency`` at a time; return TTFT and total-time percentiles in ms."""
    firsts, totals = [], []
    for start in range(0, len(prompts), concurrency):
        batch = prompts[start : start + concurrency]
        for first, total in await asyncio.gather(*(stream_one(session, url, model, p, max_new_tokens) for p in batch)):
            firsts.append(first)
            totals.append(total)
    return {"requests": len(firsts), "p50_ttft_ms": _percentile_ms(firsts, 0.5), "p99_ttft_ms": _percentile_ms(firsts, 0.99),
            "p50_total_ms": _percentile_ms(totals, 0.5), "p99_total_ms": _percentile_ms(totals, 0.99)}


def _percentile_ms(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 2) if ordered else 0.0


def format_ttft(ttft: dict) -> str:
    """One line for the bench's output."""
    return (f"streaming ({ttft['requests']} requests): time to first token p50 {ttft['p50_ttft_ms']:.1f} ms, p99 {ttft['p99_ttft_ms']:.1f} ms; "
            f"whole completion p50 {ttft['p50_total_ms']:.1f} ms, p99 {ttft['p99_total_ms']:.1f} ms")
