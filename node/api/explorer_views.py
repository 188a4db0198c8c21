"""The explorer: a page every node serves at /explorer, and the JSON it reads.

    GET /explorer                              the page (static ES modules and CSS shipped in verillm.node.api.explorer; no build, no CDN)
    GET /explorer/{file}                       its scripts and style sheet
    GET /v1/verillm/explorer/network           chain, contracts, this node, every registered node with stake and slashes, serving
    GET /v1/verillm/explorer/summary           nodes, stake, jobs per hour, audits by verdict, slashes; series for the plots
    GET /v1/verillm/explorer/jobs              the jobs this node dispatched, newest first (?status= &worker= &model= &limit= &offset=)
    GET /v1/verillm/explorer/jobs/{0xjob}      one job: status, audit (seats, conduct, next step) and its timeline
    GET /v1/verillm/explorer/audits            every audit on the chain, newest first (?verdict= &worker= &limit= &offset=)
    GET /v1/verillm/explorer/audits/{id}       one audit
    GET /v1/verillm/explorer/nodes/{0xaddr}    one node: stake history, audited jobs, committees, votes, slashes, batches
    GET /v1/verillm/explorer/batches/{id}      one receipt batch
    GET /v1/verillm/explorer/blocks/{n}        the protocol events of one block
    GET /v1/verillm/explorer/txs/{0xhash}      the protocol events of one transaction
    GET /v1/verillm/explorer/search?q=         what a job/receipt/transaction hash, address, audit id, batch id or block number names

The data is the dispatcher role's (its store mirrors the contracts' events; node/store/explorer_tables.py
reads it through indexes); node stakes, an open audit's phase and block timestamps are read from the
chain (cached). A node without ``[dispatcher] enabled`` serves the page and answers the JSON routes
with 404 saying so. Every body carries ``block_times`` (block -> unix time) and ``clock``.
"""

import time
from importlib import resources

from aiohttp import web
from web3 import Web3

from verillm.errors import InvalidInput, NotFound
from verillm.spec.outcome import PENALTY_RULES

from verillm.node.api.dispatcher_views import add_job_deadlines, get_serving, name_own_worker, read_current_round, require_dispatch_service
from verillm.node.api.explorer_audit import compute_next_step
from verillm.node.api.explorer_bodies import compute_audit_body, compute_job_body, compute_job_row
from verillm.node.api.explorer_clock import BlockClock, compute_block_edges
from verillm.node.api.explorer_pages import (compute_batch_body, compute_block_body, compute_node_body, compute_search, compute_tx_body)
from verillm.node.appkeys import APP_MODEL
from verillm.node.store.explorer_tables import ExplorerTables
from verillm.wire import from_hex

STATIC_FILES = {"index.html": "text/html", "style.css": "text/css", "app.js": "text/javascript", "util.js": "text/javascript",
                "home.js": "text/javascript", "job.js": "text/javascript", "entities.js": "text/javascript", "plot.js": "text/javascript"}
MAX_LIMIT = 200
MAX_OFFSET = 1_000_000
NETWORK_CACHE_S = 2.0
PLOT_BLOCKS = 7_200  # 2 h of 1 s devnet blocks, 24 h of 12 s ones
JOB_STATUSES = ("dispatched", "committed", "audited", "verified", "final", "slashed", "tie", "abandoned")
AUDIT_VERDICTS = ("open", "pass", "fail", "tie", "worker-default", "abandoned")


async def get_page(request: web.Request) -> web.Response:
    """The explorer page (and, under /explorer/{file}, its scripts and style)."""
    name = request.match_info.get("file", "index.html")
    if name not in STATIC_FILES:
        raise NotFound(f"no explorer file {name!r}")
    body = resources.files("verillm.node.api.explorer").joinpath(name).read_bytes()
    return web.Response(body=body, content_type=STATIC_FILES[name], headers={"Cache-Control": "no-cache"})


# --- parameters ------------------------------------------------------------------------------------

