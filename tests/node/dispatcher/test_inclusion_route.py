"""A client checks a batching promise before it claims (docs/protocol.md §12 "Batching promises"):
the dispatcher's inclusion route (real anvil, SQLite on disk, aiohttp on loopback) before and
after batching, for unknown and malformed hashes; `check_inclusion` verifying the served proof
against Batches.getBatch and rejecting a lying dispatcher's; `verillm promise claim` refusing to
throw a bond at an included receipt, and claiming one the dispatcher cannot show."""

import asyncio
import copy
import json

import aiohttp
import pytest
from aiohttp import web
from click.testing import CliRunner

from verillm.cli.promise import promise as promise_cli
from verillm.errors import InvalidInput, InvalidProof
from verillm.client.promise import INCLUDED, INVALID, MISSING, NOT_DUE, check_inclusion, fetch_inclusion
from verillm.spec import promise as spec
from verillm.spec import vrf
from verillm.spec.audit import compute_batch_levels
from verillm.spec.hashing import keccak256
from verillm.spec.params import MINIMAL
from verillm.spec.receipt import SigningDomain, compute_auditable_until_block, compute_receipt, compute_receipt_hash, sign_receipt
from verillm.spec.types import Job, SamplingParams

from verillm.node.appkeys import APP_METRICS
from verillm.node.dispatcher.batches import BatchScheduler
from verillm.node.dispatcher.chainio import ChainIO
from verillm.node.dispatcher.promises import Promises, compute_post_margin
from verillm.node.dispatcher.service import DispatchService
from verillm.node.routes import setup_routes
from verillm.node.appkeys import APP_SERVICE
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.keys import compute_node_key
from verillm.node.metrics import NodeMetrics
from verillm.node.middlewares import error_middleware
from verillm.node.store.store import open_store
from verillm.wire import promise_to_json

from one_node_chain import one_node_deployment

MODEL_ID = keccak256(b"inclusion test model")


@pytest.fixture(scope="module")
def deployed(anvil_installed, tmp_path_factory):
    # The registered endpoint answers nothing: a dispatcher gone offline.
    with one_node_deployment(MODEL_ID) as (anvil, protocol, node, client):
        book = tmp_path_factory.mktemp("deployment") / "deployment.json"
        protocol.deployment.save(book)
        yield anvil, protocol, node, client, str(book)


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"


def _dispatcher_app(chainio: ChainIO, tables: DispatcherTables) -> web.Application:
    """The node's dispatcher routes over this node's chain connection and tables (the router,
    watcher and task runner play no part in the inclusion route)."""
    app = web.Application(middlewares=[error_middleware])
    app[APP_METRICS] = NodeMetrics()
    app[APP_SERVICE] = DispatchService(chainio, tables, None, None, None)
    setup_routes(app)  # the dispatcher routes among them
    return app


def _lying_app(honest_url: str, tamper) -> web.Application:
    """A dispatcher that shows a doctored copy of its real proof."""
    async def handler(request):
        async with aiohttp.ClientSession() as session, session.get(honest_url + request.path) as response:
            body = await response.json()
        return web.json_response(tamper(copy.deepcopy(body)))
    app = web.Application()
    app.router.add_get("/v1/verillm/receipts/{receipt_hash}/inclusion", handler)
    return app


