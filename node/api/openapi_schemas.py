"""The JSON Schemas (2020-12, as OpenAPI 3.1 uses them) of the node's bodies: the `components`
of the document node/api/openapi.py serves. Each describes what the handler named beside it
builds; tests/node/test_openapi.py validates real responses of a running node against them.
"""

HEX = {"type": "string", "pattern": "^0x[0-9a-fA-F]*$"}
HASH = {"type": "string", "pattern": "^0x[0-9a-fA-F]{64}$"}
ADDRESS = {"type": "string", "pattern": "^0x[0-9a-fA-F]{40}$"}
UINT = {"type": "integer", "minimum": 0}
TOKENS = {"type": "array", "items": UINT}
NULLABLE_UINT = {"type": ["integer", "null"], "minimum": 0}


def _object(properties: dict, required: tuple[str, ...] | None = None, extra: bool = True, **more) -> dict:
    """An object schema; ``required`` defaults to every property named."""
    return {"type": "object", "properties": properties, "required": list(properties if required is None else required),
            "additionalProperties": extra, **more}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


SAMPLING = _object({"temperature_milli": UINT, "top_k": UINT, "top_p_ppm": UINT, "seed": UINT})

GENERATION_OPTIONS = {
    "model": {"type": "string", "description": "a name from /v1/models (the manifest's name, the node's alias or the 0x model id)"},
    "temperature": {"type": "number", "minimum": 0}, "top_p": {"type": "number"}, "top_k": UINT, "seed": UINT,
    "stream": {"type": "boolean"}, "stream_options": _object({"include_usage": {"type": "boolean"}}, required=()),
    "stop": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 4}, {"type": "null"}]},
    "verillm": _object({"audit": {"type": "boolean", "description": "ask the dispatcher to audit this job"},
                        "nonce": {**HASH, "description": "the job's nonce: the receipt signs it (freshness)"}}, required=()),
}
REFUSED_OPTIONS = "OpenAI's; n > 1, logprobs, penalties, tools and the like are refused (400), never ignored."

