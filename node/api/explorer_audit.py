"""One audit as the explorer shows it, computed from its recorded events: rounds, seats, what each
party did and what its vote turned out to be; and, while it is open, what happens next, who
must act and by which block, with the deadlines `Jobs.sol` enforces (docs/protocol.md §12).

Pure functions over event rows (``{"name", "block_number", "args", ...}``) and a Preset.
"""

from verillm.spec.audit import TERMINAL_PHASES, Phase, RoundState, is_claim_standing
from verillm.spec.params import Preset
from verillm.spec.outcome import ADJUDICATED, CONTEST_LOST, OVERTURNED_RULE, AuditOutcome, compute_audit_outcome
from verillm.spec.settlement import AGREE, VERDICT_NAMES

from verillm.node.store.explorer_tables import compute_event_records


def compute_rounds(events: list[dict]) -> list[dict]:
    """Return the audit's rounds: each committee draw, every seat (receipt, opening, vote) and the decision."""
    rounds: dict[int, dict] = {}

    def round_of(index: int) -> dict:
        return rounds.setdefault(index, {"round": index, "draws": [], "members": [], "challenge_block": None, "worker_opened_block": None,
                                         "decided": None, "receipts": {}, "seals": {}, "openings": {}})

    for e in events:
        args, name = e["args"], e["name"]
        if name == "CommitteeDrawn":
            round_of(args["round"])["draws"].append({"attempt": args["attempt"], "block": e["block_number"], "members": args["members"]})
        elif name == "CommitteeReceiptPosted":
            round_of(args["round"])["receipts"][args["slot"]] = {"block": e["block_number"], "root": args["commitmentRoot"], "tx_hash": _hex(e["tx_hash"])}
        elif name == "ChallengeDrawn":
            round_of(args["round"])["challenge_block"] = e["block_number"]
        elif name == "VoteSealed":
            round_of(args["round"])["seals"][args["slot"] - 1] = {"block": e["block_number"], "tx_hash": _hex(e["tx_hash"])}
        elif name == "Opened" and args["slot"] == 0:
            round_of(args["round"])["worker_opened_block"] = e["block_number"]
        elif name == "Opened":
            round_of(args["round"])["openings"][args["slot"] - 1] = {"block": e["block_number"], "vote": args["vote"], "tx_hash": _hex(e["tx_hash"])}
        elif name == "RoundDecided":
            round_of(args["round"])["decided"] = {"block": e["block_number"], "verdict": VERDICT_NAMES.get(args["verdict"], str(args["verdict"])),
                                                  "agree": args["agree"], "disagree": args["disagree"]}
    for r in rounds.values():
        r["members"] = _seats(r)
        del r["receipts"], r["seals"], r["openings"]
    return [rounds[i] for i in sorted(rounds)]


def _hex(value: str) -> str:
    return value if value.startswith("0x") else "0x" + value


def _seats(r: dict) -> list[dict]:
    """Every node drawn into the round: the seats of the last draw, then those it replaced (no receipt)."""
    current = r["draws"][-1]["members"] if r["draws"] else []
    seats = [{"slot": slot, "node": node, "receipt": r["receipts"].get(slot), "seal": r["seals"].get(slot), "opening": r["openings"].get(slot),
              "replaced": False} for slot, node in enumerate(current)]
    earlier = {m.lower() for draw in r["draws"][:-1] for m in draw["members"]} - {m.lower() for m in current}
    seats += [{"slot": None, "node": node, "receipt": None, "seal": None, "opening": None, "replaced": True} for node in sorted(earlier)]
    return seats


def compute_conduct(events: list[dict], contest_events: list[dict], rounds: list[dict], worker: str) -> dict:
    """`compute_conduct_of` over event rows (the audit's, its contests' and the Registry's `Slashed` of the same transactions)."""
    return compute_conduct_of(compute_audit_outcome(compute_event_records(events + contest_events), worker), rounds)


def compute_conduct_of(outcome: AuditOutcome, rounds: list[dict]) -> dict:
    """Return, per address (lower case), what its part in the audit came to, from the audit's outcome
    (`verillm.spec.outcome`, which `audit chain` and the status route render too): a label, whether it
    was a proven lie, and the slash it cost. A caught liar's vote is shown as what it was, not as a vote."""
    conduct = {}
    for r in rounds:
        for seat in r["members"]:
            conduct[seat["node"].lower()] = _member_conduct(r, seat, outcome)
    slash = next((s for s in outcome.slashes if s.role == "worker"), None)
    label = ("" if slash is None else "could not prove its opening (contest lost)" if slash.rule == CONTEST_LOST else
             "penalised: a FAIL round 0 and the last round do not both give" if slash.rule == OVERTURNED_RULE else f"slashed: {slash.meaning}")
    conduct[outcome.worker.lower()] = {"label": label or "worker", "lie": bool(slash) and slash.lie, "slashed_wei": slash.amount_wei if slash else None}
    return conduct


