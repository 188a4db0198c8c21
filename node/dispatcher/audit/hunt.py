"""The worker's hunt of the first-round members that framed it (docs/protocol.md §12 "Accountable votes").

Once the appeal round this node asked for decides PASS of a first round whose majority passed it
too (after an overturned FAIL or TIE nobody is hunted: the contract convicts only on two rounds
agreeing), its own data are found honest; a
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

The symmetric hunt, by a member of the appeal round: once the appeal decided FAIL of a first round
whose majority failed the worker too, and this node
voted "disagree" in it (or the worker defaulted there, whether this node opened or not), a
first-round member that voted "agree" and whose posted leaves fail
against this node's own on those token cells vouched for a cheat (`compute_vouch_targets`). The
same steps; the adjudication is `adjudicateAcrossRounds` with this node's own appeal opening as
the reference, counted once per appeal member: the member is slashed when a majority of the
appeal's seats have been counted. Every "disagree" voter of the appeal hunts, but contests only
when no other contest on that member is answered or still running in time: another hunter's
answered contest publishes the proofs this node's count needs (its challenger gets the reward).
"""

import logging

from verillm.spec.audit import Phase, compute_prompt_len, decode_opening_leaves
from verillm.spec.challenge import compute_challenge
from verillm.spec.honest import compute_hunt_targets, compute_vouch_targets, is_hunt_in_time
from verillm.spec.settlement import FAIL, PASS, WORKER_DEFAULT, MemberRecord, RoundRecord, compute_majority

from verillm.node.dispatcher.chainio import ChainIO, is_revert
from verillm.node.store.dispatcher_tables import DispatcherTables, Duty
from verillm.node.worker.worker import Worker

log = logging.getLogger(__name__)

# getContest's fields (Disputes.Contest)
OPEN, CHALLENGER, DEADLINE, ANSWERED, RELEASED = 3, 4, 5, 8, 9


