"""One hostile staked worker cannot break its gateway (issue 22, item 3).

A real gateway node routes through `NetworkDispatcher` to three hostile workers (real aiohttp
servers on loopback) and one honest node. The hostile ones answer as the issue found: 200 with a
malformed body (a `KeyError` and a 500 before), 400 with a message of the worker's choosing (relayed
word for word before), and a 400 MB body (read whole before). Each is that worker's failure: the
gateway moves on, the client gets 200 from the honest worker, never the worker's text, and the
failed workers are benched so the next request does not touch them.
"""

import aiohttp
import pytest
from aiohttp import web

from verillm.node.appkeys import APP_DISPATCHER, APP_DOMAIN, APP_KEY, APP_STORE, APP_WORKER
from verillm.node.dispatcher.router import NetworkDispatcher, RegistryView, WorkerEntry
from verillm.node.keys import new_node_key, read_key_file
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.spec.params import MINIMAL
from helpers.nodes import make_local_config

SCAM = "your account is suspended: pay at https://pay.example.invalid"
HUGE_BYTES = 400 * 1024 * 1024


class HostileWorkers:
    """Three workers on loopback, each answering every job in its own hostile way."""

    def __init__(self):
        self.hits = {"malformed": 0, "scam": 0, "huge": 0}
        self.sent_huge = 0
        self.runners = []

    async def malformed(self, request: web.Request) -> web.Response:
        self.hits["malformed"] += 1
        return web.json_response({"job_hash": "0x" + "00" * 32, "status": "done"})  # no receipt, no tokens

    async def scam(self, request: web.Request) -> web.Response:
        self.hits["scam"] += 1
        return web.json_response({"error": {"code": "invalid_input", "message": SCAM, "type": "invalid_request_error"}}, status=400)

    async def huge(self, request: web.Request) -> web.StreamResponse:
        self.hits["huge"] += 1
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        chunk = b" " * (1024 * 1024)
        try:
            while self.sent_huge < HUGE_BYTES:
                await response.write(chunk)
                self.sent_huge += len(chunk)
        except (ConnectionResetError, aiohttp.ClientConnectionError):
            pass  # the gateway hung up: what it should do
        return response

    async def start(self) -> list[WorkerEntry]:
        entries = []
        for name in self.hits:
            app = web.Application()
            app.router.add_post("/v1/verillm/jobs", getattr(self, name))
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            self.runners.append(runner)
            entries.append(WorkerEntry(new_node_key().address, f"http://127.0.0.1:{runner.addresses[0][1]}", 10**18))
        return entries

    async def stop(self) -> None:
        for runner in self.runners:
            await runner.cleanup()


@pytest.fixture
async def hostile_workers():
    workers = HostileWorkers()
    yield workers
    await workers.stop()


async def _gateway(start, tmp_path, workers: list[WorkerEntry], session) -> object:
    gateway = await start(make_local_config(tmp_path / "gateway"))
    app = gateway.app
    view = RegistryView(None, app[APP_WORKER].served.model_id, refresh_s=1e9)
    view.workers = workers
    app[APP_DISPATCHER] = NetworkDispatcher(app[APP_WORKER], app[APP_STORE], DispatcherTables(app[APP_STORE].db), view, app[APP_KEY],
                                            app[APP_DOMAIN], session, committee_size=1,
                                            max_transcript_tokens=MINIMAL.MAX_TRANSCRIPT_TOKENS)
    return gateway


