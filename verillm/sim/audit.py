"""One audit under a rule set: committee draws (spec sortition), redraws, votes, escalation and
settlement (spec `compute_settlement`), with the engines replaced by measured rates.

An honest member that serves the verification job votes DISAGREE on a cheat with probability
``d`` (the attack's measured per-audit detection) and DISAGREE on an honest job with probability
``mu`` (the measured false rejection). The adversary's nodes follow a `Behaviour`.
"""

from dataclasses import dataclass, field

import numpy as np

from verillm.errors import InvalidInput
from verillm.spec.audit import compute_escalation_seed
from verillm.spec.hashing import keccak256
from verillm.spec.params import Preset
from verillm.spec.settlement import (AGREE, DISAGREE, FAIL, PASS, TIE, WORKER_DEFAULT, AuditRecord, MemberRecord, RoundRecord, compute_settlement,
                                     compute_slash, compute_slash_split, compute_round_verdict, needs_decider)
from verillm.sim.appeals import charge_silent_seats, choose_escalator, is_lazy, cross_round_hunts, griefer_escalator, griefer_votes, undo_proportionality
from verillm.sim.rules import RuleSet
from verillm.spec.constants import BPS
from verillm.sim.settle_paths import BIG_POOL_WEI, Contest, apply_contest, settle_undelivered, settle_unheard
from verillm.sim.sortition import Pool, draw_committee


@dataclass(frozen=True)
class Behaviour:
    """What the adversary's nodes do in an audit."""

    collude: bool = False
    """Adversarial members copy an adversarial worker's trace and vote AGREE."""
    withhold: bool = False
    """Adversarial members never answer while they are a minority of the seats (hoping for a redraw)."""
    refuse: bool = False
    """Adversarial members never answer at all (grief: abandon audits)."""
    grief: bool = False
    """Adversarial members vote DISAGREE on an honest worker."""
    starve: bool = False
    """An adversarial dispatcher never sends the job to honest seats while the adversary lacks a
    majority of them: redrawn when the dispatcher feeds the seats; claimed under the job-delivery
    challenge (the worker then publishes its transcript, or is slashed: `withhold_transcript`)."""
    withhold_transcript: bool = False
    """An adversarial worker whose starved seats claimed their jobs never publishes its transcript:
    `slashUndelivered` slashes it as a worker default (the claimant earns the slash reward)."""
    escalate_own_fail: bool = False
    """A cheat's FAIL (or TIE) is appealed, hoping the appeal is unheard or captured: by the cheating
    worker itself where only parties with standing appeal (issue 34), else by another adversarial
    identity (not the dispatcher, so an unheard escalation refunds its bond)."""
    lazy: bool = False
    """Adversarial members vote without computing the job (saving the prefill): AGREE, blind, under
    sealed votes; without them, the majority of the votes already shown (they open last)."""
    withhold_openings: bool = False
    """Adversarial members post their receipt but never open (grief: hold the round to its window)."""
    worker_defaults: bool = False
    """An adversarial worker that cheated never opens (hoping nobody finalizes)."""
    stake_grind: bool = False
    """Top up an adversarial node 1 unit at a time until the committee is captured (live stakes only)."""
    edge_escape: bool = False
    """Issue 20, attack 2: a self-dispatched cheat times every window at its edge and an adversarial
    member of its committee claims falsely at the last block: unless the epoch covers the claim
    window (`timeline_covers_claims`), the redraw reads an unreadable epoch and the round is abandoned."""
    appeal_pass: bool = False
    """Issue 34, attack 1: appeal an honest worker's PASS, hoping to capture the appeal (its
    members vote DISAGREE there, with fabricated data): an outsider identity where anyone may
    appeal; with standing, a round-0 member of its own that dissents for it, or its dispatcher
    (`verillm.sim.appeals`)."""
    appeal_rich_only: bool = False
    """appeal-hunter: appeal only workers staked at least `AuditContext.appeal_min_stake_wei` (the
    most stake to burn per bond; the appeal's committee is drawn from a blockhash after the
    escalation, so which appeal is capturable cannot be seen)."""
    silent: bool = False
    """Issue 34, silent sybils: adversarial members never answer any seat (neither receipt nor claim)."""
    grind_max_trials: int = 5000


