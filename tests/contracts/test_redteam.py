"""Red-team review of the adversary-proofed contracts (issue 9): cheap, rational attacks replayed
on the real contracts in the attacker's call order.

An attack that still WORKS is an `xfail(strict=True, raises=AssertionError)` test asserting the
SAFE outcome: it fails today (the assertion), and flips to XPASS, a failure, the moment the
contracts close it, so whoever fixes it turns it into a plain test. Only an AssertionError counts
as the expected failure: a revert or a helper error is reported as a real failure. The passing
tests are attacks the contracts withstand that tests/contracts/test_onchain_attacks.py does not cover
(exact window boundaries, ETH conservation to the wei).
"""

import pytest

from helpers.chain import reverts
from verillm.chain import TransactionReverted
from verillm.errors import ChainError
from verillm.chain.protocol import compute_receipt_tuple
from verillm.spec import audit as spec_audit
from verillm.spec.audit import Phase
from verillm.spec import settlement as spec

from eth_account import Account

from verillm.spec import vrf
from verillm.spec.hashing import keccak256

from helpers.contracts import CHEAT_OFFSET, MODEL_ID, PRESET, AuditRun, Node

ABANDONED, DECIDED = Phase.ABANDONED, Phase.DECIDED


def _works(reason: str):
    """An attack that works on the current contracts: the test asserts the safe outcome."""
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"redteam: {reason}")


def _land_at(world, block: int) -> None:
    """Mine so that the next transaction is included in block ``block`` (anvil automines)."""
    head = world.chain.get_block_number()
    assert head < block, (head, block)
    world.chain.mine(block - 1 - head)


def _round(world, audit_id: int, round_index: int = 0) -> dict:
    phase, commit_deadline, ready, verdict_block, seed, opened, members = world.protocol.jobs.call("getRound", audit_id, round_index)
    return {"phase": phase, "commit_deadline": commit_deadline, "ready": ready, "verdict_block": verdict_block, "members": members}


def _started(world, cheat: bool = False, dispatcher: int = 1) -> AuditRun:
    run = world.start(world.make_worker(world.nodes[0], offset=CHEAT_OFFSET if cheat else 0.0), dispatcher=world.nodes[dispatcher])
    world.post_members(run, [world.make_member(n) for n in world.committee(run)])
    return run


def _opened(world, cheat: bool = False) -> AuditRun:
    run = _started(world, cheat)
    world.open_worker(run)
    return run


# --- attacks that work today -------------------------------------------------------------------


# Stopped by docs/protocol.md §12 "Undelivered jobs" (contracts/src/Delivery.sol): a member
# without its job claims it, and the worker, who can always publish its own transcript, must
# post it on-chain within a commit window or be slashed as a worker default.
def test_self_dispatched_cheat_withholds_the_committee_jobs_and_keeps_its_stake(world):
    # The worker is its own dispatcher (allowed): it must start the audit its draw selected (or
    # be slashed for a missed start), but the committee's verification jobs come from it, and it
    # sends none. Before the rule, no receipt arrived, replaceMissing redrew then abandoned the
    # audit: nobody slashed. Now the honest members claim their jobs; the cheat does not publish.
    cheat = world.nodes[0]
    before = world.stakes()[cheat.address]
    run = world.start(world.make_worker(cheat, offset=CHEAT_OFFSET), dispatcher=cheat)
    deadline = 0
    for slot, member in enumerate(world.committee(run)):
        deadline = world.protocol.claim_undelivered(member.account, run.audit_id, slot).value
    world.chain.mine(deadline - world.chain.get_block_number() + 1)
    with reverts("TooEarly"):  # the claims hold the round open: no redraw, no abandonment
        world.protocol.replace_missing(world.outsider, run.audit_id)
    world.protocol.slash_undelivered(world.outsider, run.audit_id)
    assert world.protocol.get_audit(run.audit_id).phase != ABANDONED
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    assert world.protocol.settle(world.outsider, run.audit_id).value == spec.WORKER_DEFAULT
    # Safe outcome: whoever had to deliver the committee's jobs (here the cheat) loses stake.
    assert world.stakes()[cheat.address] < before


