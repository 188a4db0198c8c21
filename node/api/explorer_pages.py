"""The bodies of the explorer's node, batch, block and transaction pages, its search and the network
summary's counts, from the recorded chain events and the dispatcher's tables (no chain reads)."""

import re

from verillm.errors import InvalidInput
from verillm.spec.outcome import compute_tx_key

from verillm.node.api.explorer_bodies import compute_audit_brief, compute_event_json, compute_hex, compute_job_row
from verillm.node.store.explorer_tables import ExplorerTables

STAKE_EVENTS = ("Registered", "StakeAdded", "Slashed", "Deregistered", "Withdrawn")
SLASH_EVENTS = ("PartySlashed", "Adjudicated", "ContestLost", "DispatcherSlashed", "OmissionSlashed")
SEARCH_HELP = ("search for a job hash, receipt hash or transaction hash (0x + 64 hex), an address (0x + 40 hex), "
               "an audit id, a batch id or a block number ('audit 3', 'batch 1', 'block 120' to say which)")


def compute_stake_history(events: list[dict]) -> list[dict]:
    """The node's stake after each Registry event that changed it, oldest first."""
    history = []
    for e in sorted(events, key=lambda e: (e["block_number"], e["log_index"])):
        a = e["args"]
        stake = {"Registered": a.get("stakeWei"), "StakeAdded": a.get("stakeWei"), "Slashed": a.get("stakeLeftWei"), "Withdrawn": 0}.get(e["name"])
        change = {"Registered": a.get("stakeWei"), "StakeAdded": a.get("amountWei"), "Slashed": -int(a.get("amountWei") or 0),
                  "Withdrawn": -int(a.get("amountWei") or 0)}.get(e["name"], 0)
        history.append({"block": e["block_number"], "event": e["name"], "stake_wei": stake, "change_wei": change,
                        "tx_hash": compute_hex(e["tx_hash"]), "unbonding_end_block": a.get("unbondingEndBlock")})
    return history


def compute_node_body(explorer: ExplorerTables, address: bytes, limit: int) -> dict:
    """A node's part in the network: stake history, jobs it served that were audited, committees it
    sat on and its votes (as they turned out), its slashes and the batches it posted."""
    counts = explorer.count_events_naming(address)
    stake = explorer.get_events_naming(address, STAKE_EVENTS, 1000, role="node")
    served = explorer.get_events_naming(address, ("AuditStarted",), limit, role="worker")
    seats = explorer.get_events_naming(address, ("CommitteeDrawn",), limit, role="members")
    votes = explorer.get_events_naming(address, ("Opened",), limit, role="party")
    slashes = explorer.get_events_naming(address, SLASH_EVENTS, limit)
    batches = explorer.get_events_naming(address, ("BatchPosted",), limit, role="dispatcher")
    me = "0x" + address.hex()
    briefs: dict[int, dict] = {}

    def brief(audit_id: int, worker: str) -> dict:
        if audit_id not in briefs:
            briefs[audit_id] = compute_audit_brief(explorer, audit_id, worker)
        return briefs[audit_id]

    workers = {e["audit_id"]: e["args"]["worker"] for e in explorer.get_events_naming(address, ("AuditStarted",), 10_000)}

    def worker_of(audit_id: int) -> str:
        if audit_id not in workers:
            started = explorer.get_audit_outcome(audit_id)
            workers[audit_id] = started["args"]["worker"] if started else ""
        return workers[audit_id]

    vote_rows = []
    for e in votes:
        if e["args"]["slot"] == 0:
            continue
        own = next((v for v in brief(e["audit_id"], worker_of(e["audit_id"]))["votes"] if v["node"].lower() == me), {})
        vote_rows.append({"audit_id": e["audit_id"], "round": e["args"]["round"], "vote": e["args"]["vote"], "block": e["block_number"],
                          "tx_hash": compute_hex(e["tx_hash"]), "label": own.get("label", ""), "lie": own.get("lie", False),
                          "outcome": briefs[e["audit_id"]]["outcome"]})
    return {
        "address": me, "counts": counts, "stake_history": compute_stake_history(stake),
        "served": [{"audit_id": e["audit_id"], "block": e["block_number"], "batch_id": e["args"]["batchId"], "index": e["args"]["index"],
                    "outcome": brief(e["audit_id"], me)["outcome"], "slashed": [s for s in briefs[e["audit_id"]]["slashed"] if s["node"].lower() == me]}
                   for e in served],
        "committees": [{"audit_id": e["audit_id"], "round": e["args"]["round"], "attempt": e["args"]["attempt"], "block": e["block_number"],
                        "members": e["args"]["members"], "outcome": brief(e["audit_id"], worker_of(e["audit_id"]))["outcome"]} for e in seats],
        "votes": vote_rows,
        "slashes": [_slash_row(e, explorer) for e in slashes],
        "batches": [{"batch_id": e["batch_id"], "count": e["args"]["count"], "block": e["block_number"], "tx_hash": compute_hex(e["tx_hash"])}
                    for e in batches],
    }


