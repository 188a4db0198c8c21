"""Replay simulated audits through the real contracts and compare them outcome by outcome.

Each case is one audit as `verillm.sim.audit.run_audit` plays it under the `main` rule set:
a worker (honest or cheating), a dispatcher, and members that are honest, offline, colluding,
lazy, griefing, withholding their receipt or their opening. The replay batches the worker's
receipt on anvil, lets the contracts draw the committee, and runs the simulator with the
chain's seeds (each round's from the blockhash after its start or its `escalate`, `drawRound`),
so both draw the same committees. It then plays the simulator's decisions step
by step — receipts, delivery claims (`claimUndelivered`) with the worker's `publishTranscript` or,
unpublished, `slashUndelivered`, `replaceMissing`, sealed votes (`sealVote`, salted from
the member's key) then their openings (`openAndVote`), `finalize`, `escalate`,
`drawRound` of the escalation, the second round (an unheard one abandons the audit), `settle` — and compares:
every committee drawn, abandoned or not, escalation unheard or not, the verdict, each node's stake
change and credit (wei).
Every chain action is reverted after its case, so every case starts from the same stakes.
"""

from dataclasses import dataclass, field

import numpy as np

from verillm.spec.audit import Phase, compute_round_seed, compute_vote_salt
from verillm.spec.params import MINIMAL, Preset
from verillm.spec.settlement import AGREE, VERDICT_NAMES
from verillm.sim.audit import AuditContext, Behaviour, run_audit
from verillm.spec.types import SamplingParams
from verillm.sim.replay_chain import TRANSCRIPT, ReplayWorld, compute_receipt_hash
from verillm.sim.settle_paths import Contest
from verillm.sim.rules import MAIN, RuleSet

REPLAY_STAKES_MIN = (3, 2, 2, 1, 1, 1, 2, 1, 1, 3, 1, 1)
"""Twelve nodes: enough for a committee, a redraw and an escalation, few enough that an
escalation after redraws sometimes finds the pool exhausted (and lapses)."""

# (name, behaviour, worker adversarial, cheated, honest offline probability)
CASE_KINDS = (
    ("honest", Behaviour(), False, False, 0.0),
    ("honest-offline", Behaviour(), False, False, 0.35),
    ("members-mostly-offline", Behaviour(), False, False, 0.75),
    ("cheat", Behaviour(), True, True, 0.0),
    ("cheat-offline", Behaviour(), True, True, 0.3),
    ("collude", Behaviour(collude=True), True, True, 0.0),
    ("collude-withhold", Behaviour(collude=True, withhold=True), True, True, 0.1),
    ("grief-disagree", Behaviour(grief=True), False, False, 0.0),
    ("grief-refuse", Behaviour(refuse=True), False, False, 0.0),
    ("lazy-on-cheat", Behaviour(lazy=True), True, True, 0.0),
    ("withhold-openings", Behaviour(withhold_openings=True), True, True, 0.0),
    ("worker-default", Behaviour(worker_defaults=True), True, True, 0.0),
    ("withheld-published", Behaviour(collude=True, starve=True), True, True, 0.0),
    ("withheld-unpublished", Behaviour(collude=True, starve=True, withhold_transcript=True), True, True, 0.0),
    ("honest-worker-withheld", Behaviour(grief=True, starve=True), False, False, 0.0),
    ("escalate-unheard", Behaviour(collude=True, withhold=True, escalate_own_fail=True), True, True, 0.1),
    ("contest-answered", Behaviour(), False, False, 0.0),
    ("contest-unanswered", Behaviour(), False, False, 0.0),
)
CONTEST_KINDS = {"contest-answered": True, "contest-unanswered": False}
"""The adversary contests the honest worker's opening in the final round's dispute window; the
worker answers (`answerContest`) or misses the proof window (`resolveContest` slashes it)."""
ADVERSARIAL_DISPATCHER_KINDS = {"withheld-published", "withheld-unpublished", "honest-worker-withheld"}
"""Kinds whose dispatcher must be the adversary's (it withholds the committee's jobs)."""


