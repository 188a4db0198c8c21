"""Issue 34, "Proportionality": a private draw revealed late (docs/protocol.md §12 "Private draws";
§13 "Loss ledger").

A private draw's committee is fixed when the start commits to its secret, before the seed block's
hash exists: keccak256(0x1c ‖ audit ‖ round ‖ blockhash(drawAfter) ‖ secret). Revealing it a block
after drawBy re-rolls nothing, so the late reveal (`Jobs.revealRound` until
revealBy = drawBy + PRIVATE_REVEAL_GRACE_BLOCKS) costs its dispatcher MEMBER_PENALTY_BPS of its stake
and nothing more: an honest gateway whose reveal was mined late on a loaded machine keeps its stake.
What the full slash is there for — a dispatcher that withholds its reveal to get the round
re-rolled publicly — starts only after the grace: `lapse` refuses (`TooEarly`) until then and still
slashes the whole stake after it.
"""

from web3.exceptions import ContractCustomError, ContractLogicError

from helpers.chain import reverts
from verillm.chain.events import get_events
from verillm.spec.audit import Phase, compute_due_steps, compute_private_draw_bond
from verillm.spec.hashing import keccak256

from helpers.contracts import World

SECRET = keccak256(b"issue 34: a late reveal")
BPS = 10_000
_NONCES = iter(range(3000, 4000))


def _start_private(world: World, dispatcher: int = 1):
    worker, dispatcher = world.make_worker(world.nodes[0], nonce=next(_NONCES)), world.nodes[dispatcher]
    return dispatcher, world.start(worker, dispatcher=dispatcher, secret=SECRET)


def _mine_to(world: World, head: int) -> None:
    """Mine until the chain's head is ``head``: the next transaction lands in ``head + 1``."""
    now = world.chain.get_block_number()
    assert now <= head, f"already past block {head} (at {now})"
    if head > now:
        world.chain.mine(head - now)


def _takes(world: World, block: int) -> list:
    """Every stake taken in ``block``: Registry.Slashed, with the Jobs rule (PartySlashed) named beside it."""
    contracts = [world.protocol.registry, world.protocol.jobs]
    return get_events(world.chain, contracts, block, block, names={"Slashed", "PartySlashed", "PrivateDrawMissed"})


def _too_early(until_block: int) -> bytes:
    return keccak256(b"TooEarly(uint256)")[:4] + until_block.to_bytes(32, "big")


def _lapse_refusal(world: World, run) -> bytes | None:
    """The revert data of `lapse` in the next block (an eth_call on the pending block), None if accepted."""
    jobs = world.protocol.jobs
    call = {"from": world.outsider.address, "to": jobs.address, "data": jobs.web3.encode_abi("lapse", args=[run.audit_id])}
    try:
        world.chain.w3.eth.call(call, "pending")
    except (ContractCustomError, ContractLogicError) as exc:
        raw = str(exc.data if isinstance(exc.data, str) else exc.args[0])
        return bytes.fromhex(raw[2:]) if raw.startswith("0x") else raw.encode()
    return None


def _state(world: World, run):
    return world.protocol.get_round_state(run.audit_id)


def test_a_reveal_one_block_late_is_the_same_draw_and_costs_only_the_member_penalty(world):
    dispatcher, run = _start_private(world)
    on_time = world.preview(run, SECRET)  # who an on-time reveal seats (mined past the seed block)
    members = [world.make_member(n) for n in on_time]
    d = _state(world, run).deadlines
    assert d.reveal_by == d.draw_by + world.preset.PRIVATE_REVEAL_GRACE_BLOCKS
    stake, credit = world.stakes()[dispatcher.address], world.protocol.get_credit(dispatcher.address)
    others = {a: s for a, s in world.stakes().items() if a != dispatcher.address}
    _mine_to(world, d.draw_by)
    assert compute_due_steps(_state(world, run), d.draw_by + 1) == ()  # nobody may lapse it yet
    tx = world.reveal(run, dispatcher, SECRET, members)  # lands in draw_by + 1: one block late
    block = tx.receipt["blockNumber"]
    assert block == d.draw_by + 1
    # The same draw: the seats an on-time reveal would have given, every receipt posted with it.
    assert [world.node(a) for a in tx.value] == on_time
    assert _state(world, run).phase == Phase.OPENING
    # The dispatcher loses MEMBER_PENALTY_BPS of its stake, once, and nothing else: its start's bond
    # comes back as after an on-time reveal; nobody else loses anything.
    penalty = stake * world.preset.MEMBER_PENALTY_BPS // BPS
    takes = _takes(world, block)
    assert [(e.name, e.args["node"]) for e in takes] == [("Slashed", dispatcher.address), ("PartySlashed", dispatcher.address)]
    rule = next(e for e in takes if e.name == "PartySlashed")
    assert rule.args["reason"] == "late private draw" and rule.args["amountWei"] == penalty
    assert world.stakes()[dispatcher.address] == stake - penalty
    assert world.protocol.get_credit(dispatcher.address) == credit + compute_private_draw_bond(world.preset)
    assert {a: s for a, s in world.stakes().items() if a != dispatcher.address} == others
    # The audit goes on from the reveal: an honest worker passes; the dispatcher pays nothing more.
    world.open_worker(run)
    world.vote_members(run)
    world.finish(run)
    assert world.stakes()[dispatcher.address] == stake - penalty


