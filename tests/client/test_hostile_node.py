"""The client against a hostile node facing it (issue 22, item 2): it shows only what it verified.

Each attack is replayed through `verillm complete` as a user runs it (the real entry point, so
the exit code is the documented one): (a) a genuine receipt beside attacker text, (b) a genuine
receipt for another prompt, temperature, seed or max_tokens, (c) a receipt a fresh key signed for
a made-up model the same node reports. Each exits 2 naming what does not match. Then the SDK's
transport: an oversized answer, a trickle, a body without ``choices``.
"""

import dataclasses
import os
import sys
import time

import pytest
from aiohttp import web

from verillm.client import Client
from verillm.errors import BadResponse, DeadlineExceeded
from verillm.node.appkeys import APP_DOMAIN
from verillm.node.keys import new_node_key
from verillm.spec.encoding import decode, encode
from verillm.spec.job import compute_model_id
from verillm.spec.receipt import compute_receipt, sign_receipt
from verillm.spec.types import Job
from verillm.wire import from_hex, job_to_json, receipt_to_json, to_hex

from helpers.hostile_node import HostileNode

ATTACKER_TEXT = "Your account is suspended: pay at https://example.invalid"


def run_verillm(capsys, *args: str) -> tuple[int, str, str]:
    """Run `verillm ARGS` through the CLI's entry point; return (exit code, stdout, stderr)."""
    from verillm.cli import main

    argv, sys.argv = sys.argv, ["verillm", *args]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = argv
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def hostile(threaded_node):
    nodes = []

    def make(**kwargs) -> HostileNode:
        nodes.append(HostileNode(threaded_node.url, **kwargs))
        return nodes[-1]

    yield make
    for node in nodes:
        node.stop()


def test_a_genuine_receipt_beside_attacker_text_exits_2(hostile, capsys):
    def swap_text(path, body):
        if path == "/v1/completions" and "choices" in body:
            body["choices"][0]["text"] = ATTACKER_TEXT
        return body

    node = hostile(on_answer=swap_text)
    code, out, err = run_verillm(capsys, "complete", "--url", node.url, "--max-tokens", "4", "The river")
    assert code == 2, (out, err)
    assert "the node's text is not what the receipt's output tokens decode to" in err
    assert ATTACKER_TEXT not in out


@pytest.mark.parametrize(("field", "rewrite"), [
    ("input tokens", lambda body: body | {"prompt": "Something else entirely"}),
    ("temperature", lambda body: body | {"temperature": 0.7}),
    ("seed", lambda body: body | {"seed": 6}),
    ("max_tokens", lambda body: body | {"max_tokens": 3}),
])
def test_b_a_genuine_receipt_for_another_request_exits_2(hostile, capsys, field, rewrite):
    node = hostile(on_request=lambda path, body: rewrite(body) if path == "/v1/completions" else body)
    code, out, err = run_verillm(capsys, "complete", "--url", node.url, "--max-tokens", "4", "--seed", "5", "The river")
    assert code == 2, (out, err)
    assert "the receipt is for another request" in err and field in err


def test_d_a_receipt_kept_from_an_identical_earlier_request_exits_2(hostile, capsys):
    """A node that runs a request once and answers every identical request with that genuine receipt
    (no work, and a receipt that may already be batched, audited or slashed) is refused: the SDK sends
    a fresh nonce each call and the signed job must carry it."""
    kept = {}

    def replay(path, body):
        if path == "/v1/completions" and "verillm" in body:
            return kept.setdefault("body", body)
        return body

    node = hostile(on_answer=replay)
    code, out, err = run_verillm(capsys, "complete", "--url", node.url, "--max-tokens", "4", "The river")
    assert code == 3, err  # shown; its signer tied to no network (a local node names no chain)
    code, out, err = run_verillm(capsys, "complete", "--url", node.url, "--max-tokens", "4", "The river")
    assert code == 2, (out, err)
    assert "the receipt is for another request: nonce (signed 0x" in err


