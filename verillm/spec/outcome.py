"""What the chain decided for one audit, from its events alone: the one derivation every view renders.

`compute_audit_outcome(events)` takes the events of one audit — those carrying its id (`Jobs`,
`Disputes`, `Delivery`), the `ContestLost` of its contests (which name no audit) and the
Registry's `Slashed` of the same transactions (an adjudication's amount) — in any order, from
any source (`verillm audit chain` reads them from a JSON-RPC node, the node's status route and
explorer from its SQLite store), and returns an `AuditOutcome`: the verdict, every round's
decision, every vote with whether it counted (a vote proven a lie — an adjudication or a lost
contest — does not), and every slash and penalty with its amount in wei, the rule (the
contract's reason string, or the event that took the stake where the contract gives none), the
node and its role; and who was paid (each Jobs `Credited` of the audit's transactions: rewards,
bonds back, a slash's reward to its caller). The devnet's lines and summary, `audit chain` (text and `--json`), the status
body (and so the SDK) and the explorer all render this, so they cannot disagree.
"""

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from verillm.errors import InvalidInput
from verillm.spec.settlement import AGREE, DISAGREE, VERDICT_NAMES

MEMBER_PENALTY_RULE = "missed opening or minority vote"  # Jobs._settleParties: one string for both rules
OVERTURNED_RULE = "overturned"  # Jobs._settleParties: a FAIL round 0's majority and the last round do not both give (a penalty)
LATE_REVEAL_RULE = "late private draw"  # Jobs.revealRound after drawBy, in its grace: the same draw, a penalty (issue 34)
DISPATCHER_RULES = ("missed committee draw", "missed private draw", LATE_REVEAL_RULE)  # Jobs.lapse, Jobs._fallBackToPublicDraw, Jobs.revealRound
PENALTY_RULES = (MEMBER_PENALTY_RULE, OVERTURNED_RULE, LATE_REVEAL_RULE)
# Events that take stake and carry no reason string: the event's name is the rule.
ADJUDICATED, CONTEST_LOST, DELIVERY_DEFAULTED, SILENT_SEAT = "Adjudicated", "ContestLost", "DeliveryDefaulted", "SilentSeat"
ADJUDICATED_MEANING = "adjudicated: voted agree against its own posted data"
ACROSS_ROUNDS_MEANING = "adjudicated: voted agree; the later round that convicted the worker (the appeal, or its decider) contradicts its posted data"
APPEAL_MEANING = "adjudicated: its posted data contradict the worker's, which the appeal round found honest"
CONTEST_MEANING = "lost a contest: could not prove its opening"
DEFAULT_MEANING = "never published the job a member claimed (delivery default)"
SILENT_MEANING = "silent seat: drawn, never posted its receipt (penalised)"


@dataclass(frozen=True)
class EventRecord:
    """One decoded log, whatever read it: ``tx_hash`` as 0x-hex, lower case (`compute_tx_key`)."""

    name: str
    args: Mapping[str, Any]
    block_number: int
    log_index: int
    tx_hash: str


@dataclass(frozen=True)
class Vote:
    """One member's opened vote: ``lie`` once proven a lie (adjudicated, or a lost contest), and then not ``counted``."""

    round_index: int
    slot: int
    """The party slot (1 = the first member; 0 is the worker)."""
    node: str
    vote: int
    lie: bool
    counted: bool


@dataclass(frozen=True)
class Slash:
    """Stake one party lost in the audit."""

    node: str
    role: str
    """worker, member or dispatcher"""
    amount_wei: int | None
    """None only when the Registry's `Slashed` of the transaction was not among the events given."""
    rule: str
    """The contract's reason string (`PartySlashed.reason`), else the event that took the stake (Adjudicated, ContestLost, ...)."""
    meaning: str
    """The rule in plain words: a member penalty says which of its two rules applied (the member opened: a minority vote)."""
    penalty: bool
    """A penalty (a share of the stake for a minority vote, a missed opening, a silent seat, an overturned pass), not a conviction."""
    lie: bool
    """A proven lie or a failed audit: the party's own data convicted it."""
    round_index: int | None
    block_number: int
    tx_hash: str


@dataclass(frozen=True)
class RoundDecision:
    """A round's `RoundDecided`: its verdict and the votes it tallied then (before any later adjudication)."""

    round_index: int
    verdict: str
    agree: int
    disagree: int


@dataclass(frozen=True)
class Payment:
    """An amount Jobs credited in one of the audit's transactions (`Credited`; claimable with `claim`)."""

    node: str
    amount_wei: int
    block_number: int
    tx_hash: str


