"""Token streaming for the OpenAI edge: text deltas as the engine samples tokens, receipt last.

The handler subscribes to the job's tokens in this node's engine queue before dispatching it;
while the dispatch runs, each token that arrives becomes a text delta (held back while it
ends inside a multi-byte character). When the dispatch returns, whatever was not streamed —
all of it when another worker ran the job, since peers answer whole — goes out, then the
final chunk with `finish_reason` and the `verillm` field (receipt, job, job hash).
"""

import asyncio
from collections.abc import Awaitable, Callable

from verillm.errors import VerillmError

from verillm.engine.text import compute_text


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


async def stream_dispatch(queue, job_hash: bytes, dispatch: Callable[[], Awaitable], tokenizer,
                          send_text: Callable[[str], Awaitable[None]]):
    """Run ``dispatch()``, calling ``send_text(delta)`` as this node's engine samples the job's tokens.

    Returns (result, remaining text): the dispatch's result and the text not streamed yet.
    """
    arrived: asyncio.Queue[int] = asyncio.Queue()
    unsubscribe = queue.subscribe(job_hash, arrived.put_nowait)
    stream, sent = TextStream(tokenizer), []
    task = asyncio.ensure_future(dispatch())
    try:
        while not task.done():
            getter = asyncio.ensure_future(arrived.get())
            await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                continue
            await _send_delta(stream, getter.result(), sent, send_text)
        while not arrived.empty():
            await _send_delta(stream, arrived.get_nowait(), sent, send_text)
    finally:
        unsubscribe()
        if not task.done():
            task.cancel()
    result = task.result()
    return result, compute_remaining_text(tokenizer, stream, "".join(sent), tuple(result.output_tokens))


async def _send_delta(stream: TextStream, token: int, sent: list[str], send_text) -> None:
    delta = stream.push(token)
    if delta:
        sent.append(delta)
        await send_text(delta)


def compute_remaining_text(tokenizer, stream: TextStream, sent: str, output_tokens: tuple[int, ...]) -> str:
    """Return the part of the output's text not sent yet; raise if what was sent is not its prefix."""
    if tuple(output_tokens[: len(stream.tokens)]) != tuple(stream.tokens):
        raise VerillmError("the streamed tokens are not a prefix of the job's output")
    text = compute_text(tokenizer, list(output_tokens))
    if not text.startswith(sent):
        raise VerillmError("the streamed text is not a prefix of the job's output text")
    return text[len(sent):]
