"""The dispatcher's side of each audit it started, phase by phase (docs/protocol.md §12 "Messages, in order", steps 3–7).

    drawing      a first round it started with a draw commitment: drawn privately, the members'
                 jobs sent, and revealed with their receipts (`private_draw.py`); any other
                 round: `drawRound` once its seed block (entered + delay) is mined; `lapse`
                 once the draw window has passed
    committing   committee jobs and receipts (`committee.py`); redraws after the deadline
    opening      draws the challenge when due; as each party opens, fetches its opening with
                 proofs from its node (this dispatcher sent both jobs, so it may) and checks it:
                 leaves that do not hash to what was posted, or proofs that do not reach the
                 committed root → `contest` (the party cannot answer it: slashed); a member
                 whose vote its own proven data contradict → `adjudicate` (slashed at once);
                 then `finalize` once every party has opened or the windows have passed
    decided      resolves its contests past their proof window; escalates when warranted
                 (`votes.is_escalation_warranted`); `settle` after the dispute window
    settled      records the verdict and the slashes; counts them in the metrics

Which permissionless call is due comes from the state machine's twin
(`verillm.spec.audit.compute_due_steps` over `Jobs.getRoundState`), never from trying calls.
"""

import logging

import aiohttp

from verillm.errors import InvalidProof, VerillmError
from verillm.spec.audit import Phase, compute_due_steps, compute_opening_hash, is_onchain_agreement
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.job import compute_job_hash
from verillm.spec.commitment import verify_opening
from verillm.spec.settlement import FAIL, PASS, WORKER_DEFAULT

from verillm.node.dispatcher.chainio import ChainIO, is_revert
from verillm.node.dispatcher.audit.committee import CommitteeDriver
from verillm.node.dispatcher.audit.delivery import compute_self_run_job
from verillm.node.dispatcher.audit.private_draw import PrivateDrawDriver
from verillm.node.dispatcher.router import NetworkDispatcher, RegistryView
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.dispatcher.status import compute_audit_summary
from verillm.node.dispatcher.tasks import KeyedTasks
from verillm.spec.honest import compute_member_vote, is_escalation_warranted, is_provable_lie
from verillm.node.metrics import NodeMetrics

log = logging.getLogger(__name__)

CONTESTED_CELLS = 3  # cells a contest asks for: one unprovable cell is enough to slash


