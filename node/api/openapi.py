"""The node's HTTP API as an OpenAPI 3.1 document, built from one table (`OPERATIONS`) and served at
GET /v1/openapi.json.

`OPERATIONS` names every public route (method, path as node/routes.py registers it), what it answers,
the schema of its body (node/api/openapi_schemas.py) and its errors, which all share one shape
(`Error`, node/middlewares.py). tests/node/test_openapi.py enumerates the aiohttp router: a route
the table does not describe, or a described route that does not exist, fails it; and real responses
of a running node are validated against the schemas.
"""

import functools
import json
from dataclasses import dataclass, field

from aiohttp import web

from verillm.node.api.openapi_schemas import SCHEMAS

JSON = "application/json"
SSE = "text/event-stream"
NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class Operation:
    """One route: ``method`` and ``path`` as node/routes.py registers them."""

    method: str
    path: str
    tag: str
    summary: str
    response: str | None
    """The 200 body's schema name (None: not JSON, see ``media``)."""
    media: tuple[str, ...] = (JSON,)
    request: str | None = None
    query: tuple[tuple[str, str], ...] = ()
    """(name, description) of each optional query parameter."""
    errors: tuple[int, ...] = ()
    extra: dict = field(default_factory=dict)


OPENAI, NATIVE, DISPATCHER, NETWORK, EXPLORER, OPS = "openai", "native", "dispatcher", "network", "explorer", "operations"
PAGE = (("limit", "at most this many rows (1–200, default 50)"), ("offset", "rows to skip"))
NEEDS_DISPATCHER = "404 on a node without [dispatcher] enabled."

OPERATIONS: tuple[Operation, ...] = (
    Operation("GET", "/v1/models", OPENAI, "The served model (OpenAI's list), with its on-chain model id", "ModelList", errors=(401,)),
    Operation("POST", "/v1/completions", OPENAI, "A text completion with its signed receipt in `verillm`; `stream: true` answers SSE chunks, "
              "each carrying the worker's signed prefix (`verillm_stream`), the last one the receipt", "Completion", (JSON, SSE),
              request="CompletionRequest", errors=(400, 401, 403, 404, 413, 429, 503)),
    Operation("POST", "/v1/chat/completions", OPENAI, "A chat completion through the model's own chat template; as /v1/completions",
              "ChatCompletion", (JSON, SSE), request="ChatRequest", errors=(400, 401, 403, 404, 413, 429, 503)),
    Operation("GET", "/v1/openapi.json", OPS, "This document", "OpenApiDocument"),
    Operation("POST", "/v1/verillm/jobs", NATIVE, "A job in a signed envelope from an accountable sender (a dispatcher); the receipt. "
              "?wait=0: 202 once durable; ?stream=1: NDJSON token lines, each signed, then the result", "NativeJobResult", (JSON, NDJSON),
              query=(("wait", "0: answer 202 once the job is durable and queued"), ("stream", "1: NDJSON lines as the engine samples")),
              errors=(400, 401, 403, 409, 413, 429), extra={"requestBody": {"required": True, "content": {"application/octet-stream": {}}}}),
    Operation("GET", "/v1/verillm/jobs/{job_hash}", NATIVE, "A job's status, receipt and output tokens, for its requester (?token= from "
              "status_url) or a signed read", "NativeJobStatus", query=(("token", "the read token of status_url"),), errors=(400, 401, 403, 404)),
    Operation("POST", "/v1/verillm/jobs/{job_hash}/openings", NATIVE, "Open cells of a done job, for its submitter (a signed envelope)",
              "Opening", errors=(400, 401, 403, 404, 409, 429), extra={"requestBody": {"required": True, "content": {"application/octet-stream": {}}}}),
    Operation("GET", "/v1/verillm/info", NATIVE, "This node: worker address, model and manifest, signing domain, the chain it names", "Info"),
    Operation("GET", "/healthz", OPS, "Liveness: model, queue depth, jobs by status, schema version, whether it can serve now", "Health"),
    Operation("GET", "/metrics", OPS, "Prometheus metrics", None, ("text/plain",)),
    Operation("GET", "/v1/verillm/audits/{job_hash}", DISPATCHER, "Where a job this node dispatched stands: batch, audit, committee, votes, "
              "verdict, slashes (the SDK's wait_verified, wait_final and watch read it). " + NEEDS_DISPATCHER, "AuditStatus", errors=(400, 404)),
    Operation("GET", "/v1/verillm/audits/{job_hash}/evidence", DISPATCHER, "The data to replay a dispatched job's audit, for its parties "
              "(a signed read). " + NEEDS_DISPATCHER, "Evidence", errors=(400, 401, 403, 404)),
    Operation("GET", "/v1/verillm/dispatcher", DISPATCHER, "The dispatcher's view: head, promise domain, workers, pending work. " + NEEDS_DISPATCHER,
              "DispatcherInfo", errors=(404,)),
    Operation("GET", "/v1/verillm/receipts/{receipt_hash}/inclusion", DISPATCHER, "The inclusion proof of a receipt this dispatcher promised "
              "to batch. " + NEEDS_DISPATCHER, "Inclusion", errors=(400, 404)),
    Operation("GET", "/v1/verillm/network", NETWORK, "The network this gateway sees: chain, contracts, the chain's parameters, the model's "
              "pool and exact-mode class, nodes, recent verdicts. " + NEEDS_DISPATCHER, "Network", errors=(404,)),
    Operation("GET", "/explorer", EXPLORER, "The explorer page", None, ("text/html",)),
    Operation("GET", "/explorer/{file}", EXPLORER, "The explorer's scripts and style sheet", None, ("text/javascript", "text/css", "text/html"),
              errors=(404,)),
    Operation("GET", "/v1/verillm/explorer/network", EXPLORER, "Chain, contracts, every registered node with stake and slashes", "ExplorerBody", errors=(404,)),
    Operation("GET", "/v1/verillm/explorer/summary", EXPLORER, "The network in numbers and the page's plots", "ExplorerBody", errors=(404,)),
    Operation("GET", "/v1/verillm/explorer/search", EXPLORER, "What a hash, address, audit id, batch id or block number names", "ExplorerBody",
              query=(("q", "the text searched"),), errors=(400, 404)),
    Operation("GET", "/v1/verillm/explorer/jobs", EXPLORER, "The jobs this node dispatched, newest first", "ExplorerBody",
              query=PAGE + (("status", "a job status"), ("worker", "0x address"), ("model", "0x model id")), errors=(400, 404)),
    Operation("GET", "/v1/verillm/explorer/jobs/{job_hash}", EXPLORER, "One job: status, audit, next step, timeline", "ExplorerBody", errors=(400, 404)),
    Operation("GET", "/v1/verillm/explorer/audits", EXPLORER, "Every audit on the chain, newest first", "ExplorerBody",
              query=PAGE + (("verdict", "open, pass, fail, tie, worker-default or abandoned"), ("worker", "0x address")), errors=(400, 404)),
    Operation("GET", "/v1/verillm/explorer/audits/{audit_id}", EXPLORER, "One audit: rounds, seats, conduct, next step", "ExplorerBody", errors=(400, 404)),
    Operation("GET", "/v1/verillm/explorer/nodes/{address}", EXPLORER, "One node: stake, audited jobs, committees, votes, slashes", "ExplorerBody",
              errors=(400, 404)),
    Operation("GET", "/v1/verillm/explorer/batches/{batch_id}", EXPLORER, "One receipt batch", "ExplorerBody", errors=(400, 404)),
    Operation("GET", "/v1/verillm/explorer/blocks/{number}", EXPLORER, "The protocol events of one block", "ExplorerBody", errors=(400, 404)),
    Operation("GET", "/v1/verillm/explorer/txs/{tx_hash}", EXPLORER, "The protocol events of one transaction", "ExplorerBody", errors=(400, 404)),
)

