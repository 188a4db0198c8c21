"""The on-chain rule set the simulator enforces, as an explicit, switchable policy.

`FIRST_LANDING` is the contracts of the first landing (main before issue 9): what
../shared/notes/economics-check.md measured. `ISSUE9` is the `onchain` branch at 19cf271;
`MEMBER_PENALTY` adds the graduated member penalty of 97c39e4 (`MEMBER_PENALTY_BPS`).
`BEFORE_COVERAGE` is main before the receipt-omission fix merged: that, plus four changes (bond
refunded only to a winning escalator, an unheard escalation abandons the audit, the O(log n) stake
tree, the job-delivery challenge). `MAIN` is what main's contracts enforce today: all of `LANDED`,
the receipt-coverage change included (contracts/src/Coverage.sol: a dispatcher-signed batching
promise and an on-chain non-inclusion challenge). Every rule set drives the same audit and
settlement code (the spec's, as it is today: the escalation bond of every rule set follows the
landed refund-on-win rule; issue 34's proportionality of an overturning appeal is a flag,
`proportional_verdicts`, undone for the older rule sets in `verillm.sim.appeals`), so
before/after curves come from one code base; `verillm sim replay`
checks `MAIN` against the contracts audit by audit.
"""

from dataclasses import dataclass, replace

from verillm.errors import ConfigError
from verillm.spec.constants import BPS



