"""`stop` strings on the OpenAI routes, as OpenAI client frameworks send them.

A stop string cuts the reply's text after the fact: the worker still generates to a stop token
or max_tokens (what the job binds and a committee re-checks), so the receipt covers the whole
output and stays verifiable; the text is that output's decoded text cut before the first stop
string, and `verillm.stop` says where. A requester checks it from the receipt alone.
"""

import pytest
from openai import AsyncOpenAI, BadRequestError

from verillm.node.api.openai_format import StopFilter
from verillm.wire import compute_stopped_text

from test_openai_api import check_verillm_field

PROMPT = "The quick brown fox"


@pytest.fixture
async def openai_client(node):
    client = AsyncOpenAI(base_url=f"{node.url}/v1", api_key="unused", max_retries=0)
    yield client
    await client.close()


@pytest.mark.parametrize("text,stops", [
    ("hello world, hello there", ("lo t", "world")),
    ("aaab aab", ("aab",)),
    ("no stop in here", ("zz", "q")),
    ("ends with a partial sto", ("stop",)),
    ("ünïcödé → stop ← here", ("→ st", "←")),
])
def test_a_stream_cut_by_stop_strings_concatenates_to_the_cut_text(text, stops):
    """However the text is split into deltas, what the filter lets out is the text cut before the first stop string."""
    expected, _, _ = compute_stopped_text(text, "length", stops)
    for split in range(len(text) + 1):
        for step in (1, 2, 3):
            deltas = [text[:split]] + [text[i:i + step] for i in range(split, len(text), step)]
            f = StopFilter(stops)
            assert "".join(f.push(d) for d in deltas) + f.flush() == expected, (split, step)


def test_the_cut_names_the_stop_string_and_where():
    text, finish, stopped = compute_stopped_text("alpha beta gamma", "length", ("gamma", "beta"))
    assert (text, finish) == ("alpha ", "stop")
    assert stopped == {"string": "beta", "text_chars": 6, "output_text_chars": 16}
    assert compute_stopped_text("alpha", "length", ("z",)) == ("alpha", "length", None)


async def _full_text(client) -> tuple[str, list[int]]:
    full = await client.completions.create(model="tiny", prompt=PROMPT, max_tokens=12, temperature=0)
    return full.choices[0].text, full.model_extra["verillm"]["output_tokens"]


async def test_a_completion_with_stop_strings_is_cut_and_its_receipt_covers_the_whole_output(openai_client, node, served_tiny):
    text, tokens = await _full_text(openai_client)
    stop = text[len(text) // 2: len(text) // 2 + 2]
    assert stop.strip(), f"pick a visible stop string from {text!r}"
    cut = await openai_client.completions.create(model="tiny", prompt=PROMPT, max_tokens=12, temperature=0, stop=[stop, "never-in-output"])
    verillm = cut.model_extra["verillm"]
    assert cut.choices[0].text == text[: text.find(stop)] and cut.choices[0].finish_reason == "stop"
    assert verillm["output_tokens"] == tokens and verillm["stop"] == {"string": stop, "text_chars": text.find(stop), "output_text_chars": len(text)}
    check_verillm_field(node, verillm, verillm["output_tokens"])  # the receipt covers the whole output, as without stop
    decoded = served_tiny.tokenizer.decode(verillm["output_tokens"], skip_special_tokens=True)
    assert decoded[: verillm["stop"]["text_chars"]] == cut.choices[0].text  # what a requester checks against the receipt


@pytest.mark.parametrize("chat", [False, True])
async def test_a_stream_with_a_stop_string_sends_only_the_cut_text(openai_client, node, chat):
    kwargs = dict(model="tiny", max_tokens=12, temperature=0)
    if chat:
        messages = [{"role": "user", "content": "Count"}]
        full = await openai_client.chat.completions.create(messages=messages, **kwargs)
        text = full.choices[0].message.content
    else:
        text, _ = await _full_text(openai_client)
    stop = text[len(text) // 3: len(text) // 3 + 2]
    if chat:
        stream = await openai_client.chat.completions.create(messages=messages, stream=True, stop=stop, **kwargs)
    else:
        stream = await openai_client.completions.create(prompt=PROMPT, stream=True, stop=stop, **kwargs)
    pieces, last = [], None
    async for chunk in stream:
        if chunk.choices:
            pieces.append((chunk.choices[0].delta.content if chat else chunk.choices[0].text) or "")
            last = chunk
    assert "".join(pieces) == text[: text.find(stop)]
    assert last.choices[0].finish_reason == "stop" and last.model_extra["verillm"]["stop"]["string"] == stop


@pytest.mark.parametrize("stop", [["a", "b", "c", "d", "e"], [""], [3], {"x": 1}])
async def test_malformed_stop_is_refused_naming_the_field(openai_client, stop):
    with pytest.raises(BadRequestError, match="stop"):
        await openai_client.completions.create(model="tiny", prompt=PROMPT, max_tokens=2, stop=stop)
