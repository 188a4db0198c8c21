"""Request-reading helpers shared by the handlers: JSON bodies and signed envelopes."""

import asyncio
import time

from aiohttp import web

from verillm.errors import RequestTimeout
from verillm.jsonsafe import load_json

from verillm.node.api.access import compute_read_token
from verillm.node.appkeys import APP_CONFIG, APP_KEY, APP_STORE
from verillm.node.envelope import Envelope, decode_envelope_json, verify_envelope_freshness, verify_envelope_signature


async def read_json(request: web.Request) -> object:
    """Return the parsed JSON body; 413 past the size limit (aiohttp), 408 if it trickles in too slowly, 400 if not JSON."""
    timeout_s = request.app[APP_CONFIG].limits.body_timeout_s
    try:
        async with asyncio.timeout(timeout_s):
            raw = await request.read()
    except TimeoutError:
        raise RequestTimeout(f"body: not received within {timeout_s:g} s") from None
    return load_json(raw, "body")


async def read_signed_envelope(request: web.Request) -> Envelope:
    """Return the request's envelope after checking its signature (401) and timestamp (409).

    The nonce is checked and remembered separately (`remember_nonce`), once the payload has
    been validated, so a malformed request does not consume it.
    """
    config = request.app[APP_CONFIG]
    envelope = decode_envelope_json(await read_json(request))
    verify_envelope_signature(envelope, request.path, request.app[APP_KEY].address)  # who may do what: node/api/admission.py
    verify_envelope_freshness(envelope, time.time(), config.auth.max_clock_skew_s)
    return envelope


def remember_nonce(request: web.Request, envelope: Envelope) -> None:
    """Record the envelope's nonce; 409 if this sender used it before (within the skew window)."""
    skew = request.app[APP_CONFIG].auth.max_clock_skew_s
    request.app[APP_STORE].process_nonce(envelope.sender, envelope.nonce, envelope.timestamp_s, time.time() - 2 * skew)


def get_status_url(request: web.Request, job_hash: bytes) -> str:
    """Return the URL of a job's status, with the requester's read token (node/api/access.py): the
    configured public URL, else the one the client used.

    With the dispatcher role the job may have run on another worker, whose store this node's
    job route cannot see: the URL is then the dispatcher's own record of the job (receipt,
    batch, audit), which this node answers whichever worker ran it. The token rides along so
    the client can also read the job route of the node that answered.
    """
    config = request.app[APP_CONFIG]
    route = "audits" if config.dispatcher.enabled else "jobs"
    return f"{get_base_url(request)}/v1/verillm/{route}/0x{job_hash.hex()}?token={compute_read_token(request.app[APP_KEY], job_hash)}"


def get_base_url(request: web.Request) -> str:
    """This node's URL as its clients reach it: the configured public URL, else the one the request used."""
    return request.app[APP_CONFIG].server.public_url.rstrip("/") or str(request.url.origin())