def test_unfillable_escalation_enforces_the_colluding_verdict_it_disputes(world):
    # Two colluders in a committee of three call an honest worker a cheat (a DISAGREE is never
    # adjudicated). The worker escalates, as docs/protocol.md tells it to, but the pool holds
    # fewer than escalationCommitteeSize fresh nodes (here 6 nodes: 1 left). Rule (§12, §13): an
    # escalation that cannot be heard does not reinstate the verdict it disputes; the audit is
    # abandoned, nobody slashed on either side of the disputed votes, the bond refunded.
    run = _opened(world)
    world.vote_members(run, votes=lambda slot: (True, False, False)[slot])
    assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.FAIL
    honest = {run.worker.node.address, run.members[0].node.address}
    before, pool = world.stakes(), world.protocol.jobs.call("feePoolWei")
    credit = world.protocol.get_credit(run.worker.node.address)
    world.protocol.escalate(run.worker.node.account, run.audit_id)
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    world.protocol.draw_escalation(world.outsider, run.audit_id)  # pool exhausted: the escalation is unheard
    assert world.protocol.get_audit(run.audit_id).phase == ABANDONED
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    with reverts("UnexpectedPhase"):  # nothing left to settle: the disputed FAIL is never enforced
        world.protocol.settle(world.outsider, run.audit_id)
    after = world.stakes()
    # Safe outcome: a verdict whose escalation could not be heard slashes no honest party.
    assert {a: after[a] for a in honest} == {a: before[a] for a in honest}
    assert after == before  # nobody at all: the colluders' FAIL is not a provable lie either
    assert world.protocol.get_credit(run.worker.node.address) == credit + PRESET.DISPUTE_BOND_WEI
    assert world.protocol.jobs.call("feePoolWei") == pool  # the job's fee stays in the pool, unpaid
    assert all(world.protocol.get_node(n.address)["locks"] == 0 for n in world.nodes)


def _escalated_to_round_one(world, escalator) -> AuditRun:
    """A colluding FAIL on an honest worker, escalated by ``escalator``, round 1 drawn (10 nodes)."""
    run = _opened(world)
    world.vote_members(run, votes=lambda slot: (True, False, False)[slot])
    assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.FAIL
    world.protocol.escalate(escalator, run.audit_id)
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    world.protocol.draw_escalation(world.outsider, run.audit_id)
    assert world.protocol.get_audit(run.audit_id).round == 1
    return run


def _withhold_round_one(world, run: AuditRun) -> None:
    """Nobody sends the round-1 jobs: every redraw's commit window passes without a receipt."""
    while world.protocol.get_audit(run.audit_id).phase == Phase.COMMITTING:
        world.chain.mine(PRESET.COMMIT_WINDOW_BLOCKS + 1)
        world.protocol.replace_missing(world.outsider, run.audit_id)
    assert world.protocol.get_audit(run.audit_id).phase == ABANDONED


def test_escalation_whose_round_one_jobs_never_arrive_is_unheard_and_slashes_nobody(world):
    # A colluding dispatcher (or round-1 colluders) withholds the escalation committee's jobs: the
    # round lapses for missing receipts. The worker escalated, not the dispatcher that had to
    # send the jobs: nobody slashed, the worker's bond refunded.
    world.nodes.extend(_register_crowd(world, 4))
    try:
        run = _escalated_to_round_one(world, world.nodes[0].account)
        before, credit = world.stakes(), world.protocol.get_credit(world.nodes[0].address)
        _withhold_round_one(world, run)
        assert world.stakes() == before
        assert world.protocol.get_credit(world.nodes[0].address) == credit + PRESET.DISPUTE_BOND_WEI
        assert all(world.protocol.get_node(n.address)["locks"] == 0 for n in world.nodes)
    finally:
        del world.nodes[6:]


def test_dispatcher_that_escalates_then_withholds_the_round_one_jobs_loses_its_bond(world):
    # The dispatcher sends the round's jobs: an escalation it bonded and then starved of receipts
    # is unheard (nobody slashed) but its bond goes to the pool: escaping this way is not free.
    world.nodes.extend(_register_crowd(world, 4))
    try:
        dispatcher = world.nodes[1]
        run = _escalated_to_round_one(world, dispatcher.account)
        pool, credit = world.protocol.jobs.call("feePoolWei"), world.protocol.get_credit(dispatcher.address)
        _withhold_round_one(world, run)
        assert world.protocol.get_credit(dispatcher.address) == credit
        assert world.protocol.jobs.call("feePoolWei") == pool + PRESET.DISPUTE_BOND_WEI
    finally:
        del world.nodes[6:]


