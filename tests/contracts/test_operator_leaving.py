"""An operator leaving, with the commands: `node unbond` (announcing its transaction),
`node status` saying until which block committees may still seat the node, when its duties end
and when it may stop, `chain mine --next-epoch` and `--past-unbonding` on a dev chain, then `node withdraw`."""

import json

from click.testing import CliRunner

from verillm.cli.chain import chain as chain_cli
from verillm.cli.node import node as node_cli
from verillm.spec.params import compute_leaver_schedule, compute_timeline


def _operator(world, tmp_path, index: int = 5) -> list[str]:
    account = world.nodes[index].account
    key_file = tmp_path / "key.json"
    key_file.write_text(json.dumps({"address": account.address, "private_key": "0x" + bytes(account.key).hex()}))
    key_file.chmod(0o600)
    book = tmp_path / "addresses.json"
    world.protocol.deployment.save(book)
    return ["--rpc-url", world.chain.url, "--addresses", str(book), "--key-file", str(key_file)]


def _run(cli, args):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def test_a_leaving_worker_learns_when_it_may_stop_and_mines_past_its_unbonding(world, tmp_path):
    operator = _operator(world, tmp_path)
    preset = world.preset
    unbond = _run(node_cli, ["unbond", *operator])
    assert "Registry.deregister: sent; waiting for the transaction to be mined" in unbond.stderr
    left = world.chain.get_block_number()
    status = json.loads(_run(node_cli, ["status", *operator, "--json"]).stdout)
    schedule = compute_leaver_schedule(left, preset)  # no round seeded at or after `left` draws it (Registry.drawCommittee)
    assert status["leaving"]["drawable_until_block"] == schedule.seated_until_block < status["stay_up_until_block"] == schedule.duties_end_block
    assert status["leaving"]["last_start_block"] == left + preset.AUDIT_HORIZON_BLOCKS + compute_timeline(preset).start_span
    assert not status["leaving"]["worker_may_stop"]
    # what it must keep, and until when: each trace until its receipt's horizon + the audit span
    keep = status["keep_traces"]
    assert keep["until_block"] == status["block"] + preset.RECEIPT_HORIZON_BLOCKS + compute_timeline(preset).audit_span
    quiet_after = max(schedule.seated_until_block, schedule.last_start_block)
    assert status["leaving"]["withdraw_from_block"] == left + preset.UNBONDING_BLOCKS
    book = operator[3]
    _run(chain_cli, ["mine", "--rpc-url", world.chain.url, "--next-epoch", "--addresses", book])
    assert world.chain.get_block_number() % preset.EPOCH_BLOCKS == 0
    _run(chain_cli, ["mine", "--rpc-url", world.chain.url, "--past-unbonding", world.nodes[5].address, "--addresses", book])
    assert world.chain.get_block_number() == left + preset.UNBONDING_BLOCKS
    status = json.loads(_run(node_cli, ["status", *operator, "--json"]).stdout)
    assert status["leaving"]["worker_may_stop"] == (world.chain.get_block_number() > quiet_after)
    assert "withdrew" in _run(node_cli, ["withdraw", *operator]).stdout
    assert json.loads(_run(node_cli, ["status", *operator, "--json"]).stdout)["leaving"] is None
