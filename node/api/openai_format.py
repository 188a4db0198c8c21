"""The OpenAI-compatible edge: request bodies → jobs, job results → response bodies and chunks.

Pure functions (no aiohttp): parse with flat guard clauses that name the offending field
(400), build Completion / ChatCompletion bodies and SSE chunks, each with a ``verillm`` field
beside the standard body: the signed receipt, job hash, status URL and the token ids.

Sampling maps to the job's integer params: temperature → milli-units (OpenAI's default 1.0),
top_p → parts per million, top_k (a vLLM extension) as is, seed → the sampler seed (a random
one, recorded in the receipt, when absent). Unsupported options (n > 1, logprobs, penalties,
...) are refused rather than silently ignored.

Stop strings (``stop``: a string or up to 4) are a truncation of the text, after the fact:
generation still ends only at the model's stop tokens or ``max_tokens`` (the manifest and the
job bind those, and a committee re-checks them), so the receipt covers the whole output; the
reply's text is cut before the first stop string, ``finish_reason`` is "stop", and the
``verillm.stop`` field says where (docs/protocol.md §"Stop strings"). `StopFilter` does the
same to a stream, holding back text that may begin a stop string.
"""

import secrets
from dataclasses import dataclass

from verillm.errors import InvalidInput
from verillm.spec.types import SamplingParams

from verillm.wire import compute_stop_cut, from_hex, job_to_json, promise_to_json, receipt_to_json, to_hex

U64_MAX = 2**64 - 1
# option -> the value that means "off"; anything else is refused with a 400 naming it.
UNSUPPORTED_OPTIONS = {
    "n": 1, "best_of": 1, "logprobs": None, "top_logprobs": None, "echo": False, "suffix": None,
    "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": None, "tools": None, "response_format": None,
}


@dataclass(frozen=True)
class GenerationRequest:
    """What an OpenAI request asks for, before tokenization."""

    model: str
    prompt: str | tuple[int, ...] | None
    """Completion prompt: text or token ids (None for chat)."""
    messages: tuple[dict, ...] | None
    """Chat messages, each {"role", "content"} with text content (None for completions)."""
    sampling: SamplingParams
    max_new_tokens: int | None
    """None: up to the node's limit and the model's context."""
    stream: bool
    include_usage: bool
    audit: bool
    stop: tuple[str, ...] = ()
    """Stop strings: the text is cut before the first one (the receipt still covers the whole output)."""
    nonce: bytes | None = None
    """The client's job nonce (``verillm.nonce``, 32 bytes): the receipt then signs it, so a client that
    sent a fresh one knows the receipt is for this request, not a replay of an identical earlier one.
    None: the node draws one (an OpenAI client that knows nothing of VeriLLM)."""


MAX_STOP_STRINGS = 4  # OpenAI's limit


def parse_completion_request(body: object, max_tokens_limit: int = U64_MAX) -> GenerationRequest:
    """Return the generation a /v1/completions body asks for; raise InvalidInput naming the field.

    ``max_tokens_limit``: the node's `limits.max_new_tokens`, named in the error above it.
    """
    data = _require_object(body)
    return _parse_common(data, prompt=_parse_prompt(data.get("prompt")), messages=None, default_max=16, max_limit=max_tokens_limit)


def parse_chat_request(body: object, max_tokens_limit: int = U64_MAX) -> GenerationRequest:
    """Return the generation a /v1/chat/completions body asks for."""
    data = _require_object(body)
    max_key = "max_completion_tokens" if data.get("max_completion_tokens") is not None else "max_tokens"
    return _parse_common(data, prompt=None, messages=_parse_messages(data.get("messages")), default_max=None, max_key=max_key,
                         max_limit=max_tokens_limit)


def _require_object(body: object) -> dict:
    if not isinstance(body, dict):
        raise InvalidInput("body: expected a JSON object")
    return body


def _parse_max_tokens(data: dict, max_key: str, default_max: int | None, limit: int) -> int | None:
    value = data.get(max_key)
    if isinstance(value, int) and not isinstance(value, bool) and value > limit:
        raise InvalidInput(f"{max_key}: {value} exceeds this node's limit of {limit} new tokens (limits.max_new_tokens)")
    return _parse_int(data, max_key, 1, limit, default_max if default_max is None else min(default_max, limit))


