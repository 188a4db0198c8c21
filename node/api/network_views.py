"""GET /v1/verillm/network: what a client needs to know about the network a gateway sees before it
sends a job — which chain and contracts, the protocol's parameters as the contracts hold them, the
served model's pool (its exact-mode class, how many nodes stake for it and how much), the nodes
registered and active, and the recent audits' verdicts.

Every protocol value comes from the chain (`Protocol.preset` is read from `Jobs.params()` and
Coverage's), never from this node's configuration: ``preset.name`` is only the preset the operator
configured, and ``preset.matches_chain`` says whether the chain holds exactly that preset's values.
A node without ``[dispatcher] enabled`` has no chain and answers 404 saying so.
"""

import dataclasses

from aiohttp import web

from verillm.errors import ConfigError
from verillm.spec.params import Preset, compute_timeline, get_preset

from verillm.node.api.dispatcher_views import require_dispatch_service
from verillm.node.api.explorer_views import get_registered_nodes
from verillm.node.appkeys import APP_CONFIG, APP_MODEL
from verillm.node.store.explorer_tables import ExplorerTables
from verillm.wire import to_hex

RECENT_AUDITS = 10


async def get_network(request: web.Request) -> web.Response:
    """The network as this gateway sees it: chain, contracts, parameters, the model's pool, nodes, verdicts.
    Built once per head block (a public route: a client polling it costs one body per block, not a
    chain read and an audit count per request)."""
    service = require_dispatch_service(request, "it has no view of a network")
    cache = service.__dict__.setdefault("network_body", {})
    head = service.watcher.head
    if cache.get("head") != head:
        cache.update(head=head, body=await compute_network_body(request.app, service, head))
    return web.json_response(cache["body"])


async def compute_network_body(app: web.Application, service, head: int) -> dict:
    """The body of GET /v1/verillm/network at ``head``."""
    protocol, served = service.chainio.protocol, app[APP_MODEL]
    nodes = await get_registered_nodes(service)
    pool = await _model_pool(service, served.model_id)
    return {
        "chain_id": protocol.chain.chain_id, "head": head, "start_block": protocol.deployment.start_block,
        "addresses": dict(protocol.deployment.addresses),
        "gateway": to_hex(service.chainio.address),
        "preset": compute_preset_body(protocol.preset, app[APP_CONFIG].engine.preset),
        "models": [compute_model_body(served, pool)],
        "nodes": {"registered": sum(1 for n in nodes if n["registered"]), "active": sum(1 for n in nodes if n["active"]),
                  "stake_wei": sum(int(n["stake_wei"]) for n in nodes), "slashed_wei": sum(int(n["slashed_wei"]) for n in nodes)},
        "audits": compute_audits_body(ExplorerTables(service.tables.db)),
    }


def compute_preset_body(onchain: Preset, configured_name: str) -> dict:
    """The chain's parameters (lower-case preset names, units in them), the timeline's spans, and the
    preset the operator configured with whether the chain holds exactly its values."""
    params = {f.name.lower(): getattr(onchain, f.name) for f in dataclasses.fields(onchain) if f.name != "name"}
    timeline = {f"{name}_blocks": value for name, value in dataclasses.asdict(compute_timeline(onchain)).items()}
    return {"name": configured_name, "matches_chain": _matches(onchain, configured_name), "params": params, "timeline": timeline}


def _matches(onchain: Preset, name: str) -> bool:
    try:
        configured = get_preset(name)
    except ConfigError:  # a preset name this version does not know: the chain cannot be said to hold it
        return False
    return dataclasses.replace(configured, name=onchain.name) == onchain


def compute_model_body(served, pool: tuple[list[str], list[int]]) -> dict:
    """The served model: its OpenAI name, model id, dtype, exact-mode class and its pool on the Registry."""
    manifest = served.manifest
    weights = [w for w in pool[1] if w > 0]  # a slot a node left weighs 0
    return {"name": served.name, "model_id": to_hex(served.model_id), "dtype": manifest.dtype,
            "exact": bool(manifest.kernel_class), "kernel_class": manifest.kernel_class or None,
            "pool": {"nodes": len(weights), "stake_wei": sum(weights)}}


async def _model_pool(service, model_id: bytes) -> tuple[list[str], list[int]]:
    """`Registry.getModelNodes`: the sortition table the next epoch's draws of this model's committees use (nodes, stakes)."""
    return await service.chainio.read_for_clients(lambda: service.chainio.protocol.get_model_nodes(model_id))


def compute_audits_body(explorer: ExplorerTables) -> dict:
    """Every audit on the chain counted by outcome, and the most recent ones."""
    total, rows = explorer.get_audit_page(RECENT_AUDITS, 0)
    recent = [{"audit_id": r["audit_id"], "worker": r["args"]["worker"], "started_block": r["started_block"],
               "ended_block": r["ended_block"], "outcome": r["outcome"]} for r in rows]
    return {"total": total, "by_outcome": explorer.count_audits_by_outcome(), "recent": recent}
