"""Re-deriving every committee draw of an audit exactly as `Jobs._drawMembers` makes it.

A draw (round r, attempt k) of audit a, made in block B:

    seed      keccak(0x1c ‖ u64 audit id ‖ u8 round ‖ blockhash(entered + delay) [‖ secret]),
              entered = the round's start (AuditStarted), its escalation (EscalationStarted), or
              the lapse of a private draw never revealed (PrivateDrawMissed: drawn publicly from
              there); secret = the dispatcher's, for a private draw (PrivateDrawRevealed)
              (`verillm.spec.audit.compute_round_seed`, `RoundEntry`)
    epoch     the first entered block // epochBlocks (`Jobs._enterRound`: a fallback keeps it)
    excluded  the worker, the batch's dispatcher, every member drawn for the audit so far
              (`spec.audit.compute_round_exclusions`, as the contract passes them), and every
              node out of the draw at or before entered + delay: unbonded, or slashed or left
              below the minimum stake in the epoch or later (`Registry.outBlock`; `Registry.drawCommittee`: the draw
              repeated without it, `spec.audit.compute_round_committee`)
    count     attempt 0: the committee size of the round; a redraw: the seats whose receipt
              never came, filled in seat order (seats that posted keep their member)
    weights   `Registry.getModelWeights(model, epoch)` read at block B − 1 (an epoch's weights
              are fixed when it begins: nothing during it, a slash neither, changes them)

The draw is then `spec.audit.compute_round_committee(seed, attempt, count, slots, weights,
out blocks, entered + delay)`. A round
whose draw has too few candidates, or whose epoch is no longer readable, is abandoned
("pool exhausted"): that is re-derived too. Every rule here is the contract's, so on a chain
whose contracts are correct every check is "ok": a difference is an inconsistency.
"""

from dataclasses import dataclass

from verillm.chain.errors import ChainTimeout, ChainUnavailable, TransactionReverted
from verillm.chain.events import ChainEvent
from verillm.errors import ChainError, InvalidInput
from verillm.spec import audit as spec_audit


class HistoryUnavailable(ChainError):
    """The chain no longer serves the state of a past block (a node that prunes history: the
    project's anvil keeps the last 500 blocks' states); the draw can be re-derived only on an
    archive node."""


@dataclass(frozen=True)
class RoundEntry:
    """Where a round's seed comes from: its first entry (whose epoch its draws read), the block it
    was entered for its draw (later than ``first_block`` only after a missed private draw), and
    the secret of a private draw (empty for a public one)."""

    first_block: int
    entered_block: int
    secret: bytes


def get_round_entry(auditor, audit_id: int, round_index: int) -> RoundEntry:
    """Return round ``round_index``'s entry from the deployment's events (`auditor.named`)."""
    first = auditor.named("AuditStarted" if round_index == 0 else "EscalationStarted", auditId=audit_id)[0].block_number
    if round_index > 0:
        return RoundEntry(first, first, b"")
    missed = auditor.named("PrivateDrawMissed", auditId=audit_id)
    if missed:
        return RoundEntry(first, missed[0].block_number, b"")
    revealed = auditor.named("PrivateDrawRevealed", auditId=audit_id)
    return RoundEntry(first, first, bytes(revealed[0].args["secret"]) if revealed else b"")


@dataclass(frozen=True)
class DrawPlan:
    """What one draw of a round must produce."""

    round_index: int
    attempt: int
    seed: bytes
    epoch: int
    seed_block: int
    excluded: tuple[str, ...]
    count: int
    kept: tuple[str | None, ...]
    """The round's seats before the draw: a member who posted its receipt, None for a seat to fill."""


def compute_filled_seats(kept: tuple[str | None, ...], chosen: tuple[str, ...]) -> list[str]:
    """Return the seats after a draw: the empty ones filled with ``chosen`` in seat order, new seats appended."""
    seats, picks = list(kept), list(chosen)
    for i, seat in enumerate(seats):
        if seat is None:
            seats[i] = picks.pop(0)
    return seats + picks


def is_epoch_readable(epoch: int, block: int, epoch_blocks: int) -> bool:
    """Return whether a draw in ``block`` may read ``epoch`` (`Registry._requireReadable(epoch, false)`)."""
    now = spec_audit.compute_epoch(block, epoch_blocks)
    return not (epoch > now or epoch + 1 < now)