@dataclass
class ReplayCase:
    index: int
    kind: str
    behaviour: Behaviour
    worker: int
    dispatcher: int
    cheated: bool
    offline: float
    rng_seed: int


@dataclass
class ReplayResult:
    case: ReplayCase
    abandoned: bool = False
    escalated: bool = False
    lapsed: bool = False
    verdict: int = 0
    committees: int = 0
    claims: int = 0
    published: bool = False
    undelivered: bool = False
    contested: bool = False
    omission_slashed: bool = False
    sealed_unopened: int = 0
    """Seats (all rounds) that sealed their vote and never opened it."""
    unsealed: int = 0
    """Seats (all rounds) that never sealed although the worker opened."""
    mismatches: list = field(default_factory=list)
    claimants: list = field(default_factory=list)
    """node indices whose delivery claims are unresolved (their bonds held in Delivery)."""
    claim_bond_credits: dict = field(default_factory=dict)
    """node index → wei credited by the resolution of delivery claim bonds (paid in ETH, outside the simulator's ledger)."""


def sample_cases(count: int, adversarial: np.ndarray, seed: int = 0) -> list[ReplayCase]:
    """``count`` audits, cycling through the case kinds, with random workers and dispatchers."""
    rng = np.random.default_rng(seed)
    adv, honest = np.flatnonzero(adversarial), np.flatnonzero(~adversarial)
    cases = []
    for i in range(count):
        kind, beh, worker_adv, cheated, offline = CASE_KINDS[i % len(CASE_KINDS)]
        worker = int(rng.choice(adv if worker_adv else honest))
        # the worker's own node dispatches half the time; otherwise any other node
        dispatcher = worker if rng.random() < 0.5 else int(rng.choice([n for n in range(len(adversarial)) if n != worker]))
        if kind in ADVERSARIAL_DISPATCHER_KINDS and not adversarial[dispatcher]:
            dispatcher = int(rng.choice([n for n in adv if n != worker]))
        cases.append(ReplayCase(i, kind, beh, worker, dispatcher, cheated, offline, int(rng.integers(2**31))))
    return cases