class LiarHunt:
    """Hunts the first-round liars: of this node's own seat as a worker, after its appeal passed;
    as an appeal "disagree" voter, the first-round agrees its data contradict after a FAIL."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, worker: Worker):
        self.chainio, self.tables, self.worker = chainio, tables, worker
        self.me = "0x" + chainio.address.hex()
        # audit id → (own opening, targets, model): computed once per passed appeal (an opening
        # may cost a prefill); rebuilt from the store and the chain after a restart.
        self._plans: dict[int, tuple] = {}

    async def advance(self, duty: Duty, head: int) -> None:
        """Take the next step against every first-round liar of ``duty``: the worker's round-0
        seat after a PASS of its appeal, or an appeal member's seat after a FAIL."""
        is_worker = duty.round == 0 and duty.slot == 0
        if not is_worker and (duty.round == 0 or duty.slot == 0):
            return
        protocol = self.chainio.protocol
        state = await self.chainio.read(protocol.get_audit, duty.audit_id)
        if state.round == 0 or (not is_worker and state.round != duty.round):
            return
        appeal = await self.chainio.get_round(duty.audit_id, state.round)
        verdict = await self.chainio.read(protocol.jobs.call, "currentVerdict", duty.audit_id) if appeal.phase == Phase.DECIDED else 0
        if verdict not in ((PASS,) if is_worker else (FAIL, WORKER_DEFAULT)):
            return
        if duty.audit_id not in self._plans:
            self._plans[duty.audit_id] = await (self._plan(duty, state) if is_worker else self._plan_vouched(duty, state, verdict))
        mine, targets, model = self._plans[duty.audit_id]
        dispute_by = appeal.verdict_block + self.chainio.preset.DISPUTE_WINDOW_BLOCKS
        for slot, cells in targets.items():
            await self._step(duty.audit_id, slot, cells, self._adjudication(duty, slot, cells, mine, is_worker), model, head, dispute_by,
                             0 if is_worker else duty.slot)

    @staticmethod
    def _adjudication(duty: Duty, slot: int, cells: tuple, mine, is_worker: bool):
        """The adjudication of member ``slot`` once its answer published its proofs: against the
        worker's data (this node's, the worker) or across rounds (this node's, an appeal member)."""
        if is_worker:
            return lambda published: ("adjudicate", (duty.audit_id, 0, slot, mine, published), {"only": set(cells)})
        return lambda published: ("adjudicate_across_rounds", (duty.audit_id, slot, duty.slot, published, mine, list(cells)), {})

    async def _plan(self, duty: Duty, state) -> tuple:
        """This node's own round-0 opening, and which members to hunt on which cells."""
        model, prompt_len, mine = await self._own_opening(duty, state, 0)
        members = await self._posted_leaves(duty.audit_id, model.fingerprint_dims)
        targets = compute_hunt_targets(PASS, {(i.leaf.position, i.leaf.layer): i.leaf for i in mine.leaves}, members, model,
                                       prompt_len, state.output_tokens, first_majority=await self._first_majority(duty.audit_id))
        return mine, targets, model

    async def _plan_vouched(self, duty: Duty, state, verdict: int) -> tuple:
        """This node's own appeal opening, and which first-round agrees to hunt on which cells."""
        model, prompt_len, mine = await self._own_opening(duty, state, duty.round)
        own_vote = (await self.chainio.read(self.chainio.protocol.get_party, duty.audit_id, duty.round, duty.slot))["vote"]
        members = await self._posted_leaves(duty.audit_id, model.fingerprint_dims)
        votes = {e["args"]["slot"]: e["args"]["vote"] for e in self.tables.get_events("Opened", duty.audit_id) if e["args"]["round"] == 0}
        targets = compute_vouch_targets(verdict, own_vote, {(i.leaf.position, i.leaf.layer): i.leaf for i in mine.leaves}, members, votes,
                                        model, prompt_len, state.output_tokens, first_majority=await self._first_majority(duty.audit_id))
        return mine, targets, model

    async def _first_majority(self, audit_id: int) -> int:
        """Round 0's majority as `Disputes` tallies it (opened, not slashed): only a hunt of two
        rounds agreeing can slash, so a hunt after an overturn would only cost its bonds."""
        seats = (await self.chainio.get_round(audit_id, 0)).members
        parties = [await self.chainio.read(self.chainio.protocol.get_party, audit_id, 0, slot) for slot in range(1, len(seats) + 1)]
        return compute_majority(RoundRecord(worker_opened=True, members=tuple(
            MemberRecord(node=p["node"], opened=p["opened"], vote=p["vote"], slashed=p["slashed"]) for p in parties)))

    async def _own_opening(self, duty: Duty, state, round_index: int) -> tuple:
        model = await self.chainio.get_model(state.model_id)
        prompt_len = compute_prompt_len(state.num_positions, state.output_tokens)
        seed = (await self.chainio.get_round(duty.audit_id, round_index)).challenge_seed
        challenge = compute_challenge(seed, prompt_len, state.output_tokens, model.committed_layers, self.chainio.preset.CHALLENGE_POSITIONS)
        return model, prompt_len, await self.worker.open_own_cells(duty.job_hash, challenge=challenge)

    async def _posted_leaves(self, audit_id: int, dims: int) -> dict[int, dict]:
        """Each first-round member's leaves as its `openAndVote` posted them, by party slot."""
        posted = {}
        for event in self.tables.get_events("Opened", audit_id):
            if event["args"]["round"] != 0 or event["args"]["slot"] == 0:
                continue
            calldata = await self.chainio.get_calldata(bytes.fromhex(event["tx_hash"]))
            posted[event["args"]["slot"]] = {(l.position, l.layer): l for l in decode_opening_leaves(calldata["leaves"], dims)}
        return posted

    async def _step(self, audit_id: int, slot: int, cells: tuple, adjudicate, model, head: int, dispute_by: int, appeal_slot: int) -> None:
        """One step against first-round member ``slot``; ``adjudicate(published)`` names the call;
        ``appeal_slot``: this node's seat in the appeal (0: the worker's hunt), whose contradiction
        counts once (the slash needs a majority of the appeal's seats)."""
        protocol = self.chainio.protocol
        party = await self.chainio.read(protocol.get_party, audit_id, 0, slot)
        contests = [(e["args"]["contestId"], e["args"]["challenger"].lower()) for e in self.tables.get_events("Contested", audit_id)
                    if e["args"]["round"] == 0 and e["args"]["slot"] == slot]
        ours = [c for c, challenger in contests if challenger == self.me]
        if not ours:
            if party["slashed"]:
                return
            if appeal_slot:  # another hunter's contest serves: its answer's proofs count this node's contradiction too
                for contest_id, _ in contests:
                    contest = await self.chainio.read(protocol.disputes.call, "getContest", contest_id)
                    if contest[ANSWERED]:
                        return await self._adjudicate(audit_id, slot, contest_id, adjudicate, model, appeal_slot)
                    if contest[OPEN] and contest[DEADLINE] < dispute_by:
                        return  # its answer (or its loss) comes in time
            if is_hunt_in_time(head, dispute_by, self.chainio.preset.PROOF_WINDOW_BLOCKS):
                await self.chainio.send("contest", audit_id, 0, slot, list(cells), audit_id=audit_id)
                log.warning("audit %d: first-round member %d's data contradict the appeal's verdict; contested", audit_id, slot)
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
        await self._adjudicate(audit_id, slot, contest_id, adjudicate, model, appeal_slot)

    async def _adjudicate(self, audit_id: int, slot: int, contest_id: int, adjudicate, model, appeal_slot: int) -> None:
        """Adjudicate member ``slot`` with the proofs contest ``contest_id``'s answer published."""
        protocol = self.chainio.protocol
        if appeal_slot and (await self.chainio.read(protocol.disputes.call, "hunts", audit_id, slot))[2] >> appeal_slot & 1:
            return  # counted: the other appeal members' contradictions complete the quorum
        published = await self.chainio.read(protocol.get_answered_opening, contest_id, model)
        name, args, kwargs = adjudicate(published)
        await self._send_tolerant(name, audit_id, ("AlreadyHandled", "AlreadySlashed", "AlreadyCounted"), *args, **kwargs)
        log.warning("audit %d: first-round member %d adjudicated (%s)", audit_id, slot, name)

    async def _send_tolerant(self, name: str, audit_id: int, benign: tuple[str, ...], *args, **kwargs) -> None:
        """Send; a revert that means someone else already did it is not an error."""
        try:
            await self.chainio.send(name, *args, audit_id=audit_id, **kwargs)
        except Exception as exc:
            if not is_revert(exc, *benign):
                raise
