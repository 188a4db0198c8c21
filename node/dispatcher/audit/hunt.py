"""The worker's hunt of the first-round members that framed it (docs/protocol.md §12 "Accountable votes").

Once the appeal round this node asked for decides PASS, its own data are found honest; a
first-round member whose posted leaves fail the cell test against them on the token cells
every round checks is a provable liar. For each such member (`spec.honest.compute_hunt_targets`
decides, over the `openAndVote` calldata and this node's own opening: no other I/O), one step
per watcher tick, each re-read from the chain:

    contest      the failing cells, bond `DISPUTE_BOND_WEI`, only while a last-block answer
                 still leaves a block to adjudicate (`is_hunt_in_time`)
    resolve      the contest unanswered past its proof window: the liar is slashed, the bond
                 comes back with the reward (`resolveContest`)
    adjudicate   the contest answered (its bond held in the pool, not paid to the member): with
                 the proofs its answer published (`Protocol.get_answered_opening`); the liar is
                 slashed, and this node, whose contest was the first answered, gets its bond
                 back and the reward
    release      the liar slashed while this node's answered contest was not the first one:
                 its held bond back (`releaseBond`)

A member whose data pass is never contested, whatever it voted: an honest "disagree" on honest
data (the stop rule) costs nobody anything.
"""

import logging

from verillm.spec.audit import Phase, compute_prompt_len, decode_opening_leaves
from verillm.spec.challenge import compute_challenge
from verillm.spec.honest import compute_hunt_targets, is_hunt_in_time
from verillm.spec.settlement import PASS

from verillm.node.dispatcher.chainio import ChainIO, is_revert
from verillm.node.store.dispatcher_tables import DispatcherTables, Duty
from verillm.node.worker.worker import Worker

log = logging.getLogger(__name__)

# getContest's fields (Disputes.Contest)
OPEN, CHALLENGER, DEADLINE, ANSWERED, RELEASED = 3, 4, 5, 8, 9


class LiarHunt:
    """Hunts the liars of this node's own first-round seat as a worker, after its appeal passed."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, worker: Worker):
        self.chainio, self.tables, self.worker = chainio, tables, worker
        self.me = "0x" + chainio.address.hex()
        # audit id → (own opening, targets, model): computed once per passed appeal (an opening
        # may cost a prefill); rebuilt from the store and the chain after a restart.
        self._plans: dict[int, tuple] = {}

    async def advance(self, duty: Duty, head: int) -> None:
        """Take the next step against every first-round liar of ``duty`` (the worker's round-0 seat)."""
        protocol = self.chainio.protocol
        state = await self.chainio.read(protocol.get_audit, duty.audit_id)
        if state.round == 0:
            return
        appeal = await self.chainio.get_round(duty.audit_id, state.round)
        if appeal.phase != Phase.DECIDED or await self.chainio.read(protocol.jobs.call, "currentVerdict", duty.audit_id) != PASS:
            return
        if duty.audit_id not in self._plans:
            self._plans[duty.audit_id] = await self._plan(duty, state)
        mine, targets, model = self._plans[duty.audit_id]
        dispute_by = appeal.verdict_block + self.chainio.preset.DISPUTE_WINDOW_BLOCKS
        for slot, cells in targets.items():
            await self._step(duty.audit_id, slot, cells, mine, model, head, dispute_by)

    async def _plan(self, duty: Duty, state) -> tuple:
        """This node's own round-0 opening, and which members to hunt on which cells."""
        model = await self.chainio.get_model(state.model_id)
        prompt_len = compute_prompt_len(state.num_positions, state.output_tokens)
        first = await self.chainio.get_round(duty.audit_id, 0)
        challenge = compute_challenge(first.challenge_seed, prompt_len, state.output_tokens, model.committed_layers,
                                      self.chainio.preset.CHALLENGE_POSITIONS)
        mine = await self.worker.open_cells(duty.job_hash, self.chainio.address, challenge=challenge)
        members = await self._posted_leaves(duty.audit_id, model.fingerprint_dims)
        targets = compute_hunt_targets(PASS, {(i.leaf.position, i.leaf.layer): i.leaf for i in mine.leaves}, members, model,
                                       prompt_len, state.output_tokens)
        return mine, targets, model

    async def _posted_leaves(self, audit_id: int, dims: int) -> dict[int, dict]:
        """Each first-round member's leaves as its `openAndVote` posted them, by party slot."""
        posted = {}
        for event in self.tables.get_events("Opened", audit_id):
            if event["args"]["round"] != 0 or event["args"]["slot"] == 0:
                continue
            calldata = await self.chainio.get_calldata(bytes.fromhex(event["tx_hash"]))
            posted[event["args"]["slot"]] = {(l.position, l.layer): l for l in decode_opening_leaves(calldata["leaves"], dims)}
        return posted

    async def _step(self, audit_id: int, slot: int, cells: tuple, mine, model, head: int, dispute_by: int) -> None:
        protocol = self.chainio.protocol
        party = await self.chainio.read(protocol.get_party, audit_id, 0, slot)
        ours = [e["args"]["contestId"] for e in self.tables.get_events("Contested", audit_id)
                if e["args"]["round"] == 0 and e["args"]["slot"] == slot and e["args"]["challenger"].lower() == self.me]
        if not ours:
            if not party["slashed"] and is_hunt_in_time(head, dispute_by, self.chainio.preset.PROOF_WINDOW_BLOCKS):
                await self.chainio.send("contest", audit_id, 0, slot, list(cells), audit_id=audit_id)
                log.warning("audit %d: first-round member %d's data contradict the passed appeal; contested", audit_id, slot)
            return
        contest_id = ours[-1]
        contest = await self.chainio.read(protocol.disputes.call, "getContest", contest_id)
        if contest[OPEN]:
            if head > contest[DEADLINE]:
                await self._send_tolerant("resolve_contest", audit_id, ("ContestClosed",), contest_id)
            return
        if not contest[ANSWERED] or contest[RELEASED]:
            return  # resolved (the liar slashed, our bond back with the reward), moot, or paid
        if party["slashed"]:
            await self._send_tolerant("release_bond", audit_id, ("NotHeld",), contest_id)
            return
        published = await self.chainio.read(protocol.get_answered_opening, contest_id, model)
        await self._send_tolerant("adjudicate", audit_id, ("AlreadyHandled",), audit_id, 0, slot, mine, published, only=set(cells))
        log.warning("audit %d: first-round member %d adjudicated a liar", audit_id, slot)

    async def _send_tolerant(self, name: str, audit_id: int, benign: tuple[str, ...], *args, **kwargs) -> None:
        """Send; a revert that means someone else already did it is not an error."""
        try:
            await self.chainio.send(name, *args, audit_id=audit_id, **kwargs)
        except Exception as exc:
            if not is_revert(exc, *benign):
                raise
