"""Per-sender nonces kept in process, so concurrent sends from one key never collide.

Each sender has a lock; a send reserves the next nonce, signs and submits under that lock, so
nonces reach the node in order and a failed submission leaves no gap. The first use (and any
use after a failure or `forget`) reads the node's pending count.
"""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class NonceManager:
    """The next nonce of every local sender this process signs for."""

    def __init__(self, fetch_pending_count: Callable[[str], int]):
        self._fetch = fetch_pending_count
        self._next: dict[str, int] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock_for(self, address: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(address, threading.Lock())

    @contextmanager
    def reserve(self, address: str) -> Iterator[int]:
        """Yield ``address``'s next nonce, held under its lock; it is spent only if the block succeeds.

        On an exception the cached value is dropped: the node may have seen the transaction
        (a transport timeout) or another process may have used the key, so re-read it next time.
        """
        with self._lock_for(address):
            nonce = self._next.get(address)
            if nonce is None:
                nonce = self._fetch(address)
            try:
                yield nonce
            except BaseException:
                self._next.pop(address, None)
                raise
            self._next[address] = nonce + 1

    def forget(self, address: str | None = None) -> None:
        """Drop the cached nonce of ``address`` (all senders if None), e.g. after a snapshot revert."""
        with self._guard:
            if address is None:
                self._next.clear()
            else:
                self._next.pop(address, None)
