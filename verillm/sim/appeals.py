"""Issue 34 in one audit: who may appeal an honest PASS and what a captured appeal then takes
(docs/protocol.md §12 "Disputes", §13 "Loss ledger"; `verillm sim run --strategy appeal-griefer |
appeal-hunter | settle-front-run | silent-sybils`, docs/simulation.md).

- Standing (`RuleSet.escalation_standing`): the griefer's appeal of an honest PASS comes from an
  outsider where anyone may appeal; with standing only from a party `spec.settlement.
  has_escalation_standing` admits: a round-0 dissenter (so one of its round-0 members votes
  DISAGREE for it) or the audit's dispatcher.
- Proportionality (`RuleSet.proportional_verdicts`): without it an appeal that overturns a round-0
  PASS or TIE slashes the worker in full (the spec settles it as the penalty today), and the
  captured appeal's side slashes the honest round-0 voters against it in full (the cross-round
  hunts, `RuleSet.cross_round_slashes`).
- Silent seats (`RuleSet.silent_seat_penalty`): each seat that never answered pays the penalty.

The hunts and the silent-seat penalties are separate transactions from `settle` (anyone sends
them), so they are kept apart from `Outcome.slashed_wei`: `verillm sim replay` compares `settle`'s
wei with the contracts and sends neither.
"""

from verillm.spec.constants import BPS
from verillm.spec.settlement import (AGREE, DISAGREE, FAIL, PASS, TIE, WORKER_DEFAULT, AuditRecord, compute_majority, compute_member_judgement,
                                     compute_shares, compute_slash, compute_slash_split, has_escalation_standing, is_worker_penalty_only)


def is_appeal_target(ctx, worker: int) -> bool:
    """The griefer appeals this honest worker's PASS (the hunter: only a rich one)."""
    beh = ctx.behaviour
    return bool(beh.appeal_pass and not ctx.pool.adversarial[worker] and ctx.pool.stake_wei(worker) >= ctx.appeal_min_stake_wei)


def griefer_votes(ctx, seats, votes, worker: int, dispatcher: int, appeal: bool) -> list:
    """The griefer's members: DISAGREE (fabricated data) in the appeal; in round 0 they vote as
    honest members would (AGREE), except that where only a party with standing appeals and the
    dispatcher is not the adversary's, its first seat dissents to earn the standing (the round
    still passes: one dissent among three)."""
    if not is_appeal_target(ctx, worker):
        return votes
    adv = ctx.pool.adversarial
    if appeal:
        return [DISAGREE if adv[s] else v for s, v in zip(seats, votes)]
    votes = [AGREE if adv[s] else v for s, v in zip(seats, votes)]
    mine = [i for i, s in enumerate(seats) if adv[s]]
    if ctx.rules.escalation_standing and mine and not adv[dispatcher]:
        votes[mine[0]] = DISAGREE
    return votes


def griefer_escalator(ctx, first_record, verdict: int, worker: int, dispatcher: int, seats) -> int | None:
    """Who of the adversary appeals this honest PASS, or None (no target, or no standing)."""
    if verdict != PASS or not ctx.rules.escalate_any_party_any_verdict or not is_appeal_target(ctx, worker):
        return None
    adv = ctx.pool.adversarial
    if not ctx.rules.escalation_standing:
        idx = [int(i) for i in adv.nonzero()[0] if int(i) not in (worker, dispatcher)]
        return idx[0] if idx else None  # an outsider
    audit = AuditRecord(f"n{worker}", (first_record,))
    candidates = ([dispatcher] if adv[dispatcher] else []) + [s for s in seats if adv[s]]
    for c in candidates:
        if has_escalation_standing(audit, f"n{c}", f"n{dispatcher}"):
            return c
    return None


def undo_proportionality(ctx, out, audit: AuditRecord, verdict: int, stakes: dict, settlement, add) -> None:
    """Before issue 34: an appeal's FAIL of a round-0 PASS or TIE slashed the worker in full; the
    spec settles the penalty, so top it up, the extra reward shared by the verdict's winners."""
    if ctx.rules.proportional_verdicts or not is_worker_penalty_only(audit, verdict):
        return
    worker = int(audit.worker[1:])
    taken = settlement.slashed_wei.get(audit.worker, 0)
    extra = compute_slash(stakes[audit.worker], ctx.preset) - taken
    if extra <= 0:
        return
    add(out.slashed_wei, worker, extra)
    reward, _ = compute_slash_split(extra, ctx.preset)
    winners = [m.node for r in audit.rounds for m in r.members if compute_member_judgement(r, m, verdict)[1]]
    share, _ = compute_shares(reward, len(winners))
    for node in winners:
        add(out.credits_wei, int(node[1:]), share)


