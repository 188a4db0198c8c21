"""One audit as the explorer shows it, computed from its recorded events: rounds, seats, what each
party did and what its vote turned out to be; and, while it is open, what happens next, who
must act and by which block, with the deadlines `Jobs.sol` enforces (docs/protocol.md §12).

Pure functions over event rows (``{"name", "block_number", "args", ...}``) and a Preset.
"""

from verillm.chain.protocol import ABANDONED, COMMITTING, DECIDED, OPENING, PHASE_NAMES, SETTLED
from verillm.spec.params import Preset
from verillm.spec.settlement import VERDICT_NAMES

AGREE, DISAGREE = 1, 2
MEMBER_PENALTY_REASON = "missed opening or minority vote"  # Jobs._settleParties names both rules at once


def compute_rounds(events: list[dict]) -> list[dict]:
    """Return the audit's rounds: each committee draw, every seat (receipt, opening, vote) and the decision."""
    rounds: dict[int, dict] = {}

    def round_of(index: int) -> dict:
        return rounds.setdefault(index, {"round": index, "draws": [], "members": [], "challenge_block": None, "worker_opened_block": None,
                                         "decided": None, "receipts": {}, "openings": {}})

    for e in events:
        args, name = e["args"], e["name"]
        if name == "CommitteeDrawn":
            round_of(args["round"])["draws"].append({"attempt": args["attempt"], "block": e["block_number"], "members": args["members"]})
        elif name == "CommitteeReceiptPosted":
            round_of(args["round"])["receipts"][args["slot"]] = {"block": e["block_number"], "root": args["commitmentRoot"], "tx_hash": _hex(e["tx_hash"])}
        elif name == "ChallengeDrawn":
            round_of(args["round"])["challenge_block"] = e["block_number"]
        elif name == "Opened" and args["slot"] == 0:
            round_of(args["round"])["worker_opened_block"] = e["block_number"]
        elif name == "Opened":
            round_of(args["round"])["openings"][args["slot"] - 1] = {"block": e["block_number"], "vote": args["vote"], "tx_hash": _hex(e["tx_hash"])}
        elif name == "RoundDecided":
            round_of(args["round"])["decided"] = {"block": e["block_number"], "verdict": VERDICT_NAMES.get(args["verdict"], str(args["verdict"])),
                                                  "agree": args["agree"], "disagree": args["disagree"]}
    for r in rounds.values():
        r["members"] = _seats(r)
        del r["receipts"], r["openings"]
    return [rounds[i] for i in sorted(rounds)]


def _hex(value: str) -> str:
    return value if value.startswith("0x") else "0x" + value


def _seats(r: dict) -> list[dict]:
    """Every node drawn into the round: the seats of the last draw, then those it replaced (no receipt)."""
    current = r["draws"][-1]["members"] if r["draws"] else []
    seats = [{"slot": slot, "node": node, "receipt": r["receipts"].get(slot), "opening": r["openings"].get(slot), "replaced": False}
             for slot, node in enumerate(current)]
    earlier = {m.lower() for draw in r["draws"][:-1] for m in draw["members"]} - {m.lower() for m in current}
    seats += [{"slot": None, "node": node, "receipt": None, "opening": None, "replaced": True} for node in sorted(earlier)]
    return seats


def compute_conduct(events: list[dict], contest_events: list[dict], rounds: list[dict], worker: str) -> dict:
    """Return, per address (lower case), what its part in the audit came to: a label, whether it was a
    proven lie, and the slash it cost. A caught liar's vote is shown as what it was, not as a vote."""
    lost = {e["contest_id"] for e in contest_events if e["name"] == "ContestLost"}
    contested = {(e["args"]["round"], e["args"]["slot"]) for e in events if e["name"] == "Contested" and e["contest_id"] in lost}
    adjudicated = {(e["args"]["round"], e["args"]["slot"]) for e in events if e["name"] == "Adjudicated"}
    slashes = {e["args"]["node"].lower(): e["args"] for e in events if e["name"] == "PartySlashed"}
    conduct = {}
    for r in rounds:
        for seat in r["members"]:
            conduct[seat["node"].lower()] = _member_conduct(r, seat, adjudicated, contested, slashes.get(seat["node"].lower()))
    slash = slashes.get(worker.lower())
    proved_wrong = any(slot == 0 for _, slot in contested)
    label = ("could not prove its opening (contest lost)" if proved_wrong else f"slashed: {slash['reason']}" if slash else "")
    conduct[worker.lower()] = {"label": label or "worker", "lie": bool(slash) or proved_wrong, "slashed_wei": slash["amountWei"] if slash else None}
    return conduct


def _member_conduct(r: dict, seat: dict, adjudicated: set, contested: set, slash: dict | None) -> dict:
    party_slot = None if seat["slot"] is None else seat["slot"] + 1
    opening = seat["opening"]
    vote = opening["vote"] if opening else None
    lie, label = False, ""
    if (r["round"], party_slot) in adjudicated:
        lie, label = True, "lied: voted agree, but its own committed data disagrees with the worker's (adjudicated)"
    elif (r["round"], party_slot) in contested:
        lie, label = True, "could not prove the opening it voted on (contest lost)"
    elif slash and slash["reason"] == MEMBER_PENALTY_REASON:
        label = "minority vote (penalised)" if opening else "missed its opening (penalised)"
    elif seat["replaced"]:
        label = "replaced: its receipt never came (nobody slashed)"
    elif opening:
        label = "voted with the verdict" if r["decided"] and r["decided"]["verdict"] in ("pass", "fail") else "voted"
    elif seat["receipt"]:
        label = "committed; has not opened"
    else:
        label = "has not posted its receipt"
    return {"label": label, "vote": vote, "lie": lie, "slashed_wei": slash["amountWei"] if slash else None}