class Replayer:
    def __init__(self, chain, preset: Preset = MINIMAL, rules: RuleSet = MAIN, adversary_share: float = 0.4,
                 mu: float = 0.1, d: float = 1.0, seed: int = 0):
        self.world = ReplayWorld(chain, preset, REPLAY_STAKES_MIN)
        self.preset, self.rules, self.mu, self.d = preset, rules, mu, d
        n = len(REPLAY_STAKES_MIN)
        adversarial = np.zeros(n, dtype=bool)
        adversarial[np.random.default_rng(seed).choice(n, size=int(round(adversary_share * n)), replace=False)] = True
        self.adversarial = adversarial
        self.chain = chain
        self.start_balances = self.world.balances()  # every case starts from these (reverted after each)
        self.base = chain.snapshot()

    def simulate(self, case: ReplayCase, seed: bytes, audit_id: int, escalation_seed=None, decider_seed=None):
        ctx = AuditContext(self.preset, self.rules, self.world.pool(self.adversarial), case.behaviour, self.d, self.mu, case.offline)
        contest = None
        if case.kind in CONTEST_KINDS:
            challenger = next(int(i) for i in np.flatnonzero(self.adversarial) if i != case.worker)
            contest = Contest(challenger, CONTEST_KINDS[case.kind])
        return run_audit(ctx, case.worker, case.dispatcher, case.cheated, seed, np.random.default_rng(case.rng_seed),
                         audit_id=audit_id, escalation_seed=escalation_seed, contest=contest, decider_seed=decider_seed)

    def replay(self, case: ReplayCase) -> ReplayResult:
        try:
            return self._replay(case)
        finally:
            self.chain.revert(self.base)
            self.base = self.chain.snapshot()

    def _replay(self, case: ReplayCase) -> ReplayResult:
        w, p, pre = self.world, self.world.protocol, self.preset
        res = ReplayResult(case)
        stakes0, credits0 = self.start_balances
        worker, dispatcher = w.nodes[case.worker], w.nodes[case.dispatcher]
        wtrace = w.worker_trace(case.cheated)
        wreceipt, wcommit = w.receipt(worker, wtrace, member=False, nonce=case.index)
        posted = p.post_batch(dispatcher.account, [compute_receipt_hash(wreceipt)]).value
        self.chain.mine(pre.AUDIT_DRAW_DELAY_BLOCKS + 1)
        p.draw_audit(dispatcher.account, posted.batch_id, dispatcher.vrf_key)
        started = p.start_audit(dispatcher.account, posted.batch_id, 0, wreceipt, posted.levels)
        audit_id = started.value
        self.chain.mine(pre.AUDIT_DRAW_DELAY_BLOCKS + 1)
        p.draw_round(self.world.outsider, audit_id)
        seed = compute_round_seed(audit_id, 0, p.get_blockhash(started.receipt["blockNumber"] + pre.AUDIT_DRAW_DELAY_BLOCKS))
        out = self.simulate(case, seed, audit_id)
        res.abandoned, res.escalated = out.abandoned, out.escalated
        first = out.trace[0]
        res.undelivered = out.undelivered
        self._drive_round(res, audit_id, 0, first, wtrace, wcommit)
        if first["abandoned"]:
            if w.round_phase(audit_id, 0) != Phase.ABANDONED:
                res.mismatches.append("simulator abandoned round 0, the contracts did not")
            return self._compare(res, out, stakes0, credits0, bond=0)
        if out.escalated:
            escalator = w.nodes[out.escalator]
            tx = p.escalate(escalator.account, audit_id)
            esc_block = tx.receipt["blockNumber"]
            self.chain.mine(pre.AUDIT_DRAW_DELAY_BLOCKS + 1)
            p.draw_round(self.world.outsider, audit_id)
            esc_seed = compute_round_seed(audit_id, 1, p.get_blockhash(esc_block + pre.AUDIT_DRAW_DELAY_BLOCKS))
            out = self.simulate(case, seed, audit_id, escalation_seed=esc_seed)
            if out.trace[0] != first:
                res.mismatches.append("the simulator's first round changed with the escalation seed")
            res.lapsed, res.undelivered = out.lapsed_escalation, out.undelivered
            self._drive_round(res, audit_id, 1, out.trace[1], wtrace, wcommit)
            chain_unheard = w.round_phase(audit_id, 1) == Phase.ABANDONED
            appeal_unheard = out.unheard_escalation and not out.decider_unheard  # (a decider's is checked with its round)
            if chain_unheard != appeal_unheard:
                res.mismatches.append(f"escalation unheard: simulator {appeal_unheard}, contracts {chain_unheard}")
            if out.unheard_escalation and not out.decided_by_decider:  # the audit is abandoned: nothing to settle
                return self._compare(res, out, stakes0, credits0, bond=pre.DISPUTE_BOND_WEI)
            if out.decided_by_decider:  # the appeal contradicted round 0: settling it enters the decider (round 2)
                out = self._drive_decider(res, case, seed, audit_id, esc_seed, out, wtrace, wcommit)
                if out.unheard_escalation:
                    return self._compare(res, out, stakes0, credits0, bond=pre.DISPUTE_BOND_WEI)
        res.contested = out.contested
        if out.contested:
            self._contest(audit_id, out.contest, 2 if out.decided_by_decider else 1 if out.escalated else 0, wtrace, wcommit)
        self.chain.mine(pre.DISPUTE_WINDOW_BLOCKS + 1)
        verdict = p.settle(self.world.outsider, audit_id).value
        res.verdict = out.verdict
        if verdict != out.verdict:
            res.mismatches.append(f"verdict: simulator {VERDICT_NAMES.get(out.verdict)}, contracts {VERDICT_NAMES.get(verdict)}")
        return self._compare(res, out, stakes0, credits0, bond=pre.DISPUTE_BOND_WEI if out.escalated else 0)

    def _drive_decider(self, res, case, seed, audit_id, esc_seed, out, wtrace, wcommit):
        """Settle the appeal (which enters round 2 on the contracts), draw the decider, simulate
        again with the chain's decider seed and play round 2 as the simulator did."""
        w, p, pre = self.world, self.world.protocol, self.preset
        self.chain.mine(pre.DISPUTE_WINDOW_BLOCKS + 1)
        entered = p.settle(self.world.outsider, audit_id)
        if entered.value is not None or p.get_audit(audit_id).round != 2:
            res.mismatches.append("the simulator entered a decider round, the contracts settled the appeal")
            return out
        self.chain.mine(pre.AUDIT_DRAW_DELAY_BLOCKS + 1)
        p.draw_round(self.world.outsider, audit_id)
        decider_seed = compute_round_seed(audit_id, 2, p.get_blockhash(entered.receipt["blockNumber"] + pre.AUDIT_DRAW_DELAY_BLOCKS))
        first, appeal = out.trace[0], out.trace[1]
        out = self.simulate(case, seed, audit_id, escalation_seed=esc_seed, decider_seed=decider_seed)
        if out.trace[:2] != [first, appeal]:
            res.mismatches.append("the simulator's first rounds changed with the decider seed")
        self._drive_round(res, audit_id, 2, out.trace[2], wtrace, wcommit)
        chain_unheard = w.round_phase(audit_id, 2) == Phase.ABANDONED
        if chain_unheard != out.decider_unheard:
            res.mismatches.append(f"decider unheard: simulator {out.decider_unheard}, contracts {chain_unheard}")
        return out

    def _contest(self, audit_id, contest, round_index, wtrace, wcommit) -> None:
        """Contest one challenged cell of the worker's opening; answer it, or let the window pass."""
        w, p = self.world, self.world.protocol
        opening = w.opening(audit_id, wtrace, wcommit)
        cells = [(opening.leaves[0].leaf.position, opening.leaves[0].leaf.layer)]
        contest_id = p.contest(w.nodes[contest.challenger].account, audit_id, round_index, 0, cells).value
        if contest.answered:
            p.answer_contest(w.nodes[self._worker_of(audit_id)].account, contest_id, cells, opening)
        else:
            self.chain.mine(self.preset.PROOF_WINDOW_BLOCKS + 1)
            p.resolve_contest(w.outsider, contest_id)

    def _drive_round(self, res, audit_id, ri, trace, wtrace, wcommit) -> None:
        """Play one round's receipts, redraws, openings, votes and `finalize` as the simulator did."""
        w, p, pre = self.world, self.world.protocol, self.preset
        if not trace["attempts"]:  # no candidates at the first draw: checked by the caller (abandoned / lapsed)
            return
        done = [False] * len(trace["attempts"][0]["seats"])
        members = {}
        undelivered = trace.get("undelivered", False)
        for k, attempt in enumerate(trace["attempts"]):
            res.committees += 1
            chain_seats = w.committee(audit_id, ri)
            if chain_seats != attempt["seats"]:
                res.mismatches.append(f"round {ri} attempt {k}: committee simulator {attempt['seats']}, contracts {chain_seats}")
                return
            claims = attempt.get("claims", [])
            self._claim(res, audit_id, attempt, claims, undelivered)
            for slot, (node, posted) in enumerate(zip(attempt["seats"], attempt["posted"])):
                if posted and not done[slot] and not (undelivered and slot in claims):
                    mtrace = w.member_trace()
                    receipt, commit = w.receipt(w.nodes[node], mtrace, member=True, nonce=10_000 + audit_id)
                    p.post_committee_receipt(w.outsider, audit_id, slot, receipt)
                    members[slot] = (w.nodes[node], mtrace, commit)
                    done[slot] = True
            if undelivered:
                # nobody publishes: after the publication window the claimant slashes the worker
                self.chain.mine(pre.COMMIT_WINDOW_BLOCKS + 1)
                tx = p.slash_undelivered(w.nodes[trace["claimant"]].account, audit_id)
                self._record_bonds(res, tx, None)
                return
            if all(done):
                break
            deadline = self.world.protocol.jobs.call("getRound", audit_id, ri)[1]  # claims move it
            self.chain.mine(max(0, deadline - self.chain.get_block_number()) + 1)
            p.replace_missing(w.outsider, audit_id)
        if trace["abandoned"]:
            return
        self._open_and_vote(res, audit_id, ri, trace, members, wtrace, wcommit)

    def _claim(self, res, audit_id, attempt, claims, undelivered) -> None:
        """Starved seats claim their jobs; the worker publishes its transcript unless the case
        withholds it. Once published (any round), members read the job from the event."""
        w, p = self.world, self.world.protocol
        if not claims or res.published:
            return
        for slot in claims:
            p.claim_undelivered(w.nodes[attempt["seats"][slot]].account, audit_id, slot)
            res.claimants.append(attempt["seats"][slot])
            res.claims += 1
        if not undelivered:
            worker = self._worker_of(audit_id)
            tx = p.publish_transcript(w.nodes[worker].account, audit_id, list(TRANSCRIPT), SamplingParams())
            self._record_bonds(res, tx, worker)
            res.published = True

    def _record_bonds(self, res, tx, publisher: int | None) -> None:
        """Book what the round's claim bonds credited (`ClaimBondsResolved`): the publisher its cost,
        each claimant the rest of its bond. A bond is paid in ETH, so the simulator's credits leave it out."""
        delivery = self.world.protocol.delivery
        own = {**tx.receipt, "logs": [log for log in tx.receipt["logs"] if log["address"] == delivery.address]}
        for event in delivery.web3.events.ClaimBondsResolved().process_receipt(own):
            args = event["args"]
            if publisher is not None:
                res.claim_bond_credits[publisher] = res.claim_bond_credits.get(publisher, 0) + args["paidWei"]
            for index in res.claimants:
                res.claim_bond_credits[index] = res.claim_bond_credits.get(index, 0) + args["refundedWei"]
            res.claimants = []

    def _open_and_vote(self, res, audit_id, ri, trace, members, wtrace, wcommit) -> None:
        """The worker opens; every member that will open seals its vote first (`sealVote`), and the
        members open (`openAndVote`) once all sealed or the seal window passed; then `finalize`."""
        w, p = self.world, self.world.protocol
        self.chain.mine(self.preset.AUDIT_DRAW_DELAY_BLOCKS + 1)
        p.draw_challenge(w.outsider, audit_id)
        if trace["worker_opened"]:
            p.open_worker(w.nodes[self._worker_of(audit_id)].account, audit_id, w.opening(audit_id, wtrace, wcommit))
        sealed = {}
        for slot, (opened, vote) in enumerate(zip(trace["opened"], trace["votes"])):
            # a withholder seals on every other seat (a seal never opened and no seal are both a
            # missed opening: the replay checks the contracts agree); the others wait out the window
            if trace["worker_opened"] and (opened or (audit_id + slot) % 2 == 0):
                node, mtrace, commit = members[slot]
                salt = compute_vote_salt(node.account.key, audit_id, ri, slot)
                opening = w.opening(audit_id, mtrace, commit)
                p.seal_vote(node.account, audit_id, ri, slot, opening, vote == AGREE, salt)
                if opened:
                    sealed[slot] = (node, opening, vote == AGREE, salt)
        deadlines = p.get_round_state(audit_id, ri).deadlines
        if trace["worker_opened"] and not all(trace["opened"]):
            self._mine_past(deadlines.members_seal_by)
        for slot, (node, opening, agree, salt) in sealed.items():
            p.open_and_vote(node.account, audit_id, slot, opening, agree, salt)
        if not trace["worker_opened"] or not all(trace["opened"]):
            # finalize waits out the members' open window (the worker's, if it never opened)
            self._mine_past(deadlines.members_open_by if trace["worker_opened"] else deadlines.worker_open_by)
        state = p.get_round_state(audit_id, ri)
        res.sealed_unopened += state.seals - state.opens
        res.unsealed += (state.members - state.seals) if state.worker_opened else 0
        p.finalize(w.outsider, audit_id)

    def _mine_past(self, block: int) -> None:
        self.chain.mine(max(0, block - self.chain.get_block_number()) + 1)

    def _worker_of(self, audit_id: int) -> int:
        return self.world.index[self.world.protocol.get_audit(audit_id).worker.lower()]

    def _compare(self, res: ReplayResult, out, stakes0, credits0, bond: int) -> ReplayResult:
        stakes1, credits1 = self.world.balances()
        for i in range(len(stakes0)):
            slashed = stakes0[i] - stakes1[i]
            credit = credits1[i] - credits0[i] - (bond if i == out.escalator else 0) - res.claim_bond_credits.get(i, 0)
            if out.contested and i == out.contest.challenger:  # its bond was paid in ETH, not from credit
                credit -= self.preset.DISPUTE_BOND_WEI
            if slashed != out.slashed_wei.get(i, 0):
                res.mismatches.append(f"node {i} slashed: simulator {out.slashed_wei.get(i, 0)}, contracts {slashed} wei")
            if credit != out.credits_wei.get(i, 0):
                res.mismatches.append(f"node {i} credit: simulator {out.credits_wei.get(i, 0)}, contracts {credit} wei")
        return res


