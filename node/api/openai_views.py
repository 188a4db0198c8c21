"""Handlers of the OpenAI-compatible API: /v1/models, /v1/completions, /v1/chat/completions.

Streaming (``"stream": true``) answers with server-sent events: ``data: {chunk}`` lines and a
final ``data: [DONE]``. Text chunks go out as the worker running the job samples the tokens,
whichever worker that is (node/api/streaming.py: this node's engine, or another worker's native
stream relayed by the dispatcher), and the last chunk carries ``finish_reason`` and the receipt.
Each text chunk carries ``verillm_stream``: the tokens it adds and the worker's signature over the
prefix so far (``{"tokens", "signed"}``, verillm/wire.py; the first one also the signed job), so a
client shows a delta only once a worker signed it (verillm/client/stream.py); the text that
follows the last signed prefix comes after the dispatch, covered by the receipt.
The status line (and a chat's assistant-role chunk) goes out with the first text: every error
before it — a bad request, no worker able to start the job — is an ordinary JSON error with its
status; an error after it is sent as an ``{"error": ...}`` event before ``[DONE]``.
"""

import dataclasses
import json
import logging
import secrets
import time

from aiohttp import web

from verillm.errors import VerillmError
from verillm.spec.job import compute_job_hash
from verillm.spec.stream import SignedPrefix
from verillm.spec.types import Job

from verillm.node.appkeys import APP_CONFIG, APP_DISPATCHER, APP_METRICS, APP_MODEL
from verillm.node.worker.engines import ServedModel, verify_model_name
from verillm.node.api.http import get_status_url, read_json
from verillm.node.api.openai_format import (
    GenerationRequest,
    StopFilter,
    compute_chat_body,
    compute_completion_body,
    compute_reply,
    compute_response_id,
    compute_role_chunk,
    compute_stream_chunks,
    compute_stream_head,
    compute_text_chunk,
    parse_chat_request,
    parse_completion_request,
)
from verillm.engine.text import (
    compute_chat_tokens,
    compute_finish_reason,
    compute_max_new_tokens,
    compute_prompt_tokens,
    compute_text,
)
from verillm.node.api.streaming import stream_dispatch
from verillm.wire import compute_error_body, compute_stopped_text, job_to_json, stream_chunk_to_json, to_hex

log = logging.getLogger(__name__)


async def get_models(request: web.Request) -> web.Response:
    """List the served model, with its on-chain model id."""
    served = request.app[APP_MODEL]
    manifest = served.manifest
    extra = {"model_id": to_hex(served.model_id), "dtype": manifest.dtype, "committed_layers": list(manifest.committed_layers)}
    model = {"id": served.name, "object": "model", "created": 0, "owned_by": "verillm", "verillm": extra}
    return web.json_response({"object": "list", "data": [model]})


async def post_completions(request: web.Request) -> web.StreamResponse:
    """OpenAI text completion."""
    limit = request.app[APP_CONFIG].limits.max_new_tokens
    return await _generate(request, parse_completion_request(await read_json(request), limit), chat=False)


async def post_chat_completions(request: web.Request) -> web.StreamResponse:
    """OpenAI chat completion (the chat template is the model's own)."""
    limit = request.app[APP_CONFIG].limits.max_new_tokens
    return await _generate(request, parse_chat_request(await read_json(request), limit), chat=True)


def new_request_job(served: ServedModel, request: GenerationRequest, max_new_tokens_limit: int) -> Job:
    """Return the job for a parsed request: tokenized input, sampling, the client's nonce or a fresh random one."""
    if request.messages is not None:
        tokens = compute_chat_tokens(served.tokenizer, request.messages)
    else:
        tokens = compute_prompt_tokens(served.tokenizer, request.prompt)
    return Job(
        model_id=served.model_id,
        input_tokens=tokens,
        sampling=request.sampling,
        max_new_tokens=compute_max_new_tokens(request.max_new_tokens, len(tokens), served.manifest, max_new_tokens_limit),
        nonce=request.nonce if request.nonce is not None else secrets.token_bytes(32),
    )