def compute_int_param(query, name: str, default: int, low: int, high: int) -> int:
    """Return query parameter ``name`` as an int in [low, high]; InvalidInput (400) saying so otherwise."""
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"{name}: expected an integer from {low} to {high}, got {raw[:40]!r}") from None
    if not low <= value <= high:
        raise InvalidInput(f"{name}: expected an integer from {low} to {high}, got {value}")
    return value


def compute_choice_param(query, name: str, choices: tuple[str, ...]) -> str | None:
    value = query.get(name) or None
    if value is not None and value not in choices:
        raise InvalidInput(f"{name}: expected one of {', '.join(choices)}, got {value[:40]!r}")
    return value


def compute_hex_param(query, name: str, size: int) -> bytes | None:
    value = query.get(name) or None
    return None if value is None else from_hex(value.strip(), name, size)


def _page(request: web.Request) -> tuple[int, int]:
    return (compute_int_param(request.query, "limit", 50, 1, MAX_LIMIT), compute_int_param(request.query, "offset", 0, 0, MAX_OFFSET))


def _explorer(service) -> ExplorerTables:
    return ExplorerTables(service.tables.db)


def _clock(service) -> BlockClock:
    return BlockClock.of(service)


async def _respond(service, body: dict) -> web.Response:
    """The body with the timestamps of the blocks it names and the chain's clock."""
    await _clock(service).annotate(body, service.watcher.head)
    return web.json_response(body)


# --- network and summary -----------------------------------------------------------------------------

async def get_registered_nodes(service) -> list[dict]:
    """Every node that ever registered, with its live Registry state (read at most every 2 s: the page polls)."""
    cache = service.__dict__.setdefault("explorer_cache", {})
    if cache.get("at", 0.0) + NETWORK_CACHE_S < time.monotonic():
        registered, slashed = _registered_and_slashed(service.tables)  # the store: on the loop's thread (SQLite)
        states = await service.chainio.read_for_clients(lambda: [service.chainio.protocol.get_node(a) for a, _ in registered])
        cache.update(at=time.monotonic(), nodes=[_node_row(address, block, state, slashed) for (address, block), state in zip(registered, states)])
    return cache["nodes"]


async def get_network(request: web.Request) -> web.Response:
    """Chain head, contracts, the served model, every registered node's standing, and whether this node can serve."""
    service = require_dispatch_service(request, "it has no network view")
    nodes = await get_registered_nodes(service)
    served, protocol = request.app[APP_MODEL], service.chainio.protocol
    preset = protocol.preset
    return web.json_response({
        "chain_id": protocol.chain.chain_id, "head": service.watcher.head, "start_block": protocol.deployment.start_block,
        "addresses": dict(protocol.deployment.addresses),
        "model": {"name": served.name, "model_id": "0x" + served.model_id.hex()},
        "this_node": "0x" + service.chainio.address.hex(),
        "params": {"min_stake_wei": preset.MIN_STAKE_WEI, "committee_size": preset.COMMITTEE_SIZE, "audit_rate_bps": preset.AUDIT_RATE_BPS,
                   "commit_window_blocks": preset.COMMIT_WINDOW_BLOCKS, "open_window_blocks": preset.OPEN_WINDOW_BLOCKS,
                   "dispute_window_blocks": preset.DISPUTE_WINDOW_BLOCKS, "start_window_blocks": preset.START_WINDOW_BLOCKS},
        "nodes": nodes,
        "serving": await get_serving(request.app),  # ready, or why not: e.g. too few workers to audit (readiness.py)
    })


def _registered_and_slashed(tables) -> tuple[list[tuple[str, int]], dict[str, int]]:
    """Every node that ever registered (address, block) from the recorded events, and the wei slashed from each."""
    slashed: dict[str, int] = {}
    for event in tables.get_events("Slashed"):
        node = event["args"]["node"].lower()
        slashed[node] = slashed.get(node, 0) + int(event["args"]["amountWei"])
    registered: dict[str, int] = {}
    for event in tables.get_events("Registered"):
        registered.setdefault(Web3.to_checksum_address(event["args"]["node"]), event["block_number"])
    return list(registered.items()), slashed


