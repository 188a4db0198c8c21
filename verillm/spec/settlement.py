"""Settlement arithmetic: fees, rewards and slashing, exactly as `Jobs.settle` computes them.

Inputs are an audit's final state (who posted, opened and voted how, who was already slashed
by a contest) and the stakes; the output is every slash and credit in wei. Order matters
because a slash takes a fraction of the stake left and pool payments are capped by the pool:
members round by round in seat order, then the worker, then fees, then the reward pot, then
the escalation bond — the order of the contract. The rules are in `docs/protocol.md §12`.
"""

from dataclasses import dataclass, field

from verillm.errors import InvalidInput
from verillm.spec.constants import BPS
from verillm.spec.params import Preset


NO_VOTE, AGREE, DISAGREE = 0, 1, 2
PASS, FAIL, TIE, WORKER_DEFAULT = 1, 2, 3, 4
VERDICT_NAMES = {PASS: "pass", FAIL: "fail", TIE: "tie", WORKER_DEFAULT: "worker-default"}


@dataclass(frozen=True)
class MemberRecord:
    """One committee seat at settlement."""

    node: str
    posted: bool = True
    opened: bool = True
    vote: int = AGREE
    slashed: bool = False
    """Already slashed by a contest or an adjudication (never slashed twice)."""


@dataclass(frozen=True)
class RoundRecord:
    worker_opened: bool
    members: tuple[MemberRecord, ...]


@dataclass(frozen=True)
class AuditRecord:
    """An audit as `settle` finds it. ``rounds[-1]`` is the final round: round 0, its appeal, and
    the appeal's decider when the appeal contradicted round 0 (`needs_decider`)."""

    worker: str
    rounds: tuple[RoundRecord, ...]
    worker_slashed: bool = False
    escalator: str | None = None
    escalation_bond_wei: int = 0
    appeal_is_final: bool = False
    """The rules before the decider round (the simulator's older rule sets): the appeal's verdict
    is final even against round 0's, its FAIL of a round-0 PASS or TIE at the penalty."""


@dataclass
class Settlement:
    """What settling changes: stakes slashed, credits owed, the fee pool after."""

    verdict: int
    slashed_wei: dict[str, int] = field(default_factory=dict)
    credits_wei: dict[str, int] = field(default_factory=dict)
    fee_pool_wei: int = 0

    def credit(self, to: str, amount_wei: int) -> None:
        if amount_wei:
            self.credits_wei[to] = self.credits_wei.get(to, 0) + amount_wei


def compute_slash(stake_wei: int, preset: Preset) -> int:
    """Return the stake a slash takes."""
    return stake_wei * preset.SLASH_FRACTION_BPS // BPS


def compute_slash_split(amount_wei: int, preset: Preset) -> tuple[int, int]:
    """Return (reward to whoever proved the fault, remainder to the fee pool)."""
    reward = amount_wei * preset.SLASH_REWARD_BPS // BPS
    return reward, amount_wei - reward


def compute_shares(pot_wei: int, winners: int) -> tuple[int, int]:
    """Return (each winner's share, remainder to the pool); everything to the pool if none."""
    if winners == 0:
        return 0, pot_wei
    share = pot_wei // winners
    return share, pot_wei - share * winners


def compute_tally(round_: RoundRecord) -> tuple[int, int]:
    """Return (agree, disagree) over members that opened and were not slashed."""
    counted = [m for m in round_.members if m.opened and not m.slashed]
    agree = sum(1 for m in counted if m.vote == AGREE)
    return agree, len(counted) - agree


def compute_majority(round_: RoundRecord) -> int:
    """Return PASS, FAIL or TIE from a round's counted votes."""
    agree, disagree = compute_tally(round_)
    return PASS if agree > disagree else FAIL if disagree > agree else TIE


def compute_round_verdict(audit: AuditRecord, round_: RoundRecord) -> int:
    """Return a round's verdict: the worker's default, else the majority of the votes counted."""
    if audit.worker_slashed or not round_.worker_opened:
        return WORKER_DEFAULT
    return compute_majority(round_)


