"""Splitting a byte stream into lines (NDJSON, SSE) in time linear in its bytes.

A peer chooses how its stream is chunked, so the splitter must not cost more when a line arrives
in many small chunks: ``(pending + chunk).split(b"\\n")`` copies everything still pending for
every chunk and searches it again, so one 4 MiB line in 256-byte chunks copied ~32 GB (21 s of a
gateway's CPU, issue 35). Here each byte is searched once and copied at most twice (into the
pending buffer, then out as its line), whatever the chunking: `LineSplitter.copied_bytes` counts it.

The writing side is here too: `NDJSON` (the media type) and `compute_line` (one object, one line),
so the worker that writes a native stream (node/api/streaming.py) and the dispatcher that reads
one (node/dispatcher/peer.py) share them from below both.
"""

import json

NDJSON = "application/x-ndjson"
"""The native job route's streamed answer: one JSON object per line."""


def compute_line(event: dict) -> bytes:
    """One NDJSON line of the native stream."""
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"



class LineSplitter:
    """Feed chunks, get the complete lines (without their b"\\n"); `pending` is the unfinished last one."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self.copied_bytes = 0
        """Bytes copied so far (into the pending buffer and out as lines): at most twice those fed."""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Return the lines ``chunk`` completes, in order; keep its unfinished tail."""
        view, lines, start = memoryview(chunk), [], 0
        while (end := chunk.find(b"\n", start)) != -1:
            lines.append(self._take(view[start:end]))
            start = end + 1
        self._pending += view[start:]
        self.copied_bytes += len(chunk) - start
        return lines

    def _take(self, head: memoryview) -> bytes:
        if not self._pending:
            self.copied_bytes += len(head)
            return bytes(head)
        self._pending += head
        line = bytes(self._pending)
        self.copied_bytes += len(head) + len(line)
        self._pending.clear()
        return line

    @property
    def pending(self) -> bytes:
        """The bytes after the last b"\\n" so far (the end of a stream that did not end its last line)."""
        return bytes(self._pending)
