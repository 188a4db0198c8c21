"""Receipt batches, the audit draw and audit starts (docs/protocol.md §12 "Messages, in order", steps 1–2).

    posting  the batch row and its leaf indices are written, then `Batches.postBatch(root, count)`
    posted   once the seed block (posted + AUDIT_DRAW_DELAY_BLOCKS) is mined: `drawAudit` with
             this node's BLS-VRF proof over keccak(0x13 ‖ root ‖ blockhash(seed block))
    drawn    every job the VRF output selects, or whose client asked for an audit, gets
             `startAudit` (receipt, Merkle proof into the batch, output length); its committee
             is drawn later from a blockhash after the start (`Jobs.drawRound`, by the audit
             driver: a selected audit whose round is never drawn slashes this dispatcher)
    started  every selected job has its audit id (`dispatch_audits`), or was skipped by the
             contract (`AuditSkipped`: another audit owns the receipt, or its worker's horizon
             passed; the duty is done)

A batch is posted when `batch_max_receipts` receipts wait, the oldest has waited
`batch_max_wait_s`, or a receipt's batching promise is near its deadline (node/dispatcher/promises.py). A restart finds a batch still 'posting' and looks for its BatchPosted
event before posting again, so a root is never posted twice; so does any later attempt, from the
block its first send was made at (`sent_from_block`), without waiting for the watcher's confirmations.
"""

import logging
import time

from verillm.chain.errors import ChainTimeout
from verillm.chain.events import EventPoller
from verillm.chain.protocol import ZERO32
from verillm.spec import audit as spec_audit
from verillm.spec.audit import compute_draw_commitment, compute_private_draw_bond
from verillm.spec.deadlines import compute_batch_draw_by
from verillm.spec.receipt import compute_receipt_hash

from verillm.node.dispatcher.deadlines import Due
from verillm.node.dispatcher.chainio import ChainIO, is_revert
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.metrics import NodeMetrics

log = logging.getLogger(__name__)