def _parse_common(data: dict, prompt, messages, default_max: int | None, max_key: str = "max_tokens",
                  max_limit: int = U64_MAX) -> GenerationRequest:
    for option, off in UNSUPPORTED_OPTIONS.items():
        if data.get(option) not in (off, None):
            raise InvalidInput(f"{option}: not supported by VeriLLM nodes (only {off!r})")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidInput("model: required, a model name from /v1/models")
    stream = _parse_bool(data, "stream", False)
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise InvalidInput("stream_options: expected an object")
    extension = data.get("verillm") or {}
    if not isinstance(extension, dict):
        raise InvalidInput("verillm: expected an object")
    return GenerationRequest(
        model=model,
        prompt=prompt,
        messages=messages,
        sampling=_parse_sampling(data),
        max_new_tokens=_parse_max_tokens(data, max_key, default_max, max_limit),
        stream=stream,
        include_usage=_parse_bool(options, "include_usage", False),
        audit=_parse_bool(extension, "audit", False),
        stop=_parse_stop(data.get("stop")),
        nonce=None if extension.get("nonce") is None else from_hex(extension["nonce"], "verillm.nonce", 32),
    )


def _parse_stop(value: object) -> tuple[str, ...]:
    if value is None or value == "" or value == []:
        return ()
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_STOP_STRINGS or not all(isinstance(v, str) and v for v in values):
        raise InvalidInput(f"stop: expected a non-empty string or a list of 1 to {MAX_STOP_STRINGS} non-empty strings")
    return tuple(dict.fromkeys(_require_text(v, "stop") for v in values))


# --- stop strings -----------------------------------------------------------------------------


def _held_suffix(text: str, stops: tuple[str, ...]) -> int:
    """Return the length of the longest end of ``text`` that may begin a stop string."""
    best = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:k]):
                best = k
                break
    return best


class StopFilter:
    """Turns streamed text deltas into the deltas of the cut text: what may begin a stop string
    is held back until it cannot, and nothing goes out from the first stop string on."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops, self.pending, self.stopped = stops, "", False

    def push(self, delta: str) -> str:
        """Return the part of ``delta`` (with what was held back) that may go out now."""
        if self.stopped or not self.stops:
            return "" if self.stopped else delta
        text = self.pending + delta
        cut = compute_stop_cut(text, self.stops)
        if cut is not None:
            self.stopped, self.pending = True, ""
            return text[:cut]
        hold = _held_suffix(text, self.stops)
        out, self.pending = text[: len(text) - hold], text[len(text) - hold:]
        return out

    def flush(self) -> str:
        """Return what was held back at the end of the output (it began no stop string after all)."""
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out


def _parse_sampling(data: dict) -> SamplingParams:
    temperature = _parse_number(data, "temperature", 0.0, 2.0, 1.0)
    top_p = _parse_number(data, "top_p", 0.0, 1.0, 1.0)
    if top_p == 0.0:
        raise InvalidInput("top_p: must be greater than 0")
    top_k = _parse_int(data, "top_k", -1, 2**32 - 1, 0)
    seed = _parse_int(data, "seed", 0, U64_MAX, None)
    return SamplingParams(
        temperature_milli=round(temperature * 1000),
        top_k=max(top_k, 0),  # vLLM spells "no top-k" as -1
        top_p_ppm=round(top_p * 1_000_000),
        seed=secrets.randbits(64) if seed is None else seed,
    )


def _parse_prompt(value: object) -> str | tuple[int, ...]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | list):
        value = value[0]  # a batch of one prompt
    if isinstance(value, str) and value:
        return _require_text(value, "prompt")
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
        return tuple(value)
    raise InvalidInput("prompt: expected one non-empty string or one non-empty list of token ids")


def _parse_messages(value: object) -> tuple[dict, ...]:
    if not isinstance(value, list) or not value:
        raise InvalidInput("messages: expected a non-empty list of {role, content} objects")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant", "developer"):
            raise InvalidInput(f"messages[{i}].role: expected system, user, assistant or developer")
        messages.append({"role": message["role"], "content": _parse_content(message.get("content"), i)})
    return tuple(messages)


def _parse_content(content: object, index: int) -> str:
    if isinstance(content, str):
        return _require_text(content, f"messages[{index}].content")
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
        return _require_text("".join(p["text"] for p in content), f"messages[{index}].content")
    raise InvalidInput(f"messages[{index}].content: expected text (a string or a list of text parts)")


def _require_text(value: str, name: str) -> str:
    """Return ``value`` if it is text; a lone UTF-16 surrogate (JSON "\\ud800") is not, and no tokenizer takes it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{name}: contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text") from None
    return value


