"""The stake each peer holds for this node's model, as the Registry fixes it for the current epoch.

Admission by stake (node/api/admission.py) divides the peer lane among senders by these weights.
The Registry fixes a node's weight for a model per epoch (`Registry.getModelWeights`: its stake
if it was active and serving the model when the epoch began; register, top-up, slash and
deregister weigh from the next one), so the table is read once per epoch (the epoch of the head
the chain watcher last read) and cannot change within it: a top-up or a new identity buys a share
from the next epoch, as it buys seats in draws.
"""

import asyncio
import logging
from collections.abc import Callable

from verillm.node.dispatcher.chainio import ChainIO

log = logging.getLogger(__name__)


class EpochStakes:
    """The model's stake weights in the current epoch, read from the Registry once per epoch."""

    def __init__(self, chainio: ChainIO, model_id: bytes, get_head: Callable[[], int]):
        self.chainio, self.model_id, self.get_head = chainio, model_id, get_head
        self.epoch: int | None = None
        self.weights: dict[bytes, int] = {}
        """Address → stake weight (wei) in ``epoch``; nodes of weight 0 are left out."""
        self._epoch_blocks: int | None = None
        self._lock = asyncio.Lock()

    async def get_weights(self) -> tuple[int, dict[bytes, int]]:
        """Return (epoch, weights) for the epoch of the watcher's head, reading the Registry on a new epoch."""
        async with self._lock:
            if self._epoch_blocks is None:
                self._epoch_blocks = int(await self.chainio.read(self.chainio.protocol.registry.call, "epochBlocks"))
            epoch = self.get_head() // self._epoch_blocks
            if epoch != self.epoch:
                await self._refresh(epoch)
        return self.epoch, self.weights

    async def _refresh(self, epoch: int) -> None:
        try:
            self.weights = await self.chainio.read(self._fetch, epoch)
        except Exception as exc:  # a chain outage at an epoch's turn: the last epoch's shares until the next read
            if self.epoch is None:
                raise
            log.warning("cannot read the Registry's weights of epoch %d (%s: %s); peers keep epoch %d's shares", epoch, type(exc).__name__, exc, self.epoch)
            return
        self.epoch = epoch

    def _fetch(self, epoch: int) -> dict[bytes, int]:
        addresses, weights = self.chainio.protocol.registry.call("getModelWeights", self.model_id, epoch)
        return {bytes.fromhex(a[2:].lower()): int(w) for a, w in zip(addresses, weights) if int(w) > 0}