def test_node_slashed_to_zero_is_still_drawn_in_the_same_epoch(world):
    # Closed (Registry.outBlock): a node whose stake was taken sits out every draw seeded from
    # its slash on, until its new weight counts (0 below the minimum), so a node with nothing at
    # stake never sits on a committee seeded after its slash, even in draws that read its epoch's
    # snapshot (its weight there predates the slash; the snapshot stays fixed, so nothing after a
    # seed block re-rolls a committee).
    victim = world.nodes[5]  # 1 × minimum stake; slashed below the minimum, it is inactive
    batch = world.protocol.post_batch(victim.account, [b"\x01" * 32]).value
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS + 1)
    world.protocol.slash_missed_draw(world.outsider, batch.batch_id)
    assert world.protocol.get_node(victim.address)["stake_wei"] == 0
    assert not world.protocol.get_node(victim.address)["active"]
    epoch = world.protocol.registry.call("currentEpoch")
    committees = []
    for nonce in range(4):
        run = world.start(world.make_worker(world.nodes[0], nonce=nonce), dispatcher=world.nodes[1])
        committees.append(world.protocol.get_committee(run.audit_id, 0))
    assert world.protocol.registry.call("currentEpoch") == epoch  # every draw read the stale table
    # Safe outcome: a node with no stake (inactive) is never drawn. Its votes cost it nothing:
    # a slash of 0 wei is all that adjudication or a minority vote can take.
    assert all(victim.address not in committee for committee in committees), committees


SYBILS = 100  # nodes serving the model besides the six: a small network (the threshold is ~70–90)


def _send_raw(world, account, function: str, *args, nonce: int, value: int = 0) -> bytes:
    """Sign and send a Registry call without estimating or waiting (many accounts at once)."""
    registry, chain = world.protocol.registry, world.chain
    tx = {"to": registry.address, "data": registry.web3.encode_abi(function, args=list(args)), "value": value, "gas": 800_000,
          "nonce": nonce, "maxFeePerGas": 2 * chain.get_block()["baseFeePerGas"] + 10**9, "maxPriorityFeePerGas": 10**9,
          "chainId": chain.chain_id}
    return chain.w3.eth.send_raw_transaction(account.sign_transaction(tx).raw_transaction)


def _register_crowd(world, count: int, first: int = 0) -> list[Node]:
    """Register ``count`` more nodes for the model, fast: one VRF key (a proof of possession per
    address), balances from anvil_setBalance, raw transactions sent without waiting one by one.
    ``first``: the index of the first key (a crowd after a crowd that left needs fresh accounts)."""
    secret = vrf.derive_secret_key(b"redteam crowd key" * 2)
    public = vrf.compute_public_key(secret)
    chain = world.protocol.chain
    hashes, crowd = [], []
    for i in range(first, first + count):
        account = Account.from_key(keccak256(b"redteam crowd" + i.to_bytes(2, "big")))
        chain.w3.provider.make_request("anvil_setBalance", [account.address, hex(10**18)])
        x, y, _ = vrf.compute_hash_to_g1(vrf.compute_possession_message(public, bytes.fromhex(account.address[2:])), vrf.DOMAIN_POP)
        possession = vrf.compute_g1_multiple((vrf.bn.FQ(x), vrf.bn.FQ(y), vrf.bn.FQ.one()), secret)
        hashes.append(_send_raw(world, account, "register", vrf.compute_words(public), vrf.compute_words(possession),
                                "http://127.0.0.1:1", [MODEL_ID], nonce=0, value=PRESET.MIN_STAKE_WEI))
        crowd.append(Node(account, secret))
    for tx_hash in hashes:
        chain.wait_for_receipt(tx_hash)
    world.protocol.advance_to_next_epoch()
    return crowd