@dataclass(frozen=True)
class RuleSet:
    name: str
    live_stake_draw: bool
    """Committees are drawn from the live stake table after the seed is public: a 1-wei
    `topUp` re-rolls the draw (stake grinding). False: draws read a stake snapshot."""
    escalate_any_party_any_verdict: bool
    """Any party whose own data contradict the verdict escalates, a PASS included. False:
    only the dispatcher escalates, and only a FAIL or a TIE."""
    minority_penalty_bps: int | None
    """Share of a member's stake taken for a minority vote or a missed opening (10_000 = a full
    slash). None: the preset's MEMBER_PENALTY_BPS, as `Registry.penalize` takes it today."""
    abandon_slashes_dispatcher: bool
    """A first round still missing seats after the redraws slashes the dispatcher (the caller of
    `replaceMissing` earns the slash reward). False: nobody is slashed, the seats are drawn afresh."""
    no_answer_penalty_bps: int
    """Share of stake a drawn member loses for never answering (0: redrawn for free)."""
    fresh_draws_after_abandon: int
    """Fresh committees drawn after an abandoned first round before the audit lapses."""
    dispatcher_feeds_seats: bool
    """Members receive their job from the dispatcher, so a dispatcher can starve honest seats
    and have them redrawn (re-rolls). False: non-delivery is provable, starving does not redraw."""
    omission_possible: bool
    """A dispatcher can leave a signed receipt out of every batch without consequence."""
    committee_visible: bool
    """Members learn from chain events that a job is a verification job before they serve it."""
    windows_in_seconds: bool
    """Windows are in seconds (False: in blocks, so their length depends on the block time)."""
    dispatcher_excluded: bool = False
    """The dispatcher is never drawn onto its own audit's committee."""
    lapse_refunds_bond: bool = False
    """An escalation whose committee cannot fill returns the escalator's bond (False: to the pool)."""
    unheard_escalation_abandons: bool = False
    """An escalation round that cannot be staffed (members missing after the redraws, or the pool
    exhausted) abandons the whole audit: nobody slashed on either side, no fee paid, the bond
    refunded (to the pool when the escalator is the dispatcher and the round lacked receipts:
    `spec.settlement.compute_unheard_escalation`). False: the first round settles as decided, its
    minority (the honest dissenter that escalated included) penalised; `lapse_refunds_bond`."""
    sortition_log_n: bool = False
    """Sortition costs O(log n) gas (a stake sum tree pruned of departed identities): `startAudit`
    fits a block at any N. False: O(n), the measured curve of `verillm.sim.gas`."""
    committee_after_payment: bool = False
    """Issue 20: a requested audit's committee is drawn from a blockhash after its fee is paid (and
    a receipt gets one audit, whoever batches it). False: the committee is the β-seeded draw,
    public once the batch is drawn, so a shopper pays only for a captured one."""
    timeline_covers_claims: bool = False
    """Issue 20: the epoch covers a round's draws, its one claim window included. False: a false
    claim at a window's edge pushes the redraw past its readable epoch, and the round is abandoned."""
    leaver_horizon: bool = False
    """Issue 20: a leaver's receipts are auditable only from batches posted by its unbond +
    AUDIT_HORIZON_BLOCKS. False: anyone holding an old receipt can start its audit before each
    withdrawal, and a leaver whose node is off is slashed in full."""
    sealed_votes: bool = False
    """Issue 20: every member seals its vote and opening (`sealVote`) before any is opened
    (`openAndVote`): a lazy member votes blind, and each member sends one more transaction. False:
    votes are posted in the open, so a lazy member opens last and copies the majority it sees."""
    worker_node_appeals: bool = True
    """The honest worker's node escalates a FAIL of its own job (issue 20; the simulator always
    assumed it). False: as the nodes did before issue 20, nobody escalates a captured FAIL."""
    escalation_standing: bool = False
    """Issue 34: only a party with standing appeals (`Disputes.escalate`, else `NoStanding`): the
    worker against a FAIL or a TIE, the dispatcher, a round-0 dissenter
    (`spec.settlement.has_escalation_standing`). A cheat's own FAIL is then appealed by the cheating
    worker itself. False: any identity of the adversary may appeal it."""
    cross_round_slashes: bool = False
    """Issue 20: a round-0 vote two rounds contradict is slashed in full by a hunter
    (`Disputes.adjudicateAcrossRounds` for a round-0 AGREE once the appeal fails the worker, with a
    majority of the appeal's seats contradicting it; `adjudicate`'s cross-round clause for a round-0
    DISAGREE once the appeal passes it). The simulator prices only the adversary's hunts of honest
    voters, when its colluders hold the appeal. False: the rules before issue 20 had neither."""
    proportional_verdicts: bool = False
    """Issue 34 (Proportionality): the bare verdict of one round never takes more than
    MEMBER_PENALTY_BPS from a party another round's majority supports. An appeal's FAIL of a
    round-0 PASS or TIE penalises the worker (`spec.settlement.is_worker_penalty_only`), and the
    cross-round slashes need round 0's majority on the appeal's side (`NoFault` after an overturn).
    False: as before issue 34, an overturning appeal slashes the worker in full and (with
    `cross_round_slashes`) lets the captured appeal's side slash every round-0 voter against it."""
    decider_round: bool = False
    """Issue 34 (the forge campaign's violation): an appeal that decides the opposite of round 0's
    majority (PASS against FAIL) decides nothing alone: a decider round of ESCALATION_COMMITTEE_SIZE
    fresh members is drawn and the verdict two rounds agree on is final; a decider's TIE leaves
    round 0's verdict standing, its FAIL at the penalty; one the pool cannot staff abandons the
    audit (`spec.settlement.needs_decider`, `compute_final_verdict`). False: the appeal's verdict is final."""
    promises_keepable: bool = False
    """Issue 34 (Keepability): `Batches.postBatch` accepts a node inactive for less than
    AUDIT_HORIZON_BLOCKS (`Registry.inactiveSince`), so a penalty, a slash or an unbond never makes
    a batching promise it gave unkeepable. False: a node that falls below MIN_STAKE_WEI or unbonds
    while a promise is outstanding cannot post it, and the holder's `slashOmission` takes its stake
    (only where promises exist: `omission_possible` False)."""
    silent_seat_penalty: bool = False
    """Issue 34: a seat that never answers costs its holder MEMBER_PENALTY_BPS of its stake
    (`Disputes.penalizeSilentSeat`, once per seat; the caller earns SLASH_REWARD_BPS of it). False:
    it is redrawn for free (see also the what-if `no_answer_penalty_bps`)."""

    def with_changes(self, **changes) -> "RuleSet":
        return replace(self, **changes)


FIRST_LANDING = RuleSet(
    name="first-landing",
    live_stake_draw=True,
    escalate_any_party_any_verdict=False,
    minority_penalty_bps=BPS,
    abandon_slashes_dispatcher=True,
    no_answer_penalty_bps=0,
    fresh_draws_after_abandon=0,
    dispatcher_feeds_seats=True,
    omission_possible=True,
    committee_visible=True,
    windows_in_seconds=False,
)

# The rules of the `onchain` branch (issue 9) as committed at 19cf271 (2026-11-23 20:5x UTC):
# epoch stake snapshots for draws; the dispatcher excluded from its committee; a round that
# cannot fill (members missing after the redraws, or the pool exhausted) ends with nobody
# slashed, round 0 abandoned (the worker is not judged), an escalation lapsed with its bond
# refunded; anyone may escalate any decided first round, a PASS included. Unchanged from the
# first landing: a minority vote is a full slash, a missing member is redrawn for free, members
# get their job from the dispatcher, receipts may be left out of batches, windows in blocks.
ISSUE9 = FIRST_LANDING.with_changes(
    name="issue-9",
    live_stake_draw=False,
    escalate_any_party_any_verdict=True,
    abandon_slashes_dispatcher=False,
    dispatcher_excluded=True,
    lapse_refunds_bond=True,
)

