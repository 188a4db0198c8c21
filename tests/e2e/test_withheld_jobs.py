"""A dispatcher that never sends the committees their verification jobs (docs/protocol.md §12
"Undelivered jobs"): real nodes on anvil. Node 0, the gateway, dispatches every job and
withholds every committee job; each member's node claims its job on-chain, each worker's node
publishes its transcript, the members run the published jobs themselves, and every audit
still settles as a pass with nobody slashed."""

import pytest

from verillm.chain.protocol import Protocol
from verillm.devnet.network import NodeSpec

from e2e_network import send_jobs, start_network, wait_settled

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("anvil_installed")]


def test_withheld_committee_jobs_are_claimed_published_and_the_audits_settle(tmp_path_factory, anvil_installed):
    net = start_network(tmp_path_factory, [NodeSpec(withhold_jobs=True)] + [NodeSpec() for _ in range(4)], "withheld")
    try:
        completions = send_jobs(net, 2)
        bodies = wait_settled(net, completions)
        for body in bodies:
            assert body["audit"]["status"] == "settled" and body["audit"]["verdict"] == "pass", body
            assert not body["audit"]["slashed"], body
        protocol = Protocol(net.protocol.chain, net.protocol.deployment)
        delivery = protocol.delivery.web3.events
        claimed = delivery.DeliveryClaimed().get_logs(from_block=0)
        published = delivery.TranscriptPublished().get_logs(from_block=0)
        assert {log["args"]["auditId"] for log in published} == {log["args"]["auditId"] for log in claimed} and len(published) == 2
        for node in net.nodes:
            assert protocol.get_node(node.address)["stake_wei"] == 10 * net.preset.MIN_STAKE_WEI
    finally:
        net.stop()
