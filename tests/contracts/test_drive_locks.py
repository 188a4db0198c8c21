"""`verillm node withdraw --drive` (verillm/chain/drive.py): a member whose audit stalled (its
dispatcher and the rest of the committee went quiet) gets its stake back by making the due
permissionless calls itself; nobody else needs to act, and nothing it may not do is sent."""

import pytest
from click.testing import CliRunner

from verillm.chain.drive import drive_locking_audits, find_locking_audits
from verillm.chain.errors import TransactionReverted
from verillm.cli import cli
from verillm.node.keys import compute_node_key, write_key_file


def stall_an_audit(world):
    """Start an audit nobody works on; return (its id, one member of its committee)."""
    run = world.start(world.make_worker(world.nodes[0]))
    member = world.committee(run)[0]
    return run.audit_id, member


def test_a_member_of_a_stalled_audit_drives_it_and_withdraws(world):
    protocol, preset = world.protocol, world.preset
    audit_id, member = stall_an_audit(world)
    assert find_locking_audits(protocol, member.address) == [audit_id]
    # Inside the commit window nothing is due: nothing is sent, and the report says what holds the stake.
    early = drive_locking_audits(protocol, member.account)
    assert (early.sent, early.waiting, early.locks) == ((), (audit_id,), 1)
    protocol.deregister(member.account)
    world.chain.mine(preset.UNBONDING_BLOCKS + 1)
    with pytest.raises(TransactionReverted, match="StakeLocked"):
        protocol.withdraw(member.account)
    sent = []
    for _ in range(preset.MAX_COMMITTEE_REDRAWS + 2):
        if protocol.get_node(member.address)["locks"] == 0:
            break
        world.chain.mine(preset.COMMIT_WINDOW_BLOCKS + 1)
        sent += drive_locking_audits(protocol, member.account).sent
    assert protocol.get_node(member.address)["locks"] == 0, sent
    assert sent and {step for _, step in sent} <= {"replace_missing"}  # a stalled committee: redraws, then abandonment
    stake = protocol.get_node(member.address)["stake_wei"]
    assert protocol.withdraw(member.account).value == stake > 0


def test_the_command_drives_then_withdraws_or_says_what_holds_the_stake(world, tmp_path):
    protocol, preset = world.protocol, world.preset
    _, member = stall_an_audit(world)
    protocol.deregister(member.account)
    world.chain.mine(preset.UNBONDING_BLOCKS + 1)
    key_file, book = tmp_path / "key.json", tmp_path / "addresses.json"
    write_key_file(compute_node_key(bytes(member.account.key)), key_file)
    protocol.deployment.save(book)
    args = ["node", "withdraw", "--drive", "--rpc-url", world.chain.w3.provider.endpoint_uri, "--addresses", str(book), "--key-file", str(key_file)]
    for _ in range(preset.MAX_COMMITTEE_REDRAWS + 2):  # a redraw may seat it again: drive again a window later
        result = CliRunner().invoke(cli, args)
        if result.exception is None:
            break
        assert "still locked by 1" in str(result.exception) and "open audits" in str(result.exception), result.output
        world.chain.mine(preset.COMMIT_WINDOW_BLOCKS + 1)
    assert result.exit_code == 0, (result.output, result.exception)
    assert "replace_missing" in result.output and "withdrew" in result.output
