"""An opening request's work, done in a separate process: parse the cells, rebuild the tree, prove, serialize.

A thread is not enough: the work is Python (Merkle hashing per leaf, the encoding), so a thread
holds the GIL the event loop needs, and on a loaded machine `/healthz` waited tens to hundreds of
milliseconds behind it. A process has its own interpreter: the node's loop only waits for the
answer's bytes. One pool per node process, `spawn`ed (never a fork of a process with an engine
and an event loop), sized by the first node's `limits.max_concurrent_openings`; this module
imports no engine, so a worker process starts in about a second.
"""

import asyncio
import atexit
import json
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from verillm.errors import InvalidInput
from verillm.jsonsafe import load_json
from verillm.spec.challenge import compute_opened_cells
from verillm.spec.encoding import decode
from verillm.spec.types import Challenge, Receipt
from verillm.wire import from_hex, opening_to_json, to_hex

from verillm.node.worker.commit import compute_opening_from_blob

_pool: ProcessPoolExecutor | None = None
_lock = threading.Lock()


def get_pool(workers: int) -> ProcessPoolExecutor:
    """The node process's opening pool, every worker process started (in the calling thread: call it
    from a thread the first time, `start_pool`, so no spawn ever runs on the event loop)."""
    global _pool
    with _lock:
        if _pool is None:
            pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=watch_parent, initargs=(os.getpid(),))
            for future in [pool.submit(_started) for _ in range(workers)]:  # all of them now, not one per burst
                future.result()
            atexit.register(pool.shutdown, wait=False, cancel_futures=True)
            _pool = pool
    return _pool


async def start_pool(workers: int) -> ProcessPoolExecutor:
    """`get_pool` without blocking the event loop while the processes start."""
    return _pool if _pool is not None else await asyncio.to_thread(get_pool, workers)


def _started() -> int:
    return os.getpid()


def watch_parent(parent: int) -> None:
    """Pool initializer: exit as soon as the node that started this process is gone, so a node that
    was SIGKILLed (or exited without shutting its pool down) leaves no process behind."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="verillm-opening-parent-watch", daemon=True).start()


def _is_cell(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)


def parse_opening_payload(payload: bytes, max_cells: int | None = None) -> tuple[list[tuple[int, int]] | None, Challenge | None]:
    """Return (cells, challenge) from an opening request's payload; exactly one is set. More than
    ``max_cells`` cells are refused before any is looked at."""
    data = load_json(payload, "payload")
    if not isinstance(data, dict) or ("cells" in data) == ("challenge" in data):
        raise InvalidInput("payload: give exactly one of cells or challenge")
    if "challenge" in data:
        return None, decode(Challenge, from_hex(data["challenge"], "challenge"))
    cells = data["cells"]
    if isinstance(cells, list) and max_cells is not None and len(cells) > max_cells:
        raise InvalidInput(f"cells: between 1 and {max_cells} cells per opening, got {len(cells)}")
    if not isinstance(cells, list) or not all(_is_cell(c) for c in cells):
        raise InvalidInput("cells: expected a list of [position, layer] pairs of non-negative integers")
    return [(c[0], c[1]) for c in cells], None


def verify_opening_payload(payload: bytes, max_cells: int) -> None:
    """Check a payload parses (in the pool: 65,536 cells are not parsed on the loop); raise InvalidInput."""
    parse_opening_payload(payload, max_cells)


def compute_unique_cells(cells) -> list[tuple[int, int]]:
    """The distinct (position, layer) cells, sorted: what an opening answers, whatever was asked twice."""
    return sorted(set(cells))


def compute_opening_answer(job_hash: bytes, payload: bytes, blob: bytes, encoded_receipt: bytes, layers: tuple[int, ...], max_cells: int) -> tuple[bytes, int]:
    """The JSON answer to an opening request and the number of leaves it opens (runs in the pool)."""
    cells, challenge = parse_opening_payload(payload, max_cells)
    receipt = decode(Receipt, encoded_receipt)
    if challenge is not None:
        cells = compute_opened_cells(challenge, receipt.num_positions)
    if not cells or len(cells) > max_cells:
        raise InvalidInput(f"cells: between 1 and {max_cells} cells per opening, got {len(cells or [])}")
    opening = compute_opening_from_blob(blob, receipt, layers, compute_unique_cells(cells))
    return json.dumps({"job_hash": to_hex(job_hash), "opening": opening_to_json(opening)}).encode(), len(opening.leaves)