async def _generate(request: web.Request, generation: GenerationRequest, chat: bool) -> web.StreamResponse:
    served = request.app[APP_MODEL]
    verify_model_name(served, generation.model)
    job = new_request_job(served, generation, request.app[APP_CONFIG].limits.max_new_tokens)
    if generation.stream:  # refusals come before the stream starts: it starts with the first text
        return await _stream(request, generation, job, chat)
    result = await request.app[APP_DISPATCHER].dispatch(job, generation.audit)
    reply = _compute_reply(request, result, chat, int(time.time()), generation.stop)
    return web.json_response(compute_chat_body(reply) if chat else compute_completion_body(reply))


def _compute_reply(request: web.Request, result, chat: bool, created: int, stops: tuple[str, ...] = ()):
    served = request.app[APP_MODEL]
    text = compute_text(served.tokenizer, result.output_tokens)
    # Stop strings cut the text only: the receipt covers the whole output (openai_format.py).
    text, finish, stopped = compute_stopped_text(text, compute_finish_reason(result.output_tokens, served.manifest), stops)
    status_url = get_status_url(request, result.job_hash)
    reply = compute_reply(result, text, finish, served.name, status_url, served.model_id, chat, created)
    return reply if stopped is None else dataclasses.replace(reply, verillm={**reply.verillm, "stop": stopped})


async def _stream(request: web.Request, generation: GenerationRequest, job: Job, chat: bool) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    try:
        return await _write_stream(request, response, generation, job, chat)
    except ConnectionResetError:  # the client hung up: its choice, not this node's fault (no ERROR, no internal_error)
        request.app[APP_METRICS].http_errors.labels(code="client_disconnected").inc()
        log.info("client %s dropped its stream of job 0x%s", request.remote, compute_job_hash(job).hex())
        return response


async def _write_stream(request: web.Request, response: web.StreamResponse, generation: GenerationRequest, job: Job, chat: bool) -> web.StreamResponse:
    served, created = request.app[APP_MODEL], int(time.time())
    job_hash = compute_job_hash(job)
    head = compute_stream_head(compute_response_id(chat, job_hash), created, served.name, chat)
    stop_filter = StopFilter(generation.stop)

    async def start() -> None:
        """Send the status line (and a chat's role chunk) with the first text: until then a failure is an HTTP error."""
        if not response.prepared:
            await response.prepare(request)
            if chat:
                await _send(response, compute_role_chunk(head["id"], created, served.name))

    pending: list[int] = []  # tokens of chunks whose text is held back (a partial character, a possible stop string)

    async def send_text(text: str, tokens: tuple[int, ...], signed: SignedPrefix) -> None:
        pending.extend(tokens)
        text = stop_filter.push(text)
        if text:
            await start()
            extra = stream_chunk_to_json(pending, signed) | ({} if signed.prefix.token_count > len(pending) else {"job": job_to_json(job)})
            pending.clear()
            await _send(response, compute_text_chunk(head, text, chat) | {"verillm_stream": extra})

    dispatcher = request.app[APP_DISPATCHER]
    try:
        result, remaining = await stream_dispatch(lambda on_chunk: dispatcher.dispatch(job, generation.audit, on_chunk=on_chunk),
                                                  served.tokenizer, send_text)
    except VerillmError as exc:
        if not response.prepared:
            raise  # nothing went out: an ordinary JSON error, with its status (no worker could start the job, ...)
        await _send(response, compute_error_body(exc.http_status, exc.code, str(exc)))  # the status line is out: an event
        return await _finish_stream(response)
    await start()
    reply = _compute_reply(request, result, chat, created, generation.stop)
    tail = stop_filter.push(remaining) + stop_filter.flush()
    for chunk in compute_stream_chunks(reply, [tail], chat, generation.include_usage):
        await _send(response, chunk)
    return await _finish_stream(response)


async def _send(response: web.StreamResponse, chunk: dict) -> None:
    await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")


async def _finish_stream(response: web.StreamResponse) -> web.StreamResponse:
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response