@dataclass(frozen=True)
class AuditOutcome:
    audit_id: int | None
    """None only when no event given names it (a view handed a partial list)."""
    worker: str
    state: str
    """open, settled or abandoned"""
    verdict: str
    """pass, fail, tie, worker-default once settled; abandoned; open"""
    rounds: tuple[RoundDecision, ...]
    votes: tuple[Vote, ...]
    slashes: tuple[Slash, ...]
    abandoned_reason: str | None
    abandoned_round: int | None
    paid: tuple[Payment, ...] = ()
    """Every credit of the audit's transactions, in block order (empty when the view read no `Credited`)."""


def compute_tx_key(value) -> str:
    """Return a transaction hash (bytes, or hex with or without 0x) as 0x-hex, lower case."""
    text = value.hex() if isinstance(value, (bytes, bytearray)) else str(value)
    text = text.lower()
    return text if text.startswith("0x") else "0x" + text


def _key(e: EventRecord) -> tuple[int, int]:
    return e.block_number, e.log_index


def _faults(events: list[EventRecord]) -> dict[tuple[int, int], EventRecord]:
    """(round, party slot) → the event that proved the party's vote or opening a lie."""
    contests = {e.args["contestId"]: e for e in events if e.name == "Contested"}
    proven = {(e.args["round"], e.args["slot"]): e for e in events if e.name == ADJUDICATED}
    for lost in (e for e in events if e.name == CONTEST_LOST and e.args["contestId"] in contests):
        contest = contests[lost.args["contestId"]].args
        proven.setdefault((contest["round"], contest["slot"]), lost)
    return proven


def compute_votes(events: list[EventRecord]) -> tuple[Vote, ...]:
    """Every member's opened vote, in chain order, each marked a lie when proven one."""
    proven = _faults(events)
    return tuple(Vote(e.args["round"], e.args["slot"], e.args["party"], e.args["vote"], (e.args["round"], e.args["slot"]) in proven,
                      (e.args["round"], e.args["slot"]) not in proven)
                 for e in events if e.name == "Opened" and e.args["slot"] > 0)


def _seat_round(events: list[EventRecord], node: str) -> int | None:
    drawn = [e.args["round"] for e in events if e.name == "CommitteeDrawn" and node.lower() in (m.lower() for m in e.args["members"])]
    return drawn[-1] if drawn else None


def _party_slash(e: EventRecord, worker: str, opened: set[str], events: list[EventRecord]) -> Slash:
    node, rule = e.args["node"], e.args["reason"]
    role = "worker" if node.lower() == worker.lower() else "dispatcher" if rule in DISPATCHER_RULES else "member"
    meaning = rule
    if rule == MEMBER_PENALTY_RULE:
        meaning = "minority vote" if node.lower() in opened else "missed opening"
    elif rule == OVERTURNED_RULE:
        meaning = "a FAIL round 0 and the last round do not both give (penalised)"
    elif rule == LATE_REVEAL_RULE:
        meaning = "revealed its private draw late, in the grace (penalised; the same committee)"
    return Slash(node, role, e.args["amountWei"], rule, meaning, rule in PENALTY_RULES, rule == "failed audit",
                 None if role != "member" else _seat_round(events, node), e.block_number, e.tx_hash)


def _taken(events: list[EventRecord], e: EventRecord, node: str) -> int | None:
    """The Registry's `Slashed` amount for ``node`` in ``e``'s transaction."""
    return next((s.args["amountWei"] for s in events if s.name == "Slashed" and s.tx_hash == e.tx_hash and s.args["node"].lower() == node.lower()), None)


def _fault_slashes(events: list[EventRecord]) -> list[Slash]:
    rows = []
    contests = {e.args["contestId"]: e.args for e in events if e.name == "Contested"}
    for e in events:
        if e.name == ADJUDICATED:
            meaning = (ACROSS_ROUNDS_MEANING if _is_across_rounds(events, e) else ADJUDICATED_MEANING if e.args["vote"] == AGREE
                       else APPEAL_MEANING)
            rows.append(Slash(e.args["member"], "member", _taken(events, e, e.args["member"]), ADJUDICATED, meaning, False, True,
                              e.args["round"], e.block_number, e.tx_hash))
        elif e.name == CONTEST_LOST and e.args["contestId"] in contests:
            contest = contests[e.args["contestId"]]
            rows.append(Slash(e.args["party"], "worker" if contest["slot"] == 0 else "member", e.args["slashedWei"], CONTEST_LOST, CONTEST_MEANING,
                              False, True, contest["round"], e.block_number, e.tx_hash))
        elif e.name == DELIVERY_DEFAULTED:
            rows.append(Slash(e.args["worker"], "worker", e.args["slashedWei"], DELIVERY_DEFAULTED, DEFAULT_MEANING, False, True, None,
                              e.block_number, e.tx_hash))
        elif e.name == SILENT_SEAT and e.args["penaltyWei"]:
            rows.append(Slash(e.args["member"], "member", e.args["penaltyWei"], SILENT_SEAT, SILENT_MEANING, True, False, e.args["round"],
                              e.block_number, e.tx_hash))
    return rows