SCHEMAS: dict[str, dict] = {
    "Error": _object({"error": _object({
        "message": {"type": "string"},
        "type": {"enum": ["invalid_request_error", "server_error"]},
        "param": {"type": ["string", "null"], "description": "the request field the error is about (its message starts with it), else null"},
        "code": {"type": "string", "description": "stable: verillm/errors.py's codes, not_found, method_not_allowed, request_too_large"},
    })}, description="Every error (node/middlewares.py), OpenAI's shape."),
    "Receipt": _object({
        "job_hash": HASH, "model_id": HASH, "input_hash": HASH, "output_hash": HASH, "sampling": SAMPLING, "max_new_tokens": UINT,
        "commitment_root": HASH, "num_positions": UINT, "input_tokens": UINT, "output_tokens": UINT, "auditable_until_block": UINT,
        "worker": ADDRESS, "signature": HEX, "receipt_hash": HASH, "encoded": HEX,
    }, description="A worker's signed receipt (verillm/wire.py receipt_to_json; docs/protocol.md)."),
    "Job": _object({"model_id": HASH, "input_tokens": TOKENS, "sampling": SAMPLING, "max_new_tokens": UINT, "nonce": HASH, "encoded": HEX}),
    "BatchPromise": _object({"receipt_hash": HASH, "dispatcher": ADDRESS, "batch_by_block": UINT, "signature": HEX}),
    "VerillmField": _object({
        "job_hash": HASH, "status_url": {"type": "string"}, "model_id": HASH, "receipt": _ref("Receipt"), "job": _ref("Job"),
        "input_tokens": TOKENS, "output_tokens": TOKENS, "batch_promise": _ref("BatchPromise"),
        "stop": {"type": "object"},
    }, required=("job_hash", "status_url", "model_id", "receipt", "job", "input_tokens", "output_tokens"),
        description="What rides beside OpenAI's body: the receipt and what the client checks it against; batch_promise from a networked dispatcher."),
    "Usage": _object({"prompt_tokens": UINT, "completion_tokens": UINT, "total_tokens": UINT}),
    "CompletionRequest": _object({"prompt": {"oneOf": [{"type": "string"}, TOKENS]}, "max_tokens": UINT, **GENERATION_OPTIONS},
                                 required=("model", "prompt"), description=REFUSED_OPTIONS),
    "ChatMessage": _object({"role": {"enum": ["system", "user", "assistant", "developer"]},
                            "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]}}),
    "ChatRequest": _object({"messages": {"type": "array", "items": _ref("ChatMessage"), "minItems": 1}, "max_tokens": UINT,
                            "max_completion_tokens": UINT, **GENERATION_OPTIONS}, required=("model", "messages"), description=REFUSED_OPTIONS),
    "Completion": _object({
        "id": {"type": "string"}, "object": {"const": "text_completion"}, "created": UINT, "model": {"type": "string"},
        "choices": {"type": "array", "items": _object({"index": UINT, "text": {"type": "string"}, "logprobs": {"type": "null"},
                                                       "finish_reason": {"enum": ["stop", "length"]}})},
        "usage": _ref("Usage"), "verillm": _ref("VerillmField"),
    }),
    "ChatCompletion": _object({
        "id": {"type": "string"}, "object": {"const": "chat.completion"}, "created": UINT, "model": {"type": "string"},
        "choices": {"type": "array", "items": _object({
            "index": UINT, "message": _object({"role": {"const": "assistant"}, "content": {"type": "string"}}),
            "logprobs": {"type": "null"}, "finish_reason": {"enum": ["stop", "length"]}})},
        "usage": _ref("Usage"), "verillm": _ref("VerillmField"),
    }),
    "ModelList": _object({"object": {"const": "list"}, "data": {"type": "array", "items": _object({
        "id": {"type": "string"}, "object": {"const": "model"}, "created": UINT, "owned_by": {"type": "string"},
        "verillm": _object({"model_id": HASH, "dtype": {"type": "string"}, "committed_layers": TOKENS}),
    })}}),
    "NativeJobResult": _object({"job_hash": HASH, "status": {"const": "done"}, "output_tokens": TOKENS, "receipt": _ref("Receipt"),
                                "status_url": {"type": "string"}}),
    "NativeJobStatus": _object({"job_hash": HASH, "status": {"type": "string"}, "error": {"type": ["string", "null"]},
                                "model_id": HASH, "receipt": _ref("Receipt"), "output_tokens": TOKENS},
                               required=("job_hash", "status", "model_id")),
    "Opening": _object({"job_hash": HASH, "opening": _object({"root": HASH, "num_leaves": UINT, "encoded": HEX})}),
    "Info": _object({
        "worker": ADDRESS,
        "model": _object({"name": {"type": "string"}, "model_id": HASH, "manifest": HEX}),
        "signing_domain": _object({"chain_id": UINT, "verifying_contract": ADDRESS}),
        "chain": _object({"rpc_url": {"type": "string"}, "deployment": {"type": "object"}}),
    }, required=("worker", "model", "signing_domain"), description="`chain` only on a networked node: what `verillm complete` ties the signer to."),
    "Serving": _object({"ready": {"type": "boolean"}, "reasons": {"type": "array", "items": {"type": "string"}}, "role": {"type": "string"}}),
    "Health": _object({"status": {"const": "ok"}, "model": {"type": "string"}, "worker": ADDRESS, "queue_depth": UINT,
                       "jobs": {"type": "object", "additionalProperties": UINT}, "schema_version": UINT, "serving": _ref("Serving")}),
    "AuditStatus": _object({
        "job_hash": HASH, "worker": ADDRESS, "worker_url": {"type": ["string", "null"]}, "receipt_hash": HASH, "audit_requested": {"type": "boolean"},
        "status": {"enum": ["dispatched", "committed", "audited", "verified", "final", "slashed", "tie", "abandoned"]},
        "head": UINT,
        "phase_deadline": {"enum": ["batch_by", "draw_by", "start_by", "round_draw_by", "reveal_by", "publish_by", "commit_by", "worker_open_by",
                                    "members_open_by", "dispute_by", None],
                           "description": "the contract deadline the current step waits on (verillm/spec/deadlines.py); null once final"},
        "phase_ends_block": {**NULLABLE_UINT, "description": "the last block of that deadline's window (the contract's own, Jobs.getRoundState for an audit)"},
        "final_by_block": {**NULLABLE_UINT, "description": "the latest block the job is final by, whatever every party does; null once final"},
        "seconds_per_block": {"type": ["number", "null"], "minimum": 0,
                              "description": "this node's mean block interval over its last 100 blocks: time left is an estimate from it"},
        "batch": _object({"batch_id": UINT, "index": UINT, "posted_block": NULLABLE_UINT, "status": {"type": "string"},
                          "drawn_block": {**NULLABLE_UINT, "description": "the block its audit draw landed in (AuditDrawn)"}}),
        "audit": _object({
            "audit_id": UINT, "status": {"enum": ["open", "settled", "abandoned"]}, "requested": {"type": "boolean"},
            "committee": {"type": "array", "items": ADDRESS}, "votes": {"type": "object", "additionalProperties": UINT},
            "round_verdict": NULLABLE_UINT, "verdict": {"type": ["string", "null"]}, "escalated": {"type": "boolean"},
            "slashed": {"type": "array", "items": _object({"node": ADDRESS, "amount_wei": NULLABLE_UINT, "reason": {"type": "string"},
                                                           "penalty": {"type": "boolean"}})},
        }, required=("audit_id", "status", "committee", "votes", "round_verdict", "verdict", "slashed")),
    }, required=("job_hash", "worker", "receipt_hash", "status", "head", "phase_deadline", "phase_ends_block", "final_by_block", "seconds_per_block"),
        description="Where a job this node dispatched stands (node/dispatcher/status.py); `batch` once posted, `audit` once started. "
                    "The SDK's phases (verillm/client/phases.py) are read from it."),
    "DispatcherInfo": _object({
        "address": ADDRESS, "head": UINT,
        "promise_domain": _object({"chain_id": UINT, "verifying_contract": ADDRESS, "batch_by_blocks": UINT}),
        "workers": {"type": "array", "items": _object({"address": ADDRESS, "url": {"type": "string"}, "stake_wei": UINT})},
        "batches": {"type": "object", "additionalProperties": UINT}, "audits": {"type": "object", "additionalProperties": UINT},
        "duties": UINT, "failing_steps": {"type": "object"},
    }),
    "Inclusion": _object({"receipt_hash": HASH, "dispatcher": ADDRESS, "batch_by_block": UINT, "batch_id": UINT, "posted_block": UINT,
                          "root": HASH, "leaf_index": UINT, "leaf_count": UINT, "siblings": {"type": "array", "items": HASH}}),
    "Network": _object({
        "chain_id": UINT, "head": UINT, "start_block": UINT,
        "addresses": {"type": "object", "additionalProperties": ADDRESS, "required": ["Registry", "Jobs", "Batches", "Disputes", "Delivery", "Coverage"]},
        "gateway": ADDRESS,
        "preset": _object({
            "name": {"type": "string", "description": "the preset this node's operator configured ([engine] preset)"},
            "matches_chain": {"type": "boolean", "description": "whether the chain holds exactly that preset's values"},
            "params": {"type": "object", "additionalProperties": {"type": "integer"},
                       "description": "every protocol parameter as the contracts hold it, units in the names (_blocks, _wei, _bps)"},
            "timeline": {"type": "object", "additionalProperties": UINT, "description": "the composed spans (verillm/spec/params.py compute_timeline)"},
        }),
        "models": {"type": "array", "items": _object({
            "name": {"type": "string"}, "model_id": HASH, "dtype": {"type": "string"}, "exact": {"type": "boolean"},
            "kernel_class": {"type": ["string", "null"]}, "pool": _object({"nodes": UINT, "stake_wei": UINT}),
        })},
        "nodes": _object({"registered": UINT, "active": UINT, "stake_wei": UINT, "slashed_wei": UINT}),
        "audits": _object({"total": UINT, "by_outcome": {"type": "object", "additionalProperties": UINT},
                           "recent": {"type": "array", "items": _object({
                               "audit_id": UINT, "worker": ADDRESS, "started_block": UINT, "ended_block": NULLABLE_UINT,
                               "outcome": {"enum": ["open", "pass", "fail", "tie", "worker-default", "abandoned"]}})}}),
    }, description="The network a gateway sees (node/api/network_views.py); every protocol value read from the chain."),
    "Evidence": {"type": "object", "description": "The data to replay an audit: job, output, receipts, proven openings (node/store/evidence.py); "
                                                 "it holds the prompt: only the requester and the audit's parties read it."},
    "ExplorerBody": {"type": "object", "description": "A body the explorer page reads (node/api/explorer_views.py); its fields follow the page, not a contract."},
    "OpenApiDocument": _object({"openapi": {"const": "3.1.0"}, "info": {"type": "object"}, "paths": {"type": "object"}, "components": {"type": "object"}},
                               required=("openapi", "info", "paths")),
}
