"""GET /v1/verillm/network against a real chain (anvil, the contracts, a real node with the dispatcher
role on loopback): every value is the chain's, checked here by reading the contracts ourselves, and
the body is what the node's OpenAPI document says. The audit status body a networked node answers
is validated against the document too."""

import dataclasses

import httpx2 as httpx
import pytest

from verillm.client import Client
from verillm.spec.params import MINIMAL, compute_timeline
from verillm.node.api.network_views import compute_preset_body
from helpers.networked_node import NODES, networked_node
from helpers.openapi import validate_response

UNSAMPLED = MINIMAL.replace(AUDIT_RATE_BPS=0)  # not the configured preset: the route must say the chain holds other values


@pytest.fixture(scope="module")
def network(anvil_installed, tiny_engine, tmp_path_factory):
    from verillm.node.worker.engines import ServedModel

    served = ServedModel(alias="tiny", engine=tiny_engine, tokenizer=tiny_engine.tokenizer)
    with networked_node(tmp_path_factory.mktemp("net"), served, UNSAMPLED) as (anvil, protocol, node):
        document = httpx.get(f"{node.url}/v1/openapi.json", timeout=60).json()
        yield protocol, node, served, document


def test_the_network_route_says_what_the_chain_holds(network):
    protocol, node, served, document = network
    response = httpx.get(f"{node.url}/v1/verillm/network", timeout=60)
    assert response.status_code == 200, response.text
    body = response.json()
    validate_response(document, "GET", "/v1/verillm/network", 200, body)
    assert body["chain_id"] == protocol.chain.chain_id == 31337
    assert body["addresses"] == protocol.deployment.addresses
    assert body["head"] <= protocol.chain.get_block_number() and body["head"] >= protocol.deployment.start_block
    params = body["preset"]["params"]
    assert params == {name.lower(): value for name, value in dataclasses.asdict(UNSAMPLED).items() if name != "name"}  # what was deployed
    assert params["audit_rate_bps"] == 0 and params["committee_size"] == 3 and params["min_stake_wei"] == 10**16
    assert params["dispute_window_blocks"] == 10 and params["start_window_blocks"] == 80 and params["job_fee_wei"] == 10**13
    assert body["preset"]["name"] == "minimal" and body["preset"]["matches_chain"] is False  # the chain's audit rate is not minimal's
    assert body["preset"]["timeline"]["start_span_blocks"] == compute_timeline(UNSAMPLED).start_span
    [model] = body["models"]
    assert model["model_id"] == "0x" + served.model_id.hex() and model["name"] == served.name
    assert model["exact"] is bool(served.manifest.kernel_class) and model["kernel_class"] == (served.manifest.kernel_class or None)
    nodes, stakes = protocol.get_model_nodes(served.model_id)
    assert model["pool"] == {"nodes": NODES, "stake_wei": sum(stakes)} == {"nodes": NODES, "stake_wei": NODES * MINIMAL.MIN_STAKE_WEI}
    assert body["nodes"]["registered"] == body["nodes"]["active"] == NODES and body["nodes"]["slashed_wei"] == 0
    assert body["gateway"].lower() == protocol.chain.dev_accounts[1].address.lower()  # the node runs as dev account 1
    assert body["audits"] == {"total": 0, "by_outcome": {}, "recent": []}
    with Client(node.url) as client:  # the SDK reads the same body (one per head block)
        again = client.network()
    assert again["head"] >= body["head"] and {k: v for k, v in again.items() if k != "head"} == {k: v for k, v in body.items() if k != "head"}


def test_the_preset_matches_the_chain_only_when_every_value_does():
    assert compute_preset_body(MINIMAL.replace(name="onchain"), "minimal")["matches_chain"] is True
    assert compute_preset_body(UNSAMPLED.replace(name="onchain"), "minimal")["matches_chain"] is False
    assert compute_preset_body(MINIMAL.replace(name="onchain"), "mainnet")["matches_chain"] is False
    assert compute_preset_body(MINIMAL.replace(name="onchain"), "no-such-preset")["matches_chain"] is False


def test_a_dispatched_job_status_is_what_the_document_says(network):
    protocol, node, served, document = network
    answer = httpx.post(f"{node.url}/v1/completions", json={"model": served.name, "prompt": "Hi", "max_tokens": 2, "temperature": 0}, timeout=120)
    assert answer.status_code == 200, answer.text
    job_hash = answer.json()["verillm"]["job_hash"]
    status = httpx.get(f"{node.url}/v1/verillm/audits/{job_hash}", timeout=60)
    validate_response(document, "GET", "/v1/verillm/audits/{job_hash}", 200, status.json())
    assert status.json()["head"] >= protocol.deployment.start_block
    dispatcher = httpx.get(f"{node.url}/v1/verillm/dispatcher", timeout=60)
    validate_response(document, "GET", "/v1/verillm/dispatcher", 200, dispatcher.json())