@dataclass(frozen=True)
class AuditContext:
    preset: Preset
    rules: RuleSet
    pool: Pool
    behaviour: Behaviour
    d: float
    mu: float
    offline: float = 0.0
    lazy: np.ndarray | None = None
    """bool per node: an honest-looking member that votes without computing (as `Behaviour.lazy`)."""
    appeal_min_stake_wei: int = 0
    """`Behaviour.appeal_rich_only`: the least stake of a worker whose PASS the hunter appeals."""


@dataclass
class Outcome:
    cheated: bool
    verdict: int = 0
    abandoned: bool = False
    lapsed_escalation: bool = False
    escalated: bool = False
    escaped: bool = False
    """A cheat that ends without the worker slashed."""
    rounds: int = 0
    seats_drawn: int = 0
    redraws: int = 0
    grind_trials: int = 0
    grind_topup_units: int = 0
    slashed_wei: dict = field(default_factory=dict)
    credits_wei: dict = field(default_factory=dict)
    honest_slashed: list = field(default_factory=list)
    """(role, node, wei) for every slash of a node that followed the protocol."""
    no_answer_penalised: list = field(default_factory=list)
    silent_penalty_wei: dict = field(default_factory=dict)
    """`penalizeSilentSeat` per node (issue 34): sent apart from `settle` (`verillm.sim.appeals`)."""
    hunted_wei: dict = field(default_factory=dict)
    """Cross-round slashes of honest round-0 voters by the adversary's hunts, apart from `settle`."""
    hunt_credits_wei: dict = field(default_factory=dict)
    """The hunters' rewards for ``hunted_wei``."""
    escalator: int | None = None
    decided_by_decider: bool = False
    """The appeal contradicted round 0: a decider round was entered (`RuleSet.decider_round`)."""
    decider_unheard: bool = False
    """The decider could not be staffed: the audit was abandoned (nobody slashed, the bond back)."""
    unheard_escalation: bool = False
    """The escalation could not be staffed and the rules abandon the audit for it (nobody slashed)."""
    undelivered: bool = False
    """A starved seat claimed its job and the worker never published it: slashed as a default."""
    delivery_claims: int = 0
    contest: Contest | None = None
    contested: bool = False
    """The contest was made (the audit was settled normally and its worker had opened)."""
    trace: list = field(default_factory=list)
    """One dict per round (as the contracts would see it): its seed, each draw attempt's seats
    and which of them posted a receipt, then who opened and how it voted (`verillm.sim.replay`)."""


class _Round:
    def __init__(self, seats, answered, votes, abandoned, redraws, drawn, opened=None, worker_opened=True, posted=None):
        self.seats, self.answered, self.votes = seats, answered, votes
        self.abandoned, self.redraws, self.drawn = abandoned, redraws, drawn
        self.opened, self.worker_opened = opened, worker_opened
        self.posted = posted
        """Set only for a round decided by `slashUndelivered`: which seats had posted."""

    def record(self) -> RoundRecord:
        if self.posted is not None:  # decided as the worker's default while still committing
            return RoundRecord(False, tuple(MemberRecord(f"n{s}", posted=p, opened=False, vote=0) for s, p in zip(self.seats, self.posted)))
        opened = self.opened or [True] * len(self.seats)
        return RoundRecord(self.worker_opened, tuple(MemberRecord(f"n{s}", opened=o, vote=v if o else 0)
                                                     for s, v, o in zip(self.seats, self.votes, opened)))


