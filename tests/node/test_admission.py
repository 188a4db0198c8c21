"""Admission by accountability on the native job route (issue 22, item 1), replaying the attacker's moves.

A fresh key is free: its correctly signed jobs got compute, a signed receipt and the queue slots
kept for committee jobs. Now the route serves the senders someone answers for (the operator's
named ones here; staked peers on a networked node), each within its own quota, and the committee
lane keeps slots no other job can take, run before any other queued job.
"""

import asyncio

import pytest

from verillm.errors import Forbidden, QueueFull, TooManyRequests
from verillm.node.appkeys import APP_STORE, APP_WORKER
from verillm.node.dispatcher.peer import PeerClient
from verillm.node.keys import new_node_key
from verillm.node.store.retention import compute_audit_horizon_blocks
from verillm.node.worker.engines import ServedModel
from verillm.spec.job import compute_job_hash
from verillm.spec.params import MAINNET, MINIMAL, compute_timeline
from verillm.spec.types import Job, SamplingParams


def make_job(served, n: int, max_new_tokens: int = 3) -> Job:
    return Job(served.model_id, (5, 6, 7 + n), SamplingParams(), max_new_tokens, bytes([n]) * 32)


async def test_anonymous_native_jobs_get_403_with_the_reason_and_leave_no_trace(node, http, served_tiny):
    stranger = PeerClient(node.url, new_node_key(), http)
    for n in range(25):  # the 25 anonymous jobs: none runs, none is stored, no nonce is spent
        with pytest.raises(Forbidden, match="auth.allowed_senders") as refused:
            await stranger.submit_job(make_job(served_tiny, n))
    assert "clients use /v1/completions" in str(refused.value)
    store = node.app[APP_STORE]
    assert store.get_job_counts() == {"received": 0, "running": 0, "done": 0, "failed": 0}
    assert store.db.execute("SELECT COUNT(*) FROM seen_nonces").fetchone()[0] == 0


async def test_a_named_sender_runs_jobs_within_its_own_quota(start, http, served_tiny, dispatcher_key):
    other = new_node_key()
    node = await start(limits={"max_jobs_per_sender": 2}, queue={"max_batch_size": 1, "batch_wait_ms": 0},
                       auth={"allowed_senders": [dispatcher_key.address_hex, other.address_hex]})
    peer = PeerClient(node.url, dispatcher_key, http)
    long_one = await peer.enqueue_job(make_job(served_tiny, 1, max_new_tokens=300))
    await peer.enqueue_job(make_job(served_tiny, 2))
    with pytest.raises(TooManyRequests, match="max_jobs_per_sender"):
        await peer.enqueue_job(make_job(served_tiny, 3))
    # another accountable sender is not held up by the first one's share
    assert (await PeerClient(node.url, other, http).enqueue_job(make_job(served_tiny, 4))) == compute_job_hash(make_job(served_tiny, 4))
    while (await peer.get_job(long_one))["status"] != "done":
        await asyncio.sleep(0.05)
    await peer.submit_job(make_job(served_tiny, 3))  # room again once its jobs end


class RecordingEngine:
    """The real tiny engine, recording each batch it runs (to see which job ran first)."""

    def __init__(self, engine):
        self.inner, self.batches = engine, []
        self.manifest, self.model_id, self.max_batch_size = engine.manifest, engine.model_id, engine.max_batch_size

    def run(self, jobs):
        self.batches.append([job.nonce for job in jobs])
        return self.inner.run(jobs)


async def test_the_committee_lane_has_slots_of_its_own_and_runs_first(start, served_tiny):
    engine = RecordingEngine(served_tiny.engine)
    node = await start(served=ServedModel("tiny", engine, served_tiny.tokenizer),
                       queue={"max_queued_jobs": 3, "reserved_for_peers": 0, "reserved_for_committee": 1, "max_batch_size": 4, "batch_wait_ms": 0})
    worker = node.app[APP_WORKER]
    flood = [make_job(served_tiny, n, max_new_tokens=40) for n in range(1, 5)]
    running = worker.accept_job(flood[0], b"\x01" * 20, lane="peer")
    while worker.queue.depth:  # the first job is on the engine, the queue is empty again
        await asyncio.sleep(0.01)
    for job in flood[1:]:
        worker.accept_job(job, b"\x01" * 20, lane="peer")
    with pytest.raises(QueueFull, match="engine queue holds 3"):  # the flood filled every ordinary slot
        worker.accept_job(make_job(served_tiny, 9), b"\x02" * 20, lane="peer")
    committee = make_job(served_tiny, 7, max_new_tokens=1)
    worker.accept_job(committee, b"\x03" * 20, lane="committee")  # still admitted: its slot is its own
    with pytest.raises(QueueFull, match="committee lane holds 1"):
        worker.accept_job(make_job(served_tiny, 8, max_new_tokens=1), b"\x03" * 20, lane="committee")
    await worker.wait_job(compute_job_hash(committee))
    # right after the batch that was running, in a batch of its own (not held by 40-token jobs beside it)
    assert engine.batches[:2] == [[flood[0].nonce], [committee.nonce]]
    await worker.wait_job(running)


