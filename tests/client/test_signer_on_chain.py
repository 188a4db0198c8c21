"""With a chain, the client asks it who may sign (issue 22, item 2 (c)): the model must be registered
and the receipt's signer registered, active and staked for it. A real anvil, the contracts
(MINIMAL), a real node registered with its own key, and a hostile node in front of it."""

import json
import os
from pathlib import Path

import pytest
from eth_account import Account

from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilProcess
from verillm.chain.protocol import Protocol
from verillm.client import Client
from verillm.node.appkeys import APP_DOMAIN, APP_KEY
from verillm.node.keys import new_node_key
from verillm.spec import vrf
from verillm.spec.audit import OnchainModel
from verillm.spec.encoding import decode
from verillm.spec.params import MINIMAL
from verillm.spec.receipt import compute_receipt, sign_receipt
from verillm.spec.types import Job
from verillm.wire import from_hex, receipt_to_json, to_hex

from helpers.hostile_node import HostileNode
from helpers.nodes import ThreadedNode, make_local_config
from test_hostile_node import forge_for_made_up_model, run_verillm


@pytest.fixture(scope="module")
def deployment(anvil_installed, served_tiny, tmp_path_factory):
    """(protocol, address book, a node registered and staked for tiny, serving on loopback)."""
    directory = tmp_path_factory.mktemp("chain")
    with AnvilProcess() as anvil:
        chain = RpcChain(anvil.url)
        owner = chain.dev_accounts[0]
        protocol = Protocol.deploy(chain, MINIMAL, owner)
        protocol.add_model(owner, OnchainModel(served_tiny.model_id, (1,), 1, (50_000,), (30_000,), 4))
        config = make_local_config(directory / "node", chain={"chain_id": chain.chain_id, "jobs_address": protocol.jobs.address})
        node = ThreadedNode(config, served_tiny)
        account = Account.from_key(node.app[APP_KEY].private_key)
        chain.transfer(owner, account.address, 10 * MINIMAL.MIN_STAKE_WEI)
        protocol.register(account, vrf.derive_secret_key(b"\x02" * 32), node.url, [served_tiny.model_id], MINIMAL.MIN_STAKE_WEI)
        book = directory / "deployment.json"
        protocol.deployment.save(book)
        yield anvil, protocol, str(book), node
        node.stop()


def test_a_registered_staked_signer_passes_every_check(deployment, served_tiny):
    _, protocol, _, node = deployment
    completion = Client(node.url, protocol=protocol, tokenizer=served_tiny.tokenizer).complete("The river", max_tokens=4, temperature=0)
    assert completion.text == served_tiny.tokenizer.decode(list(completion.tokens), skip_special_tokens=True)
    assert any("registered, active and staked on-chain" in c for c in completion.verification.checked)
    assert completion.verification.not_checked == ()


def test_c_a_made_up_model_is_not_registered_on_chain(deployment, served_tiny, capsys):
    anvil, protocol, book, node = deployment
    unname, rewrite, fake_model = forge_for_made_up_model(served_tiny, node.app[APP_DOMAIN])
    hostile = HostileNode(node.url, on_request=unname, on_answer=rewrite)
    try:
        code, out, err = run_verillm(capsys, "complete", "--url", hostile.url, "--rpc-url", anvil.url, "--deployment", book, "--max-tokens", "4", "Hi")
    finally:
        hostile.stop()
    assert code == 2, (out, err)
    assert f"model {to_hex(fake_model)} is not registered on-chain" in err


def test_c_a_fresh_key_signing_for_the_real_model_is_not_a_registered_node(deployment, served_tiny, capsys):
    anvil, protocol, book, node = deployment
    fresh, domain = new_node_key(), node.app[APP_DOMAIN]

    def resign(path, body):
        if path == "/v1/completions":
            job = decode(Job, from_hex(body["verillm"]["job"]["encoded"], "job"))
            receipt = compute_receipt(job, body["verillm"]["output_tokens"], os.urandom(32), fresh.address,
                                      body["verillm"]["receipt"]["auditable_until_block"])
            body["verillm"]["receipt"] = receipt_to_json(sign_receipt(receipt, fresh.private_key, domain))
        return body

    hostile = HostileNode(node.url, on_answer=resign)
    try:
        code, out, err = run_verillm(capsys, "complete", "--url", hostile.url, "--rpc-url", anvil.url, "--deployment", book, "--max-tokens", "4", "Hi")
    finally:
        hostile.stop()
    assert code == 2, (out, err)
    assert f"the receipt's signer {Account.from_key(fresh.private_key).address} is not a registered node" in err


