"""The adversary's strategies: how its workers cheat and how its members and dispatchers act."""

from dataclasses import dataclass

from verillm.errors import ConfigError
from verillm.sim.audit import Behaviour


@dataclass(frozen=True)
class Strategy:
    name: str
    summary: str
    cheat_rate: float
    """Share of its jobs an adversarial worker cheats on (the adaptive one starts here)."""
    behaviour: Behaviour = Behaviour()
    omit: bool = False
    """Cheat only on jobs it can keep out of every batch (its own dispatcher), when the rules allow."""
    adaptive: bool = False
    contest: bool = False
    """Contest the worker of every audit it does not serve (a bond each; answered, it is lost)."""
    flood: bool = False
    """Register extra minimum-stake identities (serving nothing) until `startAudit` no longer fits
    a block under O(n) sortition: no audit starts. The stake stays the adversary's, locked."""
    shop: bool = False
    """Issue 20, attack 1: request (and pay for) audits of honest jobs whose committee it can see
    is captured (≥ 2 of 3), its members voting DISAGREE; blind once committees follow payment."""
    hostage: bool = False
    """Issue 20, attack 3: request an audit of an old receipt of every honest node that leaves,
    in the block before its withdrawal, when its node is already off."""
    top_up: bool = False
    """Top each identity a penalty left below MIN_STAKE_WEI back up to it, so it stays drawn (the
    penalty is the loss; the top-up stays its own stake). False: it leaves the lists, as the Registry
    unlists it."""
    front_run: bool = False
    """Issue 34, attack 3: hold a receipt (a job) of every honest node, send each `settle` that
    leaves one below MIN_STAKE_WEI before its `postBatch`, and claim every promise its leavers
    (0.2% of the honest nodes an hour, unbonding as the guide says) had outstanding
    (`verillm.sim.moves`)."""


STRATEGIES = {s.name: s for s in (
    Strategy("honest", "every node follows the protocol", 0.0),
    Strategy("cheat-always", "cheat on every job, no help from members", 1.0),
    Strategy("cheat-fraction", "cheat on 10% of jobs", 0.1),
    Strategy("cheat-unwatched", "cheat only on jobs its own dispatcher never batches", 1.0, omit=True),
    Strategy("collude", "cheat always; adversarial members copy the trace and vote AGREE", 1.0, Behaviour(collude=True)),
    Strategy("collude-withhold", "collude, and members never answer while a minority", 1.0, Behaviour(collude=True, withhold=True)),
    Strategy("dispatcher-reroll", "collude; its dispatcher starves honest seats (redrawn, or claimed and published)", 1.0, Behaviour(collude=True, starve=True)),
    Strategy("withhold-jobs", "collude; its dispatcher starves honest seats and the worker never publishes a claimed job", 1.0,
             Behaviour(collude=True, starve=True, withhold_transcript=True)),
    Strategy("escalate-unheard", "collude-withhold, and escalate its own FAIL hoping the escalation is unheard", 1.0,
             Behaviour(collude=True, withhold=True, escalate_own_fail=True)),
    Strategy("stake-grind", "collude; top up 1 gwei at a time until the committee is its own", 1.0, Behaviour(collude=True, stake_grind=True)),
    Strategy("grief-refuse", "no cheating; members never answer (audits abandoned)", 0.0, Behaviour(refuse=True)),
    Strategy("grief-disagree", "no cheating; members vote DISAGREE on honest workers", 0.0, Behaviour(grief=True)),
    Strategy("lazy", "no cheating; members vote AGREE without running the verification job", 0.0, Behaviour(lazy=True)),
    Strategy("withhold-openings", "cheat always; members post receipts but never open", 1.0, Behaviour(withhold_openings=True)),
    Strategy("worker-default", "cheat always; the worker never opens an audited job", 1.0, Behaviour(worker_defaults=True)),
    Strategy("grief-contest", "no cheating; contest the worker of every audit (bond each)", 0.0, contest=True),
    Strategy("flood-identities", "cheat always; flood the model with identities until audits cannot start", 1.0, flood=True),
    Strategy("adaptive", "collude; cheat rate re-chosen every hour to maximise expected profit", 0.05, Behaviour(collude=True), adaptive=True),
    Strategy("shop-committees", "no cheating; pay for audits of honest jobs whose committee is captured, vote DISAGREE (issue 20, attack 1)", 0.0,
             Behaviour(grief=True), shop=True),
    Strategy("window-edge-escape", "cheat always, self-dispatched; a colluding member's false claim at the window's edge pushes the "
             "redraw past its epoch (issue 20, attack 2)", 1.0, Behaviour(collude=True, edge_escape=True)),
    Strategy("hostage", "no cheating; request audits of leavers' old receipts before each withdrawal (issue 20, attack 3)", 0.0, hostage=True),
    Strategy("appeal-griefer", "no cheating; appeal honest PASSes hoping to capture the appeal (an outsider; with standing, a round-0 "
             "member of its own dissents and appeals), its appeal members voting DISAGREE (issue 34, attack 1)", 0.0, Behaviour(appeal_pass=True), top_up=True),
    Strategy("appeal-hunter", "appeal-griefer, appealing only workers in the top decile of honest stake (run it with --stake lognormal)",
             0.0, Behaviour(appeal_pass=True, appeal_rich_only=True), top_up=True),
    Strategy("settle-front-run", "appeal-griefer, and order every settle that leaves an honest node below MIN_STAKE before its postBatch; "
             "claim the promises of unbonding nodes (issue 34, attack 3)", 0.0, Behaviour(appeal_pass=True), top_up=True, front_run=True),
    Strategy("silent-sybils", "no cheating; MIN_STAKE identities that never answer a seat (issue 34: free before, the penalty per seat after)",
             0.0, Behaviour(silent=True), top_up=True),
)}

ADAPTIVE_GRID = (0.0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0)


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ConfigError(f"unknown strategy {name!r}; known: {sorted(STRATEGIES)}")
    return STRATEGIES[name]


def choose_adaptive_rate(jobs_per_hour: float, audit_rate: float, slash_given_audit: float, gain_per_cheat_wei: float, stake_wei: float) -> float:
    """The cheat rate maximising an identity's expected profit over the next hour:
    f·J·gain − P(slashed within the hour)·stake, P = 1 − (1 − a·f·p)^J."""
    def value(f):
        return f * jobs_per_hour * gain_per_cheat_wei - (1 - (1 - audit_rate * f * slash_given_audit) ** jobs_per_hour) * stake_wei
    return max(ADAPTIVE_GRID, key=value)
