"""A node's slashable duties never share a quota, a slot or a thread with what its clients and peers fill (issue 35).

Replayed as the issue found them, on real nodes (aiohttp on loopback, SQLite on disk, the tiny model):

- an honest gateway was slashed by its own rate limit: its duty to open its own cells, and its
  dispatcher's checks of its own worker (`router.fetch_opening`, the `check:` steps), went through
  `limits.max_openings_per_sender` keyed by its own address, and client load held that 2-slot quota:
  it refused itself 429, its reveal landed a block late. Now a node's own openings take the duty lane
  (`Openings.open_for_duty`): no sender, no sender's quota, slots and threads of their own. Here the
  own address's quota and every sender slot are held — the state that refused it 429 — and the duty
  opening and the check are served at once, with the same leaves the HTTP route gives;
- the router benched an honest worker for a 429 as if it had failed. Now a full worker is tried
  after the others for a second, never benched, its failures in a row untouched;
- a gateway is one sender at each worker, so its clients' jobs filled its share there and its
  committee jobs were refused. Now its client jobs at any one worker stop at
  `dispatcher.client_jobs_per_worker`, and its committee jobs (`run_on(..., for_duty=True)`) go past it;
- a duty about to miss its window: new client work is shed (503 `shedding_for_duty`) until it lands.
"""

import asyncio

import aiohttp
import pytest
from aiohttp import web

from verillm.errors import TooManyRequests
from verillm.node.appkeys import APP_DISPATCHER, APP_DOMAIN, APP_KEY, APP_STORE, APP_WORKER
from verillm.node.dispatcher.deadlines import Due, DutyClock
from verillm.node.dispatcher.peer import PeerClient
from verillm.node.dispatcher.router import NetworkDispatcher, RegistryView, WorkerEntry
from verillm.node.keys import new_node_key, read_key_file
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.spec.challenge import compute_challenge
from verillm.spec.params import MINIMAL
from verillm.spec.types import Job, SamplingParams
from helpers.nodes import make_local_config

