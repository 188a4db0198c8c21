"""The protocol fuzzer with the generic adversary and the loss ledger (issue 34; docs/protocol.md
§13 "Generic adversary").

Cast (`World(extra_nodes=GENERIC_EXTRA_NODES)`, twelve nodes; stakes in MIN_STAKE_WEI):
    honest       0 (3), 1 (2): workers and dispatchers; 3, 4, 6, 7 (1 each): members
    cheater      2 (2): as `ProtocolMachine` (cheats as a worker, omits as a dispatcher; votes honestly)
    colluders    5 (2, topped up), 8, 9, 10, 11 (1 each): the generic adversary's registered
                 identities (`fuzz_generic`), one adversary; node 5 also plays the older named rules
    outsider     unregistered, the generic adversary's fifth identity
Adversarial stake: 8 of 17 units (47%), so committees of 3 and appeals of 5 are often captured.

Invariants (besides `ProtocolMachine`'s conservation, seals-first, termination, batching and
missed-seal checks):
    ledger       every stake taken from an honest node is within its rule's bound
                 (`fuzz_ledger.LEDGER`: 0, or MEMBER_PENALTY_BPS of its stake for a minority vote
                 or missed opening in a captured round), and its stake is never below its floor
                 less those bounds; its credit never decreases
    convicted    a cheat convicted by an honest majority (a round that decided FAIL with more
                 non-colluding seats than half) never ends with its stake: the audit took some —
                 unless two other rounds of the audit were captured (the appeal and its decider;
                 round 0 and the decider): the verdict two rounds agree on is final (issue 34);
                 a decider the pool cannot staff (this world's 12 nodes never can: 2 + 3 + 5 + 5
                 are needed) abandons the audit and is counted, not asserted
    standing     a colluder's delivery claim of a job an honest dispatcher sent (a false claim)
                 costs it something in that audit (end of run)
With FUZZ_LEDGER=record a violation is written (FUZZ_VIOLATIONS, one JSON line: seed, run, step,
the rule, the call that took it, the run's rule path) and the run goes on; otherwise it fails.
"""

import json
import os

from eth_abi import decode as abi_decode
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from verillm.spec.hashing import keccak256

from helpers.contracts import PRESET
from fuzz_generic import GenericAdversary
from fuzz_honest import ABANDONED, CHEATER, DECIDED
from fuzz_ledger import LEDGER, honest_bound, read_decided, read_takes
from verillm.chain import TransactionReverted

from fuzz_coverage import BATCHING, MAX_PROMISES
from fuzz_exits import _error
from fuzz_honest import MAX_AUDITS
from protocol_fuzz import CHEAT_MODES, STATS, ProtocolMachine

GENERIC_EXTRA_NODES = 6
GENERIC_HONEST = (0, 1, 3, 4, 6, 7)
GENERIC_ADVERSARIES = frozenset({5, 8, 9, 10, 11})
ADVERSARY_TOP_UP = {5: 1}  # × MIN_STAKE_WEI, before the first epoch
FAIL = 2  # AuditCodes.FAIL
DELIVERY_CLAIMED = "0x" + keccak256(b"DeliveryClaimed(uint256,uint8,uint8,address,uint64)").hex()
CLAIM_BONDS_RESOLVED = "0x" + keccak256(b"ClaimBondsResolved(uint256,uint8,address,uint256,uint256)").hex()
SERVE_WEIGHT = 6  # `new_audit`'s aliases (`_serve_alias`)
DEFERRING_DISPATCHERS = (0, 1, 3)
DEFER_MAX_BLOCKS = PRESET.BATCH_BY_BLOCKS * 2 // 3

STATS.setdefault("generic", {})
STATS.setdefault("violations", [])


MODE = {"record": False}  # set by a test that wants every violation listed, not the first raised


def recording() -> bool:
    return MODE["record"] or os.environ.get("FUZZ_LEDGER") == "record"


