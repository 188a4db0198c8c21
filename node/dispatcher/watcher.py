"""The chain watcher: one loop that follows the contracts and advances every pending item.

Each tick: read the head; record the new protocol events (Jobs, Batches, Disputes, Registry, Coverage) in
`chain_events` and move the cursor, in one transaction, after handing the events that name
this node a seat to `PartyDuties` (idempotent, so a crash in between repeats nothing); then
give every pending item — batches, this dispatcher's audits, this node's seats — its next
step as a keyed task (`KeyedTasks`). Nothing is remembered in memory that the store and the
chain cannot rebuild, so a restarted node picks up every pending item on its first tick.

Two sets of steps, on two loops (issue 35, "duties first"): the watcher runs on a thread and event
loop of its own (`WatcherThread`, node/dispatcher/watcher_thread.py), and the steps that need only
the chain and the store — batches and their promises' posts, private draws' reveals, answers to
omission claims, the stake — run there too (`chain_tasks`), so no client request on the node's main loop can delay a
tick or a post. The steps that talk to this node's worker or its peers — audits, a party's
openings and votes, deliveries — run on the main loop (`tasks`, handed over thread-safely), where
the worker and the peer sessions live; each of those is timed by its own window, not by a tick.
"""

import asyncio
import json
import logging

from verillm.chain.events import ChainEvent, EventPoller

from verillm.node.dispatcher.batches import BatchScheduler
from verillm.node.dispatcher.deadlines import Due
from verillm.node.dispatcher.promises import compute_post_margin
from verillm.node.dispatcher.chainio import ChainIO
from verillm.node.dispatcher.promises import OmissionAnswers
from verillm.node.dispatcher.audit.delivery import DeliveryDuties
from verillm.node.dispatcher.audit.duties import PartyDuties
from verillm.node.dispatcher.audit.driver import AuditDriver
from verillm.node.dispatcher.router import RegistryView
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.dispatcher.tasks import KeyedTasks
from verillm.node.metrics import NodeMetrics

log = logging.getLogger(__name__)

CURSOR = "protocol"
SLOW_TICK_S = 2.0
"""A tick slower than this is logged: a duty step starts no earlier than the tick that spawns it."""


def compute_json_value(value):
    """Return an event argument as JSON: bytes as 0x-hex, sequences as lists."""
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    if isinstance(value, list | tuple):
        return [compute_json_value(v) for v in value]
    return value


def compute_event_row(event: ChainEvent) -> dict:
    """Return the `chain_events` row of a decoded event."""
    args = {name: compute_json_value(value) for name, value in event.args.items()}
    return {
        "block_number": event.block_number, "log_index": event.log_index, "contract": event.contract, "name": event.name,
        "audit_id": args.get("auditId"), "batch_id": args.get("batchId"), "contest_id": args.get("contestId"),
        "args": json.dumps(args, sort_keys=True), "tx_hash": event.tx_hash.hex(),
    }


