"""Errors become responses here, and only here: OpenAI's error shape for every failure.

    {"error": {"message": "...", "type": "invalid_request_error" | "server_error", "param": "top_p" | null, "code": "..."}}

``param`` is the field a client error names: every message about one field starts with it
("top_p: must be greater than 0", "messages[2].role: …"), so it is read from there, and null
when the error is about no one field.

A `VerillmError` carries its own ``code`` and ``http_status``; aiohttp's own HTTP errors
(unknown route, wrong method, body over the size limit) keep their status. Anything else is
a bug: logged with its traceback and answered 500 internal_error.

A request aiohttp cannot parse (a header line over 8,190 bytes, over 128 headers, a malformed
request line) never reaches a handler: aiohttp answers it 400 and would log ERROR with a
traceback, so anyone could fill the log. `SERVER_LOG` (the runner's logger) writes one WARNING
line instead, naming the peer and the reason; every other error aiohttp logs keeps its traceback.
"""

import logging

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from verillm.errors import VerillmError
from verillm.wire import compute_error_body

from verillm.node.appkeys import APP_METRICS

log = logging.getLogger(__name__)

AIOHTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large", 400: "invalid_input"}


def error_response(request: web.Request, status: int, code: str, message: str) -> web.Response:
    """Return the JSON error response, counted by code."""
    request.app[APP_METRICS].http_errors.labels(code=code).inc()
    return web.json_response(compute_error_body(status, code, message), status=status)


@web.middleware
async def error_middleware(request: web.Request, handler) -> web.StreamResponse:
    """Translate errors raised by handlers into JSON error responses."""
    try:
        return await handler(request)
    except VerillmError as exc:
        response = error_response(request, exc.http_status, exc.code, str(exc))
        if exc.retry_after_s is not None:  # a full queue, a quota, a duty first: the request may come back
            response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = AIOHTTP_CODES.get(exc.status, f"http_{exc.status}")
        return error_response(request, exc.status, code, exc.reason if exc.text is None else exc.text)
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(request, 500, "internal_error", "internal error; see the node's log")


MAX_LOGGED_REASON = 200
"""Characters of a parse error's reason written to the log (it quotes the peer's bytes)."""


class ServerLog(logging.LoggerAdapter):
    """aiohttp's server logger, with a request it could not parse logged as one warning line."""

    def exception(self, msg, *args, exc_info=True, **kwargs) -> None:
        if isinstance(exc_info, HttpProcessingError):
            reason = (exc_info.message or type(exc_info).__name__)[:MAX_LOGGED_REASON]
            self.logger.warning("refused a malformed request from %s with HTTP %d: %s", args[0] if args else "?", exc_info.code or 400, reason)
            return
        self.logger.exception(msg, *args, exc_info=exc_info, **kwargs)


SERVER_LOG = ServerLog(logging.getLogger("aiohttp.server"))