class BatchScheduler:
    """Posts this dispatcher's receipt batches, draws them and starts the audits they select."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, metrics: NodeMetrics, vrf_secret_key: int,
                 max_receipts: int, max_wait_s: float):
        self.chainio, self.tables, self.metrics = chainio, tables, metrics
        self.vrf_secret_key = vrf_secret_key
        self.max_receipts = min(max_receipts, chainio.preset.MAX_BATCH_RECEIPTS)
        self.max_wait_s = max_wait_s
        self.promises = None  # node/dispatcher/promises.py's Promises: their deadlines make a batch due

    # --- posting ------------------------------------------------------------------------------

    def is_batch_due(self, head: int | None = None) -> bool:
        """Return whether waiting receipts should be posted now: full, waited long enough, or a
        batching promise near its deadline (at chain head ``head``)."""
        oldest = self.tables.get_oldest_unbatched_at()
        if oldest is None:
            return False
        if head is not None and self.promises is not None and self.promises.is_post_due(head):
            return True
        waiting = len(self.tables.get_unbatched_jobs(self.max_receipts))
        return waiting >= self.max_receipts or time.time() - oldest >= self.max_wait_s

    def create_batch(self, head: int | None = None) -> int:
        """Give the oldest waiting receipts their leaf indices in a new batch row; return it.

        At most `max_receipts`, unless a promise is near its deadline (`Promises.is_post_due`): then
        every waiting receipt up to the contracts' MAX_BATCH_RECEIPTS. One batch posts at a time, so
        a batch size below the clients' rate would let the backlog outgrow every promise (measured:
        batches of 4 at 96 completions in flight posted up to 59 blocks past their promises)."""
        behind = head is not None and self.promises is not None and self.promises.is_post_due(head)
        jobs = self.tables.get_unbatched_jobs(self.chainio.preset.MAX_BATCH_RECEIPTS if behind else self.max_receipts)
        hashes = [compute_receipt_hash(j.receipt) for j in jobs]
        root = spec_audit.compute_batch_levels(hashes)[-1][0]
        return self.tables.insert_batch(root, [j.job_hash for j in jobs])

    async def post_batch(self, row: int) -> None:
        """Post a 'posting' batch, unless an earlier attempt already did (this node's watcher recorded
        its event, or the chain holds it since the first send: `_find_own_post`)."""
        batch = self.tables.get_batch(row)
        found = self._find_posted(batch) or await self._find_own_post(batch)
        if found is None:
            if batch["sent_from_block"] is None:  # written (durably) before the transaction exists: a retry always looks
                self.tables.mark_batch_sending(row, await self.chainio.block_number())
            jobs = self.tables.get_batch_jobs(row)
            receipts = [compute_receipt_hash(j.receipt) for j in jobs]
            promised = [p[0] for p in (self.tables.get_promise(j.job_hash) for j in jobs) if p is not None]
            due = Due(f"post_batch:{row}", "post_batch", min(promised)) if promised else None  # the first promise to fall due
            if due is not None:
                self.chainio.duties.expect(due)
            tx = await self.chainio.send("post_batch", receipts, due=due)
            found = (tx.value.batch_id, tx.receipt["blockNumber"])
        self.tables.update_batch(row, status="posted", batch_id=found[0], posted_block=found[1])
        log.info("batch row %d posted as batch %d (%d receipts)", row, found[0], batch["count"])

    async def _find_own_post(self, batch: dict) -> tuple[int, int] | None:
        """This node's post of ``batch`` on chain, searched from the block of its first send: the
        watcher records an event only once confirmed, and an attempt whose post landed may have failed
        after (its receipt or bookkeeping), so a retry would post the same root as a second batch,
        never drawn: a missed draw, slashed. The transactions sent so far are waited for first; while
        one is still pending (a fee cap the base fee outgrew) this raises rather than send again (a
        second post would only queue behind it, and land with it)."""
        if batch["sent_from_block"] is None:
            return None
        if not await self.chainio.wait_own_pending_mined():
            raise ChainTimeout(f"batch row {batch['id']}: an earlier transaction of this node is still pending; "
                               "its post is not sent again before it lands or is replaced")
        # The watcher's poller, without its confirmations: in its ranges (providers cap eth_getLogs).
        search = EventPoller(self.chainio.chain, [self.chainio.protocol.batches], batch["sent_from_block"], names={"BatchPosted"})
        events, _ = await self.chainio.read(search.fetch)
        me = self.chainio.account.address.lower()
        for event in events:
            if event.args["dispatcher"].lower() == me and event.args["root"] == bytes.fromhex(batch["root"]):
                return event.args["batchId"], event.block_number
        return None

    def _find_posted(self, batch: dict) -> tuple[int, int] | None:
        me = "0x" + self.chainio.address.hex()
        for event in self.tables.get_events("BatchPosted"):
            args = event["args"]
            if args["dispatcher"].lower() == me and args["root"] == "0x" + batch["root"]:
                return args["batchId"], event["block_number"]
        return None

    # --- the draw -----------------------------------------------------------------------------

    async def advance_posted(self, batch: dict, head: int) -> None:
        """Draw the batch once its seed block is mined (and before the draw window closes)."""
        preset = self.chainio.preset
        seed_block, draw_by = batch["posted_block"] + preset.AUDIT_DRAW_DELAY_BLOCKS, compute_batch_draw_by(batch["posted_block"], preset)
        if head <= seed_block:
            return
        on_chain = await self.chainio.read(self.chainio.protocol.batches.call, "getBatch", batch["batch_id"])
        if on_chain[5] == 0 and head > draw_by:
            self.tables.update_batch(batch["id"], status="missed", error=f"draw window closed at block {draw_by}")
            log.error("batch %d: missed its draw window; the dispatcher is slashable", batch["batch_id"])
            return
        if on_chain[5] == 0:
            due = Due(f"draw_audit:{batch['batch_id']}", "draw_audit", draw_by, lead_blocks=preset.DRAW_WINDOW_BLOCKS // 2)  # a missed draw is slashed
            self.chainio.duties.expect(due)
            try:
                await self.chainio.send("draw_audit", batch["batch_id"], self.vrf_secret_key, batch_id=batch["batch_id"], due=due)
            except Exception as exc:
                if not is_revert(exc, "AlreadyDrawn"):
                    raise
            on_chain = await self.chainio.read(self.chainio.protocol.batches.call, "getBatch", batch["batch_id"])
        self.tables.update_batch(batch["id"], status="drawn", beta=bytes(on_chain[4]).hex())
        for job in self.tables.get_batch_jobs(batch["id"]):
            selected = spec_audit.is_audited(bytes(on_chain[4]), job.batch_index, self.chainio.preset.AUDIT_RATE_BPS)
            self.metrics.audit_draws.labels(selected="true" if selected else "false").inc()

    # --- audit starts -------------------------------------------------------------------------

    def get_selection(self, batch: dict) -> list:
        """Return the batch's jobs that need an audit: drawn by the VRF or requested by the client."""
        beta, rate = bytes.fromhex(batch["beta"]), self.chainio.preset.AUDIT_RATE_BPS
        jobs = self.tables.get_batch_jobs(batch["id"])
        return [(j, not spec_audit.is_audited(beta, j.batch_index, rate)) for j in jobs
                if j.audit_requested or spec_audit.is_audited(beta, j.batch_index, rate)]

    async def advance_drawn(self, batch: dict) -> None:
        """Start every selected audit not started yet; mark the batch started when all are recorded."""
        unrecorded = 0
        for job, requested in self.get_selection(batch):
            if self._is_handled(batch, job.batch_index):
                continue
            await self.start_audit(batch, job, requested)
            # A run killed after its startAudit was mined leaves the audit unrecorded here until the
            # watcher has replayed the AuditStarted event: keep the batch 'drawn' so the next head
            # retries, instead of marking it started with the audit lost (the job stuck 'committed').
            unrecorded += not self._is_handled(batch, job.batch_index)
        if not unrecorded:
            self.tables.update_batch(batch["id"], status="started")

    def _is_handled(self, batch: dict, index: int) -> bool:
        """Whether the leaf has its audit recorded, or the contract skipped its start."""
        return self.tables.get_audit_for_leaf(batch["id"], index) is not None or self._find_started(batch["batch_id"], index) == 0

    async def start_audit(self, batch: dict, job, requested: bool) -> None:
        levels = spec_audit.compute_batch_levels([compute_receipt_hash(j.receipt) for j in self.tables.get_batch_jobs(batch["id"])])
        # A selected job is drawn privately (its members learn their seats only with their receipts
        # on-chain), its bond returned at the reveal; a request this node pays for is drawn
        # publicly: only a selected start may commit.
        fee = self.chainio.preset.COMMITTEE_SIZE * self.chainio.preset.AUDIT_FEE_WEI if requested else compute_private_draw_bond(self.chainio.preset)
        commitment = ZERO32 if requested else compute_draw_commitment(self.chainio.compute_draw_secret(batch["batch_id"], job.batch_index))
        due = self._start_due(batch, job.batch_index)
        if due is not None:
            self.chainio.duties.expect(due)
        try:
            try:
                tx = await self.chainio.send("start_audit", batch["batch_id"], job.batch_index, job.receipt, levels,
                                             value_wei=fee, draw_commitment=commitment, batch_id=batch["batch_id"], due=due)
            except Exception as exc:
                if commitment == ZERO32 or not is_revert(exc, "ReceiptExpired", "NotActiveNode"):
                    raise
                # A private start is skipped only for a receipt proven taken: an expired one (its
                # horizon passed, or its worker left) is skipped by a public start, which reads the
                # receipt. Left unstarted, the missed start would slash this dispatcher.
                log.info("job 0x%s: its receipt expired (%s); starting it publicly to have it skipped", job.job_hash.hex(), exc.error)
                tx = await self.chainio.send("start_audit", batch["batch_id"], job.batch_index, job.receipt, levels,
                                             value_wei=0, batch_id=batch["batch_id"])
            audit_id = tx.value
        except Exception as exc:
            if not is_revert(exc, "AlreadyHandled", "ReceiptReplayed", "ReceiptExpired"):
                raise
            audit_id = self._find_started(batch["batch_id"], job.batch_index)
            if audit_id is None:
                return  # started by a previous run (or refused as a request): its event is not recorded yet
        if audit_id == 0:
            log.info("job 0x%s (batch %d #%d): start skipped, its receipt has its audit already", job.job_hash.hex(),
                     batch["batch_id"], job.batch_index)
            return
        self.tables.insert_audit(audit_id, job.job_hash, batch["id"], job.batch_index, requested)
        log.info("audit %d started for job 0x%s (batch %d #%d)", audit_id, job.job_hash.hex(), batch["batch_id"], job.batch_index)

    def _start_due(self, batch: dict, index: int) -> Due | None:
        """A selected leaf's start: due within START_WINDOW_BLOCKS of the draw (a missed start is slashed)."""
        drawn = [e for e in self.tables.get_events("AuditDrawn") if e["batch_id"] == batch["batch_id"]]
        if not drawn:
            return None  # the watcher has not recorded the draw yet: the next pass knows its block
        window = self.chainio.preset.START_WINDOW_BLOCKS
        return Due(f"start_audit:{batch['batch_id']}:{index}", "start_audit", drawn[0]["block_number"] + window, lead_blocks=window // 2)

    def _find_started(self, batch_id: int, index: int) -> int | None:
        """The audit id the chain recorded for the leaf, 0 when it skipped the start, None when
        neither event is recorded (yet)."""
        for event in self.tables.get_events("AuditStarted"):
            if event["args"]["batchId"] == batch_id and event["args"]["index"] == index:
                return event["audit_id"]
        for event in self.tables.get_events("AuditSkipped"):
            if event["args"]["batchId"] == batch_id and event["args"]["index"] == index:
                return 0
        return None