def run_audit(ctx: AuditContext, worker: int, dispatcher: int, cheated: bool, seed: bytes, rng: np.random.Generator, audit_id: int = 0,
              escalation_seed: bytes | None = None, contest: Contest | None = None, decider_seed: bytes | None = None) -> Outcome:
    """Simulate one audit of a job served by ``worker`` and batched by ``dispatcher``.
    ``escalation_seed``: the escalation committee's seed (default: derived from ``seed``; a
    replay on the contracts passes the one the chain drew; ``decider_seed`` likewise for the
    decider round). ``contest``: the worker's opening is
    contested in the final round's dispute window (grief-contest)."""
    out = Outcome(cheated=cheated, contest=contest)
    adv = ctx.pool.adversarial
    favoured = bool(adv[worker]) and (cheated or not ctx.behaviour.grief)  # the adversary wants this job to PASS
    hostile = (not adv[worker]) and ctx.behaviour.grief  # the adversary wants it to FAIL
    excluded = {worker, dispatcher} if ctx.rules.dispatcher_excluded else {worker}
    first = _first_round(ctx, out, worker, dispatcher, cheated, seed, excluded, favoured or hostile, rng)
    if first is not None and _edge_escapes(ctx, first, worker, dispatcher, cheated):
        out.trace[-1]["abandoned"] = True  # EpochNotReadable at the redraw: ABANDONED, nobody slashed
        first = None
    if first is None:
        return _finish(ctx, out, worker, dispatcher, [], cheated)
    if first.posted is not None:  # the worker never published a claimed job: slashed, no escalation
        return _finish(ctx, out, worker, dispatcher, [first], cheated)
    verdict = compute_round_verdict(AuditRecord(f"n{worker}", ()), first.record())
    rounds = [first]
    escalator = griefer_escalator(ctx, first.record(), verdict, worker, dispatcher, first.seats)
    escalator = choose_escalator(ctx, first, verdict, worker, dispatcher, cheated) if escalator is None else escalator
    if escalator is not None:
        out.escalated, out.escalator = True, escalator
        esc_seed = escalation_seed or compute_escalation_seed(audit_id, keccak256(seed + b"escalation"))
        second = _round_with_fresh(ctx, out, worker, dispatcher, cheated, esc_seed, ctx.preset.ESCALATION_COMMITTEE_SIZE, excluded, favoured or hostile, rng,
                                   appeal=True)
        if second is None:
            out.lapsed_escalation = True
            out.unheard_escalation = ctx.rules.unheard_escalation_abandons
        else:
            rounds.append(second)
            if ctx.rules.decider_round and needs_decider(AuditRecord(f"n{worker}", (first.record(), second.record()))):
                decider = _round_with_fresh(ctx, out, worker, dispatcher, cheated, decider_seed or keccak256(esc_seed + b"decider"),
                                            ctx.preset.ESCALATION_COMMITTEE_SIZE, excluded, favoured or hostile, rng, appeal=True)
                out.decided_by_decider = True
                if decider is None:  # unheard: the audit is abandoned, as after an unheard appeal
                    out.unheard_escalation = out.decider_unheard = True
                else:
                    rounds.append(decider)
    return _finish(ctx, out, worker, dispatcher, rounds, cheated, escalator)


def _edge_escapes(ctx, first, worker, dispatcher, cheated) -> bool:
    """Attack 2: the self-dispatched cheat's colluding member claims at the commit window's last
    block and withholds its receipt; before issue 20 the redraw then fell past the readable epoch."""
    adv = ctx.pool.adversarial
    return (ctx.behaviour.edge_escape and cheated and bool(adv[worker]) and worker == dispatcher
            and not ctx.rules.timeline_covers_claims and any(adv[s] for s in first.seats))