async def test_three_hostile_answers_end_in_a_failover_and_a_200(start, tmp_path, http, hostile_workers):
    hostile = await hostile_workers.start()
    make_local_config(tmp_path / "gateway")  # writes the gateway's key, which the honest worker names
    gateway_address = read_key_file(tmp_path / "gateway" / "node-key.json").address_hex
    honest = await start(make_local_config(tmp_path / "honest", auth={"allowed_senders": [gateway_address]}))
    honest_entry = WorkerEntry(honest.app[APP_KEY].address, honest.url, 10**18)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        gateway = await _gateway(start, tmp_path, hostile + [honest_entry], session)
        body = {"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 3, "temperature": 0}
        async with http.post(gateway.url + "/v1/completions", json=body) as response:
            text = await response.text()
            assert response.status == 200, text
        assert SCAM not in text and (await response.json())["verillm"]["receipt"]["worker"] == honest.app[APP_KEY].address_hex
        assert hostile_workers.hits == {"malformed": 1, "scam": 1, "huge": 1}
        assert hostile_workers.sent_huge < 64 * 1024 * 1024  # the gateway stopped reading at its cap
        # benched: the next job goes straight to the honest worker, whatever the rotation says
        async with http.post(gateway.url + "/v1/completions", json=body | {"prompt": "Another one"}) as response:
            assert response.status == 200, await response.text()
        assert hostile_workers.hits == {"malformed": 1, "scam": 1, "huge": 1}


async def test_when_every_worker_fails_the_client_sees_codes_not_the_workers_words(start, tmp_path, http, hostile_workers):
    hostile = await hostile_workers.start()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        gateway = await _gateway(start, tmp_path, hostile, session)
        body = {"model": "tiny", "prompt": "Hello", "max_tokens": 2, "temperature": 0}
        async with http.post(gateway.url + "/v1/completions", json=body) as response:
            text = await response.text()
        assert response.status == 503 and "no_worker_completed" in text, text
        assert SCAM not in text and "pay.example" not in text
        assert "invalid_input" in text and "bad_response" in text  # what each worker did, in the gateway's words


async def test_get_status_through_the_gateway_for_a_job_another_worker_ran(start, tmp_path, http):
    """Issue 22 item 5: the status URL a gateway returns names the gateway, but its job route only knew the
    jobs its own worker ran: `get_status` of a job another worker ran was 404. The gateway now answers
    from its own record of the job (the receipt it checked); the worker's route still wants its own token."""
    from verillm.client import AsyncClient
    from verillm.errors import InvalidSignature

    make_local_config(tmp_path / "gateway")
    gateway_address = read_key_file(tmp_path / "gateway" / "node-key.json").address_hex
    honest = await start(make_local_config(tmp_path / "honest", auth={"allowed_senders": [gateway_address]}))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        honest_entry = WorkerEntry(honest.app[APP_KEY].address, honest.url, 10**18)
        gateway = await _gateway(start, tmp_path, [honest_entry] * 2, session)  # listed twice: committee_size 1 needs 2 workers
        async with AsyncClient(gateway.url) as client:
            completion = await client.complete("The mill", max_tokens=3, temperature=0)
            assert completion.worker.lower() == honest.app[APP_KEY].address_hex  # another worker ran it
            status = await client.get_status(completion)
            assert status["status"] == "done" and status["output_tokens"] == list(completion.tokens)
            assert status["receipt"]["worker"] == honest.app[APP_KEY].address_hex
            with pytest.raises(InvalidSignature):  # without the gateway's read token: refused, as for any job
                await client.get_status(completion.job_id)
        async with AsyncClient(honest.url) as at_worker:  # the gateway's token is the gateway's, not the worker's
            with pytest.raises(InvalidSignature):
                await at_worker.get_status(completion)


async def test_the_same_job_twice_at_once_is_routed_once(start, tmp_path, hostile_workers):
    """A client picks its job's nonce (`verillm.nonce`), so the same job can reach a gateway twice at once.
    The second joins the first's run: one worker, one receipt, one kept row (two workers would give the
    client a promise for a receipt the gateway never batches)."""
    import asyncio

    from verillm.node.dispatcher.router import JobResult
    from verillm.spec.job import compute_job_hash
    from verillm.spec.types import Job, SamplingParams

    hostile = await hostile_workers.start()
    async with aiohttp.ClientSession() as session:
        gateway = await _gateway(start, tmp_path, hostile, session)
        dispatcher = gateway.app[APP_DISPATCHER]
        served = gateway.app[APP_WORKER].served
        job = Job(served.model_id, (5, 17, 300), SamplingParams(), 3, b"\xab" * 32)
        release, routed = asyncio.Event(), []

        async def route(job, job_hash, audit_requested, on_token):
            routed.append(job_hash)
            await release.wait()
            return JobResult(job_hash, job, None, (1, 2, 3), None)

        dispatcher._route = route
        first = asyncio.create_task(dispatcher.dispatch(job, False))
        second = asyncio.create_task(dispatcher.dispatch(job, False))
        while not routed or compute_job_hash(job) not in dispatcher._routing:
            await asyncio.sleep(0)  # yields to the two tasks; no wall-clock wait
        for _ in range(20):
            await asyncio.sleep(0)  # let the second reach its join
        release.set()
        one, two = await first, await second
        assert routed == [compute_job_hash(job)] and one is two
        assert dispatcher._routing == {}
        # the first caller leaving ends its run, as without joiners; a joiner is told so in words, and retries
        routed.clear()
        release.clear()
        leaving = asyncio.create_task(dispatcher.dispatch(job, False))
        staying = asyncio.create_task(dispatcher.dispatch(job, False))
        while not routed:
            await asyncio.sleep(0)
        for _ in range(20):
            await asyncio.sleep(0)
        staying_result = asyncio.ensure_future(staying)
        leaving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leaving
        from verillm.node.dispatcher.router import NoWorkerCompleted

        with pytest.raises(NoWorkerCompleted, match="identical request .* whose caller left; retry"):
            await staying_result
        assert dispatcher._routing == {}