def test_cheat_that_escalates_its_fail_then_defaults_gets_its_bond_back(world):
    # A caught cheat escalates, never opens in round 1 (WORKER_DEFAULT), while five more nodes ran
    # verification jobs paid from the fee pool. Rule (§12): the bond is refunded only when the
    # larger committee decides the other way (a FAIL becomes a PASS); a default after a FAIL is
    # a conviction again, the bond goes to the pool.
    world.nodes.extend(_register_crowd(world, 4))  # 10 nodes: room for an escalation committee
    try:
        run = _opened(world, cheat=True)
        world.vote_members(run)
        assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.FAIL
        cheat = run.worker.node
        world.protocol.escalate(cheat.account, run.audit_id)
        world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
        world.protocol.draw_escalation(world.outsider, run.audit_id)
        world.post_members(run, [world.make_member(n) for n in world.committee(run, 1)])
        world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.OPEN_WINDOW_BLOCKS + 1)  # the cheat never opens
        assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.WORKER_DEFAULT
        world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
        credit = world.protocol.get_credit(cheat.address)
        assert world.protocol.settle(world.outsider, run.audit_id).value == spec.WORKER_DEFAULT
        # Safe outcome: an escalation that convicts the worker again keeps the worker's bond.
        assert world.protocol.get_credit(cheat.address) == credit
    finally:
        del world.nodes[6:]


def _flood_departed(world, count: int) -> None:
    """``count`` identities register at minimum stake, deregister and withdraw their stake."""
    crowd = _register_crowd(world, count)
    for tx_hash in [_send_raw(world, node.account, "deregister", nonce=1) for node in crowd]:
        world.chain.wait_for_receipt(tx_hash)
    world.chain.mine(PRESET.UNBONDING_BLOCKS)
    for tx_hash in [_send_raw(world, node.account, "withdraw", nonce=2) for node in crowd]:
        world.chain.wait_for_receipt(tx_hash)
    assert not any(world.protocol.get_node(n.address)["registered"] for n in crowd)


def _draw_gas(world) -> int:
    """Gas of Registry.drawCommittee for a first committee in the current epoch."""
    registry = world.protocol.registry
    call = {"to": registry.address, "data": registry.web3.encode_abi(
        "drawCommittee", args=[MODEL_ID, b"\x01" * 32, 0, PRESET.COMMITTEE_SIZE, [world.nodes[0].address], registry.call("currentEpoch"), 0])}
    return world.chain.w3.eth.estimate_gas(call)


def test_departed_identities_stay_in_every_draw(world):
    # Closed (StakeTree): a draw descends a Fenwick tree of stake sums over slots, O(log2 slots)
    # reads, instead of walking every node ever listed (~8k gas each). Sybils that registered at
    # minimum stake, deregistered and withdrew hold weight 0 in every readable epoch; their slots
    # go back to a free queue (test_sortition_scale.py: reused by the next registrations).
    count = 10
    before = _draw_gas(world)
    _flood_departed(world, count)
    world.protocol.advance_to_next_epoch()
    after = _draw_gas(world)
    # Safe outcome: identities that left cost a draw nothing (measured before the tree: ~+8.9k gas each).
    assert after - before < count * 1_000, (before, after)


def _draw_needed(world, dispatcher, worker):
    """Start an audit of the worker's receipt and mine past its seed block; return it and the
    gas estimate of its committee draw (Jobs.drawRound)."""
    run = world.start(worker, dispatcher=dispatcher, draw=False)
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    data = world.protocol.jobs.web3.encode_abi("drawRound", args=[run.audit_id])
    return run, world.chain.w3.eth.estimate_gas({"from": dispatcher.address, "to": world.protocol.jobs.address, "data": data})