def _node_row(address: str, block: int, state: dict, slashed: dict[str, int]) -> dict:
    return {"address": address, "endpoint": state["endpoint"], "stake_wei": state["stake_wei"], "registered": state["registered"],
            "active": state["active"], "locks": state["locks"], "unbonding_end_block": state["unbonding_end_block"],
            "models": ["0x" + m.hex() for m in state["models"]], "slashed_wei": slashed.get(address.lower(), 0), "registered_block": block}


async def get_summary(request: web.Request) -> web.Response:
    """The network in numbers, and the series the page plots (jobs and audits over time, stake by node)."""
    service = require_dispatch_service(request, "it has no network view")
    cache = service.__dict__.setdefault("explorer_summary", {})
    if cache.get("head") == service.watcher.head:  # the page polls every 3 s: nothing new until a new block is read
        return web.json_response(cache["body"])
    nodes = await get_registered_nodes(service)
    explorer, clock, head = _explorer(service), _clock(service), service.watcher.head
    start = service.chainio.protocol.deployment.start_block
    counts = explorer.count_events()
    slashes = explorer.get_events("Slashed")
    penalties = sum(explorer.count_events_where("PartySlashed", "reason", r) for r in PENALTY_RULES)  # spec.outcome's: a penalty, not a conviction
    hour_ago = await clock.get_block_at(await clock.get_time(head) - 3600, start, head)
    # The plot spans the chain's activity: from its first batch (start-up blocks are empty), the last PLOT_BLOCKS at most.
    edges = compute_block_edges(max(explorer.get_first_block("BatchPosted") or start, head + 1 - PLOT_BLOCKS, start), head + 1, 24)
    body = {
        "head": head, "start_block": start,
        "nodes": {"registered": len(nodes), "active": sum(1 for n in nodes if n["active"]), "stake_wei": sum(int(n["stake_wei"]) for n in nodes),
                  "slashed_wei": sum(int(n["slashed_wei"]) for n in nodes)},
        "jobs": {"batched": explorer.sum_small_arg("BatchPosted", "count"), "dispatched_here": explorer.count_dispatched_jobs(),
                 "last_hour": explorer.count_in_blocks("BatchPosted", [hour_ago, head + 1], "count")[0], "last_hour_from_block": hour_ago},
        "audits": {**{v: 0 for v in AUDIT_VERDICTS}, **explorer.count_audits_by_outcome()},
        "slashes": {"events": len(slashes), "wei": sum(int(e["args"]["amountWei"]) for e in slashes), "penalties": penalties,
                    "convictions": len(slashes) - penalties, "batches": counts.get("BatchPosted", 0)},
        "series": {"edges": edges, "jobs": explorer.count_in_blocks("BatchPosted", edges, "count"),
                   "audits": explorer.count_in_blocks("AuditStarted", edges), "settled": explorer.count_in_blocks("AuditSettled", edges),
                   "slashes": explorer.count_in_blocks("Slashed", edges)},
        "stake": [{"address": n["address"], "stake_wei": n["stake_wei"], "slashed_wei": n["slashed_wei"], "active": n["active"]} for n in nodes],
    }
    body["series_blocks"] = [e for e in edges if e <= head] + ([head] if edges[-1] > head else [])
    await _clock(service).annotate(body, head)
    cache.update(head=head, body=body)
    return web.json_response(body)


# --- lists --------------------------------------------------------------------------------------------

