"""Block timestamps for the explorer: read from the chain once per block and kept in the store
(`chain_block_times`, migration 7), so every page can show a time next to every block."""

from verillm.node.store.explorer_tables import ExplorerTables

MAX_READS_PER_BODY = 128  # block headers read for one response; the rest show their number alone until a later one
BLOCK_KEYS = ("block", "posted_block", "started_block", "ended_block", "registered_block", "from_block", "by_block", "read_at_block",
              "phase_ends_block", "final_by_block", "drawn_block", "unbonding_end_block", "start_window_ends", "last_hour_from_block", "series_blocks")
RATE_SPAN_BLOCKS = 100


def compute_block_edges(start: int, stop: int, buckets: int) -> list[int]:
    """Return ascending block edges splitting [start, stop) into at most ``buckets`` equal ranges (≥ 1 block each)."""
    span = max(stop - start, 1)
    count = min(buckets, span)
    return sorted({start + span * i // count for i in range(count)} | {start + span})


def compute_blocks_named(body, found: set[int] | None = None) -> set[int]:
    """Every block number a body names (under the keys in BLOCK_KEYS, at any depth)."""
    found = set() if found is None else found
    if isinstance(body, dict):
        for key, value in body.items():
            if key in BLOCK_KEYS and isinstance(value, int) and not isinstance(value, bool):
                found.add(value)
            elif key in BLOCK_KEYS and isinstance(value, list):
                found.update(v for v in value if isinstance(v, int) and not isinstance(v, bool))
            elif isinstance(value, dict | list):
                compute_blocks_named(value, found)
    elif isinstance(body, list):
        for value in body:
            compute_blocks_named(value, found)
    return found


class BlockClock:
    """Timestamps of mined blocks, from the store or (once) from the chain."""

    def __init__(self, service):
        self.service = service
        self.tables = ExplorerTables(service.tables.db)

    @classmethod
    def of(cls, service) -> "BlockClock":
        return cls(service)

    async def get_times(self, blocks: list[int]) -> dict[int, int]:
        known = self.tables.get_block_times(blocks)
        missing = [b for b in blocks if b not in known][:MAX_READS_PER_BODY]
        if missing:
            chain = self.service.chainio.chain
            fetched = await self.service.chainio.read_for_clients(lambda: {b: int(chain.get_block(b)["timestamp"]) for b in missing})
            self.tables.insert_block_times(fetched)
            known.update(fetched)
        return known

    async def get_time(self, block: int) -> int:
        return (await self.get_times([block]))[block]

    async def get_block_at(self, timestamp: int, low: int, high: int) -> int:
        """Return the first block in [low, high] mined at or after ``timestamp`` (``high`` if none): a binary search."""
        while low < high:
            middle = (low + high) // 2
            if await self.get_time(middle) >= timestamp:
                high = middle
            else:
                low = middle + 1
        return low

    async def annotate(self, body: dict, head: int) -> None:
        """Add ``block_times`` (every mined block the body names -> unix time) and ``clock`` (the head,
        its time, and seconds per block over the last 100 blocks, to estimate when a future block comes)."""
        start = max(head - RATE_SPAN_BLOCKS, 0)
        blocks = sorted({b for b in compute_blocks_named(body) if 0 <= b <= head} | {head, start})
        times = await self.get_times(blocks)
        body["block_times"] = {str(b): t for b, t in times.items()}
        body["clock"] = {"head": head, "head_time": times.get(head), "seconds_per_block": compute_seconds_per_block(times, head)}

    async def get_seconds_per_block(self, head: int) -> float | None:
        """Seconds per block over the last RATE_SPAN_BLOCKS blocks (None before a second block)."""
        return compute_seconds_per_block(await self.get_times(sorted({max(head - RATE_SPAN_BLOCKS, 0), head})), head)


def compute_seconds_per_block(times: dict[int, int], head: int) -> float | None:
    """The mean block interval from the block RATE_SPAN_BLOCKS before ``head`` (or 0) to ``head``, from their timestamps."""
    start = max(head - RATE_SPAN_BLOCKS, 0)
    return (times[head] - times[start]) / (head - start) if head > start and head in times and start in times else None