def test_identity_flood_makes_starts_unfittable_and_slashes_honest_dispatchers(world):
    # Scale model of the old docs/protocol.md §13 "Scale" (30 M gas at ~3,900 identities): the
    # block gas limit is set to what a committee draw cost before a flood of 10 departed
    # identities plus 40k, half of what the flood used to add (~8k gas each), and the honest
    # dispatcher must then draw (since issue 20 the draw is `drawRound`, after the start; a
    # selected audit never drawn slashes its dispatcher). Closed (StakeTree): the flood adds at
    # most one tree level, the draw fits, and the dispatcher is never slashed for it. (A pool
    # really too small ends the audit with nobody slashed: test_attack8_start_with_too_small_a_pool_slashes_nobody.)
    chain = world.chain
    dispatcher = world.nodes[1]
    run, needed_before = _draw_needed(world, dispatcher, world.make_worker(world.nodes[0], nonce=1))
    world.protocol.draw_round(dispatcher.account, run.audit_id)
    _flood_departed(world, 10)
    world.protocol.advance_to_next_epoch()
    run, needed = _draw_needed(world, dispatcher, world.make_worker(world.nodes[0], nonce=2))
    assert needed - needed_before < 40_000, (needed_before, needed)
    limit = chain.get_block()["gasLimit"]
    chain.w3.provider.make_request("anvil_setBlockGasLimit", [hex(needed_before + 40_000)])
    try:
        chain.mine(1)
        chain.transact(world.protocol.jobs, "drawRound", run.audit_id, sender=dispatcher.account, gas=needed_before + 40_000)
    finally:
        chain.w3.provider.make_request("anvil_setBlockGasLimit", [hex(limit)])
    stake = world.stakes()[dispatcher.address]
    world.chain.mine(PRESET.DRAW_WINDOW_BLOCKS + 1)
    with reverts("UnexpectedPhase"):  # drawn: nothing lapses
        world.protocol.lapse(world.outsider, run.audit_id)
    # Safe outcome: a dispatcher that could not draw a committee for the pool's size is not slashed.
    assert world.stakes()[dispatcher.address] == stake