class ChainWatcher:
    """Follows the chain and drives batches, audits and duties."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, view: RegistryView, batches: BatchScheduler,
                 audits: AuditDriver, duties: PartyDuties, tasks: KeyedTasks, metrics: NodeMetrics,
                 poll_interval_s: float, confirmations: int, delivery: DeliveryDuties | None = None,
                 omissions: OmissionAnswers | None = None, chain_tasks: KeyedTasks | None = None):
        self.chainio, self.tables, self.view = chainio, tables, view
        self.delivery, self.omissions = delivery, omissions
        self.batches, self.audits, self.duties, self.tasks, self.metrics = batches, audits, duties, tasks, metrics
        self.chain_tasks = chain_tasks if chain_tasks is not None else tasks
        """Steps of the chain and the store only (batches, omission answers, the stake): on the watcher's own loop."""
        self.party_loop: asyncio.AbstractEventLoop | None = None
        """The loop `tasks` (audits, a party's steps, deliveries) run on, when it is not the watcher's (`WatcherThread`)."""
        self.poll_interval_s = poll_interval_s
        protocol = chainio.protocol
        start = tables.get_cursor(CURSOR, chainio.deployment.start_block)
        self.poller = EventPoller(chainio.chain, [protocol.jobs, protocol.batches, protocol.disputes, protocol.delivery, protocol.registry,
                                                   protocol.coverage],
                                  start, confirmations)
        self.head = 0
        self.ticks = 0
        self.failed_ticks = 0

    async def run_forever(self) -> None:
        """Tick until cancelled; a failed tick (chain unreachable, ...) is logged and retried."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.tick()
                took = loop.time() - started
                if took > SLOW_TICK_S:  # every step of every duty waits for the tick: say so, it explains a late duty
                    log.warning("watcher tick took %.1f s (head %d): the duties' steps started that late", took, self.head)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop outlives a chain outage; every step re-reads state
                self.failed_ticks += 1
                log.warning("watcher tick failed: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(self.poll_interval_s)

    async def tick(self) -> None:
        """Record new events, then give every pending item its next step."""
        self.head = await self.chainio.block_number()
        # The duties' chain threads, not the loop's default ones (clients' DNS lookups use those). The
        # poller moves past these events only once the store holds them: a tick that fails before (the
        # store's write lock held past busy_timeout by the main loop's thread) fetches them again.
        events, next_block = await self.chainio.read(self.poller.fetch)
        rows = [compute_event_row(e) for e in events]
        for row in rows:
            self.duties.on_event(row["name"], json.loads(row["args"]), row["audit_id"])  # idempotent: a seat is inserted once
        self.tables.record_events(CURSOR, rows, next_block)
        self.poller.advance_to(next_block)
        for row in rows:
            self._count(row)
        if not self.view.workers and self._is_on_party_loop():
            await self.view.refresh()  # the first tick (on the main loop, before serving): the steps below route by it
        else:  # N+1 reads every registry_refresh_s: never on the path of a duty's step (issue 35)
            self._spawn_party("registry-view", self.view.refresh)
        self._advance_batches()
        for row in self.tables.get_audit_rows("open"):
            self._spawn_party(f"audit:{row['audit_id']}", lambda a=row["audit_id"]: self.audits.advance(a, self.head))
        for duty in self.tables.get_duties():
            self._spawn_party(f"duty:{duty.audit_id}:{duty.round}:{duty.slot}", lambda d=duty: self.duties.advance(d, self.head))
        if self.delivery is not None:
            self._spawn_party("delivery", lambda: self.delivery.advance(self.head))
        for audit_id in self.tables.get_undrawn_private_audits():  # a private draw's reveal: chain and store only
            self.chain_tasks.spawn(f"reveal:{audit_id}", lambda a=audit_id: self.audits.private_draw.advance_reveal(a, self.head))
        if self.omissions is not None:
            self.chain_tasks.spawn("omissions", lambda: self.omissions.advance(self.head))
        if self.ticks % 20 == 0:
            self.chain_tasks.spawn("stake", self._update_stake)
        self.ticks += 1

    def _is_on_party_loop(self) -> bool:
        return self.party_loop is None or self.party_loop is asyncio.get_running_loop()

    def _spawn_party(self, key: str, step) -> None:
        """Start a step that talks to the worker or peers on their loop (from the watcher's thread: handed over)."""
        if self._is_on_party_loop():
            self.tasks.spawn(key, step)
        elif not self.party_loop.is_closed():
            self.party_loop.call_soon_threadsafe(self.tasks.spawn, key, step)

    def _advance_batches(self) -> None:
        posting = self.tables.get_batches(("posting",))
        # One batch posts at a time, unless waiting receipts' promises are near their deadline: then
        # the next batch goes out beside the one posting (a post takes blocks under load; a promise cannot wait).
        behind = self.batches.promises is not None and self.batches.promises.is_post_due(self.head)
        if (not posting or behind) and self.batches.is_batch_due(self.head):
            posting = posting + [self.tables.get_batch(self.batches.create_batch(self.head))]
        # The first promise to fall due is a duty too: client work is shed once a receipt has waited half its
        # promise unbatched (the batcher is behind: it posts every batch_max_wait_s otherwise), before the post margin.
        earliest = self.tables.get_earliest_unbatched_promise()
        lead = max(compute_post_margin(self.chainio.preset.BATCH_BY_BLOCKS), self.chainio.preset.BATCH_BY_BLOCKS // 2)
        self.chainio.duties.set_standing("promises", Due("promises", "post_batch", earliest, lead_blocks=lead) if earliest is not None else None)
        for batch in posting:
            self.chain_tasks.spawn(f"batch:{batch['id']}", lambda b=batch: self.batches.post_batch(b["id"]))
        for batch in self.tables.get_batches(("posted",)):
            self.chain_tasks.spawn(f"batch:{batch['id']}", lambda b=batch: self.batches.advance_posted(b, self.head))
        for batch in self.tables.get_batches(("drawn",)):
            self.chain_tasks.spawn(f"batch:{batch['id']}", lambda b=batch: self.batches.advance_drawn(b))

    def _count(self, row: dict) -> None:
        args = json.loads(row["args"])
        if row["name"] == "Slashed" and args["node"].lower() == "0x" + self.chainio.address.hex():
            self.metrics.slashed_wei.inc(args["amountWei"])

    async def _update_stake(self) -> None:
        stake = await self.chainio.read(self.chainio.protocol.registry.call, "getStake", self.chainio.account.address)
        self.metrics.stake_wei.set(stake)
