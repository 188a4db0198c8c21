"""A batch is posted once, even when the attempt that posted it failed after its transaction landed.

`Batches.postBatch` takes the same root twice, and a second batch of the same receipts is never
drawn by this node: a missed draw, slashed. An attempt can fail after its post landed (the store
refused to record the transaction: its write lock held past `busy_timeout` by the node's other
thread; a receipt that came back late), and the retry, two seconds on, cannot rely on the watcher
having recorded the `BatchPosted` event: the watcher records events only once `confirmations`
deep. The dispatcher writes the head before it first sends and, on any later attempt, looks on
chain from there for its own post (`BatchScheduler._find_own_post`). On a real node and anvil.
"""

import dataclasses
import sqlite3
import threading
import time

import httpx2 as httpx
import pytest

from verillm.chain.events import get_events
from verillm.spec.params import MINIMAL

from verillm.node.appkeys import APP_SERVICE
from helpers.networked_node import networked_node

UNSAMPLED = MINIMAL.replace(AUDIT_RATE_BPS=0)
BODY = {"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 3, "temperature": 0}
WAIT_S = 120.0


@pytest.fixture
def network(anvil_installed, tiny_engine, tmp_path):
    from verillm.node.worker.engines import ServedModel

    served = ServedModel(alias="tiny", engine=tiny_engine, tokenizer=tiny_engine.tokenizer)
    # anvil mines a block per transaction: at 50 confirmations the watcher records no event of this test.
    with networked_node(tmp_path, served, UNSAMPLED, dispatcher={"batch_max_receipts": 1, "confirmations": 50}) as (anvil, protocol, node):
        yield protocol, node


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_post_that_landed_but_was_not_recorded_is_not_posted_again(network, monkeypatch):
    protocol, node = network
    service = node.app[APP_SERVICE]
    refused = threading.Event()
    record_tx = service.chainio.tables.record_tx

    def refuse_the_first_post(tx_hash, function, *args, **kwargs):
        if function == "post_batch" and not refused.is_set():
            refused.set()
            raise sqlite3.OperationalError("database is locked")  # what a write lock held past busy_timeout raises
        return record_tx(tx_hash, function, *args, **kwargs)

    monkeypatch.setattr(service.chainio.tables, "record_tx", refuse_the_first_post)
    start = protocol.chain.get_block_number()
    response = httpx.post(f"{node.url}/v1/completions", json=BODY, timeout=300)
    assert response.status_code == 200, response.text
    _wait(refused.is_set, "the batch was never posted")
    _wait(lambda: service.tables.get_batches(("posted", "drawn", "started")), "the batch row never became posted")
    me = service.chainio.account.address.lower()
    posts = [e for e in get_events(protocol.chain, [protocol.batches], start, "latest", {"BatchPosted"}) if e.args["dispatcher"].lower() == me]
    [batch] = service.tables.get_batches(("posted", "drawn", "started"))
    assert [(e.args["batchId"], e.args["root"].hex()) for e in posts] == [(batch["batch_id"], batch["root"])]  # once, and the row names it
    assert batch["posted_block"] == posts[0].block_number and batch["sent_from_block"] < batch["posted_block"]


def test_a_post_still_in_the_pool_is_not_sent_again_however_long_it_waits(network, monkeypatch):
    """The first post is sent while the chain mines nothing (a fee cap the base fee outgrew, here
    anvil's automine off): its receipt times out and the step is retried. The retry must not send a
    second post, which would queue behind the first (the next nonce) and land with it: it waits,
    and says why. Once blocks are mined again the one post lands and the row names it."""
    from verillm.node.dispatcher import chainio as chainio_module

    protocol, node = network
    service = node.app[APP_SERVICE]
    chain = service.chainio.chain
    monkeypatch.setattr(chain, "config", dataclasses.replace(chain.config, receipt_timeout_s=2.0))
    monkeypatch.setattr(chainio_module, "PENDING_WAIT_S", 2.0)
    start = protocol.chain.get_block_number()
    protocol.chain.w3.provider.make_request("evm_setAutomine", [False])
    try:
        response = httpx.post(f"{node.url}/v1/completions", json=BODY, timeout=300)
        assert response.status_code == 200, response.text
        failures = service.watcher.chain_tasks.failures
        _wait(lambda: any("still pending" in error for error in dict(failures).values()), "the retry did not wait for the post in the pool")
        address = service.chainio.account.address
        assert protocol.chain.w3.eth.get_transaction_count(address, "pending") == protocol.chain.w3.eth.get_transaction_count(address, "latest") + 1
    finally:
        protocol.chain.w3.provider.make_request("evm_setAutomine", [True])
    protocol.chain.mine(1)
    _wait(lambda: service.tables.get_batches(("posted", "drawn", "started")), "the batch row never became posted")
    me = service.chainio.account.address.lower()
    posts = [e for e in get_events(protocol.chain, [protocol.batches], start, "latest", {"BatchPosted"}) if e.args["dispatcher"].lower() == me]
    [batch] = service.tables.get_batches(("posted", "drawn", "started"))
    assert [(e.args["batchId"], e.args["root"].hex()) for e in posts] == [(batch["batch_id"], batch["root"])]
