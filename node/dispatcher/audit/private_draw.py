"""The dispatcher's private draw of a first round (docs/protocol.md §12 "Private draws").

This node started the audit with a commitment to a secret (`ChainIO.compute_draw_secret`, derived
from its key: a restart reveals the same one). Once the round's seed block is mined it previews
the committee with the secret (`Delivery.previewCommittee`, an eth_call to its own RPC node), sends
each member its verification job — the member runs it as any other job: nothing public says it
sits on a committee — and reveals the draw with every receipt that came back (`revealRound`), as
soon as all have, or once a third of the draw window has passed (`REVEAL_WAIT_FRACTION`). Seats whose receipt has not
come go on as after a public draw: `CommitteeDriver` posts them, or redraws them.

Two loops share the work: the main loop (`AuditDriver` → `advance(..., reveal=False)`) previews the
committee and sends the members' jobs (peer HTTP); the chain watcher's thread decides and sends the
reveal (`advance_reveal`: chain and store only, the answered receipts read from `committee_jobs`),
so no client load on the main loop can make the reveal late (issue 35).

The start sent only the worker's receipt hash (`Batches.startPrivateAudit`): the receipt itself
names the members' jobs (its outputHash is their input hash), so it goes on-chain with the reveal.

The reveal is sent at the latest a third of the way into the window. One that lands after the
window (a loaded machine, a restart) is still the same draw: until `reveal_by` (the window plus
PRIVATE_REVEAL_GRACE_BLOCKS) it costs MEMBER_PENALTY_BPS of the stake, so a dispatcher that missed
draw_by still reveals. Not revealing by then gets this dispatcher slashed and the round drawn
publicly (`Jobs.lapse`); after such a missed reveal the node shows the worker's receipt
(`supply_receipt`) so the public draw can run.
"""

import logging

from verillm.chain.errors import TransactionReverted
from verillm.chain.protocol import AuditState
from verillm.spec.audit import RoundState
from verillm.spec.types import Receipt

from verillm.node.dispatcher.audit.committee import CommitteeDriver
from verillm.node.dispatcher.chainio import ChainIO, is_revert
from verillm.node.dispatcher.deadlines import Due
from verillm.node.dispatcher.tasks import KeyedTasks
from verillm.node.store.dispatcher_tables import DispatcherTables

log = logging.getLogger(__name__)

UNSEATABLE = ("NotEnoughCandidates", "EpochNotReadable")  # Registry.drawCommittee: the round cannot be drawn

REVEAL_WAIT_FRACTION = 3
"""The reveal goes out with whatever receipts came once a third of the draw window has passed
(MINIMAL: 3 of 10 blocks; MAINNET: 33 of 100): the rest of the window is room for the transaction
to be mined on a loaded machine or a congested chain (a reveal sent 3 blocks before the end was
mined a block late on a loaded 2-core machine, and the lapse slashed the honest dispatcher).
A member that answers later learns its seat before its receipt is posted; no stake is at risk."""