def _slash_row(e: dict, explorer: ExplorerTables) -> dict:
    """A slash naming the node, with the amount the Registry took in the same transaction; an audit's
    slash says what its outcome (`verillm.spec.outcome`, as on the audit page) says of it."""
    registry = [x for x in explorer.get_tx_events(bytes.fromhex(e["tx_hash"].removeprefix("0x"))) if x["name"] == "Slashed"]
    node = (e["args"].get("node") or e["args"].get("member") or e["args"].get("party") or e["args"].get("dispatcher") or "").lower()
    taken = next((x["args"] for x in registry if x["args"]["node"].lower() == node), {})
    reason = e["args"].get("reason") or {"OmissionSlashed": "omitted a promised receipt from its batches"}.get(e["name"], e["name"])
    penalty, amount = False, taken.get("amountWei")
    audit_id = e["audit_id"] if e["audit_id"] is not None else _contest_audit(explorer, e)
    outcome = explorer.get_outcome(audit_id) if audit_id is not None else None
    slash = next((s for s in (outcome.slashes if outcome else ()) if s.node.lower() == node and s.tx_hash == compute_tx_key(e["tx_hash"])), None)
    if slash is not None:
        reason, penalty, amount = slash.meaning, slash.penalty, slash.amount_wei
    return {"event": e["name"], "audit_id": audit_id, "batch_id": e["batch_id"], "block": e["block_number"], "reason": reason,
            "penalty": penalty, "amount_wei": amount, "stake_left_wei": taken.get("stakeLeftWei"), "tx_hash": compute_hex(e["tx_hash"])}


def _contest_audit(explorer: ExplorerTables, e: dict) -> int | None:
    """A `ContestLost` names no audit: its contest's `Contested` does."""
    if e["name"] != "ContestLost":
        return None
    contested = [x for x in explorer.get_contest_events([e["contest_id"]]) if x["name"] == "Contested"]
    return contested[0]["audit_id"] if contested else None


def compute_batch_body(explorer: ExplorerTables, batch_id: int, head: int, start_window: int) -> dict | None:
    """A receipt batch: who posted it, its root, the draw, the audits started from it and this node's jobs in it."""
    events = explorer.get_batch_events(batch_id)
    posted = next((e for e in events if e["name"] == "BatchPosted"), None)
    if posted is None:
        return None
    drawn = next((e for e in events if e["name"] == "AuditDrawn"), None)
    audits = [e for e in events if e["name"] == "AuditStarted"]
    return {
        "batch_id": batch_id, "dispatcher": posted["args"]["dispatcher"], "root": posted["args"]["root"], "count": posted["args"]["count"],
        "posted_block": posted["block_number"], "tx_hash": compute_hex(posted["tx_hash"]),
        "draw": {"block": drawn["block_number"], "beta": drawn["args"]["beta"], "start_window_ends": drawn["block_number"] + start_window} if drawn else None,
        "audits": [{"audit_id": e["audit_id"], "index": e["args"]["index"], "worker": e["args"]["worker"], "requested": e["args"]["requested"],
                    "block": e["block_number"], "outcome": (explorer.get_audit_outcome(e["audit_id"]) or {}).get("outcome")} for e in audits],
        "jobs": [compute_job_row(r, explorer) for r in explorer.get_jobs_of_batch(batch_id, head, start_window)],
        "events": [compute_event_json(e) for e in events if e["name"] not in ("AuditStarted",)],
    }


