"""JSON forms of protocol records (and OpenAI's error body), shared by the node's API and the client SDK.

A record travels as its canonical encoding in hex (``"encoded"``) — the only part a reader
trusts — beside readable fields for people and dashboards. `receipt_from_json` decodes the
encoding and refuses a body whose readable fields disagree with it. Hex is 0x-prefixed.
Imports nothing heavy: the SDK uses this module without torch or aiohttp's server.
"""

import re

from verillm.errors import EncodingError, InvalidInput, NotFound, VerillmError
from verillm.spec.promise import BatchPromise, SignedPromise
from verillm.spec.encoding import decode, encode
from verillm.spec.receipt import compute_receipt_hash
from verillm.spec.stream import SignedPrefix, StreamPrefix
from verillm.spec.types import Challenge, Job, Opening, Receipt


def to_hex(value: bytes) -> str:
    """Return ``value`` as 0x-prefixed lowercase hex."""
    return "0x" + value.hex()


def from_hex(value: object, name: str, size: int | None = None) -> bytes:
    """Return the bytes of a 0x-hex string; raise InvalidInput naming ``name`` if it is not one."""
    if not isinstance(value, str) or not value.startswith("0x"):
        raise InvalidInput(f"{name}: expected a 0x-prefixed hex string")
    try:
        raw = bytes.fromhex(value[2:])
    except ValueError:
        raise InvalidInput(f"{name}: not valid hex") from None
    if size is not None and len(raw) != size:
        raise InvalidInput(f"{name}: expected {size} bytes, got {len(raw)}")
    return raw


def receipt_to_json(receipt: Receipt) -> dict:
    """Return the JSON form of a signed receipt."""
    s = receipt.sampling
    return {
        "job_hash": to_hex(receipt.job_hash),
        "model_id": to_hex(receipt.model_id),
        "input_hash": to_hex(receipt.input_hash),
        "output_hash": to_hex(receipt.output_hash),
        "sampling": {"temperature_milli": s.temperature_milli, "top_k": s.top_k, "top_p_ppm": s.top_p_ppm, "seed": s.seed},
        "max_new_tokens": receipt.max_new_tokens,
        "commitment_root": to_hex(receipt.commitment_root),
        "num_positions": receipt.num_positions,
        "input_tokens": receipt.input_tokens,
        "output_tokens": receipt.output_tokens,
        "auditable_until_block": receipt.auditable_until_block,
        "worker": to_hex(receipt.worker),
        "signature": to_hex(receipt.signature),
        "receipt_hash": to_hex(compute_receipt_hash(receipt)),
        "encoded": to_hex(encode(receipt)),
    }


def receipt_from_json(data: object) -> Receipt:
    """Return the receipt in a JSON form; raise EncodingError if its fields disagree with its encoding."""
    if not isinstance(data, dict):
        raise InvalidInput("receipt: expected a JSON object")
    receipt = decode(Receipt, from_hex(data.get("encoded"), "receipt.encoded"))
    readable = receipt_to_json(receipt)
    for name, value in data.items():
        if name in readable and readable[name] != value:
            raise EncodingError(f"receipt.{name} disagrees with the receipt's encoding")
    return receipt


def promise_to_json(signed: SignedPromise) -> dict:
    """A dispatcher's signed batching promise (verillm.spec.promise), 0x-hex."""
    p = signed.promise
    return {"receipt_hash": to_hex(p.receipt_hash), "dispatcher": to_hex(p.dispatcher),
            "batch_by_block": p.batch_by_block, "signature": to_hex(signed.signature)}


def promise_from_json(data: object) -> SignedPromise:
    """Parse `promise_to_json`'s output; raise InvalidInput on a malformed promise."""
    if not isinstance(data, dict):
        raise InvalidInput("batch_promise: expected an object")
    by = data.get("batch_by_block")
    if not isinstance(by, int) or isinstance(by, bool) or not 0 <= by < 1 << 64:
        raise InvalidInput("batch_promise.batch_by_block: expected a uint64")
    promise = BatchPromise(from_hex(data.get("receipt_hash"), "batch_promise.receipt_hash", 32),
                           from_hex(data.get("dispatcher"), "batch_promise.dispatcher", 20), by)
    return SignedPromise(promise, from_hex(data.get("signature"), "batch_promise.signature", 65))


def signed_prefix_to_json(signed: SignedPrefix) -> dict:
    """A worker's signed stream prefix (verillm.spec.stream), 0x-hex: what each streamed chunk carries."""
    p = signed.prefix
    return {"job_hash": to_hex(p.job_hash), "token_count": p.token_count, "prefix_hash": to_hex(p.prefix_hash),
            "worker": to_hex(p.worker), "signature": to_hex(signed.signature)}


