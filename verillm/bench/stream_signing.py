"""What signing a stream costs per token: `verillm bench stream-signing [--json PATH]`.

A worker signs every chunk it streams (verillm/spec/stream.py): per token one keccak of the running
hash, per chunk one secp256k1 signature; a gateway and a client each recompute the running hash and
recover the signer per chunk. This times those spec functions (median CPU time over ``--repeats`` streams of
``--tokens`` tokens) at chunk sizes of 1, 4 and 16 tokens (the native stream batches whatever the
engine sampled while the last chunk was written; 1 is a worker that keeps up token by token), on the
secp256k1 backend eth_keys uses here (coincurve when installed, its pure-Python one otherwise;
``--backend`` picks), and the bytes a signed chunk adds to an SSE event.
"""

import json
import os
import statistics
import time

import click

from verillm.bench.tables import format_table, write_json
from verillm.spec.receipt import SigningDomain
from verillm.spec.stream import EMPTY_PREFIX_HASH, StreamPrefix, StreamState, compute_prefix_hash, process_stream_chunk, sign_prefix
from verillm.wire import stream_chunk_to_json

CHUNK_SIZES = (1, 4, 16)
DOMAIN = SigningDomain(31337, b"\x11" * 20)


def _use_backend(name: str) -> str:
    """Make eth_keys sign with ``name`` ("auto": its default, coincurve when installed); return the backend's
    class name. eth_keys reads ECC_BACKEND_CLASS at every operation."""
    from eth_keys.backends import get_backend

    if name != "auto":
        os.environ["ECC_BACKEND_CLASS"] = {"coincurve": "eth_keys.backends.CoinCurveECCBackend",
                                           "native": "eth_keys.backends.NativeECCBackend"}[name]
    return type(get_backend()).__name__


def _sign_stream(key: bytes, worker: bytes, job_hash: bytes, tokens: list[int], size: int) -> list:
    prefix, chunks = StreamPrefix(job_hash, 0, EMPTY_PREFIX_HASH, worker), []
    for start in range(0, len(tokens), size):
        part = tokens[start:start + size]
        prefix = StreamPrefix(job_hash, prefix.token_count + len(part), compute_prefix_hash(prefix.prefix_hash, part), worker)
        chunks.append((tuple(part), sign_prefix(prefix, key, DOMAIN)))
    return chunks


def _check_stream(job_hash: bytes, chunks: list) -> None:
    state = StreamState(job_hash)
    for part, signed in chunks:
        state = process_stream_chunk(state, part, signed, DOMAIN)


def _median_s(action, repeats: int) -> float:
    """Median CPU seconds of this process per call of ``action`` (CPU, not wall time: what the node pays,
    and less swayed by other work on a shared machine)."""
    samples = []
    for _ in range(repeats):
        start = time.process_time()
        action()
        samples.append(time.process_time() - start)
    return statistics.median(samples)


def measure_stream_signing(token_count: int = 256, repeats: int = 5) -> list[dict]:
    """Return one row per chunk size: µs per token to sign (worker) and to check (gateway, client)."""
    from eth_keys import keys

    key = os.urandom(32)
    worker = keys.PrivateKey(key).public_key.to_canonical_address()
    job_hash, tokens = os.urandom(32), [int.from_bytes(os.urandom(2), "big") for _ in range(token_count)]
    hash_s = _median_s(lambda: compute_prefix_hash(EMPTY_PREFIX_HASH, tokens), repeats)
    rows = []
    for size in CHUNK_SIZES:
        chunks = _sign_stream(key, worker, job_hash, tokens, size)
        sign_s = _median_s(lambda: _sign_stream(key, worker, job_hash, tokens, size), repeats)
        check_s = _median_s(lambda: _check_stream(job_hash, chunks), repeats)
        extra = len(json.dumps(stream_chunk_to_json(*chunks[1]))) - len(json.dumps(list(chunks[1][0])))
        rows.append({"chunk_tokens": size, "tokens": token_count, "running_hash_us_per_token": round(hash_s / token_count * 1e6, 1),
                     "sign_us_per_token": round(sign_s / token_count * 1e6, 1), "check_us_per_token": round(check_s / token_count * 1e6, 1),
                     "signed_chunk_extra_bytes": extra})
    return rows


@click.command("stream-signing")
@click.option("--tokens", "token_count", type=int, default=256, show_default=True, help="Tokens per timed stream.")
@click.option("--repeats", type=int, default=5, show_default=True, help="Timed streams per row; medians are reported.")
@click.option("--backend", type=click.Choice(["auto", "coincurve", "native"]), default="auto", show_default=True,
              help="eth_keys' secp256k1 backend (auto: coincurve when installed).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def stream_signing_bench(token_count, repeats, backend, json_path):
    """What a signed stream costs per token: the worker's signatures, the gateway's and client's checks."""
    used = _use_backend(backend)
    rows = measure_stream_signing(token_count, repeats)
    headers = list(rows[0])
    click.echo(f"secp256k1 backend: {used}")
    click.echo(format_table(headers, [[row[h] for h in headers] for row in rows]))
    write_json(json_path, {"backend": used, "rows": rows})