def compute_block_body(explorer: ExplorerTables, number: int) -> dict:
    return {"block": number, "events": [compute_event_json(e) for e in explorer.get_block_events(number)]}


def compute_tx_body(explorer: ExplorerTables, tx_hash: bytes) -> dict | None:
    events = explorer.get_tx_events(tx_hash)
    if not events:
        return None
    sent = explorer.db.execute("SELECT function, gas_used FROM chain_txs WHERE tx_hash = ?", [tx_hash.hex()]).fetchone()
    return {"tx_hash": "0x" + tx_hash.hex(), "block": events[0]["block_number"], "events": [compute_event_json(e) for e in events],
            "sent_by_this_node": {"function": sent[0], "gas_used": sent[1]} if sent else None}


def compute_search(explorer: ExplorerTables, query: str, head: int) -> list[dict]:
    """Return what ``query`` names on this node: [{kind, id, href}] (several for a bare number)."""
    q = query.strip().lower()
    if not q:
        raise InvalidInput(SEARCH_HELP)
    kind_number = re.fullmatch(r"(audit|batch|block)?\s*#?\s*(\d{1,18})", q)
    if kind_number:
        return _search_number(explorer, kind_number.group(1), int(kind_number.group(2)), head)
    if re.fullmatch(r"0x[0-9a-f]{64}", q):
        return _search_hash(explorer, bytes.fromhex(q[2:]))
    if re.fullmatch(r"0x[0-9a-f]{40}", q):
        return [{"kind": "node", "id": q, "href": f"#/node/{q}"}] if explorer.is_known_address(bytes.fromhex(q[2:])) else []
    raise InvalidInput(f"{query[:80]!r}: {SEARCH_HELP}")


def _search_number(explorer: ExplorerTables, kind: str | None, number: int, head: int) -> list[dict]:
    found = []
    if kind in (None, "audit") and explorer.get_audit_outcome(number) is not None:
        found.append({"kind": "audit", "id": number, "href": f"#/audit/{number}"})
    if kind in (None, "batch") and explorer.get_batch_events(number):
        found.append({"kind": "batch", "id": number, "href": f"#/batch/{number}"})
    if kind in (None, "block") and number <= head:
        found.append({"kind": "block", "id": number, "href": f"#/block/{number}"})
    return found


def _search_hash(explorer: ExplorerTables, digest: bytes) -> list[dict]:
    if explorer.has_job(digest):
        return [{"kind": "job", "id": "0x" + digest.hex(), "href": f"#/job/0x{digest.hex()}"}]
    found = []
    known = explorer.get_job_by_receipt_or_committee_hash(digest)
    if known is not None and known[1] is None:
        found.append({"kind": "job", "id": "0x" + known[0], "href": f"#/job/0x{known[0]}", "via": "receipt hash"})
    elif known is not None:
        found.append({"kind": "audit", "id": known[1], "href": f"#/audit/{known[1]}", "via": "a committee member's verification job"})
    if explorer.get_tx_events(digest):
        found.append({"kind": "tx", "id": "0x" + digest.hex(), "href": f"#/tx/0x{digest.hex()}"})
    started = explorer.find_audit_by_receipt_hash(digest)
    if started is not None and not any(f["kind"] == "audit" for f in found):
        found.append({"kind": "audit", "id": started, "href": f"#/audit/{started}", "via": "the audited receipt's hash"})
    return found