async def _get(url: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json()


def _claim(deployed, promise_file, *extra) -> object:
    anvil, _, _, client, book = deployed
    return CliRunner().invoke(promise_cli, ["claim", str(promise_file), "--rpc-url", anvil.url, "--deployment", book,
                                            "--key", bytes(client.key).hex(), *extra])


async def test_the_route_serves_the_stored_proof_and_the_sdk_verifies_it_on_chain(deployed, tmp_path):
    anvil, protocol, node, _, book = deployed
    key = compute_node_key(bytes(node.key))
    tables = DispatcherTables(open_store(tmp_path / "node.sqlite").db)
    chainio = ChainIO(anvil.url, protocol.deployment, key, tables)
    domain = SigningDomain(protocol.chain.chain_id, bytes.fromhex(protocol.jobs.address[2:]))
    promises = Promises(chainio, tables, key)
    batches = BatchScheduler(chainio, tables, NodeMetrics(), vrf.derive_secret_key(b"\x01" * 32), 8, max_wait_s=10_000)
    batches.promises = promises
    signed = []
    for i in (1, 2, 3):  # three leaves: a real path, with a level where the last node is promoted
        job = Job(MODEL_ID, (1, 2, 3), SamplingParams(), 4, i.to_bytes(32, "big"))
        until = compute_auditable_until_block(protocol.chain.get_block_number(), protocol.preset)
        receipt = sign_receipt(compute_receipt(job, (5, 6), b"\x09" * 32, key.address, until), key.private_key, domain)
        tables.insert_dispatched_job(bytes([i]) * 32, job, key.address, "", (5, 6), receipt, False)
        signed.append(await promises.make(bytes([i]) * 32, receipt))
    mine, due = signed[0], signed[0].promise.batch_by_block
    runner, url = await _serve(_dispatcher_app(chainio, tables))
    try:
        route = url + f"/v1/verillm/receipts/0x{mine.promise.receipt_hash.hex()}/inclusion"
        status, body = await _get(route)
        assert status == 404 and body["error"]["code"] == "not_batched" and f"due by block {due}" in body["error"]["message"]
        status, body = await _get(url + "/v1/verillm/receipts/0x" + "ab" * 32 + "/inclusion")
        assert status == 404 and body["error"]["code"] == "not_found" and "unknown receipt" in body["error"]["message"]
        status, body = await _get(url + "/v1/verillm/receipts/0xabcd/inclusion")
        assert status == 400 and body["error"]["code"] == "invalid_input"
        before = await asyncio.to_thread(check_inclusion, mine, protocol, url)
        assert before.status == NOT_DUE and not before.claimable and f"due by block {due}" in before.detail

        protocol.chain.mine(due - compute_post_margin(MINIMAL.BATCH_BY_BLOCKS) - protocol.chain.get_block_number())
        await batches.post_batch(batches.create_batch())
        status, body = await _get(route)
        on_chain = protocol.batches.call("getBatch", body["batch_id"])
        assert status == 200 and body["leaf_count"] == 3 and body["siblings"] and body["batch_by_block"] == due
        assert body["root"] == "0x" + bytes(on_chain[0]).hex() and body["posted_block"] == on_chain[3] <= due
        protocol.chain.mine(due + 1 - protocol.chain.get_block_number())  # past the deadline: a claim is possible now
        checked = await asyncio.to_thread(check_inclusion, mine, protocol, url)
        assert (checked.status, checked.batch_id, checked.claimable) == (INCLUDED, body["batch_id"], False)

        # A dispatcher lying about its proof is caught on-chain, whatever it changes.
        flip = lambda b: {**b, "siblings": ["0x" + "00" * 32] + b["siblings"][1:]}  # noqa: E731
        for tamper, why in ((flip, "Merkle proof"), (lambda b: {**b, "batch_id": 99}, "does not exist"),
                            (lambda b: {**b, "leaf_count": 4}, "leaves"), (lambda b: {**b, "siblings": "x"}, "siblings")):
            liar, liar_url = await _serve(_lying_app(url, tamper))
            try:
                lied = await asyncio.to_thread(check_inclusion, mine, protocol, liar_url)
            finally:
                await liar.cleanup()
            assert lied.status == INVALID and why in lied.detail and lied.claimable

        # The CLI: check prints it, claim refuses (the bond would be lost) unless --force.
        promise_file = tmp_path / "promise.json"
        promise_file.write_text(json.dumps({"batch_promise": promise_to_json(mine)}))
        result = await asyncio.to_thread(CliRunner().invoke, promise_cli, ["check", str(promise_file), "--rpc-url", anvil.url,
                                                                           "--deployment", book, "--node-url", url])
        assert result.exit_code == 0 and json.loads(result.output)["status"] == INCLUDED, result.output
        result = await asyncio.to_thread(_claim, deployed, promise_file, "--node-url", url)
        assert isinstance(result.exception, InvalidInput) and "refusing to claim" in str(result.exception)
        result = await asyncio.to_thread(_claim, deployed, promise_file, "--node-url", url, "--force")
        assert result.exit_code == 0 and json.loads(result.output)["inclusion"]["status"] == INCLUDED, result.output
    finally:
        await runner.cleanup()


def test_a_promise_its_dispatcher_cannot_show_is_claimed(deployed, tmp_path):
    """Past the deadline, a dispatcher that does not answer (its registered endpoint is dead) shows
    no proof: the check says missing and the claim goes through."""
    _, protocol, node, _, _ = deployed
    head = protocol.chain.get_block_number()
    key = compute_node_key(bytes(node.key))
    signed = spec.sign_promise(spec.BatchPromise(keccak256(b"never batched"), key.address, head - 1), key.private_key,
                               protocol.get_promise_domain())
    checked = check_inclusion(signed, protocol, timeout_s=2.0)  # the Registry's endpoint for the dispatcher
    assert checked.status == MISSING and checked.claimable and "does not answer" in checked.detail
    promise_file = tmp_path / "promise.json"
    promise_file.write_text(json.dumps(promise_to_json(signed)))
    result = _claim(deployed, promise_file, "--timeout", "2")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["inclusion"]["status"] == MISSING and protocol.get_omission_claim(out["claim_id"])["state"] == spec.OPEN


def test_a_proof_that_fails_any_condition_is_refused():
    """`verify_inclusion_proof` names the condition a shown proof fails (the rule proveIncluded applies)."""
    hashes = [keccak256(bytes([i])) for i in range(3)]
    proof = spec.compute_inclusion_proof(hashes, hashes[2])
    root, dispatcher = compute_batch_levels(hashes)[-1][0], b"\x0d" * 20
    promise = spec.BatchPromise(hashes[2], dispatcher, 100)
    spec.verify_inclusion_proof(promise, spec.BatchRecord(root, dispatcher, 3, 100), proof)
    for batch, why in ((spec.BatchRecord(root, b"\x0e" * 20, 3, 100), "not the promise's dispatcher"),
                       (spec.BatchRecord(root, dispatcher, 3, 101), "after the promised block"),
                       (spec.BatchRecord(root, dispatcher, 4, 100), "leaves"),
                       (spec.BatchRecord(b"\x00" * 32, dispatcher, 3, 100), "Merkle proof")):
        with pytest.raises(InvalidProof, match=why):
            spec.verify_inclusion_proof(promise, batch, proof)


def test_a_registered_endpoint_that_is_not_http_is_not_read():
    """The endpoint comes from the dispatcher's registration: the client reads no local file for it."""
    body, why = fetch_inclusion("file:///etc/hostname", b"\x01" * 32, 1.0)
    assert body is None and "not http(s)" in why


async def test_a_dispatcher_body_nested_too_deep_is_no_proof_not_a_crash():
    """The client parses bytes the dispatcher chose: 64 KiB of '[' (below the recursion limit py_ecc
    sets, so json.loads would overflow the C stack) is refused as a malformed body, not a crash."""
    async def handler(request):
        return web.Response(body=b"[" * 100_000, content_type="application/json")
    app = web.Application()
    app.router.add_get("/v1/verillm/receipts/{receipt_hash}/inclusion", handler)
    runner, url = await _serve(app)
    try:
        body, why = await asyncio.to_thread(fetch_inclusion, url, b"\x01" * 32, 5.0)
    finally:
        await runner.cleanup()
    assert body is None and "nested" in why
