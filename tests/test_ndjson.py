"""The NDJSON/SSE line splitter is linear in the bytes fed, however a peer chunks them (issue 35, finding 5).

Counted, not timed: `LineSplitter.copied_bytes` is every byte it copies; the quadratic splitter it
replaced (``(pending + chunk).split(b"\\n")``) copied ~32 GB for one 4 MiB line in 256-byte chunks.
"""

import pytest

from verillm.ndjson import LineSplitter

MIB = 1024 * 1024


def split_all(chunks):
    splitter, lines = LineSplitter(), []
    for chunk in chunks:
        lines += splitter.feed(chunk)
    return splitter, lines


def test_one_4_mib_line_in_256_byte_chunks_copies_each_byte_at_most_twice():
    line = bytes(range(256)).replace(b"\n", b"x") * (4 * MIB // 256)
    data = line + b"\n"
    splitter, lines = split_all(data[i:i + 256] for i in range(0, len(data), 256))
    assert lines == [line]
    assert splitter.copied_bytes <= 2 * len(data)
    quadratic = sum(min(i + 256, len(data)) for i in range(0, len(data), 256))  # what pending + chunk copied
    assert quadratic > 1_000 * splitter.copied_bytes  # ~34 GB against ~8 MB


@pytest.mark.parametrize("size", [1, 2, 3, 7, 256, 4096])
def test_lines_are_the_same_whatever_the_chunking(size):
    data = b'{"a": 1}\n\n{"b": [1, 2]}\r\nlast-without-newline'
    splitter, lines = split_all(data[i:i + size] for i in range(0, len(data), size))
    assert lines == data.split(b"\n")[:-1]
    assert splitter.pending == b"last-without-newline"
    assert splitter.copied_bytes <= 2 * len(data)


def test_the_stream_readers_use_the_linear_splitter():
    """The gateway's reader of a worker's stream and the SDK's reader of a node's both split with it."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for path in ("node/dispatcher/peer.py", "verillm/client/stream.py"):
        source = (root / path).read_text()
        assert "LineSplitter()" in source and '.split(b"\\n")' not in source, path
