"""Fuzz targets for the node's edges: the OpenAI request parser (through tokenization), the
config file loader, and every HTTP route of a real node on loopback. See conftest.py."""

import json
import urllib.error
import urllib.request

import pytest
from fuzzing import fuzz_settings, tally
from hypothesis import given
from hypothesis import strategies as st

from verillm.errors import ConfigError, VerillmError
from verillm.node.appkeys import APP_KEY
from verillm.node.config import SECTIONS, load_config
from verillm.node.worker.engines import ServedModel
from verillm.node.envelope import encode_envelope_json, sign_envelope
from verillm.node.keys import new_node_key
from verillm.node.api.openai_format import parse_chat_request, parse_completion_request
from verillm.node.api.openai_views import new_request_job
from helpers.nodes import ThreadedNode, make_local_config
from verillm.spec.encoding import encode
from verillm.spec.types import Job, SamplingParams

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**66, 2**66), st.floats(allow_nan=True), st.text(max_size=12))
ANY_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=12)
TEXT = st.text(max_size=40) | st.sampled_from(["\ud800", "a\udfff b", "hi \U0001f600", "", "<|im_end|>"])
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "developer", "robot"]) | SCALARS,
                                 "content": TEXT | st.lists(st.fixed_dictionaries({"type": st.just("text") | SCALARS, "text": TEXT | SCALARS}), max_size=2) | SCALARS})
OPENAI_BODY = st.fixed_dictionaries({"model": st.just("tiny") | SCALARS}, optional={
    "prompt": TEXT | st.lists(st.integers(-3, 600), max_size=6) | st.lists(TEXT, max_size=2) | ANY_JSON,
    "messages": st.lists(MESSAGE, max_size=3) | ANY_JSON,
    "max_tokens": st.integers(-2, 6) | SCALARS, "max_completion_tokens": st.integers(-2, 6) | SCALARS,
    "temperature": st.floats(-1, 3) | SCALARS, "top_p": st.floats(-0.5, 1.5) | SCALARS, "top_k": st.integers(-2, 50) | SCALARS,
    "seed": st.integers(-1, 2**65) | SCALARS, "stream": st.booleans() | SCALARS, "stream_options": ANY_JSON,
    "verillm": st.fixed_dictionaries({}, optional={"audit": st.booleans() | SCALARS}) | ANY_JSON,
    "n": st.integers(0, 3) | SCALARS, "stop": ANY_JSON, "logprobs": ANY_JSON, "echo": SCALARS,
})


@pytest.fixture(scope="module")
def served(tiny_engine):
    return ServedModel(alias="tiny", engine=tiny_engine, tokenizer=tiny_engine.tokenizer)


def test_openai_parser_through_tokenization(served, examples):
    """Any body: a job for the tiny model, or InvalidInput naming the field; never the tokenizer's TypeError."""

    @fuzz_settings(examples)
    @given(OPENAI_BODY | ANY_JSON, st.booleans())
    def check(body, chat):
        tally()
        try:
            request = (parse_chat_request if chat else parse_completion_request)(body)
            new_request_job(served, request, 1024)
        except VerillmError:
            pass

    check()


def toml_value() -> st.SearchStrategy[str]:
    return st.one_of(st.integers(-2**70, 2**70).map(str), st.floats(allow_nan=True, allow_infinity=True).map(lambda f: repr(f).replace("inf", "inf")),
                     st.booleans().map(lambda b: str(b).lower()), st.text(max_size=20).map(json.dumps), st.lists(st.text(max_size=5).map(json.dumps), max_size=3).map(lambda v: "[" + ", ".join(v) + "]"),
                     st.text(max_size=30), st.sampled_from(["{a = {b = 1}}", "[[1]]", "'''x'''", "0x10", "1979-05-27T07:32:00Z"]))


def test_config_files(tmp_path, examples):
    """Any TOML text: a NodeConfig, or ConfigError naming the source; never a crash or another exception."""
    fields = [(section, name) for section, factory in SECTIONS.items() for name in factory.__dataclass_fields__] + [("server", "nope"), ("nope", "port")]
    line = st.tuples(st.sampled_from(fields), toml_value()).map(lambda t: (t[0][0], f"{t[0][1]} = {t[1]}"))
    text = st.one_of(st.lists(line, max_size=6).map(lambda lines: "".join(f"[{s}]\n{l}\n" for s, l in lines)), st.text(max_size=200),
                     st.integers(1, 3000).map(lambda n: "a = " + "[" * n + "]" * n))
    path = tmp_path / "node.toml"

    @fuzz_settings(examples)
    @given(text)
    def check(content):
        tally()
        try:
            path.write_text(content, encoding="utf-8", errors="surrogatepass")
        except UnicodeEncodeError:
            return
        try:
            load_config(path, environ={})
        except ConfigError:
            pass

    check()


@pytest.fixture(scope="module")
def node(served, tmp_path_factory):
    config = make_local_config(tmp_path_factory.mktemp("fuzz-node"), limits={"max_new_tokens": 6, "max_prompt_tokens": 64, "max_request_bytes": 65536})
    running = ThreadedNode(config, served)
    yield running
    running.stop()


def request(url: str, method: str, body: bytes | None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_http_routes(node, served, examples):
    """Any method, route and body on a real node: a 2xx, or a 4xx with an OpenAI error body; never a 5xx."""
    me, key = node.app[APP_KEY].address, new_node_key()
    job_hash = st.one_of(st.binary(min_size=32, max_size=32).map(lambda b: "0x" + b.hex()), st.text(alphabet="0x1az%", max_size=8))
    path = st.one_of(st.sampled_from(["/v1/completions", "/v1/chat/completions", "/v1/verillm/jobs", "/v1/models", "/v1/verillm/info", "/healthz", "/metrics", "/nothing"]),
                     job_hash.map(lambda h: f"/v1/verillm/jobs/{h}"), job_hash.map(lambda h: f"/v1/verillm/jobs/{h}/openings"))
    job = st.builds(lambda toks, n, nonce: Job(served.model_id, tuple(toks), SamplingParams(), n, nonce), st.lists(st.integers(0, 400), min_size=1, max_size=8), st.integers(0, 8), st.binary(min_size=32, max_size=32))
    body = st.one_of(st.none(), st.binary(max_size=100), OPENAI_BODY.map(lambda b: json.dumps(b).encode("utf-8", "surrogatepass")), ANY_JSON.map(lambda b: json.dumps(b).encode()),
                     st.tuples(path, job).map(lambda t: encode_envelope_json(sign_envelope(t[0].split("?")[0], encode(t[1]), key.private_key, me))),
                     st.integers(60, 100_000).map(lambda n: b"[" * n))

    @fuzz_settings(examples)
    @given(st.sampled_from(["GET", "POST", "PUT"]), path, st.sampled_from(["", "?wait=0"]), body)
    def check(method, route, query, data):
        tally()
        status, raw = request(node.url + route + query, method, data if method != "GET" else None)
        assert status < 500, raw[:500]
        if status >= 400 and route != "/metrics":
            error = json.loads(raw)["error"]
            assert error["type"] == "invalid_request_error" and error["code"]

    check()
