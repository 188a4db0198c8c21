"""`wait_verified` against a real local network: anvil (or the embedded chain), the contracts,
five node processes (an audited job needs its worker, the dispatcher and a committee of 3); the job is audited (minimal preset: every job) and the SDK follows it
from the dispatcher's status route until the verdict."""

import pytest

from verillm.client import Client, verify_receipt
from verillm.errors import NotFound
from verillm.spec.receipt import SigningDomain


@pytest.mark.slow
def test_wait_verified_follows_an_audit_to_its_verdict(tmp_path):
    from verillm.devnet.network import LocalNetwork, NodeSpec

    with LocalNetwork(tmp_path / "net", nodes=[NodeSpec() for _ in range(5)], log=lambda *a: None) as net:
        net.wait_gateway_sees_all()
        client = Client(net.gateway_url)
        completion = client.complete("The quick brown fox", max_tokens=6, temperature=0, audit=True)
        domain = SigningDomain(chain_id=net.protocol.chain.chain_id, verifying_contract=bytes.fromhex(net.protocol.jobs.address[2:]))
        verify_receipt(completion.receipt, domain, model_id=net.model_id, job=completion.job, output_tokens=completion.tokens)
        phases = []
        status = client.wait_verified(completion, timeout_s=600, poll_s=1.0, on_phase=phases.append)
        assert status["status"] in ("verified", "final"), status
        assert status["audit_requested"]
        final = client.wait_final(completion, timeout_s=600, poll_s=1.0, on_phase=phases.append)
        assert final["status"] == "final" and final["audit"]["status"] == "settled", final
        # the phases of a real audit, as it happened: forward only, through the verdict, to final
        names = [p.name for p in phases]
        assert all(ORDER.index(a) <= ORDER.index(b) for a, b in zip(names, names[1:])), names
        assert names[-1] == "final" and phases[-1].final and "verified" in names, names
        assert {"committee", "voting"} & set(names), names
        # each open phase named the contract deadline it waited on and the latest final block (verillm/spec/deadlines.py)
        # (a `verified` read after the chain settled, before the dispatcher recorded it, waits on no deadline: nothing is left)
        assert all(p.deadline and p.phase_ends_block and p.final_by_block and p.seconds_per_block is not None
                   for p in phases if not p.final and p.name != "verified"), [p.line() for p in phases]
        assert any(p.deadline == "dispute_by" for p in phases if p.name == "verified"), [p.line() for p in phases]
        assert {p.deadline for p in phases} & {"round_draw_by", "reveal_by", "commit_by", "worker_open_by", "members_open_by", "dispute_by"}


ORDER = ["served", "batched", "drawn", "audit_started", "committee", "voting", "verified", "final"]


def test_wait_verified_stops_at_the_verdict_and_wait_final_at_the_settlement(tmp_path):
    """Issue 23: `wait_verified` returns at `verified` (the dispute window still open), so there must
    be a way to wait for `final`. A dispatcher's status route on loopback walks a job through its
    statuses, one step per read."""
    import asyncio
    import threading

    from aiohttp import web

    steps = [("committed", None), ("audited", "open"), ("verified", "open"), ("verified", "open"), ("final", "settled")]
    reads = []

    async def status(request: web.Request) -> web.Response:
        name, audit = steps[min(len(reads), len(steps) - 1)]
        reads.append(name)
        body = {"job_hash": request.match_info["job"], "status": name} | ({"audit": {"status": audit}} if audit else {})
        return web.json_response(body)

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def serve():
        app = web.Application()
        app.router.add_get("/v1/verillm/audits/{job}", status)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    runner = asyncio.run_coroutine_threadsafe(serve(), loop).result(30)
    try:
        client = Client(f"http://127.0.0.1:{runner.addresses[0][1]}")
        job = "0x" + "11" * 32
        assert client.wait_verified(job, timeout_s=30, poll_s=0.01)["status"] == "verified"
        assert reads == ["committed", "audited", "verified"]
        body = client.wait_final(job, timeout_s=30, poll_s=0.01)
        assert body["status"] == "final" and reads[-2:] == ["verified", "final"]
        client.close()
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)


def test_audit_status_needs_the_networked_dispatcher(tmp_path, served_tiny):
    from helpers.nodes import ThreadedNode, make_local_config

    node = ThreadedNode(make_local_config(tmp_path), served_tiny)
    try:
        client = Client(node.url)
        completion = client.complete("Hello", max_tokens=2, temperature=0)
        with pytest.raises(NotFound, match="without the networked dispatcher"):
            client.wait_verified(completion, timeout_s=1)
    finally:
        node.stop()
