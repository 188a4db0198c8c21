"""Leaving the network in the protocol fuzzer (`protocol_fuzz.py`; docs/protocol.md §12 "Stake
locks and unbonding", contracts/src/Registry.sol `deregister` / `withdraw`).

Registry's exit takes no argument: `deregister()` (out of sortition and batch posting at once,
stake still slashable) then, once `unbondingEndBlock` is mined and no audit or omission claim
holds a lock on the node, `withdraw()` pays the whole stake and deletes the node (it may register
again). So "another account's exit" or "an adversarial amount" can only be a call from an account
that is not registered, a call in the wrong state, or ETH sent to a non-payable function.
Rules (mixed into `ProtocolMachine`):
    honest_deregisters  an honest member (3, 4, 6–9; nodes 0 and 1 serve and dispatch every run)
                        with no lock deregisters; one at a time, so a first committee can always
                        be staffed (an escalation needs all ten nodes: while one is out, an
                        escalation may be unheard, which the cheater invariant allows)
    honest_withdraws    the leaving node withdraws: StillUnbonding before its end block,
                        StakeLocked while drawn (a deregistered node may still be drawn in the
                        epoch it left), else it gets exactly its stake, claims its credits, and
                        its ETH balance grows by stake + credits − gas to the wei; it re-registers
                        with the same stake (the pool stays whole). With ``wait``, it first waits
                        for its end block: at once when the world is idle (every audit terminal,
                        every promise settled), else up to PATIENCE_BLOCKS blocks with the honest
                        parties acting on each
    cheater_exits       node 2 deregisters (while locked in an open audit or claim, right after
                        an omitted promise, or idle) and tries to withdraw: NotDeregistering,
                        StillUnbonding or StakeLocked exactly when its state says so; a withdrawal
                        that succeeds re-registers it (at least the minimum stake). Its stake stays
                        slashable until then: the teardown's cheater and batching invariants hold
    grief_exits         the griefer: deregister, withdraw, topUp (any amount) from its unregistered
                        account, ETH sent to deregister/withdraw, node 5 withdrawing without
                        deregistering: each must revert with its error
Counts (`STATS["exits"]`): what acted (``*_ok``) and each revert seen.
"""

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from verillm.chain import TransactionReverted
from verillm.spec.hashing import keccak256

from helpers.contracts import MODEL_ID, PRESET
from fuzz_honest import ABANDONED, ADVERSARY, CHEATER, SETTLED

EXIT_MEMBERS = (3, 4, 6, 7, 8, 9)
PATIENCE_BLOCKS = 40  # blocks a patient withdrawal waits in one step while audits are open
GRIEF_EXITS = ("deregister", "withdraw", "top-up", "deregister-value", "withdraw-value", "adversary-withdraw")
ERRORS = {keccak256(e.encode())[:4]: e.split("(")[0] for e in (
    "NotRegistered(address)", "NotDeregistering()", "StillUnbonding(uint256)", "StakeLocked(uint32)", "Deregistering()",
    "TooEarly(uint256)", "AlreadyDrawn(uint256)", "AlreadyHandled(uint256,uint32)", "IndexOutOfBatch(uint32,uint32)")}


def _error(exc: TransactionReverted) -> str:
    """The custom error's name ("" for a revert without data: ETH sent to a non-payable function)."""
    return ERRORS.get(exc.data[:4], f"0x{exc.data[:4].hex()}") if exc.data else ""


