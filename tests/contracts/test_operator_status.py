"""Issue 36: `node status` gave unbonding in blocks with no time, and after `withdraw` said only
"not registered"; `node unbond` gave the withdrawal block with no time. Both say how long the unbonding has left at the chain's pace (or that the chain
mines on demand) and, once withdrawn, when and how much came back."""

import json

from test_operator_leaving import _operator, _run

from helpers.contracts import MODEL_ID
from verillm.cli.chain import chain as chain_cli
from verillm.cli.node import node as node_cli


def test_status_gives_unbonding_a_time_and_names_the_withdrawal(world, tmp_path):
    operator = _operator(world, tmp_path)
    stake = world.protocol.get_node(world.nodes[5].address)["stake_wei"]
    before = json.loads(_run(node_cli, ["status", *operator, "--json"]).stdout)
    nodes, stakes = world.protocol.get_model_nodes(MODEL_ID)
    assert list(before["stake_share"].values()) == [stake / sum(stakes)]
    unbond = _run(node_cli, ["unbond", *operator]).stdout
    text = _run(node_cli, ["status", *operator]).stdout
    interval = json.loads(_run(node_cli, ["status", *operator, "--json"]).stdout)["block_interval_s"]
    expected = "blocks to go; the chain mines on demand" if interval == 0 else "blocks to go" if interval is None else "at the last 64 blocks' pace"
    assert "unbonding until " in text and expected in text, text
    end = world.protocol.get_node(world.nodes[5].address)["unbonding_end_block"]
    assert f"withdraw from block {end} on ({world.preset.UNBONDING_BLOCKS} " in unbond and expected in unbond, unbond  # `unbond` itself gives the time
    _run(chain_cli, ["mine", "--rpc-url", world.chain.url, "--past-unbonding", world.nodes[5].address, "--addresses", operator[3]])
    _run(node_cli, ["withdraw", *operator])
    after = json.loads(_run(node_cli, ["status", *operator, "--json"]).stdout)
    assert after["registered"] is False and after["withdrawn"]["amount_wei"] == stake
    assert after["withdrawn"]["block"] == world.chain.get_block_number()
    assert f"withdrawn in block {after['withdrawn']['block']}" in _run(node_cli, ["status", *operator]).stdout