def test_a_late_reveal_gives_the_unanswered_seats_a_whole_commit_window(world):
    """The later windows run from the actual reveal block, as after an on-time one."""
    dispatcher, run = _start_private(world)
    world.preview(run, SECRET)
    d = _state(world, run).deadlines
    _mine_to(world, d.reveal_by - 1)
    tx = world.reveal(run, dispatcher, SECRET, [])  # the grace's last block
    assert tx.receipt["blockNumber"] == d.reveal_by
    state = _state(world, run)
    assert state.phase == Phase.COMMITTING and state.deadlines.commit_by == d.reveal_by + world.preset.COMMIT_WINDOW_BLOCKS


def test_lapse_waits_out_the_grace_and_withholding_past_it_still_costs_the_stake(world):
    dispatcher, run = _start_private(world, dispatcher=5)
    world.preview(run, SECRET)
    d = _state(world, run).deadlines
    stake = world.stakes()[dispatcher.address]
    for head in (d.draw_by, d.reveal_by - 1):  # a lapse would land in draw_by + 1, then in reveal_by
        _mine_to(world, head)
        assert compute_due_steps(_state(world, run), head + 1) == ()
        assert _lapse_refusal(world, run) == _too_early(d.reveal_by + 1)  # in the next block (eth_call "pending")
        with reverts(f"TooEarly.*{d.reveal_by + 1}"):
            world.protocol.lapse(world.outsider, run.audit_id)
    _mine_to(world, d.reveal_by)
    assert _lapse_refusal(world, run) is None  # accepted from reveal_by + 1 on
    assert compute_due_steps(_state(world, run), d.reveal_by + 1) == ("lapse",)
    snapshot = world.chain.snapshot()
    with reverts("TooLate|a window that closed"):  # past the grace the reveal is refused: the draw is lost
        world.reveal(run, dispatcher, SECRET, [])  # (its gas estimated at the head, where it still fit: mined, reverted)
    world.chain.revert(snapshot)
    world.chain.mine(1)  # a transaction's gas is estimated at the head: one block more to send it
    lapsed = world.protocol.lapse(world.outsider, run.audit_id)
    block = lapsed.receipt["blockNumber"]
    assert block == d.reveal_by + 2
    # Withholding past the grace gets a re-roll (the public draw), so it still costs the whole stake.
    full = stake * world.preset.SLASH_FRACTION_BPS // BPS
    rules = [e for e in _takes(world, block) if e.name != "Slashed"]
    assert [e.name for e in rules] == ["PrivateDrawMissed", "PartySlashed"]
    assert rules[1].args["reason"] == "missed private draw" and rules[1].args["amountWei"] == full
    assert world.stakes()[dispatcher.address] == stake - full
    state = _state(world, run)
    assert state.phase == Phase.DRAWING and not state.private_draw and state.deadlines.entered_block == block


def test_an_on_time_reveal_costs_nothing(world):
    dispatcher, run = _start_private(world)
    members = [world.make_member(n) for n in world.preview(run, SECRET)]
    d = _state(world, run).deadlines
    stake, credit = world.stakes()[dispatcher.address], world.protocol.get_credit(dispatcher.address)
    _mine_to(world, d.draw_by - 1)
    tx = world.reveal(run, dispatcher, SECRET, members)  # the window's last block
    assert tx.receipt["blockNumber"] == d.draw_by
    assert [e for e in _takes(world, d.draw_by)] == []
    assert world.stakes()[dispatcher.address] == stake
    assert world.protocol.get_credit(dispatcher.address) == credit + compute_private_draw_bond(world.preset)