def needs_decider(audit: AuditRecord) -> bool:
    """Return whether settling ``audit`` enters a decider round (round 2) instead: its appeal
    (round 1) decided the opposite decisive verdict of round 0's majority, PASS against FAIL either
    way. Neither round decides alone (Proportionality, docs/protocol.md §12): a fresh committee of
    ESCALATION_COMMITTEE_SIZE, drawn publicly like the appeal, and the verdict two rounds agree on
    is final."""
    if len(audit.rounds) != 2:
        return False
    return {compute_majority(audit.rounds[0]), compute_round_verdict(audit, audit.rounds[1])} == {PASS, FAIL}


def compute_final_verdict(audit: AuditRecord) -> int:
    """Return the verdict `Jobs.settle` settles ``audit`` on: its last round's, except a decider's
    TIE (no two rounds agree), where round 0's majority stands — a FAIL then takes only the penalty
    (`is_worker_penalty_only`). Raises `InvalidInput` for an audit that enters its decider instead."""
    if needs_decider(audit) and not audit.appeal_is_final:
        raise InvalidInput("the appeal contradicts round 0: the audit enters its decider round, it does not settle")
    own = compute_round_verdict(audit, audit.rounds[-1])
    return compute_majority(audit.rounds[0]) if len(audit.rounds) == 3 and own == TIE else own


def is_worker_penalty_only(audit: AuditRecord, verdict: int) -> bool:
    """Return whether a convicted worker takes the member penalty instead of the slash: the final
    FAIL is not agreed by round 0's majority AND the last round (`Jobs.settle`'s ``bareFail``).
    Slashed in full: an unappealed round-0 FAIL, round 0's FAIL the appeal agrees with, round 0's
    FAIL a decider agrees with after the appeal passed the worker, and a default (no opening, a
    lost contest). Penalised: a FAIL over a round-0 PASS or TIE (the appeal's, with or without a
    decider agreeing: an honest round 0 passing the worker outweighs two later rounds an adversary
    may hold), and round 0's FAIL left standing by a decider's TIE (Proportionality,
    docs/protocol.md §12). So an honest worker loses its stake only when round 0 fails it, as it
    did when the appeal was final."""
    own = compute_round_verdict(audit, audit.rounds[-1])
    return verdict == FAIL and not (own == FAIL and compute_majority(audit.rounds[0]) == FAIL)


def has_escalation_standing(audit: AuditRecord, caller: str, dispatcher: str) -> bool:
    """Return whether ``caller`` may appeal round 0 (`Disputes.escalate`, else `NoStanding`):
    the audit's dispatcher; the worker against a FAIL or a TIE; a round-0 member that opened, is
    not slashed and voted against the majority (in a TIE: any such member). Nobody else puts the
    worker and the honest voters at the risk of an appeal."""
    if caller == dispatcher:
        return True
    majority = compute_majority(audit.rounds[0])
    if caller == audit.worker:
        return majority != PASS
    for member in audit.rounds[0].members:
        if member.node == caller:
            return member.opened and not member.slashed and (majority == TIE or member.vote != majority)
    return False


def compute_member_judgement(round_: RoundRecord, member: MemberRecord, verdict: int) -> tuple[bool, bool]:
    """Return (slash it, it wins a fee): slashed for a missed opening or a minority vote."""
    if member.slashed or not member.posted:
        return False, False
    if round_.worker_opened and not member.opened:
        return True, False
    majority = verdict in (PASS, FAIL)
    if majority and member.vote != verdict:
        return True, False
    return False, member.opened if majority or verdict == TIE else True


