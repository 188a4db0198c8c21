"""Signed envelopes: how one node asks another to do something (run a job, open cells).

An envelope is the JSON body of every node-to-node POST:

    {"sender": "0x<20 bytes>", "recipient": "0x<20 bytes>", "timestamp_s": <unix seconds>,
     "nonce": "0x<32 bytes>", "payload": "0x<bytes>", "signature": "0x<65 bytes r‖s‖v>"}

The signature is EIP-191 (``personal_sign``) by the sender's secp256k1 key over

    keccak256("verillm-envelope-v2" ‖ keccak256(path) ‖ keccak256(payload) ‖ sender ‖ recipient ‖ u64 timestamp_s ‖ nonce)

`path` is the request path (``/v1/verillm/jobs``), so an envelope meant for one endpoint is
refused by every other; `recipient` is the address of the node it is meant for, so a node
that received it cannot replay it to another node within the clock window (each node only
remembers its own nonces). A receiver checks, in order: the JSON shape (400), the signature
and that it is the recipient (401), the timestamp against its clock (409 when further than
``auth.max_clock_skew_s``) and the (sender, nonce) pair against every nonce it accepted in
that window (409 replayed; kept in the store, so a restart does not reopen the window).
"""

import json
import secrets
import struct
import time
from dataclasses import dataclass

from eth_keys import keys
from eth_keys.exceptions import BadSignature, ValidationError

from verillm.errors import InvalidInput, InvalidSignature, ReplayedMessage
from verillm.spec.hashing import keccak256

from verillm.wire import from_hex

from verillm.node.keys import NodeKey

ENVELOPE_DOMAIN = b"verillm-envelope-v2"
EIP191_PREFIX = b"\x19Ethereum Signed Message:\n32"
READ_HEADER = "X-Verillm-Envelope"
"""The header of a signed read: an envelope for the request's path with an empty payload (node/api/access.py)."""


@dataclass(frozen=True)
class Envelope:
    """A signed request from ``sender`` carrying ``payload`` for one endpoint."""

    sender: bytes
    recipient: bytes
    timestamp_s: int
    nonce: bytes
    payload: bytes
    signature: bytes


def compute_envelope_digest(path: str, sender: bytes, recipient: bytes, timestamp_s: int, nonce: bytes, payload: bytes) -> bytes:
    """Return the 32-byte message an envelope signs (before the EIP-191 prefix)."""
    return keccak256(
        ENVELOPE_DOMAIN + keccak256(path.encode()) + keccak256(payload) + sender + recipient + struct.pack(">Q", timestamp_s) + nonce
    )


def compute_eip191_hash(message: bytes) -> bytes:
    """Return the hash ``personal_sign`` signs for a 32-byte ``message``."""
    return keccak256(EIP191_PREFIX + message)


def sign_envelope(path: str, payload: bytes, private_key: bytes, recipient: bytes, timestamp_s: int | None = None, nonce: bytes | None = None) -> Envelope:
    """Return an envelope for ``path`` on the node ``recipient`` carrying ``payload``, signed by ``private_key``."""
    key = keys.PrivateKey(private_key)
    sender = key.public_key.to_canonical_address()
    timestamp_s = int(time.time()) if timestamp_s is None else timestamp_s
    nonce = secrets.token_bytes(32) if nonce is None else nonce
    digest = compute_envelope_digest(path, sender, recipient, timestamp_s, nonce, payload)
    signature = key.sign_msg_hash(compute_eip191_hash(digest))
    raw = signature.r.to_bytes(32, "big") + signature.s.to_bytes(32, "big") + bytes([signature.v + 27])
    return Envelope(sender=sender, recipient=recipient, timestamp_s=timestamp_s, nonce=nonce, payload=payload, signature=raw)


def recover_envelope_signer(envelope: Envelope, path: str) -> bytes:
    """Return the address whose key signed ``envelope`` for ``path``; raise InvalidSignature if none."""
    sig = envelope.signature
    if sig[64] not in (27, 28):
        raise InvalidSignature(f"envelope signature v byte is {sig[64]}, expected 27 or 28")
    digest = compute_envelope_digest(path, envelope.sender, envelope.recipient, envelope.timestamp_s, envelope.nonce, envelope.payload)
    try:
        signature = keys.Signature(vrs=(sig[64] - 27, int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:64], "big")))
        public = signature.recover_public_key_from_msg_hash(compute_eip191_hash(digest))
    except (BadSignature, ValidationError) as exc:
        raise InvalidSignature(f"envelope signature does not recover: {exc}") from None
    return public.to_canonical_address()


def verify_envelope_signature(envelope: Envelope, path: str, recipient: bytes, allowed_senders: frozenset[bytes] = frozenset()) -> None:
    """Check the envelope is for ``recipient`` and signed by its sender (who is allowed); raise InvalidSignature."""
    if envelope.recipient != recipient:
        raise InvalidSignature(f"envelope is addressed to 0x{envelope.recipient.hex()}, not this node (0x{recipient.hex()})")
    signer = recover_envelope_signer(envelope, path)
    if signer != envelope.sender:
        raise InvalidSignature(f"envelope is signed by 0x{signer.hex()}, not its sender 0x{envelope.sender.hex()}")
    if allowed_senders and envelope.sender not in allowed_senders:
        raise InvalidSignature(f"sender 0x{envelope.sender.hex()} is not allowed to submit to this node")


def verify_envelope_freshness(envelope: Envelope, now_s: float, max_skew_s: int) -> None:
    """Check the envelope's timestamp is within ``max_skew_s`` of ``now_s``; raise ReplayedMessage if stale."""
    skew = envelope.timestamp_s - now_s
    if abs(skew) > max_skew_s:
        raise ReplayedMessage(f"envelope timestamp is {skew:+.0f} s from this node's clock (limit ±{max_skew_s} s)")


def compute_read_headers(path: str, key: NodeKey, recipient: bytes) -> dict[str, str]:
    """Return the headers of a signed read of ``path`` by ``key``'s owner on the node ``recipient``."""
    return {READ_HEADER: encode_envelope_json(sign_envelope(path, b"", key.private_key, recipient)).decode()}


# --- JSON form ----------------------------------------------------------------------------


def encode_envelope_json(envelope: Envelope) -> bytes:
    """Return the JSON body carrying ``envelope``."""
    return json.dumps({
        "sender": "0x" + envelope.sender.hex(),
        "recipient": "0x" + envelope.recipient.hex(),
        "timestamp_s": envelope.timestamp_s,
        "nonce": "0x" + envelope.nonce.hex(),
        "payload": "0x" + envelope.payload.hex(),
        "signature": "0x" + envelope.signature.hex(),
    }).encode()


def decode_envelope_json(data: object) -> Envelope:
    """Return the envelope in a parsed JSON body; raise InvalidInput naming the bad field."""
    if not isinstance(data, dict):
        raise InvalidInput("body: a signed envelope must be a JSON object")
    timestamp = data.get("timestamp_s")
    if not isinstance(timestamp, int) or isinstance(timestamp, bool) or not 0 <= timestamp < 2**63:
        raise InvalidInput("timestamp_s: expected unix seconds as an integer")
    return Envelope(
        sender=from_hex(data.get("sender"), "sender", 20),
        recipient=from_hex(data.get("recipient"), "recipient", 20),
        timestamp_s=timestamp,
        nonce=from_hex(data.get("nonce"), "nonce", 32),
        payload=from_hex(data.get("payload"), "payload"),
        signature=from_hex(data.get("signature"), "signature", 65),
    )
