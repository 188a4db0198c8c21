"""Batching promises, the dispatcher's side (docs/protocol.md §12 "Batching promises";
contracts/src/Coverage.sol; the rules in verillm.spec.promise).

    promise  with every client job it keeps, the dispatcher signs (receipt hash, itself,
             head + BATCH_BY_BLOCKS) and stores it before answering; a repeated job gets the
             same promise. It promises only what it can batch: an inactive node (deregistering,
             slashed below the minimum) serves no job, nor does a node whose operator is leaving
             (`verillm node unbond` records it in the store: `node_leaving`). And only a receipt
             still auditable at its batch's last start (its auditableUntilBlock ≥ the promised
             block + the start span): a worker's receipt with a shorter horizon is that worker's
             failure, and the job goes to the next worker (docs/protocol.md §12 "Receipt horizons").
    batch    the batcher posts as soon as the earliest promise of a waiting receipt is within
             `compute_post_margin` blocks of its deadline, whatever its size and wait rules say,
             and at once while the node is leaving. Keepability: a node that stopped being
             active (a penalty, an unbond) may still post until its promises fall due
             (`spec.promise.is_batch_allowed`), so the batcher posts whatever it promised.
    answer   every `OmissionClaimed` naming this node is answered with the inclusion proof of the
             receipt in the batch that holds it (`proveIncluded`): a claim on an included receipt
             pays this node its answer's gas out of the claimant's bond; one on a receipt never
             batched cannot be answered.
    show     the same proof is served off-chain to anyone who asks
             (`GET /v1/verillm/receipts/{hash}/inclusion`), so a client checks before it claims.

Stateless between ticks: each tick re-reads recorded claims and the chain, skipping claims whose
OmissionAnswered / OmissionSlashed event is recorded; an answer repeated before that event is
confirmed reverts ClaimResolved and is ignored.
"""

import logging
from dataclasses import dataclass

from verillm.errors import QueueFull
from verillm.spec import promise as spec_coverage
from verillm.spec.merkle import MerkleProof
from verillm.spec.params import compute_timeline
from verillm.spec.receipt import compute_receipt_hash, verify_receipt_horizon

from verillm.node.dispatcher.chainio import ChainIO, is_revert
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.keys import NodeKey

log = logging.getLogger(__name__)

OPEN = spec_coverage.OPEN


class CannotPromise(QueueFull):
    """This node cannot batch a job's receipt in time, so it does not take the job."""

    code = "cannot_batch"


def compute_post_margin(batch_by_blocks: int) -> int:
    """Blocks before a promise's deadline at which its receipt's batch is posted at the latest:
    a third of the promise, at least 3 (a mempool wait and a restart must fit in it)."""
    return max(3, batch_by_blocks // 3)


class Promises:
    """Signs, stores and reads back this dispatcher's batching promises."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, key: NodeKey):
        self.chainio, self.tables, self.key = chainio, tables, key
        self.domain = chainio.protocol.get_promise_domain()
        self.preset = chainio.protocol.preset
        self.batch_by_blocks = self.preset.BATCH_BY_BLOCKS

    async def verify_capacity(self) -> None:
        """Raise CannotPromise unless this node can post a batch before a new promise falls due."""
        # read for a client's request: on the clients' chain threads, never the duties' (node/dispatcher/chainio.py)
        active = await self.chainio.read_for_clients(self.chainio.protocol.registry.call, "isActive", self.chainio.account.address)
        if not active:
            raise CannotPromise("this node is not active in the Registry: it could not batch the job's receipt")
        if self.tables.get_leaving_since() is not None:
            raise CannotPromise("this node is leaving (`verillm node unbond`): it makes no new batching promise")
        head = await self.chainio.block_number_for_clients()
        earliest = self.tables.get_earliest_unbatched_promise()
        if earliest is not None and earliest < head:
            raise CannotPromise(f"the batcher is behind: a receipt promised for block {earliest} is still unbatched at {head}")

    async def verify_horizon(self, receipt, for_duty: bool = False) -> None:
        """Raise InvalidProof unless ``receipt`` is auditable until a promise made now (head +
        BATCH_BY_BLOCKS) + the start span: a worker that signs a short horizon makes its receipt
        unauditable before the batch holding it could be drawn (`spec.verify_receipt_horizon`)."""
        head = await (self.chainio.block_number() if for_duty else self.chainio.block_number_for_clients())
        verify_receipt_horizon(receipt, spec_coverage.compute_batch_by_block(head, self.batch_by_blocks), self.preset)

    async def make(self, job_hash: bytes, receipt) -> spec_coverage.SignedPromise:
        """Return the promise for a kept job, signing and storing it the first time. Its deadline is
        head + BATCH_BY_BLOCKS, or earlier if the receipt's horizon (checked by `verify_horizon` a few
        blocks ago) would otherwise end before the batch's last audit start."""
        stored = self.tables.get_promise(job_hash)
        receipt_hash = compute_receipt_hash(receipt)
        if stored is not None:
            promise = spec_coverage.BatchPromise(receipt_hash, self.key.address, stored[0])
            return spec_coverage.SignedPromise(promise, stored[1])
        if self.tables.get_leaving_since() is not None:
            raise CannotPromise("this node is leaving (`verillm node unbond`): it makes no new batching promise")
        head = await self.chainio.block_number_for_clients()
        batch_by = min(spec_coverage.compute_batch_by_block(head, self.batch_by_blocks),
                       receipt.auditable_until_block - compute_timeline(self.preset).start_span)
        if batch_by < head:
            raise CannotPromise(f"receipt 0x{receipt_hash.hex()} is auditable only until block {receipt.auditable_until_block}: "
                                f"no batch posted from head {head} on could still start its audit")
        promise = spec_coverage.BatchPromise(receipt_hash, self.key.address, batch_by)
        signed = spec_coverage.sign_promise(promise, self.key.private_key, self.domain)
        self.tables.insert_promise(job_hash, receipt_hash, promise.batch_by_block, signed.signature)
        return signed

    def is_post_due(self, head: int) -> bool:
        """Whether a waiting receipt's promise is close enough to its deadline to post now, or the
        node is leaving (`verillm node unbond` waits for every promised receipt to be posted)."""
        earliest = self.tables.get_earliest_unbatched_promise()
        if earliest is None:
            return False
        return self.tables.get_leaving_since() is not None or head >= earliest - compute_post_margin(self.batch_by_blocks)