async def get_jobs(request: web.Request) -> web.Response:
    """The jobs this node dispatched, newest first, filtered and paged."""
    limit, offset = _page(request)
    status = compute_choice_param(request.query, "status", JOB_STATUSES)
    worker = compute_hex_param(request.query, "worker", 20)
    model = compute_hex_param(request.query, "model", 32)
    service = require_dispatch_service(request, "it has no network view")  # after the input checks: bad input is a 400 on any node
    explorer, head = _explorer(service), service.watcher.head
    total, rows = explorer.get_job_page(head, service.chainio.preset.START_WINDOW_BLOCKS, limit, offset, status, worker, model)
    body = {"head": head, "total": total, "limit": limit, "offset": offset, "jobs": [compute_job_row(r, explorer) for r in rows]}
    return await _respond(service, body)


async def get_audits(request: web.Request) -> web.Response:
    """Every audit the chain started (any dispatcher's), newest first, filtered by outcome and worker, paged."""
    limit, offset = _page(request)
    verdict = compute_choice_param(request.query, "verdict", AUDIT_VERDICTS)
    worker = compute_hex_param(request.query, "worker", 20)
    service = require_dispatch_service(request, "it has no network view")  # after the input checks: bad input is a 400 on any node
    explorer = _explorer(service)
    total, rows = explorer.get_audit_page(limit, offset, verdict, worker)
    audits = []
    for r in rows:
        audits.append({"audit_id": r["audit_id"], "outcome": r["outcome"], "started_block": r["started_block"], "ended_block": r["ended_block"],
                       "worker": r["args"]["worker"], "batch_id": r["args"]["batchId"], "index": r["args"]["index"], "requested": r["args"]["requested"],
                       "job_hash": _dispatched_job(explorer, r["audit_id"]),
                       **{k: v for k, v in _brief(explorer, r).items() if k in ("votes", "slashed", "round_verdict")}})
    return await _respond(service, {"head": service.watcher.head, "total": total, "limit": limit, "offset": offset, "audits": audits})


def _brief(explorer: ExplorerTables, row: dict) -> dict:
    from verillm.node.api.explorer_bodies import compute_audit_brief

    return compute_audit_brief(explorer, row["audit_id"], row["args"]["worker"])


def _dispatched_job(explorer: ExplorerTables, audit_id: int) -> str | None:
    mine = explorer.get_dispatched_audit(audit_id)
    return "0x" + mine["job_hash"] if mine else None


# --- one thing ------------------------------------------------------------------------------------------

async def get_job_timeline(request: web.Request) -> web.Response:
    """One job: its status body, its audit (seats, conduct, next step while open) and every on-chain event."""
    service = require_dispatch_service(request, "it has no network view")
    job_hash = from_hex(request.match_info["job_hash"], "job_hash", 32)
    body = compute_job_body(service.tables, _explorer(service), job_hash, service.watcher.head, service.chainio.preset)
    detail = body["audit_detail"]
    is_open = (body.get("audit") or {}).get("status") == "open" or (detail is not None and detail["outcome"] == "open")
    current_round = await read_current_round(service, body["audit"]["audit_id"]) if is_open and body.get("audit") else None
    body = await add_job_deadlines(service, name_own_worker(request, body), current_round)  # the same read as the next step's
    if detail is not None and detail["outcome"] == "open":
        detail["next"] = await _next_step(service, detail, current_round)
    body["links"] = {"status": f"/v1/verillm/audits/0x{job_hash.hex()}", "evidence": f"/v1/verillm/audits/0x{job_hash.hex()}/evidence",
                     "replay": compute_replay_command(job_hash, str(request.url.origin()))}
    return await _respond(service, body)


def compute_replay_command(job_hash: bytes, origin: str) -> str:
    """Return the replay command a reader of this page can run: the evidence holds the prompt, so
    it names what a reader must add, the requester's read token or a party's key (node/api/access.py)."""
    return (f"verillm audit replay 0x{job_hash.hex()} --node {origin} --token TOKEN --addresses ADDRESSES.json"
            "   (TOKEN: the token= of the status_url the requester got; a party of the audit or this node's operator: --key-file KEY instead)")


