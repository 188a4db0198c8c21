"""The chain watcher and its batch posts on a thread of their own: no load on the node's main loop
can delay them (issue 35, "duties first"; node/dispatcher/watcher_thread.py).

Under a full client load a gateway's watcher, on the main loop beside every client request, ticked
every 15–20 s, and batches whose promises fell due posted up to 17 blocks late (docs/benchmarks.md).
Here the worst case replaces the load: the node's main loop is held outright by one callback, and
the chain moves a block at a time past the point where a waiting receipt's promise makes its batch
due. The batch must post, in time, while the loop is still held. On a real node (aiohttp on
loopback, SQLite on disk, the tiny model) and a real anvil. The same for every chain step of an
audit's start: the batch post, the VRF draw, the private start and the reveal.
"""

import sqlite3
import threading
import time

import httpx2 as httpx
import pytest

from verillm.spec.params import MINIMAL

from verillm.node.appkeys import APP_SERVICE
from helpers.networked_node import networked_node

UNSAMPLED = MINIMAL.replace(AUDIT_RATE_BPS=0)  # batches only: no audit steps on the held loop
BODY = {"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 3, "temperature": 0}
WATCHER_CATCH_UP_S = 120.0
"""How long the watcher may take to see a block just mined (a loaded machine); the test only waits for it."""


@pytest.fixture
def network(anvil_installed, tiny_engine, tmp_path):
    from verillm.node.worker.engines import ServedModel

    served = ServedModel(alias="tiny", engine=tiny_engine, tokenizer=tiny_engine.tokenizer)
    # A receipt posts only when its promise makes it due (never by count or age in this test).
    with networked_node(tmp_path, served, UNSAMPLED, dispatcher={"batch_max_wait_s": 10**9}) as (anvil, protocol, node):
        yield protocol, node


def _wait_for_watcher(service, block: int) -> None:
    deadline = time.monotonic() + WATCHER_CATCH_UP_S
    while service.watcher.head < block:
        assert time.monotonic() < deadline, f"the watcher did not reach block {block} (at {service.watcher.head})"
        time.sleep(0.02)


def _posted(service) -> list[dict]:
    return service.tables.get_batches(("posted", "drawn", "started"))  # this thread's own connection to the node's store


def test_a_promise_falls_due_while_the_main_loop_is_held_and_its_batch_posts_in_time(network):
    protocol, node = network
    service = node.app[APP_SERVICE]
    response = httpx.post(f"{node.url}/v1/completions", json=BODY, timeout=300)
    assert response.status_code == 200, response.text
    due = service.tables.get_earliest_unbatched_promise()
    assert due is not None and not _posted(service)
    held, release = threading.Event(), threading.Event()
    node.loop.call_soon_threadsafe(lambda: (held.set(), release.wait(600)))  # the main loop: held outright
    assert held.wait(60)
    try:
        while not _posted(service):
            head = protocol.chain.get_block_number()
            assert head < due, f"block {head}: the promise (due by block {due}) fell due with its receipt unbatched"
            protocol.chain.mine(1)
            _wait_for_watcher(service, head + 1)
        [batch] = _posted(service)
        assert not release.is_set() and not node.loop.is_closed()  # posted while the main loop was held
        assert batch["posted_block"] <= due  # the promise kept
        assert protocol.get_batch(batch["batch_id"])["dispatcher"].lower() == node.app[APP_SERVICE].chainio.account.address.lower()
    finally:
        release.set()
    again = httpx.post(f"{node.url}/v1/completions", json=BODY, timeout=300)  # the main loop serves again
    assert again.status_code == 200, again.text


def test_a_tick_the_store_refuses_loses_no_chain_event(network, tmp_path):
    """The store's write lock held by another connection (as a long write on the main loop's thread
    holds it) makes the watcher's ticks fail at `record_events` after `busy_timeout`. The events those
    ticks fetched must be fetched again once the store takes writes: an event skipped is a seat this
    node never takes, an opening never made, a slash. Before, the poller had moved past them already."""
    protocol, node = network
    watcher = node.app[APP_SERVICE].watcher
    holder = sqlite3.connect(tmp_path / "w" / "node.sqlite", timeout=1, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the store's write lock, held
    try:
        tx = protocol.update_endpoint(protocol.chain.dev_accounts[2], "http://127.0.0.1:99")
        failed = watcher.failed_ticks
        deadline = time.monotonic() + WATCHER_CATCH_UP_S
        while watcher.failed_ticks < failed + 2:  # the second began after the event was mined: it fetched it
            assert time.monotonic() < deadline, "the watcher's ticks did not fail on the held store"
            time.sleep(0.05)
    finally:
        holder.rollback()
        holder.close()
    service = node.app[APP_SERVICE]
    deadline = time.monotonic() + WATCHER_CATCH_UP_S
    while not service.tables.get_events("EndpointUpdated"):
        assert time.monotonic() < deadline, "the event fetched by the failed ticks was never recorded"
        time.sleep(0.05)
    [event] = service.tables.get_events("EndpointUpdated")
    assert event["block_number"] == tx.receipt["blockNumber"] and event["args"]["endpoint"] == "http://127.0.0.1:99"


@pytest.fixture
def audited_network(anvil_installed, tiny_engine, tmp_path):
    from verillm.node.worker.engines import ServedModel

    served = ServedModel(alias="tiny", engine=tiny_engine, tokenizer=tiny_engine.tokenizer)
    # MINIMAL audits every job of a batch; a batch posts as soon as one receipt waits.
    with networked_node(tmp_path, served, MINIMAL, dispatcher={"batch_max_receipts": 1}) as (anvil, protocol, node):
        yield protocol, node


def test_with_the_main_loop_held_the_dispatcher_posts_draws_starts_and_reveals_its_private_draw_in_time(audited_network):
    """Every step between a receipt and its audit's committee that needs only the chain and the store —
    the batch post, the VRF draw, the private start, the reveal — runs on the watcher's thread: with the
    main loop held from the moment the client has its answer, the audit's first round is revealed
    within its draw window, and the dispatcher keeps its whole stake (a late reveal costs a penalty)."""
    protocol, node = audited_network
    service = node.app[APP_SERVICE]
    stake = protocol.registry.call("getStake", service.chainio.account.address)
    response = httpx.post(f"{node.url}/v1/completions", json=BODY, timeout=300)
    assert response.status_code == 200, response.text
    held, release = threading.Event(), threading.Event()
    node.loop.call_soon_threadsafe(lambda: (held.set(), release.wait(600)))
    assert held.wait(60)
    try:
        start = protocol.chain.get_block_number()
        while not service.tables.get_events("PrivateDrawRevealed"):
            head = protocol.chain.get_block_number()
            assert head < start + 150, "no private draw revealed in 150 blocks with the main loop held"
            protocol.chain.mine(1)
            _wait_for_watcher(service, head + 1)
        assert not release.is_set()  # all of it while the main loop was held
    finally:
        release.set()
    [revealed] = service.tables.get_events("PrivateDrawRevealed")
    summary = service.chainio.duties.get_summary()
    assert summary["missed"] == 0 and summary["by_kind"]["reveal_round"]["landed"] == 1, summary
    assert summary["by_kind"]["reveal_round"]["worst_slack_blocks"] >= 0
    assert protocol.registry.call("getStake", service.chainio.account.address) == stake  # no penalty, no slash
    assert revealed["audit_id"] is not None
