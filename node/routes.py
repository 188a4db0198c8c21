"""Every route of the node, in one table."""

from aiohttp import web

from verillm.node.api import dispatcher_views, explorer_views, native_views, network_views, openai_views, openapi


def setup_routes(app: web.Application) -> None:
    """Register every route on ``app``."""
    app.router.add_get("/v1/models", openai_views.get_models)
    app.router.add_post("/v1/completions", openai_views.post_completions)
    app.router.add_post("/v1/chat/completions", openai_views.post_chat_completions)
    app.router.add_get("/v1/openapi.json", openapi.get_openapi)  # this table, described (node/api/openapi.py; a test holds them equal)
    app.router.add_post("/v1/verillm/jobs", native_views.post_job)
    app.router.add_get("/v1/verillm/jobs/{job_hash}", native_views.get_job)
    app.router.add_post("/v1/verillm/jobs/{job_hash}/openings", native_views.post_opening)
    app.router.add_get("/v1/verillm/info", native_views.get_info)
    app.router.add_get("/healthz", native_views.get_healthz)
    app.router.add_get("/metrics", native_views.get_metrics)
    # the dispatcher role (404 on a node without it)
    app.router.add_get("/v1/verillm/audits/{job_hash}", dispatcher_views.get_dispatch_status)
    app.router.add_get("/v1/verillm/audits/{job_hash}/evidence", dispatcher_views.get_dispatch_evidence)
    app.router.add_get("/v1/verillm/dispatcher", dispatcher_views.get_dispatcher_info)
    app.router.add_get("/v1/verillm/receipts/{receipt_hash}/inclusion", dispatcher_views.get_receipt_inclusion)
    app.router.add_get("/v1/verillm/network", network_views.get_network)
    # the explorer: its page and the JSON it reads
    app.router.add_get("/explorer", explorer_views.get_page)
    app.router.add_get("/explorer/{file}", explorer_views.get_page)
    app.router.add_get("/v1/verillm/explorer/network", explorer_views.get_network)
    app.router.add_get("/v1/verillm/explorer/summary", explorer_views.get_summary)
    app.router.add_get("/v1/verillm/explorer/search", explorer_views.get_search)
    app.router.add_get("/v1/verillm/explorer/jobs", explorer_views.get_jobs)
    app.router.add_get("/v1/verillm/explorer/jobs/{job_hash}", explorer_views.get_job_timeline)
    app.router.add_get("/v1/verillm/explorer/audits", explorer_views.get_audits)
    app.router.add_get("/v1/verillm/explorer/audits/{audit_id}", explorer_views.get_audit)
    app.router.add_get("/v1/verillm/explorer/nodes/{address}", explorer_views.get_node)
    app.router.add_get("/v1/verillm/explorer/batches/{batch_id}", explorer_views.get_batch)
    app.router.add_get("/v1/verillm/explorer/blocks/{number}", explorer_views.get_block)
    app.router.add_get("/v1/verillm/explorer/txs/{tx_hash}", explorer_views.get_tx)