class ExitRules:
    """Mixin of `ProtocolMachine` (see the module note)."""

    def _fail(self, message: str):
        exc = AssertionError(message)
        self._record_failure(exc)
        raise exc

    def _count_exit(self, what: str) -> None:
        self.stats["exits"][what] = self.stats["exits"].get(what, 0) + 1

    def _row(self, i: int) -> tuple:
        """(stake, unbonding end, locks, registered, active, endpoint) of node ``i``."""
        return self.registry("getNode", self._node(i).address)[:6]

    def _idle(self) -> bool:
        return all(self.audit(t.run.audit_id).phase in (SETTLED, ABANDONED) for t in self.audits) \
            and not self.pending_starts and self._promises_done()

    def _skip_to(self, end: int) -> None:
        """Mine until a transaction lands at ``end`` (the next block)."""
        if self.reads.head() + 1 < end:
            self._mine(end - 1 - self.reads.head())

    def _wait_toward(self, end: int) -> None:
        """Wait for the unbonding end: all at once when the world is idle, else up to
        PATIENCE_BLOCKS one block at a time with the honest parties acting on each (as that many
        `mine(1)` steps would), so open audits go on and a lock may outlive the unbonding."""
        if self._idle():
            self._skip_to(end)
            return
        for _ in range(PATIENCE_BLOCKS):
            if self.reads.head() + 1 >= end:
                return
            self._mine(1)
            self._honest()

    def _balance(self, address: str) -> int:
        return int(self.rpc.call("eth_getBalance", [address, "latest"]), 16)

    @staticmethod
    def _gas_wei(tx) -> int:
        return int(tx.receipt["gasUsed"], 16) * int(tx.receipt["effectiveGasPrice"], 16)

    def _expect_revert(self, who: str, fn, *args, allowed: tuple, **kw) -> str:
        try:
            fn(*args, **kw)
        except TransactionReverted as exc:
            if _error(exc) not in allowed:
                self._fail(f"{who}: reverted {_error(exc)!r}, expected one of {allowed}")
            self._count_exit(f"{who}:{_error(exc) or 'non-payable'}")
            return _error(exc)
        self._fail(f"{who}: succeeded, expected a revert {allowed}")

    def _withdraw_error(self, row) -> str:
        """The error the Registry owes a withdrawal now, from the node's row."""
        _, end, locks, registered = row[:4]
        head = self.reads.head() + 1  # the block the transaction lands in
        return "NotRegistered" if not registered else "NotDeregistering" if end == 0 else \
            "StillUnbonding" if head < end else "StakeLocked" if locks else ""

    def _withdraw_and_return(self, i: int, restake_wei: int | None) -> int:
        """Node ``i`` withdraws (it must succeed), claims its credits, checks its ETH to the wei,
        and registers again with ``restake_wei`` (default: what it withdrew). Returns the stake."""
        node = self._node(i)
        stake, _, _, _, _, endpoint = self._row(i)
        credit, balance = self.jobs("credits", node.address), self._balance(node.address)
        tx = self.p.withdraw(node.account)
        if tx.value != stake:
            self._fail(f"node {i} withdrew {tx.value}, its stake was {stake}")
        gas = self._gas_wei(tx)
        if credit:
            gas += self._gas_wei(self.p.claim(node.account))
        if self._balance(node.address) != balance + stake + credit - gas:
            self._fail(f"node {i} left with {self._balance(node.address) - balance + gas}, owed stake {stake} + credits {credit}")
        if self._row(i)[3] or self.jobs("credits", node.address):
            self._fail(f"node {i} still registered or credited after its exit")
        self.p.register(node.account, node.vrf_key, endpoint, [MODEL_ID], restake_wei or stake)
        self.exited.append((i, stake, credit))
        return credit

    # --- rules --------------------------------------------------------------------------------
    @rule(i=st.sampled_from(EXIT_MEMBERS))
    def honest_deregisters(self, i):
        """An honest member in no open audit (no lock) leaves; one at a time."""
        if self.leaving or self._row(i)[2] or i not in self.honest:
            self._step("honest_deregisters:busy")  # busy, locked, or adversarial (fuzz_generic's cast)
            return
        self.p.deregister(self._node(i).account)
        self.leaving[i] = self._row(i)[1]
        self._count_exit("honest_deregister_ok")
        self._step("honest_deregisters")

    @precondition(lambda self: self.leaving)
    @rule(wait=st.booleans())
    def honest_withdraws(self, wait):
        i, end = next(iter(self.leaving.items()))
        if wait:
            self._wait_toward(end)
        error = self._withdraw_error(self._row(i))
        if error == "StakeLocked":
            self._check_leaver_not_held(i, end, self._row(i)[2])  # fuzz_issue20: the hostage-taker holds nobody
        if error:
            self._expect_revert("honest_withdraw", self.p.withdraw, self._node(i).account, allowed=(error,))
            self._step(f"honest_withdraws:{error}")
            return
        credit = self._withdraw_and_return(i, None)
        self.floor[i] = (self.floor[i][0], 0)  # its credits left as ETH, checked to the wei above
        del self.leaving[i]
        self._count_exit("honest_withdraw_ok")
        self._count_exit("honest_withdraw_ok_with_credits" if credit else "honest_withdraw_ok_no_credits")
        self._step("honest_withdraws")

    @rule(move=st.sampled_from(["deregister", "withdraw"]), wait=st.booleans())
    def cheater_exits(self, move, wait):
        """Node 2 tries to leave: while it is a party to an open audit or claim (StakeLocked), right
        after omitting a promised receipt (the client's claim still comes, within the unbonding
        period), or idle."""
        account, row = self._node(CHEATER).account, self._row(CHEATER)
        if wait and move == "withdraw" and row[1]:
            self._wait_toward(row[1])
            row = self._row(CHEATER)
        if move == "deregister":
            omitted = any(pr.dispatcher == CHEATER and pr.fate != "keep" and not pr.claims for pr in self.promises)
            context = "locked" if row[2] else "omitted" if omitted else "idle"
            if row[3] and row[1] == 0:
                self.p.deregister(account)
                self._count_exit(f"cheater_deregister_ok_{context}")
            else:
                self._expect_revert("cheater_deregister", self.p.deregister, account, allowed=("Deregistering", "NotRegistered"))
            self._step(f"cheater_exits:deregister:{context}")
            return
        error = self._withdraw_error(row)
        if error:
            self._expect_revert("cheater_withdraw", self.p.withdraw, account, allowed=(error,))
        else:
            self._withdraw_and_return(CHEATER, max(row[0], PRESET.MIN_STAKE_WEI))
            self._count_exit("cheater_withdraw_ok")
        self._step(f"cheater_exits:withdraw:{error or 'ok'}")

    @rule(move=st.sampled_from(GRIEF_EXITS), amount=st.integers(0, 10**18))
    def grief_exits(self, move, amount):
        p, outsider = self.p, self.world.outsider
        if move == "deregister":
            self._expect_revert("grief_deregister", p.deregister, outsider, allowed=("NotRegistered",))
        elif move == "withdraw":
            self._expect_revert("grief_withdraw", p.withdraw, outsider, allowed=("NotRegistered",))
        elif move == "top-up":
            self._expect_revert("grief_top_up", p.top_up, outsider, amount, allowed=("NotRegistered",))
        elif move in ("deregister-value", "withdraw-value"):  # non-payable: reverts before any check
            self._expect_revert(f"grief_{move}", p._send, p.registry, move.split("-")[0], sender=outsider, value=amount + 1,
                                allowed=("",))
        else:  # node 5, registered, never deregistered
            self._expect_revert("adversary_withdraw", p.withdraw, self._node(ADVERSARY).account,
                                allowed=(self._withdraw_error(self._row(ADVERSARY)),))
        self._step(f"grief_exits:{move}")
