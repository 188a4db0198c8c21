"""The chain watcher on a thread and event loop of its own: duties first, by construction (issue 35).

On the node's main loop, every client request, stream and peer call is a callback the watcher's
tick waits behind, and every store write a client's job makes blocks that loop for its fsync.
Under a full client load a tick took 15–20 s there, and batches whose promises fell due posted
up to 17 blocks late (docs/benchmarks.md, "Duty slack"). Here the watcher ticks on its own loop,
and the steps of the chain and the store alone — batch posts (the promises' duty), draws, starts,
private draws' reveals, answers to omission claims — run beside it (`ChainWatcher.chain_tasks`), with the store's
connection of this thread (node/store/connections.py) and the chain's threads of the duties
(`ChainIO`). Nothing a client or a peer can fill is on that path: a main loop blocked outright
still leaves every tick and every post on time (tests/node/dispatcher/test_watcher_thread.py).
"""

import asyncio
import concurrent.futures
import logging
import threading

from verillm.node.dispatcher.watcher import ChainWatcher

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 60.0
"""How long `stop` waits for the watcher's in-flight steps (a transaction waiting for its block) to end."""


class WatcherThread:
    """Runs ``watcher.run_forever`` on a daemon thread with an event loop of its own."""

    def __init__(self, watcher: ChainWatcher, on_thread_end=None):
        self.watcher = watcher
        self.on_thread_end = on_thread_end
        """Called on the thread as it ends (closes the thread's store connection)."""
        self.loop = asyncio.new_event_loop()
        self._task: asyncio.Task | None = None
        self._caught_up: concurrent.futures.Future = concurrent.futures.Future()
        self.thread = threading.Thread(target=self._run, name="verillm-chain-watcher", daemon=True)

    async def start(self) -> int:
        """Start the thread and return the head once its first tick has caught up with the chain (a node
        serves only then); a failed first tick raises here. Party steps go to the caller's (main) loop."""
        self.watcher.party_loop = asyncio.get_running_loop()
        self.thread.start()
        return await asyncio.wrap_future(self._caught_up)

    async def _watch(self) -> None:
        try:
            await self.watcher.tick()
        except BaseException as exc:
            self._caught_up.set_exception(exc)
            raise
        self._caught_up.set_result(self.watcher.head)
        await self.watcher.run_forever()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._task = self.loop.create_task(self._watch(), name="verillm-chain-watcher")
        try:
            self.loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass  # stopped
        except Exception:  # the first tick failed: `start` raised it to the node, which does not serve
            pass
        finally:
            self.loop.run_until_complete(self.watcher.chain_tasks.close())
            self.loop.close()
            if self.on_thread_end is not None:
                self.on_thread_end()

    async def stop(self) -> None:
        """Cancel the watcher and its chain steps; return once the thread has ended."""
        if self._task is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._task.cancel)
        await asyncio.to_thread(self.thread.join, STOP_TIMEOUT_S)
        if self.thread.is_alive():
            log.error("the chain watcher's thread did not end within %.0f s", STOP_TIMEOUT_S)
