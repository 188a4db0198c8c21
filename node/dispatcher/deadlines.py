"""The deadline, in blocks, of every slashable duty this node has pending, and the slack each landed with.

A duty (the worker's opening, a member's seal and its opening, a private draw's reveal, a batch
that a promise falls due on) is `expect`ed once it can be done, with the last block its
transaction may land in (the contracts' windows are "(a, b]": landing in b is in time, slack 0).
It stays pending until its transaction lands (`on_landed`: slack = deadline − landing block) or the
contract refuses it (`on_refused`: `TooLate` is a miss; a refusal saying it was done already ends it).

While a pending duty has `shed_at_slack_blocks` blocks or fewer left (or is in the second half of
its window: each duty names its lead, half its window for the audit steps, half its span for a
promise), this node takes no new work from its clients (`verify_room_for_clients`: 503 `shedding_for_duty`, retry): their jobs would take
the engine, the CPU and the chain threads the duty needs. Jobs of peers and committees are never
shed (the worker cannot tell a committee job from a peer's, docs/protocol.md §12), and nothing in
flight is cancelled: shedding only stops new client work until the duty lands (issue 35).

The chain watcher (and the batches, on its thread) and the audit steps (on the node's main loop)
record duties from two threads, and client requests read them: every method holds one lock.
"""

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from verillm.errors import QueueFull

log = logging.getLogger(__name__)

DONE_ALREADY = ("AlreadyOpened", "AlreadyHandled", "AlreadyDrawn")
"""Refusals that say the duty is done (an earlier run's transaction landed): no miss, nothing pending."""
KEPT_RECORDS = 10_000
"""Landed, missed and expired duties kept for the summary (the metrics count them all)."""
SHED_AT_SLACK_BLOCKS = 4
"""Default of `dispatcher.shed_at_slack_blocks`."""


class SheddingForDuty(QueueFull):
    """This node is about to miss a slashable duty's window: it takes no new client work until it lands."""

    code = "shedding_for_duty"


@dataclass(frozen=True)
class Due:
    """One slashable duty: ``kind`` names what (open_worker, seal_vote, open_and_vote, reveal_round, post_batch),
    ``key`` which one, ``by_block`` the last block its transaction may land in."""

    key: str
    kind: str
    by_block: int
    lead_blocks: int = 0
    """Blocks its own transaction needs before the deadline, beyond `shed_at_slack_blocks` (a batch post: the
    half its span); client work is shed from max(shed_at_slack_blocks, lead_blocks) blocks before it."""


@dataclass(frozen=True)
class Landed:
    """A duty done: in which block, with how many blocks of its window left."""

    due: Due
    block: int

    @property
    def slack_blocks(self) -> int:
        return self.due.by_block - self.block