def cross_round_hunts(ctx, out, worker: int, cheated: bool, records, seats_by_round, add) -> None:
    """The adversary's cross-round hunts of honest round-0 voters, once its colluders hold the
    appeal (a majority of its seats voting its way): after an appeal FAIL, each honest round-0
    AGREE (`adjudicateAcrossRounds`, the hunter the adversary); after an appeal PASS of its cheat,
    each honest round-0 DISAGREE (`adjudicate`'s cross-round clause, the hunter the cheat). Each
    takes SLASH_FRACTION_BPS of the stake `settle` left, the hunter SLASH_REWARD_BPS of it.
    With proportional verdicts only when round 0's majority is on the appeal's side too."""
    rules, adv = ctx.rules, ctx.pool.adversarial
    if not rules.cross_round_slashes or len(records) < 2 or (len(records) == 3 and compute_round_verdict_of(records[2]) == TIE):
        return
    # With a decider, the judging round is the decider (the audit's last), agreeing with round 0 or the appeal.
    # (An appeal dissenter made a liar by the appeal and the decider agreeing — both captured — is not priced here.)
    first, appeal, seats_by_round = records[0], records[-1], [seats_by_round[0], seats_by_round[-1]]
    first_majority = compute_majority(first)
    if out.verdict in (FAIL, WORKER_DEFAULT) and not adv[worker] and (ctx.behaviour.grief or is_appeal_target(ctx, worker)):
        side, target_vote, agreeing, hunter = DISAGREE, AGREE, FAIL, _first(adv, exclude=(worker,))
    elif out.verdict == PASS and cheated and adv[worker]:
        side, target_vote, agreeing, hunter = AGREE, DISAGREE, PASS, worker
    else:
        return
    if rules.proportional_verdicts and first_majority != agreeing:
        return  # NoFault: one captured appeal never makes an honest round-0 voter a liar
    held = sum(1 for s, m in zip(seats_by_round[1], appeal.members) if adv[s] and m.opened and m.vote == side)
    if hunter is None or held <= len(appeal.members) // 2:
        return  # only a majority of the appeal's seats completes the contradiction
    for s, m in zip(seats_by_round[0], first.members):
        if adv[s] or not m.opened or m.vote != target_vote or ctx.lazy is not None and ctx.lazy[s]:
            continue
        left = ctx.pool.stake_wei(s) - out.slashed_wei.get(s, 0)
        amount = left * ctx.preset.SLASH_FRACTION_BPS // BPS
        if amount > 0:
            add(out.hunted_wei, s, amount)
            add(out.hunt_credits_wei, hunter, compute_slash_split(amount, ctx.preset)[0])


def compute_round_verdict_of(record) -> int:
    """A later round's verdict as `Jobs` reads it: the worker's default, else its majority."""
    return WORKER_DEFAULT if not record.worker_opened else compute_majority(record)


def charge_silent_seats(ctx, out, add) -> None:
    """`penalizeSilentSeat`: MEMBER_PENALTY_BPS of each silent seat's holder (once per seat)."""
    if not ctx.rules.silent_seat_penalty:
        return
    for node in out.no_answer_penalised:
        add(out.silent_penalty_wei, node, ctx.pool.stake_wei(node) * ctx.preset.MEMBER_PENALTY_BPS // BPS)


def choose_escalator(ctx, first, verdict: int, worker: int, dispatcher: int, cheated: bool):
    """Return who escalates the first round's verdict, or None."""
    adv = ctx.pool.adversarial
    if verdict == WORKER_DEFAULT:
        return None  # nothing to re-judge: `startEscalation` refuses a round the worker did not open
    if ctx.rules.escalate_any_party_any_verdict and ctx.behaviour.escalate_own_fail and cheated and adv[worker] and verdict in (FAIL, TIE):
        return worker if ctx.rules.escalation_standing else _first(adv, exclude=(worker, dispatcher))
    if ctx.rules.escalate_any_party_any_verdict:
        # any honest party whose own data contradict the verdict
        if verdict == PASS:
            for s, v, o in zip(first.seats, first.votes, first.opened or [True] * len(first.seats)):
                if o and v == DISAGREE and not adv[s] and not is_lazy(ctx, s):
                    return s
        if verdict in (FAIL, TIE) and not cheated and not adv[worker] and ctx.rules.worker_node_appeals:
            return worker
        return None
    # the first landing's node code (verillm/spec/honest.py is_escalation_warranted): the
    # dispatcher escalates a FAIL or TIE when some member's data agree with the worker's
    if verdict in (FAIL, TIE) and not adv[dispatcher] and AGREE in first.votes:
        return dispatcher
    return None


def is_lazy(ctx, s) -> bool:
    """A member that votes without computing (an honest-looking lazy node, or the lazy adversary)."""
    return ctx.lazy is not None and bool(ctx.lazy[s]) or bool(ctx.pool.adversarial[s]) and ctx.behaviour.lazy


def _first(adv, exclude=()):
    idx = [int(i) for i in adv.nonzero()[0] if int(i) not in exclude]
    return idx[0] if idx else None