# issue 9 and the graduated member penalty (97c39e4): a minority vote or a missed opening takes
# MEMBER_PENALTY_BPS of the member's stake; full slashes only for provable lies. This was `main`
# until the changes of LANDED merged (2026-11-24).
MEMBER_PENALTY = ISSUE9.with_changes(name="member-penalty", minority_penalty_bps=None)

# Contract changes that landed on main after MEMBER_PENALTY, each one change away from it (b9d35a6:
# escalation + job-delivery challenge; de774f2: the stake tree; then Coverage.sol).
LANDED = {
    # Jobs._settleBond: the bond comes back only when the escalating side wins (spec is_overturned);
    # the spec's settlement does this for every rule set, so this entry records it, flag-free.
    # Jobs._abandonRound (round 1): an unheard escalation abandons the audit, nobody slashed
    "unheard-escalation-abandons": {"unheard_escalation_abandons": True},
    # StakeTree.sol: a draw reads log2(slots) cells per seat (175k gas at 10,000 nodes)
    "log-n-sortition": {"sortition_log_n": True},
    # Delivery.sol: a member without its job claims; the worker publishes or is slashed (default)
    "job-delivery-challenge": {"dispatcher_feeds_seats": False},
    # Coverage.sol: the dispatcher signs a `batchBy` promise with every job; its holder claims
    # non-inclusion after it (claimOmitted), only a Merkle proof into the dispatcher's own batch
    # answers (proveIncluded), unanswered the dispatcher is slashed (slashOmission)
    "receipt-coverage": {"omission_possible": False},
}
# Issue 20 (one change set: docs/protocol.md §12-13): committees drawn after the request is paid,
# one timeline, the leave horizon, the worker's node appealing its FAIL, and sealed votes (aa89393).
ISSUE20 = {"committee_after_payment": True, "timeline_covers_claims": True, "leaver_horizon": True, "worker_node_appeals": True,
           "sealed_votes": True, "cross_round_slashes": True}
# main before Coverage.sol merged (2026-11-24): every change of LANDED but receipt coverage.
BEFORE_COVERAGE = MEMBER_PENALTY.with_changes(
    name="before-coverage", **{k: v for name, change in LANDED.items() if name != "receipt-coverage" for k, v in change.items()})
# main before issue 20 merged: LANDED, and the nodes of the time (no worker appeal).
BEFORE_ISSUE20 = MEMBER_PENALTY.with_changes(name="before-issue-20", worker_node_appeals=False,
                                             **{k: v for change in LANDED.values() for k, v in change.items()})
# Issue 34 (docs/protocol.md §12 "The principles these rules enforce", §13 "Loss ledger"):
# standing to appeal, proportional cross-round verdicts, keepable promises, silent seats paying.
# The decider round came after (the forge campaign's violation of issue 34): `before-decider` is main without it.
ISSUE34 = {"escalation_standing": True, "proportional_verdicts": True, "promises_keepable": True, "silent_seat_penalty": True}
BEFORE_ISSUE34 = BEFORE_ISSUE20.with_changes(name="before-issue-34", **ISSUE20)
BEFORE_DECIDER = BEFORE_ISSUE34.with_changes(name="before-decider", **ISSUE34)
MAIN = BEFORE_DECIDER.with_changes(name="main", decider_round=True)

# What issue 9 asks beyond that (its "structural weaknesses"), as a what-if over main:
# a non-answer penalty (1% of stake), a fresh committee after an abandoned round, windows in seconds.
ISSUE9_FULL = MAIN.with_changes(
    name="issue-9-full",
    no_answer_penalty_bps=BPS // 100,
    fresh_draws_after_abandon=1,
    windows_in_seconds=True,
)

RULES = {r.name: r for r in (FIRST_LANDING, ISSUE9, MEMBER_PENALTY, BEFORE_COVERAGE, BEFORE_ISSUE20, BEFORE_ISSUE34, BEFORE_DECIDER, MAIN,
                             ISSUE9_FULL)}


def get_rules(name: str) -> RuleSet:
    if name not in RULES:
        raise ConfigError(f"unknown rule set {name!r}; known: {sorted(RULES)}")
    return RULES[name]