BODY = {"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 3, "temperature": 0}


def _gateway_router(app, workers: list[WorkerEntry], session) -> NetworkDispatcher:
    view = RegistryView(None, app[APP_WORKER].served.model_id, refresh_s=1e9)
    view.workers = workers
    router = NetworkDispatcher(app[APP_WORKER], app[APP_STORE], DispatcherTables(app[APP_STORE].db), view, app[APP_KEY],
                               app[APP_DOMAIN], session, committee_size=1, max_transcript_tokens=MINIMAL.MAX_TRANSCRIPT_TOKENS)
    app[APP_DISPATCHER] = router
    return router


async def _own_job(app) -> tuple[bytes, object]:
    """A job this node ran for itself (as its dispatcher does for its clients' jobs), and a challenge of it."""
    worker = app[APP_WORKER]
    job = Job(worker.served.model_id, tuple(5 + i for i in range(40)), SamplingParams(), 4, b"\x35" * 32)
    result = await worker.run_job(job)
    challenge = compute_challenge(b"\x07" * 32, len(job.input_tokens), len(result.output_tokens),
                                  worker.served.manifest.committed_layers, MINIMAL.CHALLENGE_POSITIONS)
    return result.job_hash, challenge


async def test_a_node_holding_every_sender_slot_and_its_own_quota_still_opens_its_duty_cells_at_once(start, http):
    node = await start()
    worker = node.app[APP_WORKER]
    job_hash, challenge = await _own_job(node.app)
    openings = worker.openings
    me = node.app[APP_KEY].address
    # The state the gateway was in: its own address's openings quota full (2 of 2) and every
    # one of the node's opening slots taken — the path that refused its duty 429.
    held = [openings._turn(me) for _ in range(node.config.limits.max_openings_per_sender)]
    for turn in held:
        await turn.__aenter__()
    try:
        with pytest.raises(TooManyRequests):  # the senders' path is as full as it was
            async with openings._turn(me):
                pass
        duty = await asyncio.wait_for(worker.open_own_cells(job_hash, challenge=challenge), timeout=60)
        router = _gateway_router(node.app, [WorkerEntry(me, node.url, 10**18)], http)
        checked = await asyncio.wait_for(router.fetch_opening(me, node.url, job_hash, challenge), timeout=60)  # the `check:` step's read
    finally:
        for turn in held:
            await turn.__aexit__(None, None, None)
    assert openings.duty_waits == 0  # no duty opening waited for a slot: the senders' slots were never its
    assert duty == checked and len(duty.leaves) > 0
    assert openings._by_sender == {}  # the duty lane never counted against any sender


async def test_the_duty_lane_serves_the_leaves_the_route_serves_its_submitter(start, dispatcher_key, http):
    """The lane changes who waits, not what is opened: a peer's job opened over HTTP and by the node's duty path agree."""
    node = await start()
    peer = PeerClient(node.url, dispatcher_key, http)
    served = node.app[APP_WORKER].served
    job = Job(served.model_id, tuple(9 + i for i in range(30)), SamplingParams(), 3, b"\x36" * 32)
    reply = await peer.submit_job(job)
    challenge = compute_challenge(b"\x08" * 32, len(job.input_tokens), len(reply.output_tokens), served.manifest.committed_layers,
                                  MINIMAL.CHALLENGE_POSITIONS)
    over_http = await peer.request_opening(reply.job_hash, challenge=challenge)
    own = await node.app[APP_WORKER].open_own_cells(reply.job_hash, challenge=challenge)
    assert own == over_http


class FullWorker:
    """A worker on loopback that is full: 429 `rate_limited` to every job (the words an honest full node sends)."""

    def __init__(self):
        self.hits = 0
        self.runner = None

    async def handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.json_response({"error": {"code": "rate_limited", "message": "sender already has 16 jobs", "type": "rate_limit_error"}},
                                 status=429)

    async def start(self) -> WorkerEntry:
        app = web.Application()
        app.router.add_post("/v1/verillm/jobs", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return WorkerEntry(new_node_key().address, f"http://127.0.0.1:{self.runner.addresses[0][1]}", 10**18)


@pytest.fixture
async def full_worker():
    worker = FullWorker()
    yield worker
    if worker.runner is not None:
        await worker.runner.cleanup()


async def test_a_429_from_a_full_worker_goes_elsewhere_and_does_not_bench_it(start, tmp_path, http, full_worker):
    full = await full_worker.start()
    make_local_config(tmp_path / "gateway")  # writes the gateway's key, which the honest worker names
    gateway_address = read_key_file(tmp_path / "gateway" / "node-key.json").address_hex
    honest = await start(make_local_config(tmp_path / "honest", auth={"allowed_senders": [gateway_address]}))
    honest_entry = WorkerEntry(honest.app[APP_KEY].address, honest.url, 10**18)
    gateway = await start(make_local_config(tmp_path / "gateway"))
    async with aiohttp.ClientSession() as session:
        router = _gateway_router(gateway.app, [full, honest_entry], session)
        async with http.post(gateway.url + "/v1/completions", json=BODY) as response:
            assert response.status == 200, await response.text()
        assert full_worker.hits == 1  # tried first (the rotation), full: the job went on to the honest worker
        assert not router.health.is_benched(full.address) and full.address not in router.health.failures
        assert router.health.is_busy(full.address)  # tried after the others for a moment, nothing more
        # Once it has room again it is a worker like any other: no doubling bench to sit out.
        router.health.busy_until.clear()
        router._next = 0  # the rotation starts at the full worker again
        async with http.post(gateway.url + "/v1/completions", json=BODY | {"prompt": "Another"}) as response:
            assert response.status == 200, await response.text()
        assert full_worker.hits == 2


class HeldWorker:
    """A worker on loopback that admits at most ``limit`` jobs per sender (429 above, as `limits.max_jobs_per_sender`)
    and holds each admitted job until released; it records, per job, whether it admitted it."""

    def __init__(self, limit: int):
        self.limit, self.in_flight, self.admitted, self.refused = limit, 0, 0, 0
        self.release = asyncio.Event()
        self.runner = None

    async def handle(self, request: web.Request) -> web.Response:
        if self.in_flight >= self.limit:
            self.refused += 1
            return web.json_response({"error": {"code": "rate_limited", "message": "full", "type": "rate_limit_error"}}, status=429)
        self.in_flight += 1
        self.admitted += 1
        try:
            await self.release.wait()
        finally:
            self.in_flight -= 1
        return web.json_response({"error": {"code": "queue_full", "message": "released", "type": "server_error"}}, status=503)

    async def start(self) -> WorkerEntry:
        app = web.Application()
        app.router.add_post("/v1/verillm/jobs", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return WorkerEntry(new_node_key().address, f"http://127.0.0.1:{self.runner.addresses[0][1]}", 10**18)


async def test_a_gateways_client_load_leaves_its_share_at_a_worker_free_for_its_committee_job(start, tmp_path):
    held = HeldWorker(limit=2)
    entry = await held.start()
    gateway = await start(make_local_config(tmp_path / "gateway"))
    served = gateway.app[APP_WORKER].served
    try:
        async with aiohttp.ClientSession() as session:
            router = _gateway_router(gateway.app, [entry], session)
            router.client_jobs_per_worker = 1  # the worker's share per sender is 2: one stays for committee jobs
            clients = [asyncio.create_task(router._run_client_job(entry, Job(served.model_id, (5, 6, i), SamplingParams(), 2, bytes([i]) * 32), None))
                       for i in range(1, 2)]
            while held.in_flight < 1:
                await asyncio.sleep(0.01)  # condition: the client job is held at the worker
            # A second client job finds this gateway's client share of the worker in use: it is not sent there.
            router.view.workers = [entry]
            with pytest.raises(Exception, match="client share of it is in use"):
                await router._route(Job(served.model_id, (5, 6, 9), SamplingParams(), 2, b"\x09" * 32), b"\x09" * 32, False, None)
            committee = asyncio.create_task(router.run_on(entry.address, entry.url, Job(served.model_id, (5, 6, 7, 8), SamplingParams(), 1, b"\x0c" * 32),
                                                          for_duty=True))
            while held.admitted < 2 and held.refused == 0:
                await asyncio.sleep(0.01)  # condition: the worker answered the committee job one way or the other
            assert held.admitted == 2 and held.refused == 0  # the committee job was admitted, never refused 429
            held.release.set()
            await asyncio.gather(committee, *clients, return_exceptions=True)
    finally:
        await held.runner.cleanup()


async def test_a_duty_about_to_miss_its_window_sheds_client_work_until_it_lands(start, tmp_path, http):
    gateway = await start(make_local_config(tmp_path / "gateway"))
    me = gateway.app[APP_KEY].address
    head = [100]
    router = _gateway_router(gateway.app, [WorkerEntry(me, gateway.url, 10**18)] * 3, http)
    router.duties = clock = DutyClock(get_head=lambda: head[0], shed_at_slack_blocks=4)
    reveal = Due("reveal:7", "reveal_round", 110)
    clock.expect(reveal)
    async with http.post(gateway.url + "/v1/completions", json=BODY) as response:
        assert response.status == 200, await response.text()  # 10 blocks left: client work goes on
    head[0] = 106
    async with http.post(gateway.url + "/v1/completions", json=BODY | {"prompt": "Shed"}) as response:
        text = await response.text()
        assert response.status == 503 and "shedding_for_duty" in text and "reveal_round" in text, text
    clock.on_landed(reveal, 107)
    async with http.post(gateway.url + "/v1/completions", json=BODY | {"prompt": "Shed"}) as response:
        assert response.status == 200, await response.text()
    summary = clock.get_summary()
    assert summary["landed"] == 1 and summary["missed"] == 0 and summary["worst_slack_blocks"] == 3
    assert summary["shed_client_requests"] == 1
    clock.expect(reveal)  # the watcher's view lags: a landed duty seen again is not pending again
    assert clock.pending == {}
    # The first unbatched promise is re-read every tick: it sheds like a pending duty, and is never counted.
    clock.set_standing("promises", Due("promises", "post_batch", 109))
    async with http.post(gateway.url + "/v1/completions", json=BODY | {"prompt": "Promised"}) as response:
        assert response.status == 503 and "post_batch" in await response.text()
    clock.set_standing("promises", None)
    async with http.post(gateway.url + "/v1/completions", json=BODY | {"prompt": "Promised"}) as response:
        assert response.status == 200, await response.text()
    assert clock.get_summary()["landed"] == 1


async def test_a_dispatcher_checking_many_audits_at_one_member_checks_each_at_the_pace_of_one(start, dispatcher_key, http):
    """Two-cheater devnet, issue 35: the gateway's opening checks of ten audits at once shared one
    quota of `limits.max_openings_per_sender` at each member, and its audits waited ~150 s between
    reveal and verdict. An opening of a job that holds this node's seat in an audit round counts
    against the sender's quota for that round: with its own quota full, the sender's openings of two
    audits' seat jobs are served; a round's own quota is as full as the plain one was."""
    node = await start(limits={"max_concurrent_openings": 8})  # the held quotas below take slots: leave some free
    openings = node.app[APP_WORKER].openings
    router = _gateway_router(node.app, [], http)  # a node with a chain keeps its seats in these tables
    peer = PeerClient(node.url, dispatcher_key, http)
    served = node.app[APP_WORKER].served
    sender = dispatcher_key.address
    seat_jobs = []
    for audit_id in (7, 8):
        job = Job(served.model_id, tuple(11 + audit_id + i for i in range(30)), SamplingParams(), 3, bytes([audit_id]) * 32)
        reply = await peer.submit_job(job)
        assert router.tables.insert_duty(audit_id, 0, 2, reply.job_hash)  # as `CommitteeReceiptPosted` makes it: member slot 2
        challenge = compute_challenge(bytes([audit_id]) * 32, len(job.input_tokens), len(reply.output_tokens), served.manifest.committed_layers,
                                      MINIMAL.CHALLENGE_POSITIONS)
        seat_jobs.append((audit_id, reply.job_hash, challenge))
    held = [openings._turn(sender) for _ in range(node.config.limits.max_openings_per_sender)]
    for turn in held:
        await turn.__aenter__()
    try:
        for audit_id, job_hash, challenge in seat_jobs:  # the sender's own quota is full: each audit's check is served
            opening = await asyncio.wait_for(peer.request_opening(job_hash, challenge=challenge), timeout=60)
            assert len(opening.leaves) > 0
        audit_id, job_hash, challenge = seat_jobs[0]
        round_turns = [openings._turn(sender, (audit_id, 0)) for _ in range(node.config.limits.max_openings_per_sender)]
        for turn in round_turns:
            await turn.__aenter__()
        try:
            with pytest.raises(TooManyRequests, match=f"for audit {audit_id} round 0"):  # a round's quota holds like the sender's
                await peer.request_opening(job_hash, challenge=challenge)
            other = await peer.request_opening(seat_jobs[1][1], challenge=seat_jobs[1][2])  # another round's is its own
            assert len(other.leaves) > 0
        finally:
            for turn in round_turns:
                await turn.__aexit__(None, None, None)
    finally:
        for turn in held:
            await turn.__aexit__(None, None, None)
    assert openings._by_sender == {}
