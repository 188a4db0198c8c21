"""Reporting of the protocol fuzzer (`protocol_fuzz.py`): a failure's record (the run's rule
sequence and its slashes), the progress file of a long run, and the delivery counts of an audit.
Mixed into `ProtocolMachine`; reads `self.stats` (the module's STATS)."""

import os
import time

from eth_abi import decode as abi_decode
from eth_utils import to_checksum_address

from verillm.spec.hashing import keccak256

from fuzz_honest import COMMITTING, Tracked


class Reporting:
    """Mixin of `ProtocolMachine`: failure log, progress, delivery counts."""

    def _record_failure(self, exc: AssertionError) -> None:
        """Count it, and log it with the run's rule sequence: a chunk cut by its time limit while
        hypothesis shrinks still leaves what failed."""
        self.stats["failures"] += 1
        progress = os.environ.get("FUZZ_PROGRESS")
        if progress:
            with open(progress + ".failures", "a") as f:
                f.write(f"{time.strftime('%H:%M:%S')} {exc!r} after {' '.join(self.path)}\n  slashes: {self._slash_log()}\n")
                f.writelines(f"  {line}\n" for line in self._state_dump())

    def _state_dump(self) -> list[str]:
        """What a failure's replay needs first (session 7 spent an hour rebuilding it by hand for
        seed 160002): every audit of the run with its phase on-chain and the states the harness
        saw, every batching promise and every omission claim with its state and deadline."""
        lines = [f"head {self.reads.head()}"]
        for t in self.audits:
            a = t.run.audit_id
            now = self.audit(a) if a else None
            where = f"phase {now.phase} round {now.round}" if now else "never started"
            lines.append(f"audit {a}: worker {t.worker} dispatcher {t.dispatcher} mode {t.mode} started {t.start_block} "
                         f"{where}; seen {t.seen[-8:]}")
        for pr in self.promises:
            lines.append(f"promise: dispatcher {pr.dispatcher} worker {pr.worker} fate {pr.fate} batch {pr.batch_id} "
                         f"seen included {pr.seen_included} claims {pr.claims}")
        for claim_id, pr in sorted(self.claim_of.items()):
            state, deadline = self._claim_state(claim_id)
            lines.append(f"claim {claim_id}: on dispatcher {pr.dispatcher}'s promise, state {state}, prove by block {deadline}")
        return lines

    def _slash_log(self) -> list:
        """Every PartySlashed / ContestLost of this run (the chain was reverted before it), for
        a failure's record: who lost stake in which audit, and why."""
        topics = {"0x" + keccak256(b"PartySlashed(uint256,address,uint256,string)").hex(): "PartySlashed",
                  "0x" + keccak256(b"ContestLost(uint256,address,uint256)").hex(): "ContestLost",
                  "0x" + keccak256(b"DispatcherSlashed(uint256,address,uint256,string)").hex(): "DispatcherSlashed",
                  "0x" + keccak256(b"DeliveryDefaulted(uint256,address,uint256)").hex(): "DeliveryDefaulted"}
        addresses = [self.p.jobs.address, self.p.disputes.address, self.p.delivery.address, self.p.batches.address]
        logs = self.rpc.call("eth_getLogs", [{"fromBlock": "0x0", "toBlock": "latest", "address": addresses}])
        out = []
        for log in logs:
            name = topics.get(log["topics"][0])
            if name:
                who = self._index(to_checksum_address("0x" + log["topics"][2][-40:]))
                reasoned = name in ("PartySlashed", "DispatcherSlashed")
                detail = abi_decode(["uint256", "string"], bytes.fromhex(log["data"][2:]))[1] if reasoned else name
                out.append((name, int(log["topics"][1], 16), who, detail, int(log["blockNumber"], 16)))
        return out + self._take_log()

    def _take_log(self) -> list:
        """Every stake the Registry took (`Slashed`, whichever contract asked: Coverage's omission
        slashes and Batches' missed draws have no audit event above), as ("Taken", node, wei,
        the contract, block)."""
        names = {self.p.jobs.address.lower(): "Jobs", self.p.disputes.address.lower(): "Disputes",
                 self.p.delivery.address.lower(): "Delivery", self.p.batches.address.lower(): "Batches",
                 self.p.coverage.address.lower(): "Coverage"}
        topic = "0x" + keccak256(b"Slashed(address,uint256,uint256,address)").hex()
        logs = self.rpc.call("eth_getLogs", [{"fromBlock": "0x0", "toBlock": "latest", "address": self.p.registry.address, "topics": [topic]}])
        out = []
        for log in logs:
            amount, _, by = abi_decode(["uint256", "uint256", "address"], bytes.fromhex(log["data"][2:]))
            who = self._index(to_checksum_address("0x" + log["topics"][1][-40:]))
            out.append(("Taken", who, amount, names.get(by.lower(), by), int(log["blockNumber"], 16)))
        return out

    def _report_progress(self) -> None:
        """A long run reports after every run (cumulative), so a chunk cut by its time limit
        still counts: steps, runs, failures so far, and the lifecycles it saw (one per line)."""
        progress = os.environ.get("FUZZ_PROGRESS")
        if not progress:
            return
        with open(progress, "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} steps {self.stats['steps']} runs {self.stats['runs']} paths {len(self.stats['paths'])} "
                    f"lifecycles {len(self.stats['lifecycles'])} failures {self.stats['failures']}\n")
        with open(progress + ".lifecycles", "a") as f:
            f.writelines(repr(x) + "\n" for x in self.stats["lifecycles"] - self.stats["reported"])
        self.stats["reported"] |= self.stats["lifecycles"]

    def _count_delivery(self, t: Tracked) -> None:
        """Audits that saw a claim window, a publication, a slashUndelivered (COMMITTING → DECIDED)."""
        counts = self.stats["delivery"]
        counts["audits"] += 1
        counts["claimed"] += any(x[0] == "claim" for x in t.seen)
        counts["published"] += t.published
        states = [x for x in t.seen if isinstance(x[0], int)]
        counts["slashed_undelivered"] += any(a[1] == COMMITTING and b == (a[0], 3) for a, b in zip(states, states[1:]))