def _first_round(ctx, out, worker, dispatcher, cheated, seed, excluded, contested, rng):
    seats = ctx.preset.COMMITTEE_SIZE
    if ctx.behaviour.stake_grind and ctx.rules.live_stake_draw and contested:
        weights = _grind(ctx, out, seed, seats, excluded)
    else:
        weights = None
    return _round_with_fresh(ctx, out, worker, dispatcher, cheated, seed, seats, excluded, contested, rng, weights)


def _round_with_fresh(ctx, out, worker, dispatcher, cheated, seed, size, excluded, contested, rng, weights=None, appeal=False):
    """A round, plus the fresh committees the rules allow after an abandoned one."""
    for fresh in range(ctx.rules.fresh_draws_after_abandon + 1):
        round_seed = seed if fresh == 0 else keccak256(seed + b"fresh" + bytes([fresh]))
        r = _round(ctx, out, worker, dispatcher, cheated, round_seed, size, excluded, contested, rng, weights if fresh == 0 else None, appeal)
        if not r.abandoned:
            return r
        weights = None
    return None


def _round(ctx, out, worker, dispatcher, cheated, seed, size, excluded, contested, rng, weights, appeal=False):
    pool, rules, beh = ctx.pool, ctx.rules, ctx.behaviour
    try:
        seats = draw_committee(pool, seed, 0, size, excluded, weights)
    except InvalidInput:
        out.trace.append({"seed": seed, "attempts": [], "abandoned": True, "pool_exhausted": True})
        return _Round([], None, None, True, 0, out.seats_drawn)  # pool exhausted: the round cannot fill
    excluded.update(seats)
    out.rounds += 1
    out.seats_drawn += size
    trace = {"seed": seed, "attempts": [], "abandoned": False}
    out.trace.append(trace)
    redraws, missing, posted = 0, [], [False] * size
    for attempt in range(ctx.preset.MAX_COMMITTEE_REDRAWS + 1):
        n_adv = sum(bool(pool.adversarial[s]) for s in seats)
        # a seat that posted its receipt stays posted; only new seats decide now
        claims = [i for i, s in enumerate(seats) if not posted[i] and _starved(ctx, s, n_adv, size, dispatcher, contested)
                  and not rules.dispatcher_feeds_seats]
        for i, s in enumerate(seats):
            # a claimed seat reads its job from the published transcript (or the round ends below)
            posted[i] = posted[i] or i in claims or _answers(ctx, s, n_adv, size, dispatcher, contested, rng)
        trace["attempts"].append({"seats": list(seats), "posted": list(posted), "claims": claims})
        out.delivery_claims += len(claims)
        if claims and beh.withhold_transcript and pool.adversarial[worker]:
            # nothing published: after the publication window the claimant slashes the worker
            unposted = [i in claims or not p for i, p in enumerate(posted)]
            trace.update(undelivered=True, claimant=seats[claims[0]], seats=list(seats),
                         posted=[not u for u in unposted])
            out.undelivered = True
            out.redraws += redraws
            return _Round(seats, None, None, False, redraws, out.seats_drawn, posted=[not u for u in unposted])
        missing = [i for i in range(size) if not posted[i]]
        for i in missing:
            out.no_answer_penalised.append(seats[i])
        if not missing or attempt == ctx.preset.MAX_COMMITTEE_REDRAWS:
            break
        try:
            fresh = draw_committee(pool, seed, attempt + 1, len(missing), excluded)
        except InvalidInput:
            trace["pool_exhausted"] = True
            break  # nobody left to redraw: the seats stay missing
        excluded.update(fresh)
        for i, s in zip(missing, fresh):
            seats[i] = s
        redraws += 1
        out.seats_drawn += len(missing)
    out.redraws += redraws
    if missing:
        trace["abandoned"] = True
        return _Round(seats, None, None, True, redraws, out.seats_drawn)
    votes = griefer_votes(ctx, seats, _copy_votes([_vote(ctx, s, worker, cheated, rng) for s in seats]), worker, dispatcher, appeal)
    worker_opened = not (cheated and beh.worker_defaults and pool.adversarial[worker])
    # a member seals and opens only after the worker has opened (sealVote requires it)
    opened = [worker_opened and not (beh.withhold_openings and pool.adversarial[s]) for s in seats]
    trace.update(seats=list(seats), votes=list(votes), opened=opened, worker_opened=worker_opened)
    return _Round(seats, [True] * size, votes, False, redraws, out.seats_drawn, opened, worker_opened)