def is_reveal_due(state: RoundState, head: int, seats: int, answered: int) -> bool:
    """Return whether to reveal now: every seat answered, or a third of the window has passed
    (late, past draw_by, until reveal_by: at once; the penalty is far below the lapse's slash)."""
    d = state.deadlines
    if head < d.draw_after or head + 1 > d.reveal_by:
        return False
    latest = d.draw_after + max(1, (d.draw_by - d.draw_after) // REVEAL_WAIT_FRACTION)
    return answered == seats or head + 1 >= latest


class PrivateDrawDriver:
    """Draws this dispatcher's first rounds privately and reveals them with their receipts."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, committee: CommitteeDriver, tasks: KeyedTasks):
        self.chainio, self.tables, self.committee, self.tasks = chainio, tables, committee, tasks
        self.withhold_reveal = False  # PartyFaults: a dispatcher that never reveals (tests only)

    async def advance(self, audit: AuditState, state: RoundState, head: int, reveal: bool = True) -> None:
        """Send each previewed member its job; with ``reveal``, reveal the draw too once due. The node's
        `AuditDriver` passes ``reveal=False``: the reveal is the chain watcher's own step
        (`advance_reveal`, on its thread), so no load on the main loop can make it late."""
        audit_id = audit.audit_id
        if head <= state.deadlines.draw_after or self.withhold_reveal:
            return  # the seed block's hash is not known yet
        if reveal:  # one decision, one place: the step the watcher runs (called here when driven alone, as tests do)
            self.tasks.spawn(f"reveal:{audit_id}", lambda: self.advance_reveal(audit_id, head))
        secret = self.chainio.compute_draw_secret(audit.batch_id, audit.index)
        members = await self._preview(audit_id, secret)
        if members is None:
            return
        for slot, member in enumerate(members):
            seat = self.committee.get_or_create(audit_id, 0, slot, member)
            if seat.status == "sending" and not self.committee.withhold_jobs:
                self.tasks.spawn(f"seat:{audit_id}:0:{slot}:{member.hex()}", lambda s=seat: self.committee.run_seat(s))

    async def advance_reveal(self, audit_id: int, head: int) -> None:
        """Reveal this dispatcher's private draw of ``audit_id`` once due, with the receipts its members
        have sent so far (the main loop sends their jobs: `advance`). Chain and store only: the watcher
        runs it on its own thread (node/dispatcher/watcher_thread.py)."""
        state = await self.chainio.get_round_state(audit_id)
        if not state.private_draw or head <= state.deadlines.draw_after or self.withhold_reveal:
            return  # drawn already (or publicly), or the seed block's hash is not known yet
        due = self.reveal_due(audit_id, state)
        self.chainio.duties.expect(due)
        audit = await self.chainio.read(self.chainio.protocol.get_audit, audit_id)
        secret = self.chainio.compute_draw_secret(audit.batch_id, audit.index)
        members = await self._preview(audit_id, secret)
        if members is None:
            await self._reveal(audit_id, secret, [], due)
            return
        answered = self._answered(audit_id, members)
        if members and is_reveal_due(state, head, len(members), len(answered)):
            await self._reveal(audit_id, secret, answered, due)

    async def _preview(self, audit_id: int, secret: bytes) -> list[bytes] | None:
        """The members the secret draws (`Delivery.previewCommittee`), or None when the pool cannot seat them."""
        try:
            previewed = await self.chainio.read(self.chainio.protocol.preview_committee, audit_id, secret)
        except TransactionReverted as exc:
            if exc.error not in UNSEATABLE:
                raise
            # Too few candidates: the reveal abandons the round, nobody slashed (as a public draw
            # would); left unrevealed, the lapse would slash this dispatcher.
            log.warning("audit %d: the pool cannot seat the private draw (%s); revealing it at once", audit_id, exc.error)
            return None
        return [bytes.fromhex(m[2:]) for m in previewed]

    def _answered(self, audit_id: int, members: list[bytes]) -> list[tuple[int, Receipt]]:
        """(slot, receipt) of each seat whose member has answered its job (the store's committee jobs)."""
        seats = [self.tables.get_committee_job(audit_id, 0, slot, member) for slot, member in enumerate(members)]
        return [(s.slot, s.receipt) for s in seats if s is not None and s.status == "answered"]

    def reveal_due(self, audit_id: int, state: RoundState) -> Due:
        """The reveal's deadline: the draw window's last block (a later reveal, by reveal_by, pays the
        penalty; none by then is slashed at the lapse); still pending in the window's second half, it sheds client work."""
        return Due(f"reveal:{audit_id}", "reveal_round", state.deadlines.draw_by, lead_blocks=self.chainio.preset.DRAW_WINDOW_BLOCKS // 2)

    def worker_receipt(self, audit_id: int) -> Receipt:
        """The worker's signed receipt of the audited job: the start sent only its hash, the reveal shows it."""
        return self.tables.get_dispatched_job(bytes.fromhex(self.tables.get_audit_row(audit_id)["job_hash"])).receipt

    async def supply_receipt(self, audit_id: int) -> None:
        """After a missed reveal (this node was down through the window, slashed at the lapse), show
        the worker's receipt so the round is drawn publicly: the audit goes on."""
        try:
            await self.chainio.send("supply_receipt", audit_id, self.worker_receipt(audit_id), audit_id=audit_id)
        except Exception as exc:
            if is_revert(exc, "AlreadyHandled") or is_revert(exc, "UnexpectedPhase"):  # shown already, or the round moved on
                return
            raise
        log.warning("audit %d: private draw missed; the worker's receipt is shown for a public draw", audit_id)

    async def _reveal(self, audit_id: int, secret: bytes, answered: list, due: Due | None = None) -> None:
        try:
            tx = await self.chainio.send("reveal_round", audit_id, secret, self.worker_receipt(audit_id), answered, audit_id=audit_id, due=due)
        except Exception as exc:
            if is_revert(exc, "UnexpectedPhase"):  # revealed already (a previous run), or the round moved on
                if due is not None:
                    self.chainio.duties.forget(due.key)
                return
            if not answered or not isinstance(exc, TransactionReverted):
                raise
            # A receipt the contract refuses (a member that answered with a bad one) must not cost
            # this dispatcher its stake: reveal the draw alone; the seats go on as after a public
            # draw, each receipt posted (or refused) on its own by CommitteeDriver.
            log.warning("audit %d: reveal with %d receipt(s) refused (%s); revealing the draw alone", audit_id, len(answered), exc)
            answered = []
            tx = await self.chainio.send("reveal_round", audit_id, secret, self.worker_receipt(audit_id), answered, audit_id=audit_id, due=due)
        for slot, _ in answered:
            if slot >= len(tx.value):
                break  # the round was abandoned (pool exhausted): no seat to record
            seat = self.tables.get_committee_job(audit_id, 0, slot, bytes.fromhex(tx.value[slot][2:]))
            if seat is not None:
                self.tables.update_committee_job(seat, status="posted", error=None)
        log.info("audit %d: committee drawn privately and revealed with %d receipt(s)", audit_id, len(answered))