def _is_across_rounds(events: list[EventRecord], adjudicated: EventRecord) -> bool:
    """`Disputes.adjudicateAcrossRounds` emits `Contradicted` in the same transaction; `adjudicate` does not."""
    return any(e.name == "Contradicted" and e.tx_hash == adjudicated.tx_hash for e in events)


def compute_audit_outcome(events: list[EventRecord], worker: str | None = None) -> AuditOutcome:
    """Return what the chain decided for the audit whose events (see the module) are ``events``.
    ``worker``: the audit's worker, needed only when its `AuditStarted` is not among them."""
    ordered = sorted(events, key=_key)
    started = next((e for e in ordered if e.name == "AuditStarted"), None)
    if started is None and worker is None:
        raise InvalidInput("no AuditStarted among the events and no worker given: not one audit's events")
    worker = started.args["worker"] if started is not None else worker
    audit_ids = {e.args["auditId"] for e in ordered if "auditId" in e.args}
    if len(audit_ids) > 1:
        raise InvalidInput(f"events of several audits given: {sorted(audit_ids)}")
    opened = {e.args["party"].lower() for e in ordered if e.name == "Opened"}
    settled = next((e for e in ordered if e.name == "AuditSettled"), None)
    abandoned = [e for e in ordered if e.name == "AuditAbandoned"]
    state, verdict = "open", "open"
    if settled is not None:
        state, verdict = "settled", VERDICT_NAMES.get(settled.args["verdict"], str(settled.args["verdict"]))
    elif abandoned:
        state, verdict = "abandoned", "abandoned"
    slashes = [_party_slash(e, worker, opened, ordered) for e in ordered if e.name == "PartySlashed"] + _fault_slashes(ordered)
    slashes.sort(key=lambda s: (s.block_number, s.tx_hash, s.node.lower()))
    rounds = tuple(RoundDecision(e.args["round"], VERDICT_NAMES.get(e.args["verdict"], str(e.args["verdict"])), e.args["agree"], e.args["disagree"])
                   for e in ordered if e.name == "RoundDecided")
    ended = (abandoned[-1].args["reason"], abandoned[-1].args["round"]) if abandoned and settled is None else (None, None)
    paid = tuple(Payment(e.args["to"], e.args["amountWei"], e.block_number, e.tx_hash) for e in ordered if e.name == "Credited")
    return AuditOutcome(next(iter(audit_ids), None), worker, state, verdict, rounds, compute_votes(ordered), tuple(slashes), *ended, paid)


def compute_slash_of(outcome: AuditOutcome, node: str) -> Slash | None:
    """The (first) slash ``node`` took in the audit, or None."""
    return next((s for s in outcome.slashes if s.node.lower() == node.lower()), None)


def compute_eth_text(wei: int) -> str:
    """An amount of wei in ETH, exactly (no float rounding): 100000000000000000 → "0.1"."""
    whole, fraction = divmod(wei, 10**18)
    return f"{whole}.{fraction:018d}".rstrip("0").rstrip(".")


def compute_counted_tally(outcome: AuditOutcome, round_index: int) -> tuple[int, int]:
    """(agree, disagree) among the round's votes that still count (a proven lie does not)."""
    votes = [v for v in outcome.votes if v.round_index == round_index and v.counted]
    return sum(v.vote == AGREE for v in votes), sum(v.vote == DISAGREE for v in votes)


def compute_outcome_dict(outcome: AuditOutcome) -> dict:
    """The outcome as plain data (JSON-ready): what `audit chain --json`, the status body and the explorer carry."""
    body = asdict(outcome)
    for slash in body["slashes"]:
        slash["amount_eth"] = None if slash["amount_wei"] is None else compute_eth_text(slash["amount_wei"])
    for payment in body["paid"]:
        payment["amount_eth"] = compute_eth_text(payment["amount_wei"])
    body["rounds"] = [{**r, "counted": dict(zip(("agree", "disagree"), compute_counted_tally(outcome, r["round_index"])))}
                      for r in body["rounds"]]
    return body
