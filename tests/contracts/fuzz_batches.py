"""Multi-leaf batches in the protocol fuzzer (`protocol_fuzz.py`; docs/protocol.md §12 "The audit
draw", "Batching promises").

`new_audit` batches one receipt per batch. `new_batch` serves 2–4 jobs (any of workers 0, 1 and
the cheater, each with a fresh nonce, so distinct receipts) through one honest dispatcher (0 or
1), each with its batching promise, and posts them under one Merkle root (`Protocol.post_batch`
over the real tree, `spec.audit.compute_batch_levels`). MINIMAL audits every job of a batch
(AUDIT_RATE_BPS 10,000), so an honest dispatcher must start every leaf within
START_WINDOW_BLOCKS of the draw (else `slashMissedStart`): it starts the leaves ``first`` names
at once (at least one), each with its own Merkle path, and the rest later — when
`start_batched_leaf` says, or as an honest duty half a start window after the draw, or at the
start of the teardown (`ProtocolMachine._drive_to_the_end`). The promises carry the batch's leaves (`Promised.leaves`), so the client's
check, the dispatcher's answers to omission claims (the griefer claims kept promises) and the
teardown's batching invariant prove each leaf into the real multi-leaf root.
`grief_missed_start`: the griefer's `slashMissedDraw` / `slashMissedStart` (any index, in or out
of the batch, at any block) on these batches must always revert — the dispatcher is honest; the
honest-never-loses invariant would also catch a slash.
Counts (`STATS["batches"]`): batches, leaves, leaves started at once / later, grief reverts.
"""

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from verillm.chain import TransactionReverted
from verillm.spec.receipt import compute_receipt_hash

from helpers.contracts import PRESET, AuditRun
from fuzz_coverage import MAX_PROMISES
from fuzz_exits import _error
from fuzz_honest import CHEATER, MAX_ACTIVE, MAX_AUDITS

BATCH_MODES = ("open", "skip", "forge", "late")  # "withhold" is the cheater dispatching itself: new_audit's


class BatchRules:
    """Mixin of `ProtocolMachine` (see the module note)."""

    def _count_batch(self, what: str, n: int = 1) -> None:
        self.stats["batches"][what] = self.stats["batches"].get(what, 0) + n

    def _start_leaf(self, entry: tuple) -> None:
        batch, index, party, worker, dispatcher, mode, _ = entry
        self._track(AuditRun(self._start_selected(self._node(dispatcher), batch, index, party), party), worker, dispatcher, mode)

    @precondition(lambda self: len(self.audits) + len(self.pending_starts) + 2 <= MAX_AUDITS and len(self.promises) + 2 <= MAX_PROMISES)
    @rule(workers=st.lists(st.sampled_from([0, 1, CHEATER]), min_size=2, max_size=4), dispatcher=st.sampled_from([0, 1]),
          mode=st.sampled_from(BATCH_MODES), first=st.integers(1, 15))
    def new_batch(self, workers, dispatcher, mode, first):
        n = len(workers)
        if len(self.audits) + len(self.pending_starts) + n > MAX_AUDITS or len(self.promises) + n > MAX_PROMISES \
                or self._active() + n > MAX_ACTIVE + 1:
            self._step("new_batch:busy")
            return
        if CHEATER in workers and not self.registry("getNode", self._node(CHEATER).address)[4]:
            self._step("new_batch:cheater-gone")  # inactive (slashed out, or leaving: fuzz_exits): no job is sent to it
            return
        parties = []
        for w in workers:
            self.nonce += 1
            parties.append(self._worker(w, w == CHEATER, self.nonce))
        modes = [mode if w == CHEATER else "honest" for w in workers]
        promises = [self._promise(dispatcher, w, party, m, "keep") for w, party, m in zip(workers, parties, modes)]
        batch, _, _ = self._post_and_draw(self._node(dispatcher), [party.receipt for party in parties])
        drawn = self.reads.head()
        leaves = tuple(compute_receipt_hash(party.receipt) for party in parties)
        for pr in promises:
            pr.batch_id, pr.leaves = batch.batch_id, leaves
        now = [k for k in range(n) if first >> k & 1] or [0]
        for k in range(n):
            entry = (batch, k, parties[k], workers[k], dispatcher, modes[k], drawn)
            if k in now:
                self._start_leaf(entry)
            else:
                self.pending_starts.append(entry)
        self._count_batch("batches")
        self._count_batch(f"leaves_{n}")
        self._count_batch("leaves_started_at_once", len(now))
        self._step("new_batch")

    @precondition(lambda self: self.pending_starts)
    @rule(pick=st.integers(0, 3))
    def start_batched_leaf(self, pick):
        """The dispatcher starts a pending leaf of a multi-leaf batch (any time in its start window)."""
        self._start_leaf(self.pending_starts.pop(pick % len(self.pending_starts)))
        self._count_batch("leaves_started_later")
        self._step("start_batched_leaf")

    def _start_due_leaves(self, now: bool = False) -> None:
        """An honest dispatcher's duty: every selected leaf started by half the start window."""
        for entry in list(self.pending_starts):
            if now or self.reads.head() >= entry[6] + PRESET.START_WINDOW_BLOCKS // 2:
                self.pending_starts.remove(entry)
                self._start_leaf(entry)
                self._count_batch("leaves_started_by_duty")

    def _honest(self) -> None:
        super()._honest()
        self._start_due_leaves()
        self._honest_missed_starts()  # fuzz_issue20

    @precondition(lambda self: any(pr.leaves for pr in self.promises))
    @rule(pick=st.integers(0, MAX_PROMISES - 1), index=st.integers(0, 5), draw=st.booleans())
    def grief_missed_start(self, pick, index, draw):
        batched = [pr for pr in self.promises if pr.leaves]
        pr = batched[pick % len(batched)]
        call, args = ("slashMissedDraw", (pr.batch_id,)) if draw else ("slashMissedStart", (pr.batch_id, index))
        try:
            self.p._send(self.p.batches, call, *args, sender=self.world.outsider)
        except TransactionReverted as exc:
            self._count_batch(f"grief_{call}:{_error(exc)}")
        else:
            self._fail(f"{call}{args} slashed honest dispatcher {pr.dispatcher}")
        self._step(f"grief_missed_start:{call}")