def _answers(ctx, seat, n_adv, size, dispatcher, contested, rng) -> bool:
    pool, beh = ctx.pool, ctx.behaviour
    if pool.adversarial[seat]:
        if beh.silent:
            return False
        if beh.refuse:
            return bool(pool.adversarial[dispatcher])  # refuse only audits an honest dispatcher answers for
        return not (beh.withhold and contested and 2 * n_adv <= size)
    if _starved(ctx, seat, n_adv, size, dispatcher, contested) and ctx.rules.dispatcher_feeds_seats:
        return False  # starved while the adversary lacks a majority; fed once it has one
    return not (ctx.offline and rng.random() < ctx.offline)


def _starved(ctx, seat, n_adv, size, dispatcher, contested) -> bool:
    """An honest seat whose job an adversarial dispatcher withholds (while it lacks a majority)."""
    pool = ctx.pool
    return bool(ctx.behaviour.starve and contested and not pool.adversarial[seat] and pool.adversarial[dispatcher] and 2 * n_adv <= size)


def _vote(ctx, seat, worker, cheated, rng) -> int:
    adv = ctx.pool.adversarial
    if adv[seat] and adv[worker] and ctx.behaviour.collude:
        return AGREE
    if adv[seat] and not adv[worker] and ctx.behaviour.grief:
        return DISAGREE
    if ctx.lazy is not None and ctx.lazy[seat] or adv[seat] and ctx.behaviour.lazy:
        return AGREE if ctx.rules.sealed_votes else None  # blind under sealed votes; else copies (None)
    p_disagree = ctx.d if cheated else ctx.mu
    return DISAGREE if rng.random() < p_disagree else AGREE


def _copy_votes(votes: list) -> list:
    """Without sealed votes a lazy member (None) opens last and copies the majority of the votes
    already shown (AGREE on a tie)."""
    shown = [v for v in votes if v is not None]
    majority = DISAGREE if 2 * shown.count(DISAGREE) > len(shown) else AGREE
    return [majority if v is None else v for v in votes]


def _grind(ctx, out, seed, size, excluded) -> np.ndarray | None:
    """Top up the adversary's first node by 1, 2, … units until ≥ size/2 seats are adversarial."""
    pool = ctx.pool
    adv_nodes = np.flatnonzero(pool.adversarial)
    adv_nodes = [n for n in adv_nodes if n not in excluded]
    if not adv_nodes:
        return None
    target = adv_nodes[0]
    for delta in range(ctx.behaviour.grind_max_trials):
        weights = pool.stake_units.copy()
        weights[target] += delta
        seats = draw_committee(pool, seed, 0, size, excluded, weights)
        if 2 * sum(bool(pool.adversarial[s]) for s in seats) > size:
            out.grind_trials, out.grind_topup_units = delta + 1, delta
            pool.stake_units[target] += delta  # the top-up is real: it stays in the stake table
            return None
    out.grind_trials = ctx.behaviour.grind_max_trials
    return None