async def get_audit(request: web.Request) -> web.Response:
    """One audit (any dispatcher's): seats and conduct, slashes, timeline; while open, what happens next."""
    audit_id = compute_int_param(request.match_info, "audit_id", 0, 0, 2**63 - 1)
    service = require_dispatch_service(request, "it has no network view")  # after the input checks: bad input is a 400 on any node
    body = compute_audit_body(_explorer(service), audit_id)
    if body is None:
        raise NotFound(f"no audit {audit_id} among the events this node has recorded (head {service.watcher.head})")
    if body["outcome"] == "open":
        body["next"] = await _next_step(service, body)
    return await _respond(service, body)


async def _next_step(service, body: dict, current_round=None) -> dict | None:
    """Read the audit's current round from Jobs (its phase and the deadlines the contract computes,
    `getRoundState`; ``current_round``: `read_current_round`'s, if read already), and say what happens next."""
    chainio, head = service.chainio, service.watcher.head
    audit, state = current_round or await read_current_round(service, body["audit_id"])
    parties = {"worker": audit.worker, "dispatcher": audit.dispatcher, "requested": audit.requested}
    step = compute_next_step(state, parties, body["rounds"], chainio.preset, head)
    return None if step is None else {**step, "read_at_block": head, "phase_code": int(state.phase)}


async def get_node(request: web.Request) -> web.Response:
    service = require_dispatch_service(request, "it has no network view")
    address = from_hex(request.match_info["address"], "address", 20)
    limit = compute_int_param(request.query, "limit", 50, 1, MAX_LIMIT)
    explorer = _explorer(service)
    if not explorer.is_known_address(address):
        raise NotFound(f"no recorded event names 0x{address.hex()}")
    body = compute_node_body(explorer, address, limit)
    body["state"] = next((n for n in await get_registered_nodes(service) if n["address"].lower() == body["address"]), None)
    body["this_node"] = body["address"] == "0x" + service.chainio.address.hex()
    return await _respond(service, body)


async def get_batch(request: web.Request) -> web.Response:
    batch_id = compute_int_param(request.match_info, "batch_id", 0, 0, 2**63 - 1)
    service = require_dispatch_service(request, "it has no network view")  # after the input checks: bad input is a 400 on any node
    body = compute_batch_body(_explorer(service), batch_id, service.watcher.head, service.chainio.preset.START_WINDOW_BLOCKS)
    if body is None:
        raise NotFound(f"no batch {batch_id} among the events this node has recorded")
    return await _respond(service, body)


async def get_block(request: web.Request) -> web.Response:
    service = require_dispatch_service(request, "it has no network view")
    head = service.watcher.head
    number = compute_int_param(request.match_info, "number", 0, 0, 2**63 - 1)
    if number > head:
        raise NotFound(f"block {number} is not mined yet (head {head})")
    header = await service.chainio.read_for_clients(service.chainio.chain.get_block, number)
    return await _respond(service, {**compute_block_body(_explorer(service), number), "head": head, "hash": "0x" + bytes(header["hash"]).hex(),
                                    "transactions": len(header["transactions"]), "gas_used": header["gasUsed"]})


async def get_tx(request: web.Request) -> web.Response:
    service = require_dispatch_service(request, "it has no network view")
    tx_hash = from_hex(request.match_info["tx_hash"], "tx_hash", 32)
    body = compute_tx_body(_explorer(service), tx_hash)
    if body is None:
        raise NotFound(f"transaction 0x{tx_hash.hex()} emitted no protocol event this node has recorded")
    return await _respond(service, body)


async def get_search(request: web.Request) -> web.Response:
    """What the query names: a job, audit, node, batch, block or transaction (a bare number may name several)."""
    service = require_dispatch_service(request, "it has no network view")
    query = request.query.get("q", "")
    if len(query) > 200:
        raise InvalidInput("q: at most 200 characters")
    matches = compute_search(_explorer(service), query, service.watcher.head)
    return web.json_response({"query": query, "matches": matches})