def agreement_table(results: list[ReplayResult]) -> list[dict]:
    """One row per case kind: audits, committees compared, escalations, lapses, seats that sealed
    and never opened or never sealed, mismatches."""
    rows = {}
    for r in results:
        row = rows.setdefault(r.case.kind, {"kind": r.case.kind, "audits": 0, "committees": 0, "abandoned": 0, "escalated": 0,
                                            "lapsed": 0, "claims": 0, "published": 0, "undelivered": 0, "contested": 0, "omission_slashed": 0,
                                            "sealed_unopened": 0, "unsealed": 0, "verdicts": {},
                                            "agree": 0, "mismatches": 0})
        row["audits"] += 1
        row["committees"] += r.committees
        row["abandoned"] += r.abandoned
        row["escalated"] += r.escalated
        row["lapsed"] += r.lapsed
        row["claims"] += r.claims
        row["published"] += r.published
        row["undelivered"] += r.undelivered
        row["contested"] += r.contested
        row["omission_slashed"] += r.omission_slashed
        row["sealed_unopened"] += r.sealed_unopened
        row["unsealed"] += r.unsealed
        if not r.abandoned and not r.case.kind.startswith("omission-"):  # a claim has no verdict
            name = VERDICT_NAMES.get(r.verdict, "-")
            row["verdicts"][name] = row["verdicts"].get(name, 0) + 1
        row["agree"] += not r.mismatches
        row["mismatches"] += bool(r.mismatches)
    return list(rows.values())


def run_replay(chain, audits: int, seed: int = 0, progress=None, omissions: int = 0) -> tuple[list[ReplayResult], list[dict]]:
    """``audits`` sampled audits, then ``omissions`` omission claims (`verillm.sim.replay_omission`)."""
    from verillm.sim.replay_omission import replay_omission, sample_omission_cases  # it imports this module

    replayer = Replayer(chain, seed=seed)
    results = []
    for case in sample_cases(audits, replayer.adversarial, seed):
        results.append(replayer.replay(case))
        if progress:
            progress(results[-1])
    for case in sample_omission_cases(omissions, replayer.adversarial, audits, seed):
        results.append(replay_omission(replayer, case))
        if progress:
            progress(results[-1])
    return results, agreement_table(results)