def _finish(ctx, out: Outcome, worker, dispatcher, rounds, cheated, escalator=None) -> Outcome:
    pool, preset, rules = ctx.pool, ctx.preset, ctx.rules
    if not rounds:
        out.abandoned = True
        if rules.abandon_slashes_dispatcher:
            amount = compute_slash(pool.stake_wei(dispatcher), preset)
            reward, _ = compute_slash_split(amount, preset)
            _add(out.slashed_wei, dispatcher, amount)
            # `replaceMissing`'s caller earns the reward: the adversary when it caused the abandonment
            caller = _first_adversarial(pool) if (ctx.behaviour.refuse or ctx.behaviour.withhold) else None
            if caller is not None:
                _add(out.credits_wei, caller, reward)
    elif out.undelivered:
        settle_undelivered(ctx, out, worker, rounds, escalator if out.escalated else None)
    elif out.unheard_escalation:
        settle_unheard(ctx, out, dispatcher, escalator)
    else:
        _settle(ctx, out, worker, rounds, escalator if out.escalated else None)
    _charge_no_answers(ctx, out)
    out.escaped = cheated and worker not in out.slashed_wei
    for node, wei in out.slashed_wei.items():
        if not pool.adversarial[node] and not is_lazy(ctx, node) and wei > 0 and node not in out.no_answer_penalised:
            role = "dispatcher" if node == dispatcher and out.abandoned else "worker" if node == worker else "member"
            out.honest_slashed.append((role, node, wei))
    out.honest_slashed += [("member", node, wei) for node, wei in out.hunted_wei.items()]  # the hunts take honest voters only
    return out


def _settle(ctx, out, worker, rounds, escalator):
    pool, preset, rules = ctx.pool, ctx.preset, ctx.rules
    records = tuple(r.record() for r in rounds)
    bond = preset.DISPUTE_BOND_WEI if escalator is not None else 0
    contest = out.contest if out.contest is not None and rounds[-1].worker_opened else None
    out.contested = contest is not None
    audit = AuditRecord(f"n{worker}", records, worker_slashed=bool(contest and not contest.answered),
                        escalator=f"n{escalator}" if escalator is not None else None, escalation_bond_wei=bond,
                        appeal_is_final=not rules.decider_round)
    if rules.minority_penalty_bps is not None:  # a rule set older than MEMBER_PENALTY_BPS
        preset = preset.replace(MEMBER_PENALTY_BPS=min(rules.minority_penalty_bps, preset.SLASH_FRACTION_BPS))
    stakes = {f"n{s}": pool.stake_wei(s) for r in rounds for s in r.seats}
    stakes[f"n{worker}"] = pool.stake_wei(worker)
    settlement = compute_settlement(audit, stakes, BIG_POOL_WEI, preset)
    out.verdict = settlement.verdict
    for name, wei in settlement.slashed_wei.items():
        _add(out.slashed_wei, int(name[1:]), wei)
    for name, wei in settlement.credits_wei.items():
        _add(out.credits_wei, int(name[1:]), wei)
    undo_proportionality(ctx, out, audit, settlement.verdict, stakes, settlement, _add)
    cross_round_hunts(ctx, out, worker, out.cheated, records, [r.seats for r in rounds], _add)
    if escalator is not None and not (out.lapsed_escalation and rules.lapse_refunds_bond):
        _add(out.credits_wei, escalator, -bond)  # the bond was paid when escalating
    if contest is not None:
        apply_contest(ctx, out, worker, contest)


def _charge_no_answers(ctx, out):
    charge_silent_seats(ctx, out, _add)
    if ctx.rules.no_answer_penalty_bps == 0 and not ctx.rules.silent_seat_penalty:
        out.no_answer_penalised = []
        return
    for node in set(out.no_answer_penalised) if ctx.rules.no_answer_penalty_bps else ():
        _add(out.slashed_wei, node, ctx.pool.stake_wei(node) * ctx.rules.no_answer_penalty_bps // BPS)
    out.no_answer_penalised = sorted(set(out.no_answer_penalised))


def _first_adversarial(pool: Pool, exclude=()):
    idx = [int(i) for i in np.flatnonzero(pool.adversarial) if int(i) not in exclude]
    return idx[0] if idx else None


def _add(d: dict, key, value: int) -> None:
    d[key] = d.get(key, 0) + value
