"""Batching promises and the omission challenge in the protocol fuzzer (`protocol_fuzz.py`;
docs/protocol.md §12 "Batching promises", contracts/src/Coverage.sol).

Every job a worker serves comes with its dispatcher's signed promise (`verillm.spec.promise`):
its receipt hash will be a leaf of a batch the dispatcher posts by `batchByBlock` = the head when
the job was served + BATCH_BY_BLOCKS. The promise's fate (`Promised.fate`):
    keep    the dispatcher batches the receipt at once (every honest dispatcher; the cheater when
            `new_audit`'s `batching` says so), then draws and starts its audit as before
    never   the cheater (node 2) as dispatcher never batches it: no batch, no audit
    late    the cheater batches it once `batchByBlock` has passed (`cheat_batches_late`, any step
            after the deadline, or never), then draws and starts its audit
    wrong   the cheater batches a different leaf in time (the receipt it audits is not the one it
            promised)
Honest parties (on every step: the dispatchers' answers before the audits' turns,
`_honest_coverage_answers`; the client after them, `_honest_client`):
    client      the holder of every promise: once `batchByBlock` is mined it looks for the leaf in
                the dispatcher's batches posted ≤ `batchByBlock` (on-chain root, dispatcher and
                posted block, `spec.is_inclusion_proof`) and claims with the bond whenever it
                cannot see it (strict: it never trusts a batch it cannot check); it slashes every
                unanswered claim once the proof window has passed (anyone may)
    dispatcher  an honest dispatcher (and the cheater on a promise it kept) answers every claim on
                its promises at once with the Merkle proof into its batch
Adversarial rules (mixed into `ProtocolMachine`):
    cheat_batches_late   node 2 posts the batch of a "late" promise after its deadline
    cheat_proves         node 2 answers a claim with a proof into its late or wrong batch
    grief_coverage       the outsider: a claim on any promise at any block (early, kept, late,
                         replayed), a wrong bond, a forged or altered signature, an answer into a
                         foreign batch, a slash at any block of any claim id
Invariants: Coverage's balance = the bonds of open claims (`_coverage_balance`, checked with the
others after every step); at the end of a run every claim is resolved within its proof window,
and every promise is kept (its leaf in a batch of its dispatcher posted ≤ `batchByBlock`) or its
claim slashed the dispatcher; an honest dispatcher's promises are all kept, and every claim on
them was answered (the claimant's bond is the dispatcher's credit).
"""

import dataclasses
from dataclasses import dataclass, field

from eth_keys import keys
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from verillm.spec import promise as spec
from verillm.spec.hashing import keccak256
from verillm.spec.receipt import compute_receipt_hash

from helpers.contracts import PRESET, AuditRun
from fuzz_honest import CHEATER

BATCHING = ("keep", "never", "late", "wrong")
MAX_PROMISES = 12
GRIEF_COVERAGE = ("claim", "bond", "forge", "alter", "prove-foreign", "slash")
HONEST_DISPATCHERS = (0, 1)


@dataclass
class Promised:
    signed: spec.SignedPromise
    dispatcher: int
    worker: int
    mode: str  # the audit's mode, for a late batch's audit
    fate: str  # keep / never / late / wrong
    party: object = None  # the served job's worker party (a late batch audits it)
    batch_id: int | None = None  # the batch the dispatcher posted for this job (the wrong leaf's, for "wrong")
    seen_included: bool = False  # the client saw the leaf in time: it never claims
    claims: list = field(default_factory=list)  # (claim id, who)
    leaves: tuple = ()  # every leaf of its batch, for a multi-leaf batch (fuzz_batches); () = the leaf alone

    def proof(self, leaf: bytes | None = None):
        """The Merkle path of ``leaf`` (default: the promised one) in this promise's batch."""
        return spec.compute_inclusion_proof(list(self.leaves) or [self.leaf], leaf or self.leaf)

    @property
    def leaf(self) -> bytes:
        return self.signed.promise.receipt_hash

    @property
    def batch_by(self) -> int:
        return self.signed.promise.batch_by_block

    @property
    def key(self) -> bytes:
        return spec.compute_promise_hash(self.signed.promise)


