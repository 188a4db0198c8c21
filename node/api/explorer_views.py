"""The explorer: a page every node serves at /explorer, and the JSON it reads.

    GET /explorer                          the page (static HTML/JS/CSS shipped in verillm.node.api.explorer; no build, no CDN)
    GET /explorer/{file}                   its script and style sheet
    GET /v1/verillm/explorer/network       chain, contracts, this node, every registered node with stake and slashes
    GET /v1/verillm/explorer/jobs          the jobs this node dispatched, newest first, with their audit status
    GET /v1/verillm/explorer/jobs/{0xjob}  one job's audit timeline: every on-chain event from batch to settlement

The data is the dispatcher role's (its store mirrors the contracts' events; node stakes are
read live from the Registry), so a node without ``[dispatcher] enabled`` serves the page and
answers the JSON routes with 404 saying so.
"""

import time
from importlib import resources

from aiohttp import web
from web3 import Web3

from verillm.errors import InvalidInput, NotFound

from verillm.node.api.dispatcher_views import require_dispatch_service
from verillm.node.appkeys import APP_MODEL
from verillm.node.dispatcher.status import compute_job_status
from verillm.wire import from_hex

STATIC_FILES = {"app.js": "text/javascript", "style.css": "text/css", "index.html": "text/html"}
MAX_JOBS = 200
NETWORK_CACHE_S = 2.0
# Events of one audit, in the order the protocol emits them (docs/protocol.md §12).
AUDIT_EVENTS = ("AuditStarted", "CommitteeDrawn", "CommitteeReceiptPosted", "ChallengeDrawn", "Opened", "RoundDecided",
                "EscalationStarted", "EscalationLapsed", "Contested", "Adjudicated", "PartySlashed", "AuditAbandoned", "AuditSettled")


async def get_page(request: web.Request) -> web.Response:
    """The explorer page (and, under /explorer/{file}, its script and style)."""
    name = request.match_info.get("file", "index.html")
    if name not in STATIC_FILES:
        raise NotFound(f"no explorer file {name!r}")
    body = resources.files("verillm.node.api.explorer").joinpath(name).read_bytes()
    return web.Response(body=body, content_type=STATIC_FILES[name], headers={"Cache-Control": "no-cache"})


async def get_network(request: web.Request) -> web.Response:
    """Chain head, contracts, the served model and every registered node's standing."""
    service = require_dispatch_service(request, "it has no network view")
    cache = service.__dict__.setdefault("explorer_cache", {})  # the page polls every few seconds: read the chain at most every 2 s
    if cache.get("at", 0.0) + NETWORK_CACHE_S < time.monotonic():
        registered, slashed = _registered_and_slashed(service.tables)  # the store: on the loop's thread (SQLite)
        states = await service.chainio.read(lambda: [service.chainio.protocol.get_node(a) for a, _ in registered])
        nodes = [_node_row(address, block, state, slashed) for (address, block), state in zip(registered, states)]
        cache.update(at=time.monotonic(), nodes=nodes)
    served, protocol = request.app[APP_MODEL], service.chainio.protocol
    return web.json_response({
        "chain_id": protocol.chain.chain_id, "head": service.watcher.head,
        "addresses": dict(protocol.deployment.addresses),
        "model": {"name": served.name, "model_id": "0x" + served.model_id.hex()},
        "this_node": "0x" + service.chainio.address.hex(),
        "params": {"min_stake_wei": protocol.preset.MIN_STAKE_WEI, "committee_size": protocol.preset.COMMITTEE_SIZE,
                   "audit_rate_bps": protocol.preset.AUDIT_RATE_BPS},
        "nodes": cache["nodes"],
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


def compute_limit(raw: str | None, default: int, maximum: int) -> int:
    """A ``?limit=``: an integer in 1..maximum (SQLite reads LIMIT -1 as no limit at all); InvalidInput otherwise."""
    if raw is None:
        return default
    try:
        limit = int(raw)
    except ValueError:
        raise InvalidInput("limit: expected an integer") from None
    if not 1 <= limit <= maximum:
        raise InvalidInput(f"limit: between 1 and {maximum}, got {limit}")
    return limit


async def get_jobs(request: web.Request) -> web.Response:
    """The jobs this node dispatched, newest first (``?limit=``, at most 200)."""
    limit = compute_limit(request.query.get("limit"), 50, MAX_JOBS)
    service = require_dispatch_service(request, "it has no network view")
    rows = _recent_jobs(service, limit)  # SQLite: on the loop's thread, as the status route
    return web.json_response({"head": service.watcher.head, "jobs": rows})


def _recent_jobs(service, limit: int) -> list[dict]:
    hashes = service.tables.db.execute("SELECT job_hash, created_at FROM dispatch_jobs ORDER BY created_at DESC, job_hash LIMIT ?", [limit]).fetchall()
    preset, head = service.chainio.preset, service.watcher.head
    return [{**compute_job_status(service.tables, bytes.fromhex(h), head, preset), "created_at": created} for h, created in hashes]


async def get_job_timeline(request: web.Request) -> web.Response:
    """One job: its status body, and every on-chain event of its batch and audit with block and transaction."""
    service = require_dispatch_service(request, "it has no network view")
    job_hash = from_hex(request.match_info["job_hash"], "job_hash", 32)
    body = _timeline(service, job_hash)
    body["links"] = {"status": f"/v1/verillm/audits/0x{job_hash.hex()}", "evidence": f"/v1/verillm/audits/0x{job_hash.hex()}/evidence",
                     "replay": f"verillm audit replay 0x{job_hash.hex()} --node {request.url.origin()}"}
    return web.json_response(body)


def _timeline(service, job_hash: bytes) -> dict:
    tables = service.tables
    body = compute_job_status(tables, job_hash, service.watcher.head, service.chainio.preset)
    events = []
    batch = body.get("batch")
    if batch is not None:
        events += [e for name in ("BatchPosted", "AuditDrawn") for e in tables.get_events(name) if e["batch_id"] == batch["batch_id"]]
    audit = body.get("audit")
    if audit is not None:
        events += [e for name in AUDIT_EVENTS for e in tables.get_events(name, audit["audit_id"])]
        events += [e for e in tables.get_events("Slashed") if e["tx_hash"] in {x["tx_hash"] for x in events}]
    events.sort(key=lambda e: (e["block_number"], e["log_index"]))
    body["timeline"] = [{"block": e["block_number"], "event": e["name"], "contract": e["contract"], "tx_hash": _hex(e["tx_hash"]),
                         "args": e["args"]} for e in events]
    return body


def _hex(value: str) -> str:
    return value if value.startswith("0x") else "0x" + value
