"""What the worker hands the store to make durable (node/worker/commit.py builds it, `Store.complete_job` keeps it).

Its own module, importing no SQLite: the opening processes (node/worker/opening_process.py) import
node/worker/commit.py, and importing sqlite_utils would add to each one's start (1.7 s on a loaded 2-core machine).
"""

from dataclasses import dataclass

from verillm.spec.types import Receipt


@dataclass(frozen=True)
class JobOutput:
    """A committed, signed job, ready to be made durable."""

    receipt: Receipt
    output_tokens: tuple[int, ...]
    trace_blob: bytes