def compute_next_step(view: dict, rounds: list[dict], preset: Preset, head: int) -> dict | None:
    """What the open audit waits for: ``steps`` (what, who, from/by block, in contract terms) and
    ``then`` (what the contract lets happen once the deadline passes). None once it is over.

    ``view``: the live `Jobs.getAudit` + `getRound` of the current round (phase, round, commit_deadline,
    ready_block, verdict_block, challenge_drawn, worker_opened, members, pending_contests, worker,
    dispatcher) and the block its escalation started (``escalation_block``, from its event)."""
    phase = view["phase"]
    if phase in (SETTLED, ABANDONED) or phase not in PHASE_NAMES or phase == 0:
        return None
    current = next((r for r in rounds if r["round"] == view["round"]), {"members": [], "draws": []})
    seats = [s for s in current["members"] if not s["replaced"]]
    anyone = {"anyone": True, "usually": view["dispatcher"]}
    if phase == COMMITTING:
        return _committing(view, current, seats, preset, anyone)
    if phase == OPENING:
        return _opening(view, seats, preset, head, anyone)
    if phase == DECIDED:
        return _decided(view, preset, anyone)
    return _escalating(view, preset, anyone)


def _step(action: str, what: str, who, by_block: int | None = None, from_block: int | None = None) -> dict:
    """``action``: the contract function that takes the step; ``by_block``: the last block it may be sent in."""
    return {"action": action, "what": what, "who": who, "from_block": from_block, "by_block": by_block}


def _committing(view, current, seats, preset: Preset, anyone) -> dict:
    missing = [s["node"] for s in seats if not s["receipt"]]
    attempt = current["draws"][-1]["attempt"] if current["draws"] else 0
    deadline = view["commit_deadline"]
    then = (f"from block {deadline + 1} anyone may call replaceMissing: the missing seats are redrawn "
            f"(redraw {attempt + 1} of {preset.MAX_COMMITTEE_REDRAWS}); nobody is slashed for a missing receipt"
            if attempt < preset.MAX_COMMITTEE_REDRAWS else
            f"from block {deadline + 1} anyone may call replaceMissing, which abandons the audit (no redraws left); nobody is slashed")
    return {"phase": "committing", "steps": [_step("postCommitteeReceipt", "post their committee receipts (each runs the verification job the dispatcher sends it)",
                                                   {"parties": missing}, by_block=deadline)], "then": then}


def _opening(view, seats, preset: Preset, head: int, anyone) -> dict:
    seed_block = view["ready_block"] + preset.AUDIT_DRAW_DELAY_BLOCKS
    worker_closes = seed_block + preset.OPEN_WINDOW_BLOCKS
    members_close = worker_closes + preset.OPEN_WINDOW_BLOCKS
    if not view["challenge_drawn"]:
        return {"phase": "opening", "steps": [_step("drawChallenge", "draw the challenge (drawChallenge): which cells every party opens", anyone,
                                                    from_block=seed_block + 1, by_block=seed_block + preset.OPEN_WINDOW_BLOCKS)],
                "then": f"the worker opens the challenged cells by block {worker_closes}"}
    if not view["worker_opened"]:
        return {"phase": "opening", "steps": [_step("openWorker", "open the challenged cells (openWorker)", {"parties": [view["worker"]]}, by_block=worker_closes)],
                "then": f"if it does not, from block {worker_closes + 1} anyone may finalize: the worker defaults and is slashed"}
    pending = [s["node"] for s in seats if not s["opening"]]
    if pending:
        return {"phase": "opening", "steps": [_step("openAndVote", "open the same cells and vote (openAndVote)", {"parties": pending}, by_block=members_close)],
                "then": (f"from block {members_close + 1} anyone may finalize (or as soon as every member has voted); a member that did not "
                         f"open loses {preset.MEMBER_PENALTY_BPS / 100:g}% of its stake at settlement")}
    return {"phase": "opening", "steps": [_step("finalize", "finalize: decide the round from the votes", anyone, from_block=head)],
            "then": "the dispute window opens"}


def _decided(view, preset: Preset, anyone) -> dict:
    closes = view["verdict_block"] + preset.DISPUTE_WINDOW_BLOCKS
    actions = "contest an opening or adjudicate a member's vote" + (
        f", or escalate to a committee of {preset.ESCALATION_COMMITTEE_SIZE} (bond {preset.DISPUTE_BOND_WEI / 1e18:g} ETH)" if view["round"] == 0 else "")
    settle = f"settle: slashes and payments (after the {view['pending_contests']} pending contests resolve)" if view["pending_contests"] else \
        "settle: slashes and payments"
    return {"phase": "decided", "steps": [_step("dispute", actions, {"anyone": True}, by_block=closes), _step("settle", settle, anyone, from_block=closes + 1)],
            "then": "the verdict becomes final"}


def _escalating(view, preset: Preset, anyone) -> dict:
    seed_block = (view["escalation_block"] or 0) + preset.AUDIT_DRAW_DELAY_BLOCKS
    lapses = seed_block + preset.DRAW_WINDOW_BLOCKS
    return {"phase": "escalating", "steps": [_step("drawEscalation", f"draw the escalation committee of {preset.ESCALATION_COMMITTEE_SIZE} (drawEscalation)", anyone,
                                                   from_block=seed_block + 1, by_block=lapses)],
            "then": f"if nobody does, from block {lapses + 1} settling lapses the escalation: the first verdict stands, the bond goes to the pool"}
