"""Keyed background steps: at most one task per key, a failed step retried after a pause.

The watcher asks every pending item for its next step on every tick; a step that sends a
job or waits for a transaction can take longer than a tick, so it runs as a task under the
item's key and the next ticks skip that key until it is done. A step that fails is logged
with its traceback and tried again after ``backoff_s``: the chain's state, read afresh, says
what is still to do. A step the contracts refuse for good (its phase or window has passed, the
node is no longer active, it was done already: `GIVE_UP_ERRORS`) is logged once as an error and
retried only every ``give_up_s`` — if the chain has moved on, the next read asks for another
step — instead of a warning every ``backoff_s`` forever.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# Reverts no retry can fix: the window or phase is over, the party is not (or no longer) allowed.
GIVE_UP_ERRORS = ("TooLate", "UnexpectedPhase", "NotActiveNode", "AlreadyHandled", "AlreadyOpened", "AlreadyDrawn",
                  "ReceiptReplayed", "NotParty", "WindowClosed", "AlreadySlashed", "ContestClosed")


class KeyedTasks:
    """Running steps by key."""

    def __init__(self, backoff_s: float = 2.0, give_up_s: float = 10.0):
        self.backoff_s = backoff_s
        self.give_up_s = give_up_s
        self.given_up: dict[str, str] = {}
        """Key → the final revert last logged for it (logged once, not again while it repeats)."""
        self._tasks: dict[str, asyncio.Task] = {}
        self._retry_at: dict[str, float] = {}
        self.failures: dict[str, str] = {}
        """Last error per key (cleared when the key next succeeds); shown by the status route."""

    def is_busy(self, key: str) -> bool:
        return key in self._tasks or time.monotonic() < self._retry_at.get(key, 0.0)

    def spawn(self, key: str, step: Callable[[], Awaitable[None]]) -> bool:
        """Start ``step()`` under ``key`` unless it runs or is backing off; return whether it started."""
        if self.is_busy(key):
            return False
        self._tasks[key] = asyncio.get_running_loop().create_task(self._run(key, step), name=f"verillm-dispatcher:{key}")
        return True

    async def _run(self, key: str, step: Callable[[], Awaitable[None]]) -> None:
        try:
            await step()
            self.failures.pop(key, None)
            self.given_up.pop(key, None)
            self._retry_at.pop(key, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a daemon step: log it, retry later from the chain's state
            self.failures[key] = f"{type(exc).__name__}: {exc}"
            if getattr(exc, "error", None) in GIVE_UP_ERRORS:
                if self.given_up.get(key) != exc.error:
                    log.error("step %s can no longer succeed, giving up on it: %s", key, exc)
                self.given_up[key] = exc.error
                self._retry_at[key] = time.monotonic() + self.give_up_s
                return
            log.warning("step %s failed (retrying in %.1f s): %s: %s", key, self.backoff_s, type(exc).__name__, exc,
                        exc_info=log.isEnabledFor(logging.DEBUG))
            self._retry_at[key] = time.monotonic() + self.backoff_s
        finally:
            self._tasks.pop(key, None)

    async def wait_idle(self) -> None:
        """Wait for every running step (tests)."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def close(self) -> None:
        """Cancel every running step and wait for them to end."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