class CoverageParties:
    """Mixin of `ProtocolMachine` (see the module note)."""

    # --- serving a job: the promise, and the dispatcher's batch ---------------------------------
    def _promise(self, dispatcher: int, worker: int, party, mode: str, fate: str) -> Promised:
        """The promise ``dispatcher`` returns with ``party``'s job, served at the current head."""
        leaf = compute_receipt_hash(party.receipt)
        if fate == "wrong":  # the client's job; the cheater batches the audited party's receipt instead
            leaf = compute_receipt_hash(dataclasses.replace(party.receipt, job_hash=keccak256(b"served" + party.receipt.job_hash)))
        node = self._node(dispatcher)
        promise = spec.BatchPromise(leaf, bytes.fromhex(node.address[2:]),
                                    spec.compute_batch_by_block(self.reads.head(), PRESET.BATCH_BY_BLOCKS))
        pr = Promised(spec.sign_promise(promise, node.account.key, self.promise_domain), dispatcher, worker, mode, fate, party)
        self.promises.append(pr)
        return pr

    def _start_batched(self, party, dispatcher: int) -> tuple[AuditRun, int]:
        """`World.start`, keeping the batch id: post the one-leaf batch, draw, start its audit."""
        node = self._node(dispatcher)
        batch, _, _ = self._post_and_draw(node, [party.receipt])
        audit_id = self._start_selected(node, batch, 0, party)
        if not audit_id and self.reads.head() <= party.receipt.auditable_until_block:  # a fresh receipt is never skipped
            self._fail(f"start of batch {batch.batch_id} skipped at block {self.reads.head()}, "
                       f"within its receipt's horizon {party.receipt.auditable_until_block}")
        return AuditRun(audit_id, party), batch.batch_id

    # --- what the client sees ---------------------------------------------------------------------
    def _included(self, pr: Promised) -> bool:
        """Whether the leaf is provably in a batch of the promise's dispatcher posted by its
        deadline, as the client checks it: the batch as `Batches.getBatch` returns it."""
        if pr.batch_id is None:
            return False
        root, dispatcher, count, posted, *_ = self.batches("getBatch", pr.batch_id)
        record = spec.BatchRecord(bytes(root), bytes.fromhex(dispatcher[2:]), count, posted)
        return spec.is_inclusion_proof(pr.signed.promise, record, pr.proof())

    def _claim_state(self, claim_id: int) -> tuple[int, int]:
        """(state, prove deadline) of a claim."""
        c = self.coverage("getClaim", claim_id)
        return c[5], c[4]

    # --- honest parties ---------------------------------------------------------------------------
    def _honest_coverage_answers(self) -> None:
        """Every open claim on a promise its dispatcher kept is answered at once (5-block window)."""
        self._answer_or_slash(slash=False)

    def _honest_client(self) -> None:
        """The client: slash unanswered claims, claim what it cannot see batched (no hurry:
        the claim window is OMISSION_CLAIM_WINDOW_BLOCKS, a slash may come any time after)."""
        if not self.promises:
            return
        self._answer_or_slash(slash=True)
        head = self.reads.head()
        for pr in self.promises:
            if pr.seen_included or pr.claims or head < pr.batch_by or head >= pr.batch_by + PRESET.OMISSION_CLAIM_WINDOW_BLOCKS:
                continue  # the next block is a claim's: in (batchByBlock, batchByBlock + window]
            if self._included(pr):
                pr.seen_included = True
                continue
            tx = self._try(self.p.claim_omitted, self.client, pr.signed)
            if tx is not None:
                pr.claims.append((tx.value, "client"))
                self.claim_of[tx.value] = pr

    def _answer_or_slash(self, slash: bool) -> None:
        """Every open claim: its dispatcher answers if it kept the promise; past the proof window
        (``slash``), the client slashes. A claim the harness did not make (the generic adversary's
        replay of a promise, `fuzz_generic`) is found on-chain and tracked as any other."""
        count = self.coverage("claimCount")
        for claim_id in range(self.claims_scanned + 1, count + 1):
            if claim_id not in self.claim_of:
                receipt_hash, dispatcher, batch_by = self.coverage("getClaim", claim_id)[:3]
                pr = next((x for x in self.promises if x.signed.promise.receipt_hash == bytes(receipt_hash)
                           and self._node(x.dispatcher).address.lower() == dispatcher.lower() and x.batch_by == batch_by), None)
                if pr is not None:
                    pr.claims.append((claim_id, "generic"))
                    self.claim_of[claim_id] = pr
        self.claims_scanned = count
        for claim_id, pr in list(self.claim_of.items()):
            if claim_id in self.resolved:
                continue
            state, deadline = self._claim_state(claim_id)
            if state != spec.OPEN:
                self.resolved.add(claim_id)
                continue
            keeps = pr.dispatcher in HONEST_DISPATCHERS or pr.fate == "keep"
            if keeps and pr.batch_id is not None and self.reads.head() < deadline:
                if self._try(self.p.prove_included, self._node(pr.dispatcher).account, claim_id, pr.batch_id, pr.proof()) is not None:
                    self.resolved.add(claim_id)
                    continue
            if slash and self.reads.head() >= deadline and self._try(self.p.slash_omission, self.client, claim_id) is not None:
                self.resolved.add(claim_id)

    # --- adversarial rules --------------------------------------------------------------------
    @precondition(lambda self: self.promises)
    @rule(pick=st.integers(0, MAX_PROMISES - 1))
    def cheat_batches_late(self, pick):
        """Node 2 posts a "late" promise's batch after its deadline, and audits it as usual. Past
        the receipt's horizon (auditableUntilBlock) the start is skipped: the late batch bought an
        escape, which only the client's omission claim punishes (claims on "late" promises)."""
        pr = self.promises[pick % len(self.promises)]
        if pr.fate == "late" and pr.batch_id is None and self.reads.head() >= pr.batch_by \
                and len(self.audits) < self.max_audits and self._active() < self.max_active \
                and self.registry("getNode", self._node(CHEATER).address)[4]:
            run, pr.batch_id = self._start_batched(pr.party, CHEATER)
            if run.audit_id:
                self._track(run, pr.worker, CHEATER, pr.mode)
            else:
                self._count20("horizon:late_start_skipped")  # STATS["issue20"]
        self._step("cheat_batches_late")

    @precondition(lambda self: self.claim_of)
    @rule(pick=st.integers(0, MAX_PROMISES - 1))
    def cheat_proves(self, pick):
        """Node 2 answers a claim on its promise with a proof into its late or wrong-leaf batch."""
        claim_id = sorted(self.claim_of)[pick % len(self.claim_of)]
        pr = self.claim_of[claim_id]
        if pr.dispatcher == CHEATER and pr.batch_id is not None:
            self._try(self.p.prove_included, self._node(CHEATER).account, claim_id, pr.batch_id,
                      spec.compute_inclusion_proof([pr.leaf], pr.leaf))  # the promised leaf (a late batch holds it)
            root_leaf = compute_receipt_hash(pr.party.receipt)
            self._try(self.p.prove_included, self._node(CHEATER).account, claim_id, pr.batch_id,
                      spec.compute_inclusion_proof([root_leaf], root_leaf))  # the leaf it did batch
        self._step("cheat_proves")

    @precondition(lambda self: self.promises)
    @rule(pick=st.integers(0, MAX_PROMISES - 1), other=st.integers(0, MAX_PROMISES - 1), move=st.sampled_from(GRIEF_COVERAGE))
    def grief_coverage(self, pick, other, move):
        pr = self.promises[pick % len(self.promises)]
        outsider = self.world.outsider
        if move == "claim":  # any block: early (TooEarly), kept (answered: the bond is lost), late, replayed
            tx = self._try(self.p.claim_omitted, outsider, pr.signed)
            if tx is not None:
                pr.claims.append((tx.value, "griefer"))
                self.claim_of[tx.value] = pr
        elif move == "bond":
            p = pr.signed.promise
            args = ((p.receipt_hash, self._node(pr.dispatcher).address, p.batch_by_block), pr.signed.signature)
            self._try(self.p._send, self.p.coverage, "claimOmitted", *args, sender=outsider,
                      value=PRESET.OMISSION_CLAIM_BOND_WEI + (1 if other % 2 else -1))
        elif move == "forge":  # signed by the outsider, naming the dispatcher
            digest = spec.compute_promise_digest(pr.signed.promise, self.promise_domain)
            sig = keys.PrivateKey(outsider.key).sign_msg_hash(digest)
            forged = spec.SignedPromise(pr.signed.promise, sig.r.to_bytes(32, "big") + sig.s.to_bytes(32, "big") + bytes([sig.v + 27]))
            self._try(self.p.claim_omitted, outsider, forged)
        elif move == "alter":  # a later deadline than signed (or another leaf)
            p = pr.signed.promise
            altered = dataclasses.replace(p, batch_by_block=p.batch_by_block + 1 + other) if other % 2 else \
                dataclasses.replace(p, receipt_hash=keccak256(p.receipt_hash))
            self._try(self.p.claim_omitted, outsider, dataclasses.replace(pr.signed, promise=altered))
        elif move == "prove-foreign" and self.claim_of:  # claim `pick` answered with promise `other`'s batch
            claim_id = sorted(self.claim_of)[pick % len(self.claim_of)]
            foreign = self.promises[other % len(self.promises)]
            if foreign.batch_id is not None:
                leaf = self.claim_of[claim_id].leaf
                self._try(self.p.prove_included, outsider, claim_id, foreign.batch_id, spec.compute_inclusion_proof([leaf], leaf))
        elif move == "slash":  # any claim id, at any block (0 and one past the last: UnknownClaim)
            self._try(self.p.slash_omission, outsider, other % (self.coverage("claimCount") + 2))
        self._step(f"grief_coverage:{move}")

    # --- invariants and the end of a run ----------------------------------------------------------
    def _promises_done(self) -> bool:
        """Every promise past its deadline, seen kept or claimed, and every claim resolved."""
        head = self.reads.head()
        return all(head > pr.batch_by and (pr.seen_included or pr.claims) for pr in self.promises) and \
            all(c in self.resolved for c in self.claim_of)

    def _check_claims_terminate(self, slack: int) -> None:
        for claim_id in self.claim_of:
            if claim_id not in self.resolved:
                state, deadline = self._claim_state(claim_id)
                assert state != spec.OPEN or self.reads.head() <= deadline + slack, f"omission claim {claim_id} open past block {deadline + slack}"

    def _check_promises(self) -> None:
        """The issue's invariant: every receipt a client holds is batched by its deadline, or its
        dispatcher was slashed for it (no promise was left unclaimed: the client claims whenever
        it cannot see the leaf)."""
        counts = self.stats["omission"]
        for pr in self.promises:
            included = self._included(pr)
            states = {cid: self._claim_state(cid)[0] for cid, _ in pr.claims}  # at most one: one claim per promise, ever
            assert len(states) <= 1 and (not states or self.coverage("claimOf", pr.key) in states), f"claims {pr.claims}"
            slashed = spec.SLASHED in states.values()
            assert included or slashed, f"promise of node {pr.dispatcher} ({pr.fate}) neither kept nor slashed: claims {states}"
            assert all(s != spec.OPEN for s in states.values()), f"claim on a promise still open: {states}"
            if pr.dispatcher in HONEST_DISPATCHERS:
                assert included and all(s == spec.ANSWERED for s in states.values()), f"honest dispatcher {pr.dispatcher}: {states}"
            if included:
                assert not slashed, f"a kept promise was slashed: {states}"
            counts["promises"] += 1
            counts[pr.fate] += 1
            counts["claims"] += len(pr.claims)
            counts["client_claims"] += sum(1 for _, who in pr.claims if who == "client")
            counts["griefer_claims"] += sum(1 for _, who in pr.claims if who == "griefer")
            counts["answered"] += sum(1 for s in states.values() if s == spec.ANSWERED)
            counts["slashed"] += slashed
            self.stats["omission_paths"].add((pr.fate, pr.dispatcher in HONEST_DISPATCHERS, included,
                                              tuple((who, states[cid]) for cid, who in pr.claims)))
