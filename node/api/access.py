"""Who may read a job: its requester and the parties of its audit, nobody else.

A job's status (`GET /v1/verillm/jobs/{job}`) carries its output tokens and receipt, and a
dispatcher's evidence (`GET /v1/verillm/audits/{job}/evidence`) its prompt too: a client's
data, served only to

- the requester, by the read token in the ``status_url`` the node returned to it
  (``?token=``: keccak256("verillm-read-token-v1" ‖ node key ‖ job hash), first 16 bytes;
  only this node can compute it, and it names one job);
- a party, by a signed read: the header ``X-Verillm-Envelope`` holding an envelope (see
  `node/envelope.py`) for the request's path with an empty payload, addressed to this node,
  fresh within ``auth.max_clock_skew_s``, from the job's submitter, one of the audit's
  parties, or this node. A read has no nonce: replaying one only re-reads what its response
  already showed.

Anything else is 401 invalid_signature.
"""

import hmac
import time

from aiohttp import web

from verillm.errors import InvalidSignature
from verillm.jsonsafe import load_json
from verillm.spec.hashing import keccak256

from verillm.node.appkeys import APP_CONFIG, APP_KEY
from verillm.node.envelope import READ_HEADER, decode_envelope_json, verify_envelope_freshness, verify_envelope_signature
from verillm.node.keys import NodeKey


def compute_read_token(key: NodeKey, job_hash: bytes) -> str:
    """Return the requester's read token of ``job_hash`` on the node with ``key``."""
    return keccak256(b"verillm-read-token-v1" + key.private_key + job_hash)[:16].hex()


def verify_reader(request: web.Request, job_hash: bytes, parties: set[bytes]) -> None:
    """Check the request comes from the job's requester (token) or one of ``parties`` (signed); raise InvalidSignature."""
    key = request.app[APP_KEY]
    token = request.query.get("token")
    if token is not None and hmac.compare_digest(token.encode(), compute_read_token(key, job_hash).encode()):
        return
    header = request.headers.get(READ_HEADER)
    if header is None:
        raise InvalidSignature("only the job's requester (the token in its status_url) or a party of its audit (a signed read) may read it")
    envelope = decode_envelope_json(load_json(header, READ_HEADER))
    verify_envelope_signature(envelope, request.path, key.address)
    verify_envelope_freshness(envelope, time.time(), request.app[APP_CONFIG].auth.max_clock_skew_s)
    if envelope.payload or envelope.sender not in parties | {key.address}:
        raise InvalidSignature(f"0x{envelope.sender.hex()} is not a party of job 0x{job_hash.hex()}")


def compute_evidence_parties(evidence: dict) -> set[bytes]:
    """Return the addresses of an evidence body's parties: the worker and every committee member."""
    addresses = {evidence["receipt"]["worker"]}
    for audit in evidence.get("audits", ()):
        addresses |= {member["address"] for member in audit.get("members", {}).values()}
    return {bytes.fromhex(a[2:]) for a in addresses}