def forge_for_made_up_model(served, domain):
    """The rewrite of a node that signs with a fresh key for a model id it made up, and reports that model."""
    fresh = new_node_key()
    manifest = dataclasses.replace(served.manifest, name="gpt-9-verified")
    model_id = compute_model_id(manifest)

    def rewrite(path, body):
        if path in ("/v1/completions", "/v1/chat/completions"):
            job = dataclasses.replace(decode(Job, from_hex(body["verillm"]["job"]["encoded"], "job")), model_id=model_id)
            receipt = compute_receipt(job, body["verillm"]["output_tokens"], os.urandom(32), fresh.address,
                                      body["verillm"]["receipt"]["auditable_until_block"])
            body["verillm"]["job"] = job_to_json(job) | {"encoded": to_hex(encode(job))}
            body["verillm"]["receipt"] = receipt_to_json(sign_receipt(receipt, fresh.private_key, domain))
            body["model"] = manifest.name
        elif path == "/v1/verillm/info":
            body["worker"], body["model"] = to_hex(fresh.address), {"name": manifest.name, "model_id": to_hex(model_id), "manifest": to_hex(encode(manifest))}
        elif path == "/v1/models":
            body["data"][0] |= {"id": manifest.name, "verillm": body["data"][0]["verillm"] | {"model_id": to_hex(model_id)}}
        return body

    def unname(path, body):  # the node behind it serves tiny under its real name
        return body | {"model": served.name} if isinstance(body, dict) and "model" in body else body

    return unname, rewrite, model_id


def test_c_a_fresh_key_and_a_made_up_model_exit_2_once_the_model_is_pinned(hostile, capsys, served_tiny, threaded_node):
    unname, rewrite, fake_model = forge_for_made_up_model(served_tiny, threaded_node.app[APP_DOMAIN])
    node = hostile(on_request=unname, on_answer=rewrite)
    code, out, err = run_verillm(capsys, "complete", "--url", node.url, "--max-tokens", "4", "--model-id", to_hex(served_tiny.model_id), "The river")
    assert code == 2, (out, err)
    assert f"receipt is for model {to_hex(fake_model)}, expected {to_hex(served_tiny.model_id)} (pinned)" in err
    # unpinned, the same answer is shown with what it rests on: the node's word, never "ok"
    code, out, err = run_verillm(capsys, "complete", "--url", node.url, "--max-tokens", "4", "The river")
    assert code == 3, err  # issue 35: a fresh key nothing ties to a network no longer exits 0
    assert f"[not checked: model {to_hex(fake_model)}: the node's claim" in err
    assert "[network: not tied to any network" in err
    assert "[not checked: signer's registration and stake" in err and " ok" not in err


def test_oversized_answer_is_refused_before_it_is_buffered(hostile):
    sent = {"bytes": 0}

    async def flood(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()  # no Content-Length: the cap must hold while reading
        await response.prepare(request)
        chunk = b"[" + b"1," * (512 * 1024)
        for _ in range(200):  # 200 MB if nobody stops reading
            await response.write(chunk)
            sent["bytes"] += len(chunk)
        return response

    node = hostile(raw={"/v1/models": flood})
    with pytest.raises(BadResponse, match="exceeds 4194304 bytes"):
        Client(node.url, max_body_bytes=4 * 1024 * 1024).models()
    assert sent["bytes"] < 64 * 1024 * 1024  # the client stopped reading: the node could not push 200 MB


def test_a_trickle_ends_at_the_total_deadline(hostile):
    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(10_000):  # one byte every 0.2 s: no per-read timeout ever fires
            await response.write(b" ")
            await asyncio_sleep(0.2)
        return response

    node = hostile(raw={"/v1/models": trickle})
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="2 s"):
        Client(node.url, timeout_s=2).models()
    assert time.monotonic() - started < 4


async def asyncio_sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def test_a_body_without_choices_exits_2_naming_it(hostile, capsys):
    node = hostile(on_answer=lambda path, body: {k: v for k, v in body.items() if k != "choices"} if path == "/v1/completions" else body)
    code, out, err = run_verillm(capsys, "complete", "--url", node.url, "--max-tokens", "2", "Hi")
    assert code == 2, (out, err)
    assert "has no choices.0.text" in err


def test_the_first_command_of_the_sdk_doc_works_on_a_node_with_a_real_jobs_address(tmp_path, served_tiny, capsys):
    """Issue 23: `verillm complete --url … "…"` against a node whose Jobs address is not zero: the
    domain is the node's (and said to be unchecked), never a silent zero address."""
    from helpers.nodes import ThreadedNode, make_local_config

    jobs = "0x" + "ab" * 20
    node = ThreadedNode(make_local_config(tmp_path, chain={"chain_id": 5, "jobs_address": jobs}), served_tiny)
    try:
        code, out, err = run_verillm(capsys, "complete", "--url", node.url, "--max-tokens", "16", "The quick brown fox")
    finally:
        node.stop()
    assert code == 3, err  # shown, with exit 3: a node without a chain names none to tie its signer to
    assert out.strip() and f"[not checked: deployment: the signature holds for chain 5, Jobs {jobs}" in err