class LedgerChecks:
    """Mixin of `GenericMachine`: the loss ledger and the conviction invariant."""

    def _ledger_setup(self) -> None:
        self.takes = []
        self.allowed = {i: 0 for i in self.honest}
        self.ledger_from = self.reads.head() + 1
        self.decided_from = self.ledger_from
        self.reported = set()

    def _index_of(self, address: str):
        return next((i for i, n in enumerate(self.world.nodes) if n.address.lower() == address.lower()), None)

    def _captured(self, take) -> bool:
        """Whether the colluders hold at least half the seats of the take's round."""
        if take.audit_id is None or not any(t.run.audit_id == take.audit_id for t in self.audits):
            return False
        r = take.round if take.round is not None else self.audit(take.audit_id).round
        seats = [self._index_of(a) for a in self.committee(take.audit_id, r)]
        return 2 * sum(1 for i in seats if i in self.adversaries) >= len(seats) > 0

    def _captured_rounds(self, audit_id: int) -> set[int]:
        """The rounds of the audit (round 0, the appeal, its decider) whose seats the colluders hold at least half of."""
        out = set()
        for r in (0, 1, 2):
            seats = [self._index_of(a) for a in self.committee(audit_id, r)]
            if 2 * sum(1 for i in seats if i in self.adversaries) >= len(seats) > 0:
                out.add(r)
        return out

    def _framed(self, take) -> bool:
        """Whether round 0 and a later round of the take's audit were captured (§13's framing
        residual: round 0 and the appeal, or round 0 and the decider; a worker's full slash needs
        round 0's majority to fail it, `spec.settlement.is_worker_penalty_only`)."""
        if take.audit_id is None or not any(t.run.audit_id == take.audit_id for t in self.audits):
            return False
        captured = self._captured_rounds(take.audit_id)
        return 0 in captured and len(captured) >= 2

    def _honest_appeals(self) -> None:
        """An honest worker's node appeals a FAIL of its own job (escalates, with the bond:
        docs/protocol.md §13 "Accountable votes", `PartyFaults.appeal`), once."""
        for t in self.audits:
            a = t.run.audit_id
            if t.mode != "honest" or a in self.appealed:
                continue
            state = self.audit(a)
            if state.phase == DECIDED and state.round == 0 and (a, 0, FAIL) in read_decided(self.rpc, self.p.jobs.address, t.start_block,
                                                                                            self.reads.head(), a):
                self.appealed.add(a)
                if self._try(self.p.escalate, t.run.worker.node.account, a) is not None:
                    self._count_generic("honest:appealed")

    def _call_of(self, tx_hash: str) -> str:
        """contract.function of the transaction that took (its selector against the ABIs), and who sent it."""
        tx = self.rpc.call("eth_getTransactionByHash", [tx_hash])
        selector = bytes.fromhex(tx["input"][2:10])
        name = next((f"{c}.{f}" for c, f, *_ in self.functions if self.sender._function(getattr(self.p, c), f)[0] == selector), "?")
        who = self._index_of(tx["from"])
        role = "outsider" if who is None else "colluder" if who in self.adversaries else "cheater" if who == CHEATER else "honest"
        return f"{name} by {role} {'' if who is None else who}".strip()

    def _violation(self, message: str, take=None) -> None:
        key = (message.split(":")[0], take.tx) if take else (message, None)
        if key in self.reported:
            return
        self.reported.add(key)
        record = {"seed": self.stats.get("seed"), "run": self.stats["runs"], "step": len(self.path), "violation": message,
                  "path": self.path[-40:]}
        if take is not None:
            record.update(rule=take.rule, amount=take.amount, stake_before=take.stake_before, audit=take.audit_id, round=take.round,
                          call=self._call_of(take.tx), block=take.block,
                          rule_path=[f"{x.rule} → node {self._index_of(x.node)}" for x in self.takes if x.audit_id == take.audit_id])
            t = next((x for x in self.audits if x.run.audit_id == take.audit_id), None)
            if t is not None:
                record.update(audit_worker=t.worker, audit_mode=t.mode, lifecycle=[list(map(str, s)) for s in t.seen])
        self.stats["violations"].append(record)
        out = os.environ.get("FUZZ_VIOLATIONS")
        if out:
            with open(out, "a") as f:
                f.write(json.dumps(record, default=str) + "\n")
        if not recording():
            raise AssertionError(message)

    def _check_honest(self, node_rows: list, credits: list) -> None:
        head = self.reads.head()
        new = read_takes(self.rpc, self.p, self.ledger_from, head)
        self.ledger_from = head + 1
        self.takes += new
        for take in new:
            i = self._index_of(take.node)
            if i not in self.allowed:
                continue
            bound = honest_bound(take, self._captured(take), PRESET, self._framed(take))
            self.allowed[i] += bound
            if take.amount > bound:
                self.allowed[i] += take.amount - bound  # recorded once; the floor check does not count it again
                known = "" if take.rule in LEDGER else " (a rule missing from the ledger)"
                self._violation(f"ledger: honest node {i} lost {take.amount} wei to {take.rule}{known}, bound {bound}", take)
        for i, (stake, credit) in self.floor.items():
            if node_rows[i][0] < stake - self.allowed[i]:
                self._violation(f"ledger: honest node {i} lost stake outside any rule: {stake - node_rows[i][0]} wei, bound {self.allowed[i]}")
            if credits[i] < credit:
                self._violation(f"ledger: honest node {i} lost credit: {credit - credits[i]} wei")

    def _check_cheater(self, t, state, slashed: bool) -> None:
        """A cheat convicted by an honest majority never ends with its stake, unless two other
        rounds of its audit were captured (issue 34: an appeal that contradicts round 0 decides
        nothing alone; the verdict two rounds agree on is final, so a conviction by an honest
        round is undone only by two captured rounds agreeing against it — the appeal and the
        decider after an honest round 0; round 0 and the decider after an honest appeal)."""
        head = self.reads.head()
        if t.mode == "honest" and state.phase != 5:  # SETTLED: counted, not asserted (issue 34 "honest work gets verified")
            self._count_generic(f"honest_work_unverified:phase{state.phase}:round{state.round}")
        for audit_id, r, verdict in read_decided(self.rpc, self.p.jobs.address, 0, head):
            if audit_id != t.run.audit_id:
                continue
            seats = [self._index_of(a) for a in self.committee(audit_id, r)]
            captured = 2 * sum(1 for i in seats if i in self.adversaries) >= len(seats)
            self._count_generic(f"decided:round{r}:{'captured' if captured else 'honest'}:{'honest' if t.mode == 'honest' else 'cheat'}:verdict{verdict}")
            if verdict != FAIL or t.mode == "honest":
                continue
            if 2 * sum(1 for i in seats if i not in self.adversaries) <= len(seats):
                continue  # not an honest majority
            worker = t.run.worker.node.address
            if state.phase == ABANDONED and state.round == 2:
                self._count_generic(f"convicted:decider_unheard:round{r}")
                continue  # a decider the pool cannot staff abandons the audit (docs/protocol.md §12 "Escalate"; 15 nodes staff one)
            if len(self._captured_rounds(audit_id) - {r}) >= 2:
                self._count_generic(f"convicted:undone_by_two_captured_rounds:round{r}")
                continue  # the documented bound (docs/protocol.md §13 "Residual")
            if not any(x.audit_id == audit_id and x.node.lower() == worker.lower() for x in self.takes) and not slashed:
                self._violation(f"convicted: cheater ({t.mode}) of audit {audit_id}, convicted by an honest majority in round {r}, "
                                f"kept its stake (ended {state.phase}, seen {t.seen[-6:]})")


    def _check_false_claims(self) -> None:
        """Standing (issue 34): a delivery claim by a colluder whose job an honest dispatcher sent
        (so the claim is false) pays for the publication it forced. The cost is the claim bond
        (`ClaimBondsResolved`: the publisher paid out of the round's bonds), not a stake take; a claim
        still open when the run stops, or whose bonds came back because nobody had to publish, imposed
        no cost yet and is only counted."""
        logs = self.rpc.call("eth_getLogs", [{"fromBlock": "0x0", "toBlock": "latest", "address": self.p.delivery.address,
                                               "topics": [DELIVERY_CLAIMED]}])
        resolved = self._claim_bonds_resolved()
        for log in logs:
            audit_id, member = int(log["topics"][1], 16), self._index_of("0x" + log["topics"][2][-40:])
            round_index = abi_decode(["uint8", "uint8", "uint64"], bytes.fromhex(log["data"][2:]))[0]
            t = next((x for x in self.audits if x.run.audit_id == audit_id), None)
            if t is None or t.dispatcher not in self.honest or member not in self.adversaries:
                continue
            self._count_generic("false_delivery_claim")
            outcome = resolved.get((audit_id, round_index))
            if outcome is None:
                self._count_generic("false_delivery_claim:open_at_end")
                continue
            publisher, paid_wei = outcome
            if int(publisher, 16) == 0:
                self._count_generic("false_delivery_claim:nobody_published")
                continue
            if paid_wei == 0:
                self._violation(f"standing: colluder {member}'s false delivery claim on audit {audit_id} (its job sent by honest "
                                f"dispatcher {t.dispatcher}) cost it nothing; worker {t.worker} had to publish")

    def _claim_bonds_resolved(self) -> dict:
        """(audit, round) → (publisher, paid wei) of every `Delivery.ClaimBondsResolved` so far."""
        logs = self.rpc.call("eth_getLogs", [{"fromBlock": "0x0", "toBlock": "latest", "address": self.p.delivery.address,
                                               "topics": [CLAIM_BONDS_RESOLVED]}])
        out = {}
        for log in logs:
            round_index, publisher, paid_wei, _ = abi_decode(["uint8", "address", "uint256", "uint256"], bytes.fromhex(log["data"][2:]))
            out[(int(log["topics"][1], 16), round_index)] = (publisher, paid_wei)
        return out


