"""Settlement paths besides a plain `settle`: a worker slashed for an unpublished job
(`Delivery.slashUndelivered`), an unheard escalation (`Jobs._abandonRound`, round 1), and a
contest of the worker's opening (`Disputes.contest` / `answerContest` / `resolveContest`).
Each is checked against the contracts by `verillm sim replay`."""

from dataclasses import dataclass

from verillm.spec.settlement import AuditRecord, compute_settlement, compute_slash, compute_slash_split, compute_unheard_escalation

BIG_POOL_WEI = 10**30  # the fee pool never caps a payment in audit-level runs


@dataclass(frozen=True)
class Contest:
    """A contest of the worker's opening by ``challenger`` (bond DISPUTE_BOND_WEI)."""

    challenger: int
    answered: bool
    """The worker proved the cells within PROOF_WINDOW_BLOCKS (it takes the bond). False: it
    missed the window; `resolveContest` slashed it in full before `settle` (so the verdict is its
    default: no worker fee, and nobody is a minority), the challenger got the reward and its bond."""


def apply_contest(ctx, out, worker: int, contest: Contest) -> None:
    """The contest's own money; `_settle` has already settled with ``worker_slashed`` when lost."""
    if contest.answered:
        _add(out.credits_wei, contest.challenger, -ctx.preset.DISPUTE_BOND_WEI)
        _add(out.credits_wei, worker, ctx.preset.DISPUTE_BOND_WEI)
        return
    amount = compute_slash(ctx.pool.stake_wei(worker), ctx.preset)
    reward, _ = compute_slash_split(amount, ctx.preset)
    _add(out.slashed_wei, worker, amount)
    _add(out.credits_wei, contest.challenger, reward)


def settle_undelivered(ctx, out, worker, rounds, escalator):
    """`slashUndelivered` (the claimant calls it, for the reward), then `settle` of the round it
    decided as the worker's default: members that posted (and, in round 0 of an escalated audit,
    opened) earn their fee; an escalator of a PASS gets its bond back (a default convicts)."""
    amount = compute_slash(ctx.pool.stake_wei(worker), ctx.preset)
    reward, _ = compute_slash_split(amount, ctx.preset)
    _add(out.slashed_wei, worker, amount)
    _add(out.credits_wei, out.trace[-1]["claimant"], reward)
    bond = ctx.preset.DISPUTE_BOND_WEI if escalator is not None else 0
    audit = AuditRecord(f"n{worker}", tuple(r.record() for r in rounds), worker_slashed=True,
                        escalator=f"n{escalator}" if escalator is not None else None, escalation_bond_wei=bond)
    settlement = compute_settlement(audit, {}, BIG_POOL_WEI, ctx.preset)
    out.verdict = settlement.verdict
    for name, wei in settlement.credits_wei.items():
        _add(out.credits_wei, int(name[1:]), wei)
    if escalator is not None:
        _add(out.credits_wei, escalator, -bond)


def settle_unheard(ctx, out, dispatcher, escalator):
    """An unheard escalation (`Jobs._abandonRound`, round 1): nobody slashed, no fee; the bond back
    unless the dispatcher escalated and its round lacked receipts (the pool was not exhausted at
    the first draw)."""
    withheld = bool(out.trace[-1]["attempts"])
    audit = AuditRecord("w", (), escalator=f"n{escalator}", escalation_bond_wei=ctx.preset.DISPUTE_BOND_WEI)
    settlement = compute_unheard_escalation(audit, f"n{dispatcher}", BIG_POOL_WEI, withheld)
    _add(out.credits_wei, escalator, settlement.credits_wei.get(f"n{escalator}", 0) - ctx.preset.DISPUTE_BOND_WEI)
    out.verdict = settlement.verdict


def _add(d: dict, key, value: int) -> None:
    d[key] = d.get(key, 0) + value