def test_the_audit_horizon_composes_every_window():
    # MINIMAL, by hand: the receipt's horizon 200 (no audit of it starts later); a round's draws =
    # 22 (a private draw missed: 1 + 10 + 10 grace + 1) + 1 + 10 + 1 × (20 + 1) redraw + 2 × 20 claim = 94, a
    # round = 94 + 20 commit + 1 + 3 × 20 open (the worker's, the seals', their openings') + 1 = 176;
    # the audit = 3 × (176 + 10 dispute) − 2 × 22 (the appeal and its decider are public) + 2 × (5 proof + 1)
    # (the last round's contest, and one the appeal's settle waits out before the decider) = 526;
    # omission path 30 + 100 + 5 = 135 < 726.
    assert compute_timeline(MINIMAL).audit_span == 526
    assert compute_audit_horizon_blocks(MINIMAL) == 200 + 526 == 726
    # MAINNET: 600 + 3 × (710 + 100) − 2 × 203 + 2 × 51 = 2,726 blocks (9.1 h at 12 s)
    assert compute_audit_horizon_blocks(MAINNET) == 2726


async def test_finished_jobs_are_pruned_after_their_retention_but_not_while_a_duty_holds_them(node, peer, served_tiny):
    store = node.app[APP_STORE]
    kept, dropped = await peer.submit_job(make_job(served_tiny, 1)), await peer.submit_job(make_job(served_tiny, 2))
    store.db.conn.execute("INSERT INTO party_duties VALUES (?, 0, 1, ?, 'waiting', NULL, NULL, 0, 0)", (7, kept.job_hash.hex()))
    assert store.prune_finished(before_s=0.0) == 0  # nothing is that old
    assert store.prune_finished(before_s=float("inf")) == 1  # everything is, but a seat still needs one
    assert store.get_job(dropped.job_hash) is None and store.get_job(kept.job_hash).status == "done"
    assert store.db.execute("SELECT COUNT(*) FROM traces").fetchone()[0] == store.db.execute("SELECT COUNT(*) FROM receipts").fetchone()[0] == 1


async def test_a_committee_job_queued_before_its_seat_was_known_is_promoted(start, served_tiny):
    """The dispatcher sends a member its job right after the draw, often before the member's watcher
    has recorded the draw: the job waits in the peer lane until the seat is known, then moves ahead."""
    engine = RecordingEngine(served_tiny.engine)
    node = await start(served=ServedModel("tiny", engine, served_tiny.tokenizer),
                       queue={"reserved_for_peers": 0, "reserved_for_committee": 1, "max_batch_size": 1, "batch_wait_ms": 0})
    worker, dispatcher = node.app[APP_WORKER], b"\x0d" * 20
    flood = [make_job(served_tiny, n, max_new_tokens=30) for n in range(1, 5)]
    worker.accept_job(flood[0], b"\x01" * 20, lane="peer")
    while worker.queue.depth:
        await asyncio.sleep(0.01)
    for job in flood[1:]:
        worker.accept_job(job, b"\x01" * 20, lane="peer")
    seat_job = make_job(served_tiny, 7, max_new_tokens=1)
    worker.accept_job(seat_job, dispatcher, lane="peer")  # the seat is not known yet: a peer job, last in line
    seats = {compute_job_hash(seat_job): dispatcher}  # what the chain proves once the watcher has read the draw
    admit = lambda job, job_hash, sender: "seat" if seats.get(job_hash) == sender else None  # noqa: E731
    assert worker.promote_committee_job(admit) == 1 and worker.queue.priority_depth == 1
    await worker.wait_job(compute_job_hash(seat_job))
    assert [batch[0] for batch in engine.batches][:2] == [flood[0].nonce, seat_job.nonce]
    assert worker.promote_committee_job(admit) == 0  # nothing left to move
