"""Reading contract events, and following them with a confirmation depth.

`EventPoller` walks forward from a block and yields an event only once `confirmations` more
blocks sit on top of it, so a shallow reorg cannot un-happen what a node has acted on. Events
come out in chain order (block, log index), decoded against the contracts' ABIs.
"""

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from eth_utils import event_abi_to_log_topic

from verillm.chain.chain import Chain, ContractHandle
from verillm.errors import InvalidInput


@dataclass(frozen=True)
class ChainEvent:
    """One decoded log."""

    contract: str
    """Artifact name of the emitting contract."""
    name: str
    args: dict[str, Any]
    address: str
    block_number: int
    log_index: int
    tx_hash: bytes


class EventDecoder:
    """Maps (address, topic0) to the event ABI of the contracts being watched."""

    def __init__(self, contracts: list[ContractHandle], names: set[str] | None = None):
        self._events: dict[tuple[str, bytes], tuple[ContractHandle, str]] = {}
        for handle in contracts:
            for entry in handle.web3.abi:
                if entry.get("type") == "event" and not entry.get("anonymous") and (names is None or entry["name"] in names):
                    self._events[(handle.address, event_abi_to_log_topic(entry))] = (handle, entry["name"])

    def compute_event(self, log: dict) -> ChainEvent | None:
        """Return the decoded event, or None for a log this decoder does not watch."""
        if not log["topics"]:
            return None
        match = self._events.get((log["address"], bytes(log["topics"][0])))
        if match is None:
            return None
        handle, name = match
        decoded = handle.web3.events[name]().process_log(log)
        return ChainEvent(
            contract=handle.name, name=name, args=dict(decoded["args"]), address=handle.address,
            block_number=log["blockNumber"], log_index=log["logIndex"], tx_hash=bytes(log["transactionHash"]),
        )


def get_events(chain: Chain, contracts: list[ContractHandle], from_block: int, to_block: int | str = "latest",
               names: set[str] | None = None) -> list[ChainEvent]:
    """Return the events of ``contracts`` in [from_block, to_block], in chain order."""
    decoder = EventDecoder(contracts, names)
    query = {"fromBlock": from_block, "toBlock": to_block, "address": [c.address for c in contracts]}
    logs = chain.rpc("eth_getLogs", lambda: chain.w3.eth.get_logs(query))
    events = [e for e in (decoder.compute_event(dict(log)) for log in logs) if e is not None]
    return sorted(events, key=lambda e: (e.block_number, e.log_index))


class EventPoller:
    """Follows events from ``from_block`` on, releasing each once it is ``confirmations`` deep.

    An event in block b is released when the head is at least b + confirmations (0 releases
    every mined event). `next_block` is the first block not yet released; persist it to resume.
    """

    def __init__(self, chain: Chain, contracts: list[ContractHandle], from_block: int, confirmations: int = 0,
                 names: set[str] | None = None, max_range_blocks: int = 2_000):
        if confirmations < 0 or from_block < 0:
            raise InvalidInput(f"confirmations and from_block must be >= 0, got {confirmations} and {from_block}")
        self.chain, self.contracts, self.names = chain, list(contracts), names
        self.confirmations = confirmations
        self.next_block = from_block
        self.max_range_blocks = max_range_blocks

    def fetch(self) -> tuple[list[ChainEvent], int]:
        """Return every newly confirmed event (possibly none) and the block to resume from after them,
        without moving `next_block`: a caller that keeps the events somewhere moves it (`advance_to`)
        once they are kept, so a failure in between (a store that refused the write, a chain that
        failed on the second range) loses nothing — the next fetch returns the same events again."""
        safe_head = self.chain.get_block_number() - self.confirmations
        released: list[ChainEvent] = []
        next_block = self.next_block
        while next_block <= safe_head:
            to_block = min(safe_head, next_block + self.max_range_blocks - 1)
            released += get_events(self.chain, self.contracts, next_block, to_block, self.names)
            next_block = to_block + 1
        return released, next_block

    def advance_to(self, next_block: int) -> None:
        """Move past the events a `fetch` returned, once they are kept."""
        self.next_block = max(self.next_block, next_block)

    def poll(self) -> list[ChainEvent]:
        """Return every newly confirmed event (possibly none) and advance `next_block` (all or nothing)."""
        released, next_block = self.fetch()
        self.advance_to(next_block)
        return released

    def follow(self, stop: threading.Event | None = None, interval_s: float = 1.0) -> Iterator[ChainEvent]:
        """Yield confirmed events as they come, until ``stop`` is set."""
        stop = stop or threading.Event()
        while not stop.is_set():
            yield from self.poll()
            stop.wait(interval_s)

    async def follow_async(self, interval_s: float = 1.0) -> AsyncIterator[ChainEvent]:
        """Yield confirmed events as they come, polling in a worker thread (web3 here is blocking)."""
        while True:
            for event in await asyncio.to_thread(self.poll):
                yield event
            await asyncio.sleep(interval_s)
