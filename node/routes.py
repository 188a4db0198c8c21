"""Every route of the node, in one table."""

from aiohttp import web

from verillm.node.api import native_views, openai_views


def setup_routes(app: web.Application) -> None:
    """Register every route on ``app``."""
    app.router.add_get("/v1/models", openai_views.get_models)
    app.router.add_post("/v1/completions", openai_views.post_completions)
    app.router.add_post("/v1/chat/completions", openai_views.post_chat_completions)
    app.router.add_post("/v1/verillm/jobs", native_views.post_job)
    app.router.add_get("/v1/verillm/jobs/{job_hash}", native_views.get_job)
    app.router.add_post("/v1/verillm/jobs/{job_hash}/openings", native_views.post_opening)
    app.router.add_get("/v1/verillm/info", native_views.get_info)
    app.router.add_get("/healthz", native_views.get_healthz)
    app.router.add_get("/metrics", native_views.get_metrics)
