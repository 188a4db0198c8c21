"""Event reading and following with a confirmation depth, on both backends."""

import threading

import pytest

from verillm.chain import EventPoller, get_events
from verillm.errors import InvalidInput


def test_get_events_decodes_in_chain_order(chain, probe):
    alice, bob = chain.dev_accounts[:2]
    start = chain.get_block_number()
    probe.transact("store", 1, 10, sender=alice)
    probe.transact("pay", sender=bob, value=10**15)
    probe.transact("store", 2, 20, sender=bob)
    events = get_events(chain, [probe], start)
    assert [(e.name, e.contract) for e in events] == [("Stored", "ChainProbe"), ("Paid", "ChainProbe"), ("Stored", "ChainProbe")]
    assert events[0].args == {"who": alice.address, "slot": 1, "value": 10}
    assert events[1].args == {"from": bob.address, "amount": 10**15}
    assert [e.block_number for e in events] == sorted(e.block_number for e in events)
    assert get_events(chain, [probe], start, names={"Paid"}) == [events[1]]


def test_events_of_other_contracts_are_ignored(chain, probe):
    other = chain.deploy("ChainProbe", 1, sender=chain.dev_accounts[0])
    start = chain.get_block_number()
    other.transact("store", 5, 5, sender=chain.dev_accounts[0])
    probe.transact("store", 6, 6, sender=chain.dev_accounts[0])
    assert [e.args["slot"] for e in get_events(chain, [probe], start)] == [6]
    assert [e.address for e in get_events(chain, [probe, other], start)] == [other.address, probe.address]


def test_poller_releases_events_only_once_confirmed(chain, probe):
    poller = EventPoller(chain, [probe], from_block=chain.get_block_number() + 1, confirmations=2)
    probe.transact("store", 1, 1, sender=chain.dev_accounts[0])
    assert poller.poll() == []
    chain.mine(1)
    assert poller.poll() == []
    chain.mine(1)
    released = poller.poll()
    assert [(e.name, e.args["slot"]) for e in released] == [("Stored", 1)]
    chain.mine(3)
    assert poller.poll() == []  # never twice


def test_poller_walks_long_ranges_in_chunks(chain, probe):
    start = chain.get_block_number() + 1
    for slot in range(5):
        probe.transact("store", slot, slot, sender=chain.dev_accounts[0])
        chain.mine(2)
    poller = EventPoller(chain, [probe], from_block=start, confirmations=0, max_range_blocks=3)
    assert [e.args["slot"] for e in poller.poll()] == [0, 1, 2, 3, 4]
    assert poller.next_block == chain.get_block_number() + 1


def test_a_poll_that_fails_part_way_moves_nothing_and_the_next_one_returns_every_event(chain, probe, monkeypatch):
    """A node keeps the events a poll returns before it moves past them: a poll that fails on its
    second range (a chain outage mid catch-up) must not have moved past the first, or its events —
    a seat this node was drawn to — would be lost for good (the next poll starts after them)."""
    start = chain.get_block_number() + 1
    for slot in range(4):
        probe.transact("store", slot, slot, sender=chain.dev_accounts[0])
        chain.mine(2)
    poller = EventPoller(chain, [probe], from_block=start, confirmations=0, max_range_blocks=3)
    calls = []
    real_rpc = chain.rpc

    def failing_second_range(name, call, *args, **kwargs):
        if name == "eth_getLogs":
            calls.append(name)
            if len(calls) == 2:
                raise ConnectionError("the chain went away on the second range")
        return real_rpc(name, call, *args, **kwargs)

    monkeypatch.setattr(chain, "rpc", failing_second_range)
    with pytest.raises(ConnectionError):
        poller.poll()
    assert poller.next_block == start  # nothing released, nothing skipped
    events, next_block = poller.fetch()
    assert poller.next_block == start  # a fetch alone moves nothing: its caller moves it once the events are kept
    assert [e.args["slot"] for e in events] == [0, 1, 2, 3] and next_block == chain.get_block_number() + 1
    assert [e.args["slot"] for e in poller.poll()] == [0, 1, 2, 3]
    assert poller.poll() == [] and poller.next_block == next_block


def test_follow_yields_until_stopped(chain, probe):
    poller = EventPoller(chain, [probe], from_block=chain.get_block_number() + 1)
    for slot in (1, 2):
        probe.transact("store", slot, slot, sender=chain.dev_accounts[0])
    stop = threading.Event()
    seen = []
    for event in poller.follow(stop, interval_s=0.01):
        seen.append(event.args["slot"])
        if len(seen) == 2:
            stop.set()
    assert seen == [1, 2]


async def test_follow_async(chain, probe):
    poller = EventPoller(chain, [probe], from_block=chain.get_block_number() + 1)
    probe.transact("store", 9, 9, sender=chain.dev_accounts[0])
    async for event in poller.follow_async(interval_s=0.01):
        assert event.args == {"who": chain.dev_accounts[0].address, "slot": 9, "value": 9}
        break


def test_poller_rejects_negative_depth(chain, probe):
    with pytest.raises(InvalidInput, match="confirmations"):
        EventPoller(chain, [probe], from_block=0, confirmations=-1)
