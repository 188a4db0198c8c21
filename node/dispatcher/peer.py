"""A node's client for another node's native API: signed job submission, status, openings.

The dispatcher role uses it to send jobs (inference and verification alike) to workers and
to collect openings; tests and the bench use it as a dispatcher would.
"""

import json
from dataclasses import dataclass

import aiohttp

from verillm.jsonsafe import load_json
from verillm.spec.encoding import encode
from verillm.spec.types import Challenge, Job, Opening, Receipt

from verillm.node.api.access import compute_read_headers
from verillm.node.envelope import encode_envelope_json, sign_envelope
from verillm.node.keys import NodeKey
from verillm.wire import challenge_to_json, compute_error_from_body, from_hex, opening_from_json, receipt_from_json, to_hex

JOBS_PATH = "/v1/verillm/jobs"


@dataclass(frozen=True)
class WorkerReply:
    """A worker's answer to a job: its hash, output tokens and signed receipt."""

    job_hash: bytes
    output_tokens: tuple[int, ...]
    receipt: Receipt
    status_url: str


class PeerClient:
    """Signed requests from ``key``'s owner to the node at ``base_url``."""

    def __init__(self, base_url: str, key: NodeKey, session: aiohttp.ClientSession, recipient: bytes | None = None):
        self.base_url = base_url.rstrip("/")
        self.key = key
        self.session = session
        self.recipient = recipient
        """The node's address, which every envelope names; None: asked of the node (/v1/verillm/info) once."""

    async def get_recipient(self) -> bytes:
        """Return the address envelopes to this node are addressed to."""
        if self.recipient is None:
            self.recipient = from_hex((await self.get_info()).get("worker"), "info.worker", 20)
        return self.recipient

    async def post_signed(self, path: str, payload: bytes, query: str = "") -> tuple[int, dict]:
        """POST an envelope carrying ``payload`` to ``path``; return (status, JSON body) of a 2xx."""
        body = encode_envelope_json(sign_envelope(path, payload, self.key.private_key, await self.get_recipient()))
        url = f"{self.base_url}{path}{query}"
        async with self.session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
            data = load_json(await response.read(), "worker response")
            if response.status >= 400:
                raise compute_error_from_body(response.status, data)
            return response.status, data

    async def submit_job(self, job: Job) -> WorkerReply:
        """Run ``job`` on the worker and return its reply (waits for the job to finish)."""
        _, data = await self.post_signed(JOBS_PATH, encode(job))
        return WorkerReply(from_hex(data["job_hash"], "job_hash", 32), tuple(data["output_tokens"]), receipt_from_json(data["receipt"]), data["status_url"])

    async def enqueue_job(self, job: Job) -> bytes:
        """Hand ``job`` to the worker without waiting; return its job hash once it is durable there."""
        _, data = await self.post_signed(JOBS_PATH, encode(job), "?wait=0")
        return from_hex(data["job_hash"], "job_hash", 32)

    async def get_job(self, job_hash: bytes) -> dict:
        """Return the worker's status body for ``job_hash``."""
        path = f"{JOBS_PATH}/{to_hex(job_hash)}"
        async with self.session.get(f"{self.base_url}{path}", headers=compute_read_headers(path, self.key, await self.get_recipient())) as response:
            data = load_json(await response.read(), "worker response")
            if response.status >= 400:
                raise compute_error_from_body(response.status, data)
            return data

    async def request_opening(self, job_hash: bytes, cells: list[tuple[int, int]] | None = None, challenge: Challenge | None = None) -> Opening:
        """Ask the worker to open ``cells`` (or ``challenge``'s cells) of a job this key submitted."""
        request = {"challenge": challenge_to_json(challenge)} if challenge is not None else {"cells": [list(c) for c in cells or []]}
        _, data = await self.post_signed(f"{JOBS_PATH}/{to_hex(job_hash)}/openings", json.dumps(request).encode())
        return opening_from_json(data["opening"])

    async def get_info(self) -> dict:
        """Return the worker's /v1/verillm/info body (address, model, signing domain)."""
        async with self.session.get(f"{self.base_url}/v1/verillm/info") as response:
            data = load_json(await response.read(), "worker response")
            if response.status >= 400 or not isinstance(data, dict):
                raise compute_error_from_body(response.status, data)
            return data
