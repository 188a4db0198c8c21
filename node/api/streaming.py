"""Token streaming, end to end: the engine samples, the worker relays, the gateway turns tokens into text.

Three hops, one rule (tokens go out in the order sampled, the receipt last):

- the engine queue hands each sampled token to its subscribers on the event loop
  (node/worker/engine_queue.py);
- a worker asked for a stream on its native job route (``POST /v1/verillm/jobs?stream=1``)
  answers NDJSON: ``{"tokens": [...], "signed": {...}}`` lines as the engine samples them, each
  signed by the worker over the prefix so far (verillm/spec/stream.py, node/worker/stream_signer.py),
  then one ``{"done": {...}}`` line carrying what the whole answer carries (output tokens, receipt),
  or one ``{"error": {code, message}}`` line (`write_job_stream`; read by node/dispatcher/peer.py,
  which relays a chunk only once its signature and running hash hold);
- the dispatcher hands each checked chunk of whichever worker runs the job to the OpenAI edge
  (`Dispatcher.dispatch(..., on_chunk=)`), which turns tokens into text deltas (`stream_dispatch`),
  held back while a delta ends inside a multi-byte character; every SSE text chunk carries the
  tokens it adds and the worker's signed prefix (``verillm.stream``), so the SDK checks it too.

When the dispatch returns, whatever text was not streamed goes out, then the final chunk with
`finish_reason` and the `verillm` field (receipt, job, job hash). The streamed tokens must be a
prefix of the output the receipt signs (`compute_remaining_text`): text another worker wrote
is never spliced into a stream (node/dispatcher/router.py ends a broken stream instead).
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from verillm.errors import VerillmError
from verillm.ndjson import NDJSON, compute_line

from verillm.spec.stream import SignedPrefix
from verillm.wire import compute_error_body, stream_chunk_to_json

from verillm.engine.text import compute_text
from verillm.node.worker.stream_signer import OnChunk, PrefixSigner

SendText = Callable[[str, tuple[int, ...], SignedPrefix], Awaitable[None]]
"""The edge's writer: (text delta, possibly "", the tokens that produced it, their signed prefix)."""


class TextStream:
    """Turns tokens into text deltas that concatenate to the decoded output."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.tokens: list[int] = []
        self.emitted = ""

    def push(self, token: int) -> str:
        """Add a token; return the new text it completes ("" while inside a character)."""
        self.tokens.append(token)
        text = compute_text(self.tokenizer, self.tokens)
        if text.endswith("\ufffd") or not text.startswith(self.emitted):
            return ""
        delta, self.emitted = text[len(self.emitted):], text
        return delta


async def iterate_arrivals(arrived: asyncio.Queue, task: asyncio.Future) -> AsyncIterator[list]:
    """Yield the items put in ``arrived`` (all that are waiting, as one list) until ``task`` is done,
    then what is left. Tokens arrive on the loop before the run's result does (engine_queue.py), so
    none is lost at the end."""
    while not task.done():
        getter = asyncio.ensure_future(arrived.get())
        try:
            await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not getter.done():
                getter.cancel()
        if getter.done() and not getter.cancelled():
            yield [getter.result(), *_drain(arrived)]
    rest = _drain(arrived)
    if rest:
        yield rest


def _drain(arrived: asyncio.Queue) -> list[int]:
    tokens = []
    while not arrived.empty():
        tokens.append(arrived.get_nowait())
    return tokens


async def stream_dispatch(dispatch: Callable[[OnChunk], Awaitable], tokenizer, send_text: SendText):
    """Run ``dispatch(on_chunk)``, calling ``send_text(delta, tokens, signed)`` for each checked chunk of
    the worker running the job (``delta`` may be "": the edge then holds the tokens for its next chunk).

    Returns (result, remaining text): the dispatch's result and the text not streamed yet.
    """
    arrived: asyncio.Queue = asyncio.Queue()
    stream, sent = TextStream(tokenizer), []
    task = asyncio.ensure_future(dispatch(lambda tokens, signed: arrived.put_nowait((tokens, signed))))
    try:
        async for chunks in iterate_arrivals(arrived, task):
            for tokens, signed in chunks:
                delta = "".join(stream.push(token) for token in tokens)
                sent.append(delta)
                await send_text(delta, tuple(tokens), signed)
    finally:
        if not task.done():
            task.cancel()
    result = task.result()
    return result, compute_remaining_text(tokenizer, stream, "".join(sent), tuple(result.output_tokens))


def compute_remaining_text(tokenizer, stream: TextStream, sent: str, output_tokens: tuple[int, ...]) -> str:
    """Return the part of the output's text not sent yet; raise if what was sent is not its prefix."""
    if tuple(output_tokens[: len(stream.tokens)]) != tuple(stream.tokens):
        raise VerillmError("the streamed tokens are not a prefix of the job's output")
    text = compute_text(tokenizer, list(output_tokens))
    if not text.startswith(sent):
        raise VerillmError("the streamed text is not a prefix of the job's output text")
    return text[len(sent):]


# --- the worker's side of the native stream ---------------------------------------------------


async def write_job_stream(request: web.Request, arrived: asyncio.Queue, wait: Awaitable,
                           compute_body: Callable[[object], dict], signer: PrefixSigner) -> web.StreamResponse:
    """Answer a native job request as NDJSON: token lines while ``wait`` (the job's run) goes on, each
    with ``signer``'s signature over the prefix so far, then ``{"done": compute_body(result)}``, or the
    error body the plain route would answer with.

    A dispatcher that hangs up ends the stream, not the job (it is durable and runs to its end)."""
    response = web.StreamResponse(headers={"Content-Type": NDJSON, "Cache-Control": "no-cache"})
    response.enable_chunked_encoding()
    task = asyncio.ensure_future(wait)
    try:
        await response.prepare(request)
        async for tokens in iterate_arrivals(arrived, task):
            await response.write(compute_line(stream_chunk_to_json(tokens, signer.sign(tokens))))
        try:
            last = {"done": compute_body(task.result())}
        except VerillmError as exc:
            last = compute_error_body(exc.http_status, exc.code, str(exc))
        await response.write(compute_line(last))
        await response.write_eof()
    except ConnectionResetError:
        pass  # the dispatcher went away; the job's result stays in the store for its status route
    finally:
        if not task.done():
            task.cancel()  # only this wait: the run itself is shielded (Worker.wait_job)
    return response
