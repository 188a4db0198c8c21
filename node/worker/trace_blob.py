"""The retained trace blob: what a worker keeps of a job to rebuild its tree and open any leaf.

Storage, not protocol: the commitment (`verillm/spec/commitment.py`) fixes what the root
commits to; this format only has to give the same `JobTrace` back. Layout:

    header   5 × u32 big-endian: version, positions, layers, dims, output tokens
    body     DEFLATE(fingerprint byte planes ‖ 2-bit flags ‖ u32 output tokens)

Fingerprints are byte-plane shuffled (sign/exponent bytes together, then each mantissa byte),
which compresses about twice as well as raw float32. The tree itself is not kept: it is
rebuilt from this blob when an opening is asked for.
"""

import struct
import zlib

import numpy as np

from verillm.errors import EncodingError
from verillm.spec.commitment import JobTrace

BLOB_VERSION = 1
HEADER = struct.Struct(">5I")
MAX_BLOB_VALUES = 1 << 28
"""Most fingerprint values a retained blob may claim (1 GiB as float32): a header past it is corrupt."""


def encode_trace_blob(trace: JobTrace) -> bytes:
    """Pack what a worker must keep to rebuild its tree and open any leaf, losslessly."""
    positions, layers, dims = trace.fingerprints.shape
    planes = np.ascontiguousarray(trace.fingerprints.astype(">f4")).view(np.uint8).reshape(-1, 4).T.tobytes()
    flags = np.packbits(np.unpackbits(trace.flags.astype(np.uint8)[:, None], axis=1)[:, 6:].reshape(-1)).tobytes()
    outputs = np.asarray(trace.output_tokens, dtype=">u4").tobytes()
    header = HEADER.pack(BLOB_VERSION, positions, layers, dims, len(trace.output_tokens))
    return header + zlib.compress(planes + flags + outputs, 6)


def decode_trace_blob(blob: bytes) -> JobTrace:
    """Inverse of `encode_trace_blob`; raise EncodingError if the blob is corrupt.

    The node wrote the blob itself, but a store survives disks and copies: a damaged one
    must fail as a typed error before numpy sees it, and never decompress into more memory
    than its header claims.
    """
    if len(blob) < HEADER.size:
        raise EncodingError(f"trace blob is {len(blob)} bytes, shorter than its {HEADER.size}-byte header")
    version, positions, layers, dims, outputs = HEADER.unpack(blob[:HEADER.size])
    if version != BLOB_VERSION:
        raise EncodingError(f"trace blob version {version} is not {BLOB_VERSION}")
    count = positions * layers * dims
    if count > MAX_BLOB_VALUES or outputs > positions + 1:
        raise EncodingError(f"trace blob header claims {positions}×{layers}×{dims} values and {outputs} outputs")
    flag_bytes = (2 * positions + 7) // 8
    body = _inflate_exactly(blob[HEADER.size:], 4 * count + flag_bytes + 4 * outputs)
    planes = np.frombuffer(body[: 4 * count], dtype=np.uint8).reshape(4, count).T.copy()
    fingerprints = planes.view(">f4").astype(np.float32).reshape(positions, layers, dims)
    bits = np.unpackbits(np.frombuffer(body[4 * count : 4 * count + flag_bytes], dtype=np.uint8))[: 2 * positions]
    flags = np.packbits(np.concatenate([np.zeros((positions, 6), np.uint8), bits.reshape(positions, 2)], axis=1), axis=1)[:, 0]
    tokens = np.frombuffer(body[4 * count + flag_bytes :], dtype=">u4")
    return JobTrace(output_tokens=tuple(int(t) for t in tokens), fingerprints=fingerprints, flags=flags)


def _inflate_exactly(data: bytes, expected: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(data, expected + 1)
    except zlib.error as exc:
        raise EncodingError(f"trace blob does not inflate: {exc}") from None
    if len(body) != expected or not inflater.eof or inflater.unused_data:
        raise EncodingError(f"trace blob body is not the {expected} bytes its header claims")
    return body