class AuditDriver:
    """Advances this dispatcher's audits from the chain's state."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, router: NetworkDispatcher, view: RegistryView,
                 tasks: KeyedTasks, metrics: NodeMetrics, escalate: bool):
        self.chainio, self.tables, self.router, self.view, self.tasks, self.metrics = chainio, tables, router, view, tasks, metrics
        self.committee = CommitteeDriver(chainio, tables, router, view, tasks)
        self.private_draw = PrivateDrawDriver(chainio, tables, self.committee, tasks)
        self.escalate = escalate
        self.preset = chainio.preset
        self.me = "0x" + chainio.address.hex()

    async def advance(self, audit_id: int, head: int) -> None:
        row = self.tables.get_audit_row(audit_id)  # read when the step runs: the watcher listed it on another thread
        if row is None or row["status"] != "open":
            return
        state = await self.chainio.read(self.chainio.protocol.get_audit, audit_id)
        info = await self.chainio.get_round(audit_id, state.round)
        if info.phase == Phase.DRAWING:
            await self._advance_drawing(state, head)
        elif info.phase == Phase.COMMITTING:
            await self.committee.advance(audit_id, state.round, info, head)
        elif info.phase == Phase.OPENING:
            await self._advance_opening(row, state, info, head)
        elif info.phase == Phase.DECIDED:
            await self._advance_decided(row, state, info, head)
        elif info.phase == Phase.SETTLED:  # read again: `state` may predate the settling transaction
            self._on_settled(row, await self.chainio.read(self.chainio.protocol.get_audit, audit_id))
        elif info.phase == Phase.ABANDONED and self.tables.close_audit(audit_id, "abandoned"):
            log.error("audit %d abandoned: its committee never filled", audit_id)

    # --- opening --------------------------------------------------------------------------------

    async def _context(self, state, info):
        model = await self.chainio.get_model(state.model_id)
        prompt_len = state.num_positions - state.output_tokens + 1
        challenge = compute_challenge(info.challenge_seed, prompt_len, state.output_tokens, model.committed_layers, self.preset.CHALLENGE_POSITIONS)
        return model, prompt_len, challenge

    async def _advance_opening(self, row: dict, state, info, head: int) -> None:
        audit_id, round_index = row["audit_id"], state.round
        if info.challenge_seed == b"\x00" * 32:
            if head > info.ready_block + self.preset.AUDIT_DRAW_DELAY_BLOCKS:
                self.tasks.spawn(f"challenge:{audit_id}", lambda: self.chainio.draw_challenge(audit_id))
            return
        parties = [await self.chainio.read(self.chainio.protocol.get_party, audit_id, round_index, s) for s in range(len(info.members) + 1)]
        checks = self.tables.get_checks(audit_id)  # read after the awaits: a check may have finished meanwhile
        for slot, party in enumerate(parties):
            worker_checked = f"{round_index}:0" in checks
            if party["opened"] and f"{round_index}:{slot}" not in checks and (slot == 0 or worker_checked):
                self.tasks.spawn(f"check:{audit_id}:{round_index}:{slot}", lambda s=slot: self._check_party(row, state, info, s))
        all_checked = all(f"{round_index}:{s}" in checks for s, p in enumerate(parties) if p["opened"])
        round_state = await self.chainio.get_round_state(audit_id, round_index)
        d = round_state.deadlines
        late = head >= (d.members_open_by if info.worker_opened else d.worker_open_by)  # no vote can come any more
        if "finalize" in compute_due_steps(round_state, head + 1) and (all_checked or late):
            self.tasks.spawn(f"finalize:{audit_id}", lambda: self._finalize(audit_id))

    async def _finalize(self, audit_id: int) -> None:
        try:
            tx = await self.chainio.send("finalize", audit_id, audit_id=audit_id)
            log.info("audit %d: round decided, verdict code %s", audit_id, tx.value)
        except Exception as exc:
            if not is_revert(exc, "UnexpectedPhase"):
                raise

    async def _check_party(self, row: dict, state, info, slot: int) -> None:
        """Fetch party ``slot``'s opening, prove it against what it committed and posted; act on it."""
        audit_id, round_index = row["audit_id"], state.round
        if f"{round_index}:{slot}" in self.tables.get_checks(audit_id):
            return  # checked by an earlier step (each check may bond a contest: never twice)
        model, prompt_len, challenge = await self._context(state, info)
        party, opening, problem = await self._fetch_proven(row, round_index, slot, model, challenge)
        if problem is not None and party["slashed"]:
            self.tables.record_check(audit_id, round_index, slot, {"proven": False, "problem": problem, "already_slashed": True})
        elif problem is not None:
            await self._contest(audit_id, round_index, slot, challenge, party["num_positions"], problem)
        elif slot == 0:
            self.tables.record_check(audit_id, round_index, 0, {"proven": True})
        elif not self.tables.get_checks(audit_id).get(f"{round_index}:0", {}).get("proven"):
            # The worker's own opening did not prove: there is nothing trustworthy to judge a vote against.
            self.tables.record_check(audit_id, round_index, slot, {"proven": True, "judged": False})
        else:
            worker_opening = await self._get_worker_opening(row, round_index, model, challenge)
            await self._judge_member(row, state, model, prompt_len, slot, party, worker_opening, opening)

    async def _fetch_proven(self, row: dict, round_index: int, slot: int, model, challenge):
        """Return (party, opening, why it fails to prove or None); proven openings are kept."""
        audit_id = row["audit_id"]
        party = await self.chainio.read(self.chainio.protocol.get_party, audit_id, round_index, slot)
        address, url, job_hash = await self._party_job(row, round_index, slot, party["node"])
        try:
            opening = await self.router.fetch_opening(address, url, job_hash, challenge)
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            raise VerillmError(f"party {slot} of audit {audit_id} did not answer for its opening: {exc}") from exc
        problem = self._prove(opening, party, model)
        if problem is None:
            self.tables.insert_proven_opening(audit_id, round_index, slot, challenge.seed, opening)
        return party, opening, problem

    async def _get_worker_opening(self, row: dict, round_index: int, model, challenge):
        stored = [o for r, s, _, o in self.tables.get_proven_openings(row["audit_id"]) if (r, s) == (round_index, 0)]
        if stored:
            return stored[0]
        _, opening, problem = await self._fetch_proven(row, round_index, 0, model, challenge)
        if problem is not None:
            raise VerillmError(f"audit {row['audit_id']}: the worker's opening no longer proves: {problem}")
        return opening

    async def _party_job(self, row: dict, round_index: int, slot: int, node: str):
        if slot == 0:
            job = self.tables.get_dispatched_job(bytes.fromhex(row["job_hash"]))
            return job.worker, job.worker_url, job.job_hash
        address = bytes.fromhex(node[2:])
        seat = self.tables.get_committee_job(row["audit_id"], round_index, slot - 1, address)
        if seat is not None:
            return address, await self.view.get_endpoint(address), seat.job_hash
        # Not sent by this dispatcher: the member claimed it and ran the published transcript
        # (docs/protocol.md §12 "Undelivered jobs"), a job it submitted in this dispatcher's name.
        dispatched = self.tables.get_dispatched_job(bytes.fromhex(row["job_hash"]))
        job = compute_self_run_job(dispatched.job.model_id, tuple(dispatched.job.input_tokens) + tuple(dispatched.output_tokens),
                                   dispatched.job.sampling, row["audit_id"], round_index, slot - 1, address)
        return address, await self.view.get_endpoint(address), compute_job_hash(job)

    def _prove(self, opening, party: dict, model) -> str | None:
        """Return why ``opening`` is not what the party posted under its root, or None."""
        try:
            verify_opening(opening, party["root"], model.committed_layers, party["num_positions"])
        except InvalidProof as exc:
            return str(exc)
        if compute_opening_hash(opening) != party["opening_hash"]:
            return "the leaves it serves are not the leaves it posted"
        return None

    def _find_contest(self, audit_id: int, round_index: int, slot: int) -> int | None:
        for event in self.tables.get_events("Contested", audit_id):
            if (event["args"]["round"], event["args"]["slot"]) == (round_index, slot):
                return event["contest_id"]
        return None

    async def _contest(self, audit_id: int, round_index: int, slot: int, challenge, num_positions: int, problem: str) -> None:
        # One contest per party: a second one against a party already slashed by the first can
        # never be resolved (Disputes.recordFault reverts), and would block settlement for good.
        existing = self._find_contest(audit_id, round_index, slot)
        if existing is not None:
            self.tables.record_check(audit_id, round_index, slot, {"proven": False, "problem": problem, "contest": existing})
            return
        # Disputes.contest takes cells sorted by (position, layer), without repeats, at most 16
        cells = sorted(set(compute_opened_cells(challenge, num_positions)))[:CONTESTED_CELLS]
        log.warning("audit %d: party %d's opening fails (%s); contesting %s", audit_id, slot, problem, cells)
        tx = await self.chainio.send("contest", audit_id, round_index, slot, cells, audit_id=audit_id)
        self.metrics.disputes.labels(outcome="opened").inc()
        self.tables.record_check(audit_id, round_index, slot, {"proven": False, "problem": problem, "contest": tx.value})

    async def _judge_member(self, row: dict, state, model, prompt_len: int, slot: int, party: dict, worker_opening, opening) -> None:
        audit_id, round_index = row["audit_id"], state.round
        worker_cells = {(i.leaf.position, i.leaf.layer): i.leaf for i in worker_opening.leaves}
        member_cells = {(i.leaf.position, i.leaf.layer): i.leaf for i in opening.leaves}
        job = self.tables.get_dispatched_job(bytes.fromhex(row["job_hash"]))
        seat = self.tables.get_committee_job(audit_id, round_index, slot - 1, bytes.fromhex(party["node"][2:]))
        stop_tokens = tuple(self.router.worker.served.manifest.stop_tokens)
        onchain = is_onchain_agreement(worker_cells, member_cells, model, prompt_len, state.output_tokens)
        # A member that ran the published transcript itself (no seat row) never told this
        # dispatcher its sampled token: the stop check then rests on its committed flags alone.
        member_output = (seat.output_tokens or ()) if seat is not None else ()
        full = compute_member_vote(worker_cells, member_cells, model, prompt_len, job.output_tokens, job.job.max_new_tokens, stop_tokens, member_output)
        outcome = {"proven": True, "agrees": full, "vote": party["vote"]}
        if is_provable_lie(party["vote"], onchain, full) and not party["slashed"]:  # slashed once per audit
            log.warning("audit %d: member slot %d voted %d against its own proven data; adjudicating", audit_id, slot, party["vote"])
            await self.chainio.send("adjudicate", audit_id, round_index, slot, worker_opening, opening, audit_id=audit_id)
            self.metrics.disputes.labels(outcome="opened").inc()
            self.metrics.disputes.labels(outcome="upheld").inc()
            outcome["adjudicated"] = True
        self.tables.record_check(audit_id, round_index, slot, outcome)

    # --- decided, escalation, settlement ------------------------------------------------------------

    async def _advance_decided(self, row: dict, state, info, head: int) -> None:
        audit_id = row["audit_id"]
        for event in self.tables.get_events("Contested", audit_id):
            if event["args"]["challenger"].lower() == self.me:
                self.tasks.spawn(f"resolve:{event['contest_id']}", lambda e=event: self._resolve(e, head))
        if self.escalate and state.round == 0 and not row["escalated"]:
            await self._maybe_escalate(row, state)
        if "settle" in compute_due_steps(await self.chainio.get_round_state(audit_id, state.round), head + 1):
            self.tasks.spawn(f"settle:{audit_id}", lambda: self._settle(audit_id))

    async def _resolve(self, event: dict, head: int) -> None:
        contest = await self.chainio.read(self.chainio.protocol.disputes.call, "getContest", event["contest_id"])
        if not contest[3] or head <= contest[5]:
            return
        await self.chainio.send("resolve_contest", event["contest_id"], audit_id=event["audit_id"])
        self.metrics.disputes.labels(outcome="upheld").inc()

    async def _maybe_escalate(self, row: dict, state) -> None:
        verdict = await self.chainio.read(self.chainio.protocol.jobs.call, "currentVerdict", row["audit_id"])
        proven = [c["agrees"] for key, c in self.tables.get_checks(row["audit_id"]).items() if key.startswith("0:") and "agrees" in c]
        self.tables.update_audit(row["audit_id"], escalated=1 if is_escalation_warranted(verdict, proven) else -1)
        if not is_escalation_warranted(verdict, proven):
            return
        available = len(await self.view.refresh(force=True)) - 1 - len(proven)
        if available < self.preset.ESCALATION_COMMITTEE_SIZE:
            # Escalate anyway: an escalation the pool cannot staff abandons the audit, nobody
            # slashed and the bond refunded, instead of enforcing a verdict proven data contradict.
            log.warning("audit %d: escalation warranted with only %d candidates: it will be unheard", row["audit_id"], available)
        try:
            await self.chainio.send("escalate", row["audit_id"], audit_id=row["audit_id"])
        except Exception as exc:
            # The worker appeals its own FAIL or TIE too (standing): whoever is first escalates.
            if not is_revert(exc, "AlreadyHandled", "UnexpectedPhase"):
                raise
            return
        self.metrics.disputes.labels(outcome="opened").inc()
        log.warning("audit %d: escalated (verdict %d while proven members agree with the worker)", row["audit_id"], verdict)

    async def _settle(self, audit_id: int) -> None:
        try:
            await self.chainio.send("settle", audit_id, audit_id=audit_id)
        except Exception as exc:
            if not is_revert(exc, "UnexpectedPhase"):
                raise

    async def _advance_drawing(self, audit, head: int) -> None:
        """Draw the round's committee once its seed block is mined (privately when this node
        committed to it), or lapse it once too late."""
        audit_id = audit.audit_id
        round_state = await self.chainio.get_round_state(audit_id)
        mine = audit.dispatcher.lower() == self.me.lower()
        if round_state.private_draw and mine:
            await self.private_draw.advance(audit, round_state, head, reveal=False)  # the reveal: the watcher's step
        elif not round_state.receipt_known and mine and head + 1 <= round_state.deadlines.draw_by:
            self.tasks.spawn(f"supply:{audit_id}", lambda: self.private_draw.supply_receipt(audit_id))
        for step in compute_due_steps(round_state, head + 1):
            self.tasks.spawn(f"{step}:{audit_id}", lambda s=step: self.chainio.send(s, audit_id, audit_id=audit_id))

    def _on_settled(self, row: dict, state) -> None:
        if not self.tables.get_events("AuditSettled", row["audit_id"]):
            return  # settled after this tick read the events: count its slashes on the next tick
        if record_settlement(self.tables, self.metrics, row["audit_id"], state):
            log.info("audit %d settled: verdict %d", row["audit_id"], state.verdict)


def record_settlement(tables: DispatcherTables, metrics: NodeMetrics, audit_id: int, state) -> bool:
    """Close a settled audit in the store and count its verdict and slashes, once: False (nothing
    counted) when another step of the audit closed it first. Steps of one audit can overlap (the
    watcher lists open audits on its own thread; the step runs later on the main loop), and each one
    that finds the audit settled on chain comes here; the store's compare-and-set picks one."""
    if not tables.close_audit(audit_id, "settled", verdict=state.verdict):
        return False
    if state.verdict == PASS:
        metrics.verdicts.labels(verdict="verified").inc()
    elif state.verdict in (FAIL, WORKER_DEFAULT):
        metrics.verdicts.labels(verdict="slashed").inc()
    summary = compute_audit_summary(tables, tables.get_audit_row(audit_id))
    members = {s["node"].lower() for s in summary["slashed"]} - {state.worker.lower()}
    metrics.verdicts.labels(verdict="member_slashed").inc(len(members))
    return True
