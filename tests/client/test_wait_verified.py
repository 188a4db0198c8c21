"""`wait_verified` against a real local network: anvil (or the embedded chain), the contracts,
four node processes; the job is audited (minimal preset: every job) and the SDK follows it
from the dispatcher's status route until the verdict."""

import pytest

from verillm.client import Client, verify_receipt
from verillm.errors import NotFound
from verillm.spec.receipt import SigningDomain


@pytest.mark.slow
def test_wait_verified_follows_an_audit_to_its_verdict(tmp_path):
    from verillm.devnet.network import LocalNetwork, NodeSpec

    with LocalNetwork(tmp_path / "net", nodes=[NodeSpec() for _ in range(4)], log=lambda *a: None) as net:
        net.wait_gateway_sees_all()
        client = Client(net.gateway_url)
        completion = client.complete("The quick brown fox", max_tokens=6, temperature=0, audit=True)
        domain = SigningDomain(chain_id=net.protocol.chain.chain_id, verifying_contract=bytes.fromhex(net.protocol.jobs.address[2:]))
        verify_receipt(completion.receipt, domain, model_id=net.model_id, job=completion.job, output_tokens=completion.tokens)
        status = client.wait_verified(completion, timeout_s=600, poll_s=1.0)
        assert status["status"] in ("verified", "final"), status
        assert status["audit_requested"]


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
