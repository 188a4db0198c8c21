"""`audit=True` forces an audit the draw did not select: with the audit rate at 0, only the
job whose client asked is audited (`startAudit` carries committeeSize × auditFeeWei, or reverts);
the other job becomes final once the start window closes."""

import time

import pytest

from verillm.client import Client
from verillm.devnet.run import retry_no_workers
from verillm.devnet.network import NodeSpec
from verillm.spec.params import MINIMAL

from e2e_network import get_status, start_network, wait_settled

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("anvil_installed")]
NO_DRAWS = MINIMAL.replace(AUDIT_RATE_BPS=0, START_WINDOW_BLOCKS=15)


def test_a_client_request_forces_an_audit_the_draw_skipped(tmp_path_factory, anvil_installed):
    net = start_network(tmp_path_factory, [NodeSpec() for _ in range(5)], "requested", preset=NO_DRAWS)
    try:
        client = Client(net.gateway_url)
        asked = retry_no_workers(lambda: client.complete("The mill by the river", max_tokens=6, temperature=0, audit=True))
        plain = client.complete("The bakery by the school", max_tokens=6, temperature=0)
        body = wait_settled(net, [asked])[0]
        assert body["audit_requested"] and body["audit"]["requested"] and body["status"] == "final"
        deadline_body = wait_final_unaudited(net, plain)
        assert "audit" not in deadline_body and deadline_body["status"] == "final"
    finally:
        net.stop()


def wait_final_unaudited(net, completion, timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while (body := get_status(net, completion))["status"] != "final":
        if time.monotonic() > deadline:
            pytest.fail(f"unaudited job still {body['status']}")
        time.sleep(1.0)
    return body