class CommitteeReplay:
    """Re-derives an audit's draws from the events of its deployment and the Registry's past state."""

    def __init__(self, auditor):
        self.auditor = auditor
        self.chain, self.protocol, self.preset = auditor.chain, auditor.protocol, auditor.preset

    # --- what a draw must be --------------------------------------------------------------------

    def compute_plan(self, audit_id: int, round_index: int, attempt: int, at: ChainEvent, base: dict) -> DrawPlan:
        """Return the plan of the draw of (round, attempt) made where ``at`` was emitted."""
        before = [e for e in self.auditor.named("CommitteeDrawn", auditId=audit_id) if self._key(e) < self._key(at)]
        drawn = tuple(dict.fromkeys(m.lower() for e in before for m in e.args["members"]))
        excluded = spec_audit.compute_round_exclusions(base["worker"], base["dispatcher"], drawn)
        entry = get_round_entry(self.auditor, audit_id, round_index)
        seed_block = entry.entered_block + self.preset.AUDIT_DRAW_DELAY_BLOCKS
        seed = spec_audit.compute_round_seed(audit_id, round_index, self.protocol.get_blockhash(seed_block), entry.secret)
        epoch = spec_audit.compute_epoch(entry.first_block, self.preset.EPOCH_BLOCKS)
        if attempt == 0:
            size = self.preset.COMMITTEE_SIZE if round_index == 0 else self.preset.ESCALATION_COMMITTEE_SIZE
            return DrawPlan(round_index, 0, seed, epoch, seed_block, excluded, size, ())
        previous = [e for e in before if e.args["round"] == round_index][-1].args["members"]
        posted = {e.args["slot"] for e in self.auditor.named("CommitteeReceiptPosted", auditId=audit_id)
                  if e.args["round"] == round_index and self._key(e) < self._key(at)}
        kept = tuple(m.lower() if slot in posted else None for slot, m in enumerate(previous))
        return DrawPlan(round_index, attempt, seed, epoch, seed_block, excluded, kept.count(None), kept)

    def compute_weights(self, model_id: bytes, epoch: int, at: ChainEvent) -> tuple[list[str], list[int]]:
        """Return the sortition table of ``epoch`` as the draw emitting ``at`` read it."""
        slots, weights = self._read_past(lambda: self.chain.call(self.protocol.registry, "getModelWeights", model_id, epoch, block=at.block_number - 1),
                                         at.block_number - 1)
        return [s.lower() for s in slots], list(weights)

    def _out_block(self, node: str, epoch: int, block: int) -> int:
        """The block from which ``node`` sits out draws of ``epoch``, as of ``block`` (0: never;
        `Registry.outBlock`: a slash or a leave after the seed block is past it, so any later
        block gives the same answer for this draw)."""
        return self._read_past(lambda: self.chain.call(self.protocol.registry, "outBlock", self.chain.w3.to_checksum_address(node), epoch, block=block), block)

    def compute_draw(self, plan: DrawPlan, model_id: bytes, at: ChainEvent) -> list[str] | None:
        """Return the seats the draw fills, or None when the contract must abandon the round (pool exhausted)."""
        if not is_epoch_readable(plan.epoch, at.block_number, self.preset.EPOCH_BLOCKS):
            return None
        slots, weights = self.compute_weights(model_id, plan.epoch, at)
        weights = spec_audit.compute_excluded_weights(slots, weights, plan.excluded)
        out = [self._out_block(slot, plan.epoch, at.block_number - 1) if weight else 0 for slot, weight in zip(slots, weights)]
        try:
            chosen = spec_audit.compute_round_committee(plan.seed, plan.attempt, plan.count, slots, weights, out, plan.seed_block)
        except InvalidInput:  # fewer candidates than seats: the contract's NotEnoughCandidates
            return None
        return compute_filled_seats(plan.kept, chosen)

    @staticmethod
    def _read_past(read, block: int):
        """Run a read at a past block; a node that no longer has that state raises HistoryUnavailable
        (an unreachable or slow node, or a revert, is not that: those propagate as they are)."""
        try:
            return read()
        except (ChainUnavailable, ChainTimeout, TransactionReverted):
            raise
        except ChainError as exc:
            raise HistoryUnavailable(f"the chain does not serve the state of block {block}: {exc}") from exc

    @staticmethod
    def _key(event: ChainEvent) -> tuple[int, int]:
        return event.block_number, event.log_index