def _parse_bool(data: dict, name: str, default: bool) -> bool:
    value = data.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidInput(f"{name}: expected true or false")
    return value


def _parse_number(data: dict, name: str, low: float, high: float, default: float) -> float:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise InvalidInput(f"{name}: expected a number between {low:g} and {high:g}")
    return float(value)


def _parse_int(data: dict, name: str, low: int, high: int, default: int | None) -> int | None:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{name}: expected an integer between {low} and {high}")
    return value


# --- responses ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationReply:
    """What the edge needs to answer: the job's outcome, text and identifiers."""

    response_id: str
    created: int
    model: str
    text: str
    finish_reason: str
    input_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    verillm: dict


def compute_verillm_field(result, status_url: str, model_id: bytes) -> dict:
    """Return the ``verillm`` field of a response: receipt, job, job hash, status URL, token ids."""
    return {
        "job_hash": to_hex(result.job_hash),
        "status_url": status_url,
        "model_id": to_hex(model_id),
        "receipt": receipt_to_json(result.receipt),
        "job": job_to_json(result.job),
        "input_tokens": list(result.job.input_tokens),
        "output_tokens": list(result.output_tokens),
    } | ({"batch_promise": promise_to_json(result.promise)} if result.promise is not None else {})


def compute_response_id(chat: bool, job_hash: bytes) -> str:
    """Return the OpenAI response id of a job (known before it runs, so stream chunks share it)."""
    return f"{'chatcmpl' if chat else 'cmpl'}-{job_hash.hex()[:24]}"


def compute_reply(result, text: str, finish_reason: str, model: str, status_url: str, model_id: bytes, chat: bool, created: int) -> GenerationReply:
    """Return the reply for a finished job."""
    return GenerationReply(
        response_id=compute_response_id(chat, result.job_hash),
        created=created,
        model=model,
        text=text,
        finish_reason=finish_reason,
        input_tokens=tuple(result.job.input_tokens),
        output_tokens=tuple(result.output_tokens),
        verillm=compute_verillm_field(result, status_url, model_id),
    )


def compute_usage(reply: GenerationReply) -> dict:
    """Return OpenAI's usage object."""
    prompt, completion = len(reply.input_tokens), len(reply.output_tokens)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def compute_completion_body(reply: GenerationReply) -> dict:
    """Return a /v1/completions response body."""
    choice = {"index": 0, "text": reply.text, "logprobs": None, "finish_reason": reply.finish_reason}
    return {
        "id": reply.response_id, "object": "text_completion", "created": reply.created, "model": reply.model,
        "choices": [choice], "usage": compute_usage(reply), "verillm": reply.verillm,
    }


def compute_chat_body(reply: GenerationReply) -> dict:
    """Return a /v1/chat/completions response body."""
    message = {"role": "assistant", "content": reply.text}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}
    return {
        "id": reply.response_id, "object": "chat.completion", "created": reply.created, "model": reply.model,
        "choices": [choice], "usage": compute_usage(reply), "verillm": reply.verillm,
    }


def compute_stream_head(response_id: str, created: int, model: str, chat: bool) -> dict:
    """Return the fields every chunk of one stream shares."""
    return {"id": response_id, "object": "chat.completion.chunk" if chat else "text_completion", "created": created, "model": model}


def _stream_choice(text: str | None, finish: str | None, chat: bool) -> dict:
    if chat:
        return {"index": 0, "delta": {} if text is None else {"content": text}, "logprobs": None, "finish_reason": finish}
    return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}


def compute_text_chunk(head: dict, text: str, chat: bool) -> dict:
    """Return one streamed text delta (sent as the engine samples tokens)."""
    return {**head, "choices": [_stream_choice(text, None, chat)]}


def compute_stream_chunks(reply: GenerationReply, pieces: list[str], chat: bool, include_usage: bool) -> list[dict]:
    """Return the closing SSE chunks of a job: text pieces not sent yet, then finish_reason + verillm, then usage."""
    head = compute_stream_head(reply.response_id, reply.created, reply.model, chat)
    chunks = [compute_text_chunk(head, piece, chat) for piece in pieces if piece]
    chunks.append({**head, "choices": [_stream_choice(None, reply.finish_reason, chat)], "verillm": reply.verillm})
    if include_usage:
        chunks.append({**head, "choices": [], "usage": compute_usage(reply)})
    return chunks


def compute_role_chunk(response_id: str, created: int, model: str) -> dict:
    """Return the first chat chunk (the assistant role), sent before the job finishes."""
    delta = {"role": "assistant", "content": ""}
    return {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