@pytest.mark.slow  # 100 registrations: ~10 s
def test_a_starved_committee_draw_reverts_instead_of_abandoning(world):
    # Closed since 388ff3a: with 106 nodes the draw costs more than 63 × the abandon path, so a
    # low gas limit (or eth_estimateGas, which finds the cheapest successful path) used to end
    # the audit as "pool exhausted", nobody slashed. Now only NotEnoughCandidates abandons.
    _register_crowd(world, 100)
    _, weights = world.protocol.get_model_nodes(MODEL_ID)
    assert sum(1 for w in weights if w) == 106
    worker, dispatcher = world.make_worker(world.nodes[0], offset=CHEAT_OFFSET), world.nodes[1]
    run, needed = _draw_needed(world, dispatcher, worker)  # since issue 20 the draw is drawRound, after the start
    for gas in (needed // 2, needed * 3 // 4):  # a starved call reverts: it does not abandon the audit
        # (DrawFailed when the draw itself starves; an out-of-gas of the seat writes after it, which
        # anvil reports as "ReentrancySentryOOG" without revert data: a ChainError, not a revert)
        with pytest.raises(ChainError):
            world.chain.transact(world.protocol.jobs, "drawRound", run.audit_id, sender=dispatcher.account, gas=gas)
        assert world.protocol.get_audit(run.audit_id).phase == Phase.DRAWING  # still drawing
    world.protocol.draw_round(dispatcher.account, run.audit_id)
    assert world.protocol.get_audit(run.audit_id).phase == Phase.COMMITTING  # a committee was drawn


# --- attacks the contracts withstand (not covered by test_onchain_attacks.py) ----------------------------


def _send_at(world, block: int, handle, function: str, *args, sender, value: int = 0) -> bool:
    """Land ``function(*args)`` in block ``block`` with a fixed gas limit (an estimate runs one block
    early on anvil); return whether it succeeded there."""
    _land_at(world, block)
    tx_hash = world.chain.send(handle, function, *args, sender=sender, value=value, gas=3_000_000)
    try:
        receipt = world.chain.wait_for_receipt(tx_hash)
    except TransactionReverted:
        return False
    assert receipt["blockNumber"] == block
    return True


def _receipt_args(audit_id: int, slot: int, party) -> tuple:
    return audit_id, slot, compute_receipt_tuple(party.receipt), party.receipt.signature


def test_commit_window_boundary_has_no_block_for_both_a_receipt_and_a_redraw(world):
    jobs = world.protocol.jobs
    run = world.start(world.make_worker(world.nodes[0]), dispatcher=world.nodes[1])
    deadline = _round(world, run.audit_id)["commit_deadline"]
    members = [world.make_member(n) for n in world.committee(run)]
    world.protocol.post_committee_receipt(world.outsider, run.audit_id, 0, members[0].receipt)
    # At the deadline block a griefer's redraw fails and the receipt still counts.
    assert not _send_at(world, deadline, jobs, "replaceMissing", run.audit_id, sender=world.outsider)
    assert _send_at(world, deadline + 1, jobs, "postCommitteeReceipt", *_receipt_args(run.audit_id, 1, members[1]), sender=world.outsider) is False
    world.protocol.replace_missing(world.outsider, run.audit_id)  # after it: 1 candidate for 2 seats
    assert _round(world, run.audit_id)["phase"] == ABANDONED


def test_commit_window_last_block_still_takes_a_receipt(world):
    jobs = world.protocol.jobs
    run = world.start(world.make_worker(world.nodes[0]), dispatcher=world.nodes[1])
    deadline = _round(world, run.audit_id)["commit_deadline"]
    members = [world.make_member(n) for n in world.committee(run)]
    for slot in (0, 1):
        world.protocol.post_committee_receipt(world.outsider, run.audit_id, slot, members[slot].receipt)
    assert _send_at(world, deadline, jobs, "postCommitteeReceipt", *_receipt_args(run.audit_id, 2, members[2]), sender=world.outsider)
    assert _round(world, run.audit_id)["phase"] == 2  # OPENING: no redraw can follow


def _sealed_vote(world, run: AuditRun, slot: int) -> tuple[tuple, tuple]:
    """Member ``slot``'s honest vote as the two raw calls' arguments: (sealVote, openAndVote)."""
    member = run.members[slot]
    opening, agree = world.opening(run, member), world.honest_vote(run, member)
    salt = spec_audit.compute_vote_salt(bytes(member.node.account.key), run.audit_id, 0, slot)
    seal = spec_audit.compute_vote_seal(run.audit_id, 0, slot, agree, spec_audit.compute_opening_hash(opening), salt)
    return (run.audit_id, slot, seal), (run.audit_id, slot, spec_audit.encode_opening_leaves(opening), agree, salt)


def test_open_window_boundaries_cannot_be_raced_by_finalize(world):
    jobs = world.protocol.jobs
    run = _started(world)
    ready = _round(world, run.audit_id)["ready"]
    worker_closes = ready + PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.OPEN_WINDOW_BLOCKS
    seals_close = worker_closes + PRESET.OPEN_WINDOW_BLOCKS
    members_close = seals_close + PRESET.OPEN_WINDOW_BLOCKS
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    world.protocol.draw_challenge(world.outsider, run.audit_id)
    leaves = spec_audit.encode_opening_leaves(world.opening(run, run.worker))
    # A griefer's finalize at the worker's last block fails; the worker's opening there counts.
    assert not _send_at(world, worker_closes - 1, jobs, "finalize", run.audit_id, sender=world.outsider)
    assert _send_at(world, worker_closes, jobs, "openWorker", run.audit_id, leaves, sender=run.worker.node.account)
    seal, show = zip(*(_sealed_vote(world, run, slot) for slot in range(3)))
    account = [m.node.account for m in run.members]
    assert _send_at(world, worker_closes + 1, jobs, "sealVote", *seal[0], sender=account[0])
    assert _send_at(world, worker_closes + 2, jobs, "sealVote", *seal[2], sender=account[2])
    # Member 1 has not sealed: no opening before the seal window's last block has passed.
    snapshot = world.chain.snapshot()
    assert not _send_at(world, seals_close, jobs, "openAndVote", *show[0], sender=account[0])
    assert _send_at(world, seals_close + 1, jobs, "openAndVote", *show[0], sender=account[0])
    world.chain.revert(snapshot)
    snapshot = world.chain.snapshot()
    assert not _send_at(world, seals_close + 1, jobs, "sealVote", *seal[1], sender=account[1])  # one block late
    world.chain.revert(snapshot)
    # Its seal at the window's last block counts; the openings follow, the last one at its window's last block.
    assert _send_at(world, seals_close, jobs, "sealVote", *seal[1], sender=account[1])
    assert _send_at(world, seals_close + 1, jobs, "openAndVote", *show[0], sender=account[0])
    assert not _send_at(world, members_close - 1, jobs, "finalize", run.audit_id, sender=world.outsider)
    assert _send_at(world, members_close, jobs, "openAndVote", *show[1], sender=account[1])
    assert not _send_at(world, members_close + 1, jobs, "openAndVote", *show[2], sender=account[2])
    assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.PASS


def test_dispute_window_boundary_has_no_block_for_both_a_contest_and_settle(world):
    disputes, jobs = world.protocol.disputes, world.protocol.jobs
    run = _opened(world)
    world.vote_members(run)
    world.protocol.finalize(world.outsider, run.audit_id)
    closes = _round(world, run.audit_id)["verdict_block"] + PRESET.DISPUTE_WINDOW_BLOCKS
    cell = [(leaf.leaf.position, leaf.leaf.layer) for leaf in world.opening(run, run.worker).leaves[:1]]
    bond = PRESET.DISPUTE_BOND_WEI
    contest_args = (run.audit_id, 0, 0, [cell[0][0]], [cell[0][1]])
    # Last block of the window: a contest lands, settle does not; one block later, the reverse.
    snapshot = world.chain.snapshot()
    assert _send_at(world, closes, disputes, "contest", *contest_args, sender=world.outsider, value=bond)
    world.chain.revert(snapshot)
    assert not _send_at(world, closes, jobs, "settle", run.audit_id, sender=world.outsider)
    snapshot = world.chain.snapshot()
    assert _send_at(world, closes + 1, jobs, "settle", run.audit_id, sender=world.outsider)
    world.chain.revert(snapshot)
    assert not _send_at(world, closes + 1, disputes, "contest", *contest_args, sender=world.outsider, value=bond)
    assert not _send_at(world, closes + 2, disputes, "escalate", run.audit_id, sender=world.nodes[5].account, value=bond)
    assert world.protocol.settle(world.outsider, run.audit_id).value == spec.PASS


def _eth_books(world) -> tuple[int, int]:
    """(contract balances, what they owe): stakes + credits + fee pool + open bonds, in wei."""
    protocol = world.protocol
    addresses = {n.address for n in world.nodes} | {world.outsider.address}
    stakes = sum(protocol.get_node(a)["stake_wei"] for a in addresses)
    credits = sum(protocol.get_credit(a) for a in addresses)
    bonds = sum(c[6] for c in (protocol.disputes.call("getContest", i) for i in range(protocol.disputes.call("contestCount"))) if c[3])
    escalation = 0
    for audit_id in range(1, protocol.jobs.call("auditCount") + 1):
        state = protocol.get_audit(audit_id)
        escalation += PRESET.DISPUTE_BOND_WEI if state.escalator != "0x" + "00" * 20 and state.round == 1 and state.phase != Phase.SETTLED else 0
    balances = sum(world.chain.get_balance(c.address) for c in (protocol.registry, protocol.jobs, protocol.disputes, protocol.delivery))
    return balances, stakes + credits + protocol.jobs.call("feePoolWei") + bonds + escalation


def test_eth_is_conserved_to_the_wei_through_slashes_contests_lapses_and_claims(world):
    assert _eth_books(world)[0] == _eth_books(world)[1]
    # A cheat fails, one member is contested and cannot answer (slashed, challenger rewarded).
    run = _opened(world, cheat=True)
    world.vote_members(run)
    member_cell = [(leaf.leaf.position, leaf.leaf.layer) for leaf in world.opening(run, run.members[2]).leaves[:1]]
    contest_id = world.protocol.contest(world.outsider, run.audit_id, 0, 3, member_cell).value
    world.protocol.finalize(world.outsider, run.audit_id)
    books = _eth_books(world)
    assert books[0] == books[1], books
    world.chain.mine(PRESET.PROOF_WINDOW_BLOCKS + 1)
    world.protocol.resolve_contest(world.outsider, contest_id)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    world.protocol.settle(world.outsider, run.audit_id)
    books = _eth_books(world)
    assert books[0] == books[1], books
    # An escalation nobody draws lapses into the pool at settle.
    run = _opened(world)
    world.vote_members(run)
    world.protocol.finalize(world.outsider, run.audit_id)
    world.protocol.escalate(world.nodes[1].account, run.audit_id)  # its dispatcher: standing (issue 34)
    books = _eth_books(world)
    assert books[0] == books[1], books
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS + PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    world.protocol.lapse(world.outsider, run.audit_id)  # round 1 LAPSED, the bond to the pool
    assert world.protocol.get_round_state(run.audit_id, 1).phase == Phase.LAPSED  # terminal (it was ESCALATING for ever)
    assert world.protocol.settle(world.outsider, run.audit_id).value == spec.PASS
    for node in world.nodes:
        if world.protocol.get_credit(node.address):
            world.protocol.claim(node.account)
    books = _eth_books(world)
    assert books[0] == books[1], books
    assert all(world.protocol.get_node(n.address)["locks"] == 0 for n in world.nodes)