def compute_settlement(audit: AuditRecord, stakes_wei: dict[str, int], fee_pool_wei: int, preset: Preset) -> Settlement:
    """Return every slash and credit `Jobs.settle` makes for ``audit``."""
    verdict = compute_final_verdict(audit)
    out = Settlement(verdict=verdict, fee_pool_wei=fee_pool_wei)
    stakes = dict(stakes_wei)
    winners, pot = [], 0
    for round_ in audit.rounds:
        for member in round_.members:
            slash_it, wins = compute_member_judgement(round_, member, verdict)
            if slash_it:  # a minority vote or a missed opening: the member penalty
                pot += _apply_slash(out, stakes, member.node, preset, min(preset.MEMBER_PENALTY_BPS, preset.SLASH_FRACTION_BPS))
            if wins:
                winners.append(member.node)
    if verdict in (FAIL, WORKER_DEFAULT) and not audit.worker_slashed:
        # A FAIL round 0's majority and the last round do not both give: the penalty.
        bps = min(preset.MEMBER_PENALTY_BPS, preset.SLASH_FRACTION_BPS) if is_worker_penalty_only(audit, verdict) else None
        pot += _apply_slash(out, stakes, audit.worker, preset, bps)
    for node in winners:
        _pay_from_pool(out, node, preset.AUDIT_FEE_WEI)
    if verdict == PASS:
        _pay_from_pool(out, audit.worker, preset.AUDIT_FEE_WEI)
    share, remainder = compute_shares(pot, len(winners))
    for node in winners:
        out.credit(node, share)
    out.fee_pool_wei += remainder
    _settle_bond(out, audit, verdict)
    return out


def _apply_slash(out: Settlement, stakes: dict[str, int], node: str, preset: Preset, bps: int | None = None) -> int:
    amount = compute_slash(stakes.get(node, 0), preset) if bps is None else stakes.get(node, 0) * bps // BPS
    stakes[node] = stakes.get(node, 0) - amount
    out.slashed_wei[node] = out.slashed_wei.get(node, 0) + amount
    reward, to_pool = compute_slash_split(amount, preset)
    out.fee_pool_wei += to_pool
    return reward


def _pay_from_pool(out: Settlement, to: str, amount_wei: int) -> None:
    paid = min(amount_wei, out.fee_pool_wei)
    out.fee_pool_wei -= paid
    out.credit(to, paid)


def is_overturned(first_majority: int, verdict: int) -> bool:
    """Return whether the final verdict (the appeal's, or the one its decider and another round agree
    on) went the other way from round 0's majority: a PASS became a conviction
    (FAIL or worker default), a FAIL a PASS, a TIE anything decisive. A worker that escalates
    its FAIL and then defaults is convicted again: not overturned."""
    if first_majority == PASS:
        return verdict in (FAIL, WORKER_DEFAULT)
    if first_majority == FAIL:
        return verdict == PASS
    return verdict != TIE


def _settle_bond(out: Settlement, audit: AuditRecord, verdict: int) -> None:
    if len(audit.rounds) < 2 or audit.escalation_bond_wei == 0:
        return
    # The escalator's bond comes back only when its side won.
    if is_overturned(compute_majority(audit.rounds[0]), verdict):
        out.credit(audit.escalator, audit.escalation_bond_wei)
    else:
        out.fee_pool_wei += audit.escalation_bond_wei


def compute_unheard_escalation(audit: AuditRecord, dispatcher: str, fee_pool_wei: int, withheld: bool) -> Settlement:
    """Return what `Jobs` does when an escalation round cannot be staffed (pool exhausted, or
    its receipts missing after every redraw): the audit is abandoned, nobody is slashed on either
    side of the disputed votes (the first round's verdict is not enforced), no fee is paid (the
    job's fees stay in the pool). The bond is refunded, unless the round lapsed for missing
    receipts (``withheld``) and the escalator is the dispatcher, who had to send its jobs.
    ``verdict`` is NO_VOTE: there is none."""
    out = Settlement(verdict=NO_VOTE, fee_pool_wei=fee_pool_wei)
    if audit.escalation_bond_wei and withheld and audit.escalator == dispatcher:
        out.fee_pool_wei += audit.escalation_bond_wei
    elif audit.escalation_bond_wei:
        out.credit(audit.escalator, audit.escalation_bond_wei)
    return out
