"""Hostile bodies against a real daemon process: each gets a 4xx and the process lives on.

Regressions of issue 11: 100,000 nested ``[`` segfaulted the node (py_ecc raises Python's
recursion limit to 100,000, so the C JSON decoder overflowed the C stack), and a lone UTF-16
surrogate in a prompt reached the tokenizer and came back as 500 internal_error.
"""

import json
import sys
import urllib.error
import urllib.request

import pytest
from node_process import NodeProcess

from verillm.jsonsafe import MAX_JSON_DEPTH, compute_json_depth, load_json
from verillm.errors import InvalidInput
from verillm.node.envelope import encode_envelope_json, sign_envelope
from verillm.node.keys import new_node_key

DEEP = b"[" * 100_000 + b"]" * 100_000
ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/verillm/jobs", "/v1/verillm/jobs/0x" + "11" * 32 + "/openings")


DISPATCHER = new_node_key()  # the sender the daemon's operator names for native jobs


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    node = NodeProcess(tmp_path_factory.mktemp("hostile"), dispatcher=DISPATCHER)
    node.start()
    yield node
    assert node.stop() == 0, node.log_path.read_text()


def post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("route", ROUTES)
def test_100000_nested_brackets_get_a_400_and_the_node_lives(daemon, route):
    for body in (DEEP, b'{"a":' * 100_000 + b"1" + b"}" * 100_000, b"[" * 200_000):
        status, reply = post(daemon.url + route, body)
        assert (status, reply["error"]["code"]) == (400, "invalid_input"), reply
        assert "nested" in reply["error"]["message"]
    assert daemon.alive(), daemon.log_path.read_text()


def test_deep_json_inside_a_signed_opening_payload_gets_a_400(daemon, tiny_engine):
    from verillm.spec.encoding import encode
    from verillm.spec.job import compute_job_hash
    from verillm.spec.types import Job, SamplingParams

    # a stranger's, on a job it did not submit: refused before its payload is even parsed
    path = "/v1/verillm/jobs/0x" + "11" * 32 + "/openings"
    body = encode_envelope_json(sign_envelope(path, DEEP, new_node_key().private_key, daemon.key.address))
    status, reply = post(daemon.url + path, body)
    assert (status, reply["error"]["code"]) == (404, "not_found")
    # the submitter's, on its done job: the payload is parsed (in the openings' process pool) and refused
    job = Job(tiny_engine.model_id, (5, 6, 7), SamplingParams(), 2, b"\x05" * 32)
    status, _ = post(daemon.url + "/v1/verillm/jobs", encode_envelope_json(sign_envelope("/v1/verillm/jobs", encode(job), DISPATCHER.private_key, daemon.key.address)))
    assert status == 200
    path = f"/v1/verillm/jobs/0x{compute_job_hash(job).hex()}/openings"
    status, reply = post(daemon.url + path, encode_envelope_json(sign_envelope(path, DEEP, DISPATCHER.private_key, daemon.key.address)))
    assert (status, reply["error"]["code"]) == (400, "invalid_input") and "payload" in reply["error"]["message"]
    assert daemon.alive()


@pytest.mark.parametrize("route,field", [("/v1/completions", "prompt"), ("/v1/chat/completions", "messages")])
def test_a_lone_surrogate_gets_a_400_on_both_completion_routes(daemon, route, field):
    for text in ("\\ud800 hello", "a\\udfff", "\\udc00\\ud800"):
        value = f'"{text}"' if field == "prompt" else f'[{{"role": "user", "content": "{text}"}}]'
        status, reply = post(daemon.url + route, f'{{"model": "tiny", "max_tokens": 2, "{field}": {value}}}'.encode())
        assert (status, reply["error"]["code"]) == (400, "invalid_input"), reply
        assert "surrogate" in reply["error"]["message"]
    # a surrogate pair is one real character (an emoji) and is served
    status, reply = post(daemon.url + "/v1/completions", b'{"model": "tiny", "max_tokens": 2, "prompt": "hi \\ud83d\\ude00"}')
    assert status == 200, reply


@pytest.mark.parametrize("body", [b'{"model": "tiny", "prompt": "x", "seed": ' + b"9" * 5000 + b"}", b"\xff\xfe[1]", b'"\xed\xa0\x80"', b"", b"[" * 65])
def test_other_bodies_that_used_to_reach_deeper_layers_get_a_400(daemon, body):
    status, reply = post(daemon.url + "/v1/completions", body)
    assert (status, reply["error"]["code"]) == (400, "invalid_input"), reply


def test_the_recursion_limit_is_what_made_the_parser_crash():
    """The hazard is real in this interpreter: keep this test so the guard cannot quietly become unneeded-looking."""
    import verillm.node.app  # noqa: F401  (imports py_ecc)

    assert sys.getrecursionlimit() >= 100_000


def test_depth_is_measured_outside_strings():
    assert compute_json_depth('{"a": "[[[[[[[[[[[[' + "[" * 100 + '"}') == 1
    assert compute_json_depth("[" * 70 + "]" * 70) == 70
    assert compute_json_depth('[[1, "]]]]"], {"k": [[' + "[" * 70 + "]" * 72 + "}]") == 74
    assert load_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None
    with pytest.raises(InvalidInput, match="nested 65 levels"):
        load_json("[" * 65 + "]" * 65)


def raw_request(url: str, request: bytes) -> bytes:
    """Send ``request`` as is on a fresh connection; return the first bytes of the answer."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(request)
        return sock.recv(4096)


@pytest.mark.parametrize("name, request_bytes", [
    ("a 20 kB header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"),
    ("200 headers", b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(200)) + b"\r\n"),
    ("a 20 kB request line", b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
])
def test_an_unparsable_request_gets_a_400_and_one_warning_line_not_a_traceback(daemon, name, request_bytes):
    """Issue 35: aiohttp answered these 400 but logged ERROR with a traceback (anyone could fill the log)."""
    before = daemon.log_path.read_text()
    answer = raw_request(daemon.url, request_bytes)
    assert answer.split(b"\r\n", 1)[0].split(b" ")[1] == b"400", (name, answer[:200])
    status, _ = get_json(daemon.url + "/healthz")  # the node lives on, and its log now holds the refusal
    assert status == 200
    new = daemon.log_path.read_text()[len(before):]
    warnings = [line for line in new.splitlines() if "refused a malformed request from 127.0.0.1 with HTTP 400" in line]
    assert len(warnings) == 1, new
    assert "Traceback" not in new and "ERROR" not in new, new


def get_json(url: str) -> tuple[int, dict]:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.status, json.loads(response.read())
