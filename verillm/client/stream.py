"""Streamed completions in the SDK: text deltas as the worker samples them, then the verified `Completion`.

    for item in client.stream("The capital of France is", max_tokens=32, temperature=0):
        if isinstance(item, str):
            print(item, end="")           # a delta the worker signed as it streamed it (checked before it is yielded)
        else:
            completion = item             # the last item: verified, as `complete` returns it

The node answers with OpenAI's server-sent events (node/api/openai_views.py); the last chunk
carries the receipt. A delta goes to the caller only once the worker's signature over the tokens
it streamed holds (verillm/client/signed_stream.py: job, signer, running hash, and with a
tokenizer the text); text no prefix signs is held until the receipt verifies. The final
`Completion`'s text is decoded by the client from the signed output tokens and cut at the stop
strings as the node's edge cuts them (verillm/wire.py), and the stream is refused
(`InvalidProof`) unless the deltas concatenate to exactly that text and the receipt's output
starts with the last signed prefix. An ``{"error": ...}`` event
raises the error it names; a stream without its receipt is a `BadResponse`.

Reading is bounded as every SDK answer is: all lines together within ``max_body_bytes``, the
whole stream within the client's ``timeout_s``.
"""

import asyncio
import contextlib
import queue
import time
from collections.abc import AsyncIterator, Callable, Iterator

import httpx2

from verillm.errors import BadResponse, DeadlineExceeded, InvalidInput, VerillmError
from verillm.jsonsafe import load_json
from verillm.ndjson import LineSplitter
from verillm.wire import compute_error_from_body

from verillm.client.http import AsyncHttp, LoopThread, compute_retry_wait, parse_error_json, read_bounded, verify_declared_size


async def iterate_events(http: AsyncHttp, path: str, body: dict, deadline: float) -> AsyncIterator[dict]:
    """POST ``body`` and yield each ``data:`` event of the SSE answer as a JSON object, until ``[DONE]``.

    An error status raises the node's error (its body read bounded); ``deadline`` (time.monotonic)
    bounds the whole stream."""
    url = http.base_url + path
    try:
        async with contextlib.AsyncExitStack() as stack:
            response = await _open_answer(stack, http, url, body, deadline)
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                raise BadResponse(f"POST {path}: the node answered {response.headers.get('content-type')!r}, not an event stream")
            lines = await stack.enter_async_context(contextlib.aclosing(_lines(response.aiter_bytes(), http.max_body_bytes, url, deadline)))
            done = False
            async for line in lines:  # read to the end after [DONE] too: the node ends its answer cleanly
                if done or not line.startswith(b"data:"):
                    continue  # blank separators, comments, other SSE fields
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    continue
                event = _parse_event(data, url)
                if "error" in event:
                    raise compute_error_from_body(502, event)
                yield event
            if not done:
                raise BadResponse(f"POST {path}: the stream ended without [DONE]")
    except httpx2.HTTPError as exc:
        raise VerillmError(f"cannot reach {http.base_url}: {type(exc).__name__}: {exc}") from None


async def _open_answer(stack: contextlib.AsyncExitStack, http: AsyncHttp, url: str, body: dict, deadline: float):
    """Open the POST's answer on ``stack`` and return it once the node accepts; raise its refusal, unless
    the refusal says to come back (`Retry-After`: a full queue, a quota, a node shedding for its own duty;
    `compute_retry_wait`): nothing was accepted, so the same body goes again after the wait."""
    attempt = 0
    while True:
        async with contextlib.AsyncExitStack() as attempt_stack:
            response = await _bounded(attempt_stack.enter_async_context(http.get_client().stream("POST", url, json=body, headers=http.headers)),
                                      deadline, url)
            if response.status_code < 400:
                stack.push_async_exit(attempt_stack.pop_all())
                return response
            verify_declared_size(response.headers, http.max_body_bytes, url)
            raw = await _bounded(read_bounded(response.aiter_bytes(), http.max_body_bytes, url), deadline, url)
            error = compute_error_from_body(response.status_code, parse_error_json(raw))
            wait = compute_retry_wait(error, response.headers.get("retry-after"), attempt, http.max_retries, deadline - time.monotonic())
        if wait is None:
            raise error
        await asyncio.sleep(wait)
        attempt += 1


def _loop_deadline(deadline: float) -> float:
    """``deadline`` (time.monotonic) on the running loop's clock."""
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


async def _bounded(awaitable, deadline: float, url: str):
    try:
        async with asyncio.timeout_at(_loop_deadline(deadline)):
            return await awaitable
    except TimeoutError:
        raise DeadlineExceeded(f"{url}: the stream did not end within the client's total deadline") from None


async def _lines(chunks: AsyncIterator[bytes], limit: int, url: str, deadline: float) -> AsyncIterator[bytes]:
    """Yield the lines of ``chunks``; BadResponse once they pass ``limit`` bytes together."""
    splitter, size = LineSplitter(), 0  # linear in the bytes, however the node chunks them (verillm/ndjson.py)
    iterator = chunks.__aiter__()
    while True:
        try:
            chunk = await _bounded(iterator.__anext__(), deadline, url)
        except StopAsyncIteration:
            break
        size += len(chunk)
        if size > limit:
            raise BadResponse(f"{url}: stream exceeds {limit} bytes (the client's max_body_bytes); refused")
        for line in splitter.feed(chunk):
            yield line.rstrip(b"\r")
    if splitter.pending:
        yield splitter.pending.rstrip(b"\r")


def _parse_event(data: bytes, url: str) -> dict:
    try:
        event = load_json(data, "stream event")
    except InvalidInput as exc:
        raise BadResponse(f"{url}: a stream event is not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise BadResponse(f"{url}: a stream event is not a JSON object")
    return event


def get_delta(event: dict, chat: bool) -> str:
    """Return the text an event adds ("" for a role chunk, the final chunk or a usage chunk)."""
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices:
        return ""
    choice = choices[0]
    text = (choice.get("delta") or {}).get("content") if chat and isinstance(choice, dict) else choice.get("text") if isinstance(choice, dict) else None
    if text is not None and not isinstance(text, str):
        raise BadResponse("a stream event's text is not a string")
    return text or ""


def compute_final_body(final: dict, text: str, chat: bool) -> dict:
    """The final chunk as a whole answer's body (the streamed text as the node's text), for the same checks."""
    choice = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
    return {"model": final.get("model"), "choices": [choice], "verillm": final["verillm"]}


def iterate_on_loop(loop: LoopThread, make_stream: Callable[[], AsyncIterator], timeout_s: float) -> Iterator:
    """Yield, in the caller's thread, the items of the async iterator ``make_stream()`` run on ``loop``
    (the synchronous client's private loop). Its own deadline ends it; ``timeout_s`` per item is a
    backstop. Leaving early cancels it (and so closes the HTTP stream)."""
    items: queue.Queue = queue.Queue()

    async def pump() -> None:
        try:
            async with contextlib.aclosing(make_stream()) as stream:
                async for item in stream:
                    items.put((True, item))
        except Exception as exc:  # handed to the caller's thread, raised there
            items.put((False, exc))
        else:
            items.put((False, None))

    future = asyncio.run_coroutine_threadsafe(pump(), loop.loop)
    try:
        while True:
            try:
                more, value = items.get(timeout=timeout_s + 5.0)
            except queue.Empty:
                raise DeadlineExceeded(f"no answer within {timeout_s:g} s") from None
            if not more:
                if value is not None:
                    raise value
                return
            yield value
    finally:
        future.cancel()