ERROR_MEANINGS = {400: "a malformed request; `param` names the field", 401: "no valid API key or signature", 403: "not allowed for this sender", 404: "not found, or the role is off",
                  409: "conflicts with the job's state", 413: "the body is over the node's limit", 429: "over the sender's share of the queue",
                  503: "the node cannot serve now (no worker, not ready)"}


def compute_openapi_document(version: str) -> dict:
    """Return the OpenAPI 3.1 document of every operation in `OPERATIONS`."""
    paths: dict[str, dict] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = compute_operation(op)
    return {
        "openapi": "3.1.0",
        "info": {"title": "VeriLLM node", "version": version,
                 "description": "A VeriLLM node's HTTP API: OpenAI-compatible completions carrying signed receipts, the native worker API, "
                                "the dispatcher's on-chain status, the network view and the explorer's JSON (docs/sdk.md)."},
        "paths": paths,
        "components": {"schemas": SCHEMAS},
    }


def compute_operation(op: Operation) -> dict:
    """Return one OpenAPI operation object."""
    ok = {"description": "OK", "content": {m: ({"schema": {"$ref": f"#/components/schemas/{op.response}"}} if m == JSON else {}) for m in op.media}}
    responses = {"200": ok} | {str(code): _error(code) for code in sorted(set(op.errors) | {500})}
    body = {"operationId": _operation_id(op), "tags": [op.tag], "summary": op.summary, "responses": responses}
    parameters = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}} for name in _path_names(op.path)]
    parameters += [{"name": name, "in": "query", "required": False, "description": text, "schema": {"type": "string"}} for name, text in op.query]
    if parameters:
        body["parameters"] = parameters
    if op.request is not None:
        body["requestBody"] = {"required": True, "content": {JSON: {"schema": {"$ref": f"#/components/schemas/{op.request}"}}}}
    return body | op.extra


def _error(code: int) -> dict:
    return {"description": ERROR_MEANINGS.get(code, "a bug: logged by the node with its traceback"),
            "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _path_names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def _operation_id(op: Operation) -> str:
    words = [w.strip("{}").replace(".", "_").replace("-", "_") for w in op.path.split("/") if w and w != "v1"]
    return op.method.lower() + "_" + "_".join(words)


@functools.cache
def compute_served_document() -> bytes:
    """The document as served: built and encoded once per process (it changes only with the code)."""
    from importlib.metadata import version

    return json.dumps(compute_openapi_document(version("verillm"))).encode()


async def get_openapi(request: web.Request) -> web.Response:
    """This node's API as an OpenAPI 3.1 document."""
    return web.Response(body=compute_served_document(), content_type=JSON)