def signed_prefix_from_json(data: object) -> SignedPrefix:
    """Parse `signed_prefix_to_json`'s output; raise InvalidInput naming a malformed field."""
    if not isinstance(data, dict):
        raise InvalidInput("stream prefix: expected an object")
    count = data.get("token_count")
    if not isinstance(count, int) or isinstance(count, bool) or not 0 < count < 1 << 32:
        raise InvalidInput("stream prefix.token_count: expected a uint32 above 0")
    prefix = StreamPrefix(from_hex(data.get("job_hash"), "stream prefix.job_hash", 32), count,
                          from_hex(data.get("prefix_hash"), "stream prefix.prefix_hash", 32),
                          from_hex(data.get("worker"), "stream prefix.worker", 20))
    return SignedPrefix(prefix, from_hex(data.get("signature"), "stream prefix.signature", 65))


def parse_token_list(value: object, name: str) -> tuple[int, ...]:
    """Return a JSON list of token ids (u32 each); raise InvalidInput naming ``name`` otherwise."""
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**32 for t in value):
        raise InvalidInput(f"{name}: expected a list of token ids")
    return tuple(value)


def stream_chunk_to_json(tokens, signed: SignedPrefix) -> dict:
    """One signed chunk of a stream: the tokens it adds and the signed prefix that ends with them."""
    return {"tokens": list(tokens), "signed": signed_prefix_to_json(signed)}


def stream_chunk_from_json(data: object, name: str = "stream chunk") -> tuple[tuple[int, ...], SignedPrefix]:
    """Parse `stream_chunk_to_json`'s output: (tokens, signed prefix); InvalidInput when malformed.
    Whether the prefix holds (signature, running hash) is `verillm.spec.stream.process_stream_chunk`'s."""
    if not isinstance(data, dict):
        raise InvalidInput(f"{name}: expected an object")
    return parse_token_list(data.get("tokens"), f"{name}.tokens"), signed_prefix_from_json(data.get("signed"))


def job_to_json(job: Job) -> dict:
    """Return the JSON form of a job (readable fields and the encoding)."""
    s = job.sampling
    return {
        "model_id": to_hex(job.model_id),
        "input_tokens": list(job.input_tokens),
        "sampling": {"temperature_milli": s.temperature_milli, "top_k": s.top_k, "top_p_ppm": s.top_p_ppm, "seed": s.seed},
        "max_new_tokens": job.max_new_tokens,
        "nonce": to_hex(job.nonce),
        "encoded": to_hex(encode(job)),
    }


def opening_to_json(opening: Opening) -> dict:
    """Return the JSON form of an opening: its root, leaf count and encoding."""
    return {"root": to_hex(opening.root), "num_leaves": len(opening.leaves), "encoded": to_hex(encode(opening))}


def opening_from_json(data: object) -> Opening:
    """Return the opening in a JSON form."""
    if not isinstance(data, dict):
        raise InvalidInput("opening: expected a JSON object")
    return decode(Opening, from_hex(data.get("encoded"), "opening.encoded"))


def challenge_to_json(challenge: Challenge) -> str:
    """Return a challenge as the hex of its encoding (how opening requests carry it)."""
    return to_hex(encode(challenge))


# --- errors: OpenAI's body, written by the node's edge (node/middlewares.py, a stream's error event), read back here ---

FIELD_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?(?:\.[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?)*): ")


def compute_error_param(status: int, message: str) -> str | None:
    """The request field a client error is about (its message's "field: " prefix), else None."""
    match = FIELD_PREFIX.match(message) if status < 500 else None
    return match.group(1) if match else None


def compute_error_body(status: int, code: str, message: str) -> dict:
    """Return OpenAI's error body."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": compute_error_param(status, message), "code": code}}


def _error_classes(root: type = VerillmError) -> dict[str, type]:
    classes = {root.code: root}
    for sub in root.__subclasses__():
        classes.update(_error_classes(sub))
    return classes


def compute_error_from_body(status: int, body: object) -> VerillmError:
    """Return the VerillmError a node's error response stands for (same class as on the node)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return VerillmError(f"HTTP {status} without an error body")
    code, message = error.get("code"), str(error.get("message"))
    cls = _error_classes().get(code)
    if cls is None:  # an aiohttp-level error (404 route, 413 body size) or a code this client predates
        cls = NotFound if status == 404 else InvalidInput if 400 <= status < 500 else VerillmError
    return cls(f"{message} (HTTP {status}, {code})")


# --- stop strings (OpenAI `stop`): the reply's text is cut, the signed tokens are not ------------
# The node's edge and the client apply the same cut, so the client can check the node's text.


def compute_stop_cut(text: str, stops: tuple[str, ...]) -> int | None:
    """Return where the earliest stop string begins in ``text``, or None when none occurs."""
    hits = [i for i in (text.find(stop) for stop in stops) if i >= 0]
    return min(hits) if hits else None


def compute_stopped_text(text: str, finish_reason: str, stops: tuple[str, ...]) -> tuple[str, str, dict | None]:
    """Return (text cut before the first stop string, finish_reason, the ``verillm.stop`` field or None)."""
    cut = compute_stop_cut(text, stops)
    if cut is None:
        return text, finish_reason, None
    matched = min((s for s in stops if text.find(s) == cut), key=len)
    return text[:cut], "stop", {"string": matched, "text_chars": cut, "output_text_chars": len(text)}
