"""With a chain, the client asks it who may sign (issue 22, item 2 (c)): the model must be registered
and the receipt's signer registered, active and staked for it. A real anvil, the contracts
(MINIMAL), a real node registered with its own key, and a hostile node in front of it."""

import os

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