class OmissionAnswers:
    """Answers omission claims against this node with inclusion proofs."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables):
        self.chainio, self.tables = chainio, tables

    async def advance(self, head: int) -> None:
        """Answer every recorded claim naming this node whose proof window is still open and which
        is not resolved yet (a resolved claim's answer would only rebuild its proof and revert)."""
        me = "0x" + self.chainio.address.hex()
        resolved = {e["args"]["claimId"] for name in ("OmissionAnswered", "OmissionSlashed") for e in self.tables.get_events(name)}
        for event in self.tables.get_events("OmissionClaimed"):
            args = event["args"]
            if args["dispatcher"].lower() == me and head <= args["proveDeadline"] and args["claimId"] not in resolved:
                await self.answer(args["claimId"], bytes.fromhex(args["receiptHash"][2:]))

    async def answer(self, claim_id: int, receipt_hash: bytes) -> bool:
        """Prove the claimed receipt's inclusion; return whether an answer was sent."""
        found = find_stored_inclusion(self.tables, receipt_hash)
        if found is None:
            log.error("omission claim %d: receipt 0x%s is not in any posted batch of this node; the stake is at risk", claim_id, receipt_hash.hex())
            return False
        try:
            await self.chainio.send("prove_included", claim_id, found.batch_id, found.proof)
        except Exception as exc:
            if not is_revert(exc, "ClaimResolved"):
                raise
            return False
        log.info("omission claim %d answered: receipt 0x%s is leaf %d of batch %d", claim_id, receipt_hash.hex(), found.proof.index, found.batch_id)
        return True


@dataclass(frozen=True)
class StoredInclusion:
    """Where this node batched a receipt, as it stored the batch when posting it."""

    batch_id: int
    posted_block: int
    root: bytes
    proof: MerkleProof


def find_stored_inclusion(tables: DispatcherTables, receipt_hash: bytes) -> StoredInclusion | None:
    """Return the inclusion proof of ``receipt_hash`` in the posted batch that holds it, rebuilt from
    the receipts this node stored for that batch; None while it is in no posted batch. The omission
    answer and the public inclusion route both use it, so a client sees the proof the node would
    answer a claim with."""
    job = tables.get_job_by_receipt_hash(receipt_hash)
    if job is None or job.batch_row is None:
        return None
    batch = tables.get_batch(job.batch_row)
    if batch["batch_id"] is None:
        return None
    hashes = [compute_receipt_hash(j.receipt) for j in tables.get_batch_jobs(job.batch_row)]
    proof = spec_coverage.compute_inclusion_proof(hashes, receipt_hash)
    return StoredInclusion(batch["batch_id"], batch["posted_block"], bytes.fromhex(batch["root"]), proof)