class DutyClock:
    """Pending duties by key; the landed ones' slack; misses."""

    def __init__(self, get_head: Callable[[], int] = lambda: 0, shed_at_slack_blocks: int = SHED_AT_SLACK_BLOCKS, metrics=None):
        self.get_head, self.shed_at_slack_blocks, self.metrics = get_head, shed_at_slack_blocks, metrics
        self.pending: dict[str, Due] = {}
        self.standing: dict[str, Due] = {}
        self._done: dict[str, int] = {}
        """Key → deadline of each duty landed (or found done): a later `expect` of it is stale (the watcher's view lags)."""
        self.expired: deque[Due] = deque(maxlen=KEPT_RECORDS)
        """Pending duties whose window closed without their transaction landing or being refused: moot (the round
        moved on without them) or never sent; a miss the contract saw is counted in `missed` (TooLate)."""
        self.landed: deque[Landed] = deque(maxlen=KEPT_RECORDS)
        self.missed: deque[Due] = deque(maxlen=KEPT_RECORDS)
        self.shed_requests = 0
        """Client requests refused while a duty was about to miss its window."""
        self._lock = threading.RLock()

    def expect(self, due: Due) -> None:
        """Record a duty that can be done now (again: its deadline is updated); one already done is ignored."""
        with self._lock:
            if due.key not in self._done and due.by_block >= self.get_head():
                self.pending[due.key] = due

    def set_standing(self, key: str, due: Due | None) -> None:
        """A deadline re-read on every tick rather than sent once (the first unbatched promise's): it sheds
        client work like a pending duty, and is never counted as landed or missed (its batch's post is)."""
        with self._lock:
            if due is None:
                self.standing.pop(key, None)
            else:
                self.standing[key] = due

    def forget(self, key: str) -> None:
        """Drop a pending duty that no longer applies (its round moved on without needing it, or it was done)."""
        with self._lock:
            due = self.pending.pop(key, None)
            if due is not None:
                self._done[key] = due.by_block

    def on_landed(self, due: Due, block: int) -> None:
        with self._lock:
            self.pending.pop(due.key, None)
            self._done[due.key] = due.by_block
            landed = Landed(due, block)
            self.landed.append(landed)
            if self.metrics is not None:
                self.metrics.on_duty_landed(due.kind, landed.slack_blocks)
            if landed.slack_blocks < 0:  # the contract would have refused it: a broken window, said loudly
                self._miss(due, f"landed in block {block}, after its deadline {due.by_block}")

    def on_refused(self, due: Due, error: str | None) -> None:
        """A duty's transaction failed: with ``error`` the contract's revert (None: not a revert, retried)."""
        with self._lock:
            if error == "TooLate":
                self.pending.pop(due.key, None)
                self._miss(due, "refused TooLate")
            elif error in DONE_ALREADY:
                self.forget(due.key)

    def _miss(self, due: Due, why: str) -> None:
        self._done[due.key] = due.by_block
        self.missed.append(due)
        if self.metrics is not None:
            self.metrics.duties_missed.labels(kind=due.kind).inc()
        log.error("missed duty %s (%s, due by block %d): %s", due.key, due.kind, due.by_block, why)

    def get_urgent(self, head: int) -> list[Due]:
        """Pending duties with `shed_at_slack_blocks` or fewer blocks left (and not yet past their window)."""
        with self._lock:
            self._expire(head)
            dues = list(self.pending.values()) + list(self.standing.values())
            return [d for d in dues if head <= d.by_block <= head + max(self.shed_at_slack_blocks, d.lead_blocks)]

    def _expire(self, head: int) -> None:
        for key, due in list(self.pending.items()):
            if due.by_block < head:
                del self.pending[key]
                self.expired.append(due)
                log.warning("duty %s (%s, due by block %d) is past its window at block %d without landing", key, due.kind, due.by_block, head)
        self._done = {key: by for key, by in self._done.items() if by >= head}

    def verify_room_for_clients(self) -> None:
        """Raise SheddingForDuty while a pending duty is about to miss its window (a client's request only)."""
        head = self.get_head()
        urgent = self.get_urgent(head)
        if urgent:
            self.shed_requests += 1
            tightest = min(urgent, key=lambda d: d.by_block)
            raise SheddingForDuty(f"this node's {tightest.kind} is due by block {tightest.by_block} (head {head}): "
                                  "it takes no new client work until that lands; retry in a few seconds")

    def get_summary(self) -> dict:
        """Landed and missed duties by kind, with the worst (least) slack: what `verillm bench duties` reports."""
        with self._lock:
            kinds: dict[str, dict] = {}
            for landed in self.landed:
                row = kinds.setdefault(landed.due.kind, {"landed": 0, "missed": 0, "worst_slack_blocks": None})
                row["landed"] += 1
                worst = row["worst_slack_blocks"]
                row["worst_slack_blocks"] = landed.slack_blocks if worst is None else min(worst, landed.slack_blocks)
            for due in self.missed:
                kinds.setdefault(due.kind, {"landed": 0, "missed": 0, "worst_slack_blocks": None})["missed"] += 1
            slacks = [landed.slack_blocks for landed in self.landed]
            return {"landed": len(self.landed), "missed": len(self.missed), "pending": len(self.pending), "expired": len(self.expired),
                    "worst_slack_blocks": min(slacks) if slacks else None, "shed_client_requests": self.shed_requests, "by_kind": kinds}