class GenericMachine(LedgerChecks, GenericAdversary, ProtocolMachine):
    """`ProtocolMachine` with the generic cast (see the module note)."""

    honest = GENERIC_HONEST
    adversaries = GENERIC_ADVERSARIES
    base = [None]
    parties: dict = {}  # per deployment: not ProtocolMachine's (another world, another signing domain)
    openings: dict = {}

    def __init__(self):
        super().__init__()
        self._generic_setup()
        self._ledger_setup()
        self.deferred: list = []  # (promise, party, worker, dispatcher, block it batches by) of `serve_deferred`
        self.appealed: set = set()  # audits whose honest worker appealed its FAIL (`_honest_appeals`)

    # --- an honest dispatcher that batches later, as the node does (keepability) -----------------
    @precondition(lambda self: len(self.audits) + len(self.deferred) < MAX_AUDITS and len(self.promises) < MAX_PROMISES)
    @rule(worker=st.sampled_from([0, 1, CHEATER]), dispatcher=st.sampled_from(DEFERRING_DISPATCHERS), delay=st.integers(1, DEFER_MAX_BLOCKS))
    def serve_deferred(self, worker, dispatcher, delay):
        """An honest dispatcher serves a job with its batching promise and batches it ``delay`` blocks
        later (the node batches every few seconds, by `BATCH_BY_BLOCKS` − a margin), so a promise
        is outstanding while the colluders move: a penalty or an unbond in between must leave it
        keepable. Node 3 dispatches at the minimum stake."""
        if self._active() + len(self.deferred) >= self.max_active or not self.registry("getNode", self._node(dispatcher).address)[4] \
                or worker == CHEATER and not self.registry("getNode", self._node(CHEATER).address)[4]:
            self._step("serve_deferred:busy")  # an inactive node neither serves nor dispatches
            return
        self.nonce += 1
        party = self._worker(worker, worker == CHEATER, self.nonce)
        pr = self._promise(dispatcher, worker, party, "open" if worker == CHEATER else "honest", "keep")
        self.deferred.append((pr, party, worker, dispatcher, self.reads.head() + delay))
        self._step("serve_deferred")

    def _honest(self) -> None:
        super()._honest()
        self._honest_appeals()
        self._batch_deferred(now=False)

    def _batch_deferred(self, now: bool) -> None:
        """The honest dispatcher's duty: batch each deferred receipt at its block (refused: counted,
        and the client's claim follows — the ledger then sees what the dispatcher lost)."""
        for entry in list(self.deferred):
            pr, party, worker, dispatcher, due = entry
            if not now and self.reads.head() + 1 < due:
                continue
            self.deferred.remove(entry)
            try:
                run, pr.batch_id = self._start_batched(party, dispatcher)
            except TransactionReverted as exc:
                self._count_generic(f"deferred:refused:{_error(exc) or 'revert'}")
                continue
            self._count_generic("deferred:batched")
            if run.audit_id:
                self._track(run, worker, dispatcher, pr.mode)

    def _drive_to_the_end(self) -> None:
        self._batch_deferred(now=True)
        super()._drive_to_the_end()

    @invariant()
    def invariants_hold(self):
        """As `ProtocolMachine`'s, the honest check being the ledger's; recorded, not raised, with FUZZ_LEDGER=record."""
        try:
            self._check_invariants()
        except AssertionError as exc:
            if not recording():
                self._record_failure(exc)
                raise
            self._violation(f"invariant: {exc}")

    def teardown(self):
        try:
            super().teardown()
            self._check_false_claims()
        except AssertionError as exc:
            if not recording():
                raise
            self._violation(f"teardown: {exc}")
        finally:
            self.p._send = self.sender  # the next machine wraps the fuzzer's sender afresh
            progress = os.environ.get("FUZZ_PROGRESS")
            if progress:  # the generic calls so far (sent, landed), rewritten after every run
                with open(progress + ".generic", "w") as f:
                    json.dump({"steps": self.stats["steps"], "runs": self.stats["runs"], "violations": len(self.stats["violations"]),
                               "calls": dict(sorted(self.stats["generic"].items()))}, f, indent=0)


def _serve_alias(k: int):
    """`new_audit` once more in the rule list: with the generic rule's weight, jobs (hence rounds to
    capture) would otherwise come a few times a run."""
    @precondition(lambda self: len(self.audits) < MAX_AUDITS and len(self.promises) < MAX_PROMISES)
    @rule(worker=st.sampled_from([0, 1, CHEATER]), dispatcher=st.sampled_from([0, 1, CHEATER]), mode=st.sampled_from(CHEAT_MODES),
          batching=st.sampled_from(BATCHING), timing=st.integers(0, 1023))
    def serve(self, worker, dispatcher, mode, batching, timing):
        ProtocolMachine.new_audit(self, worker, dispatcher, mode, batching, timing)
    serve.__name__ = f"serve_{k}"
    return serve


for _k in range(SERVE_WEIGHT):
    setattr(GenericMachine, f"serve_{_k}", _serve_alias(_k))


def adversarial_stake_share(world) -> float:
    """The colluders' and the cheater's share of the registered stake."""
    stakes = world.stakes()
    bad = sum(stakes[world.nodes[i].address] for i in set(GENERIC_ADVERSARIES) | {CHEATER})
    return bad / sum(stakes.values())