def naming(chain: dict, then=lambda path, body: body):
    """A proxy rewrite: /v1/verillm/info names ``chain`` (what a networked node's info route adds), then ``then``."""
    def rewrite(path, body):
        if path == "/v1/verillm/info":
            body = body | {"chain": chain}
        return then(path, body)
    return rewrite


def promising(protocol, node):
    """A proxy rewrite: the node's answer carries the batching promise a networked node's dispatcher signs."""
    from verillm.spec.promise import BatchPromise, sign_promise
    from verillm.spec.receipt import compute_receipt_hash
    from verillm.wire import promise_to_json, receipt_from_json

    def rewrite(path, body):
        if path == "/v1/completions" and "verillm" in body:
            receipt_hash = compute_receipt_hash(receipt_from_json(body["verillm"]["receipt"]))
            promise = BatchPromise(receipt_hash, node.app[APP_KEY].address, protocol.chain.get_block_number() + MINIMAL.BATCH_BY_BLOCKS)
            body["verillm"]["batch_promise"] = promise_to_json(sign_promise(promise, node.app[APP_KEY].private_key, protocol.get_promise_domain()))
        return body
    return rewrite


def test_with_no_pins_the_chain_the_node_names_ties_the_signer(deployment, capsys):
    """Issue 35: `verillm complete` with no pins exited 0 on a receipt nothing tied to the network. A node
    that names its chain is checked there by default; the output says whose word the chain is."""
    anvil, protocol, book, node = deployment
    from verillm.node.appkeys import APP_WORKER
    from verillm.spec.receipt import compute_auditable_until_block

    named = {"rpc_url": anvil.url, "deployment": json.loads(Path(book).read_text())}
    hostile = HostileNode(node.url, on_answer=naming(named, promising(protocol, node)))
    runner = node.app[APP_WORKER].runner
    runner.horizon = lambda: compute_auditable_until_block(protocol.chain.get_block_number(), MINIMAL)  # as a networked node signs
    try:
        code, out, err = run_verillm(capsys, "complete", "--url", hostile.url, "--max-tokens", "4", "Hi")
    finally:
        hostile.stop()
        runner.horizon = lambda: 0  # the local node's own again
    assert code == 0, (out, err)
    assert "[checked: signer registered, active and staked on-chain" in err
    assert f"[network: signer {Account.from_key(node.app[APP_KEY].private_key).address} checked on chain {protocol.chain.chain_id}" in err
    assert f"via the chain the node names ({anvil.url}); pin it yourself with --rpc-url and --deployment]" in err


def test_with_no_pins_a_fresh_key_on_the_named_chain_exits_2(deployment, capsys):
    anvil, protocol, book, node = deployment
    fresh, domain = new_node_key(), node.app[APP_DOMAIN]

    def resign(path, body):
        if path == "/v1/completions":
            job = decode(Job, from_hex(body["verillm"]["job"]["encoded"], "job"))
            receipt = compute_receipt(job, body["verillm"]["output_tokens"], os.urandom(32), fresh.address,
                                      body["verillm"]["receipt"]["auditable_until_block"])
            body["verillm"]["receipt"] = receipt_to_json(sign_receipt(receipt, fresh.private_key, domain))
        return body

    named = {"rpc_url": anvil.url, "deployment": json.loads(Path(book).read_text())}
    hostile = HostileNode(node.url, on_answer=naming(named, resign))
    try:
        code, out, err = run_verillm(capsys, "complete", "--url", hostile.url, "--max-tokens", "4", "Hi")
    finally:
        hostile.stop()
    assert code == 2, (out, err)
    assert "is not a registered node" in err


@pytest.mark.parametrize("named", [None, {"rpc_url": "http://127.0.0.1:9", "deployment": None}])
def test_a_receipt_nothing_ties_to_a_network_is_shown_and_exits_3(deployment, capsys, named):
    """No pin, and the node names no chain (or one that cannot be read): the text is shown with every check
    it passed, and the exit status says the signer is tied to no network."""
    anvil, protocol, book, node = deployment
    if named is not None:
        named = named | {"deployment": json.loads(Path(book).read_text())}
    hostile = HostileNode(node.url, on_answer=naming(named) if named else (lambda path, body: body))
    try:
        code, out, err = run_verillm(capsys, "complete", "--url", hostile.url, "--max-tokens", "4", "Hi")
    finally:
        hostile.stop()
    assert code == 3, (out, err)
    assert out.strip() and "[network: not tied to any network: nothing shows the signer" in err
    assert ("could not be read" in err) if named else ("the node names no chain" in err)