PENALTY_LABELS = {"minority vote": "minority vote (penalised)", "missed opening": "missed its opening (penalised)"}


def _member_conduct(r: dict, seat: dict, outcome: AuditOutcome) -> dict:
    opening = seat["opening"]
    vote = opening["vote"] if opening else None
    slash = next((s for s in outcome.slashes if s.node.lower() == seat["node"].lower() and s.role == "member"), None)
    fault = slash if slash is not None and slash.lie and slash.round_index == r["round"] and not seat["replaced"] else None
    lie, label = fault is not None, ""
    if fault is not None and fault.rule == ADJUDICATED:
        label = ("lied: voted agree, but its own committed data disagrees with the worker's (adjudicated)" if vote == AGREE else
                 "lied: its committed data contradict the worker's data that the appeal round found honest (adjudicated)")
    elif fault is not None:
        label = "could not prove the opening it voted on (contest lost)"
    elif slash is not None and slash.penalty:
        label = PENALTY_LABELS.get(slash.meaning, slash.meaning)
    elif seat["replaced"]:
        label = "replaced: its receipt never came (nobody slashed)"
    elif opening:
        label = "voted with the verdict" if r["decided"] and r["decided"]["verdict"] in ("pass", "fail") else "voted"
    elif seat["receipt"]:
        label = "committed; has not opened"
    else:
        label = "has not posted its receipt"
    return {"label": label, "vote": vote, "lie": lie, "slashed_wei": slash.amount_wei if slash else None}


def compute_next_step(state: RoundState, audit: dict, rounds: list[dict], preset: Preset, head: int) -> dict | None:
    """What the open audit waits for: ``steps`` (what, who, from/by block, in contract terms) and
    ``then`` (what the contract lets happen once the deadline passes). None once it is over.

    ``state``: the current round as `Jobs.getRoundState` gives it (phase and the deadlines the
    contract computes, `verillm.spec.audit.RoundState`); ``audit``: its ``worker``, ``dispatcher``
    and whether a client ``requested`` it (`Jobs.getAudit`). No window is re-derived here."""
    if state.phase in TERMINAL_PHASES or state.phase in (Phase.NONE, Phase.LAPSED):
        return None
    current = next((r for r in rounds if r["round"] == state.round), {"members": [], "draws": []})
    seats = [s for s in current["members"] if not s["replaced"]]
    anyone = {"anyone": True, "usually": audit["dispatcher"]}
    if state.phase == Phase.DRAWING:
        return _drawing(state, audit, preset, anyone)
    if state.phase == Phase.COMMITTING:
        return _committing(state, audit, current, seats, preset, anyone)
    if state.phase == Phase.OPENING:
        return _opening(state, audit, seats, preset, head, anyone)
    return _decided(state, preset, anyone)


def _step(action: str, what: str, who, by_block: int | None = None, from_block: int | None = None) -> dict:
    """``action``: the contract function that takes the step; ``by_block``: the last block it may be sent in."""
    return {"action": action, "what": what, "who": who, "from_block": from_block, "by_block": by_block}


def _drawing(state: RoundState, audit: dict, preset: Preset, anyone) -> dict:
    d = state.deadlines
    size = preset.COMMITTEE_SIZE if state.round == 0 else preset.ESCALATION_COMMITTEE_SIZE
    if state.private_draw:  # docs/protocol.md §12 "Private draws": nobody but the dispatcher knows the seats yet
        what = (f"the dispatcher draws the committee of {size} privately, sends the members their jobs and reveals the draw "
                f"with the worker's receipt and theirs (revealRound)")
        then = (f"a reveal after block {d.draw_by} is the same draw, late: it costs the dispatcher {preset.MEMBER_PENALTY_BPS} bps of its "
                f"stake; if it does not reveal by block {d.reveal_by}, from block {d.reveal_by + 1} anyone may call lapse: the dispatcher "
                f"is slashed, loses its bond, and the committee is drawn publicly once someone shows the worker's receipt")
        who = {"parties": [audit["dispatcher"]]}
        return {"phase": "drawing", "steps": [_step("revealRound", what, who, from_block=d.draw_after + 1, by_block=d.draw_by)], "then": then}
    if not state.receipt_known:  # a missed private draw: the start kept the worker's receipt back
        what = "anyone holding the worker's receipt (the client, the worker, the dispatcher) shows it, so the committee can be drawn (supplyReceipt)"
        then = f"if nobody does, from block {d.draw_by + 1} anyone may call lapse: the audit is abandoned (its dispatcher was slashed at the missed draw)"
        return {"phase": "drawing", "steps": [_step("supplyReceipt", what, {"anyone": True, "usually": audit["dispatcher"]}, by_block=d.draw_by)],
                "then": then}
    what = f"draw the {'appeal' if state.round else 'first'} round's committee of {size} from the blockhash of block {d.draw_after} (drawRound)"
    if state.round > 0:
        then = f"if nobody does, from block {d.draw_by + 1} anyone may call lapse: the appeal lapses, the first verdict stands, the bond goes to the pool"
    elif audit["requested"]:
        then = f"if nobody does, from block {d.draw_by + 1} anyone may call lapse: the audit is abandoned, nobody slashed, the receipt never requested again"
    else:
        then = f"if nobody does, from block {d.draw_by + 1} anyone may call lapse: the audit is abandoned and its dispatcher slashed (the draw was its duty)"
    return {"phase": "drawing", "steps": [_step("drawRound", what, anyone, from_block=d.draw_after + 1, by_block=d.draw_by)], "then": then}


