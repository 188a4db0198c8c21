"""The store's pruner: every ``store.prune_interval_s``, each table loses the rows nothing can ask for.

What "nothing can ask" means, table by table, is node/store/retention.py: block comparisons
against the head the chain watcher last read (never a clock, never a block interval measured
once). Each step deletes about `PRUNE_BATCH` rows (retention.py) in one transaction and yields to
the event loop before the next, until a step finds nothing, so a backlog (a node restarted after
weeks) drains without stalling requests: 10,000 batched jobs, 10,000 worker jobs and 20,000 events
in 80 steps of at most 0.43 s, 6.3 s in all (docs/operators.md "Pruning, in blocks").
"""

import asyncio
import logging
import time
from collections.abc import Callable

from sqlite_utils import Database

from verillm.node.store.retention import (Horizons, prune_batches, prune_chain_records, prune_failed_jobs, prune_unbatched_jobs,
                                          prune_worker_jobs)

log = logging.getLogger(__name__)


class StorePruner:
    """Prunes the node's store against the chain's head."""

    def __init__(self, db: Database, horizons: Horizons, get_head: Callable[[], int], interval_s: float, failed_retention_s: float):
        self.db, self.horizons, self.get_head = db, horizons, get_head
        self.interval_s = interval_s
        self.failed_retention_s = failed_retention_s
        self.pruned: dict[str, int] = {}
        """Rows (batches for "batches") deleted so far, per step: for the log and tests."""

    async def run_forever(self) -> None:
        """Prune every interval until cancelled; a failed pass is logged and tried again at the next."""
        while True:
            try:
                await self.prune()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a full disk or a locked file: the next pass retries from the tables
                log.warning("store pruning failed: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(self.interval_s)

    async def prune(self) -> dict[str, int]:
        """Run every step until it finds nothing more to delete at the current head; return what each deleted."""
        head = self.get_head()
        if head <= 0:  # the watcher has not read the chain yet
            return {}
        steps = {
            "batches": lambda: prune_batches(self.db, head, self.horizons),
            "unbatched_jobs": lambda: prune_unbatched_jobs(self.db, head, self.horizons),
            "worker_jobs": lambda: prune_worker_jobs(self.db, head, self.horizons),
            "failed_jobs": lambda: prune_failed_jobs(self.db, time.time() - self.failed_retention_s),
            "chain_records": lambda: prune_chain_records(self.db, head, self.horizons),
        }
        done = {name: await self._drain(step) for name, step in steps.items()}
        for name, count in done.items():
            self.pruned[name] = self.pruned.get(name, 0) + count
        if any(done.values()):
            log.info("pruned the store at head %d (%d blocks kept after the audit horizons): %s", head, self.horizons.keep_blocks,
                     ", ".join(f"{n} {name}" for name, n in done.items() if n))
        return done

    async def _drain(self, step: Callable[[], int]) -> int:
        total = 0
        while (count := step()) > 0:
            total += count
            await asyncio.sleep(0)  # let requests in between batches
        return total