def _committing(state: RoundState, audit: dict, current, seats, preset: Preset, anyone) -> dict:
    if is_claim_standing(state):  # only a publication or the worker's default ends the round now
        return {"phase": "committing", "steps": [_step("publishTranscript", "publish the claimed job's transcript (publishTranscript)",
                                                        {"parties": [audit["worker"]]}, by_block=state.publish_deadline)],
                "then": f"if it does not, from block {state.publish_deadline + 1} anyone may call slashUndelivered: the worker defaults and is slashed"}
    missing = [s["node"] for s in seats if not s["receipt"]]
    deadline = state.deadlines.commit_by
    then = (f"from block {deadline + 1} anyone may call replaceMissing: the missing seats are redrawn "
            f"(redraw {state.attempt + 1} of {preset.MAX_COMMITTEE_REDRAWS}); nobody is slashed for a missing receipt"
            if state.attempt < preset.MAX_COMMITTEE_REDRAWS else
            f"from block {deadline + 1} anyone may call replaceMissing, which abandons the audit (no redraws left); nobody is slashed")
    return {"phase": "committing", "steps": [_step("postCommitteeReceipt", "post their committee receipts (each runs the verification job the dispatcher sends it)",
                                                   {"parties": missing}, by_block=deadline)], "then": then}


def _opening(state: RoundState, audit: dict, seats, preset: Preset, head: int, anyone) -> dict:
    d = state.deadlines
    if not state.challenge_drawn:
        return {"phase": "opening", "steps": [_step("drawChallenge", "draw the challenge (drawChallenge): which cells every party opens", anyone,
                                                    from_block=d.challenge_after + 1, by_block=d.worker_open_by)],
                "then": f"the worker opens the challenged cells by block {d.worker_open_by}"}
    if not state.worker_opened:
        return {"phase": "opening", "steps": [_step("openWorker", "open the challenged cells (openWorker)", {"parties": [audit["worker"]]}, by_block=d.worker_open_by)],
                "then": f"if it does not, from block {d.worker_open_by + 1} anyone may finalize: the worker defaults and is slashed"}
    penalty = f"loses {preset.MEMBER_PENALTY_BPS / 100:g}% of its stake at settlement"
    unsealed = [s["node"] for s in seats if not s["seal"] and not s["opening"]]
    if unsealed and head <= d.members_seal_by:
        return {"phase": "opening", "steps": [_step("sealVote", "seal their votes and openings (sealVote): nobody sees a vote before every member has sealed",
                                                    {"parties": unsealed}, by_block=d.members_seal_by)],
                "then": (f"once every member has sealed (at the latest from block {d.members_seal_by + 1}), each opens what it sealed (openAndVote) "
                         f"by block {d.members_open_by}; a member that never seals or never opens {penalty}")}
    pending = [s["node"] for s in seats if s["seal"] and not s["opening"]]
    if pending:
        return {"phase": "opening", "steps": [_step("openAndVote", "open what they sealed: their cells, their vote and the seal's salt (openAndVote)",
                                                    {"parties": pending}, by_block=d.members_open_by)],
                "then": (f"from block {d.members_open_by + 1} anyone may finalize (or as soon as every member has opened); a member that did not "
                         f"open {penalty}")}
    everyone_opened = all(s["opening"] for s in seats)  # else finalize waits for the openings' window to close
    return {"phase": "opening", "steps": [_step("finalize", "finalize: decide the round from the votes", anyone,
                                                from_block=head if everyone_opened else max(head, d.members_open_by + 1))],
            "then": "the dispute window opens" if everyone_opened else "the dispute window opens; a member that never sealed " + penalty}


def _decided(state: RoundState, preset: Preset, anyone) -> dict:
    closes = state.deadlines.dispute_by
    actions = "contest an opening or adjudicate a member's committed data" + (
        f", or appeal (escalate) to a committee of {preset.ESCALATION_COMMITTEE_SIZE} (bond {preset.DISPUTE_BOND_WEI / 1e18:g} ETH)" if state.round == 0 else "")
    settle = f"settle: slashes and payments (after the {state.pending_contests} pending contests resolve)" if state.pending_contests else \
        "settle: slashes and payments"
    return {"phase": "decided", "steps": [_step("dispute", actions, {"anyone": True}, by_block=closes), _step("settle", settle, anyone, from_block=closes + 1)],
            "then": "the verdict becomes final"}
