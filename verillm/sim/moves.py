"""The adversary's moves outside an audit, each a function of the running `Simulation`: shopping
for captured committees and holding leavers hostage (issue 20, attacks 1 and 3), and issue 34's
settle front-run (attack 3: a promise made unkeepable by a penalty or an unbond).

Keepability (`RuleSet.promises_keepable`, docs/protocol.md §12 "Batching promises"): an honest
node's node batches every receipt it promised within BATCH_BY_BLOCKS. Before issue 34 a node that
fell below MIN_STAKE_WEI (a 1% penalty on a minimum stake does it) or unbonded could no longer post
(`postBatch` reverted `NotActiveNode`), so a promise outstanding then was slashed in full by its
holder's omission claim (`slashOmission`), and the adversary orders the penalising `settle` (anyone
may send it) before the victim's `postBatch`. After it `postBatch` accepts a node inactive for
less than AUDIT_HORIZON_BLOCKS: the batch lands, no claim succeeds.
"""

import math

from verillm.spec.hashing import keccak256
from verillm.sim.omission import settle_omission
from verillm.sim.sortition import draw_committee

# shops among this many unselected honest jobs a block (scanning is free before issue 20)
SHOP_SCAN = 32
# blind, after issue 20: the share of scanned jobs it still requests (it cannot see the committee)
SHOP_BLIND_RATE = 0.01
LEAVE_SHARE_PER_HOUR = 0.002
"""Honest nodes that unbond each hour (a node that leaves has its node off once unbonded)."""


def shop(sim, block: int, beta: bytes, honest_active, n_hon: int) -> None:
    """Issue 20, attack 1: pay (COMMITTEE_SIZE × AUDIT_FEE_WEI) for audits of honest jobs whose
    committee is captured (≥ 2 of 3 adversarial), its members voting DISAGREE. Before issue 20 the
    committee is the β-seeded draw: the shopper sees it and requests only captured ones; after,
    the committee is drawn after payment: it can only request blind."""
    scan = min(SHOP_SCAN, int(sim.rng.binomial(n_hon, 1 - sim.a)))
    size = sim.preset.COMMITTEE_SIZE
    for k in range(scan):
        worker = int(sim.rng.choice(honest_active))
        dispatcher = sim._dispatcher(worker)
        seed = keccak256(b"verillm sim request" + beta + k.to_bytes(4, "big"))
        if not sim.rules.committee_after_payment:
            seats = draw_committee(sim.pool, seed, 0, size, {worker, dispatcher})
            if 2 * sum(bool(sim.pool.adversarial[x]) for x in seats) <= size:
                continue  # not captured: the shopper does not pay for it
        elif sim.rng.random() >= SHOP_BLIND_RATE:
            continue
        sim.t.adversary_savings_wei -= size * sim.preset.AUDIT_FEE_WEI  # the request fee
        sim._start_audit(block, seed, worker, dispatcher, False)


def _leavers(sim, honest_active):
    leavers = int(sim.rng.binomial(len(honest_active), LEAVE_SHARE_PER_HOUR))
    return [int(n) for n in sim.rng.choice(honest_active, size=min(leavers, len(honest_active)), replace=False)]


def hold_leavers(sim, honest_active) -> None:
    """Issue 20, attack 3: each honest node leaving this hour is held by a request on an old
    receipt in the block before its withdrawal; its node is off, it never opens: a worker default,
    slashed in full. After issue 20 no audit of its receipts starts past its horizon."""
    for node in _leavers(sim, honest_active):
        if sim.rules.leaver_horizon:
            continue  # the request reverts ReceiptExpired: the leaver withdraws at its end block
        sim.t.adversary_savings_wei -= sim.preset.COMMITTEE_SIZE * sim.preset.AUDIT_FEE_WEI + sim.preset.JOB_FEE_WEI
        sim._take(node, sim.pool.stake_wei(node) * sim.preset.SLASH_FRACTION_BPS // 10_000, "worker")


def p_promise_outstanding(sim) -> float:
    """P(an honest node holds a promise not yet due): it dispatched a job within BATCH_BY_BLOCKS
    (jobs reach the active nodes uniformly, each node dispatching its own)."""
    active = max(1, int((sim.pool.stake_units > 0).sum()))
    return 1 - math.exp(-sim.s.jobs_per_s / active * sim.preset.BATCH_BY_BLOCKS * sim.s.block_s)


def _unkeepable(sim) -> bool:
    return sim.strategy.front_run and not sim.rules.omission_possible and not sim.rules.promises_keepable


def _claim_omission(sim, node: int, stake_left_wei: int) -> None:
    """The adversary, holding a receipt of ``node`` (a job it sent, paying JOB_FEE_WEI), claims the
    unkeepable promise: `slashOmission` takes SLASH_FRACTION_BPS of the stake left, the claimant
    gets its bond back and SLASH_REWARD_BPS of the slash."""
    t, preset = sim.t, sim.preset
    outcome = settle_omission(preset, sim.rules, stake_left_wei, included=False)
    t.adversary_savings_wei -= preset.JOB_FEE_WEI
    t.adversary_credits_wei += outcome.claimant_credit_wei - preset.OMISSION_CLAIM_BOND_WEI
    t.honest_slashed_events["dispatcher"] += 1
    t.honest_slashed_wei += outcome.dispatcher_slashed_wei
    t.honest_beyond_penalty_wei += outcome.dispatcher_slashed_wei
    t.unkeepable_omissions += 1


def front_run_settle(sim, node: int, stake_left_wei: int) -> None:
    """A settlement just left honest ``node`` below MIN_STAKE_WEI (unlisted, its ``stake_left_wei``
    locked); the adversary sent that `settle` before the node's `postBatch`: without keepability a
    promise outstanding then cannot be kept, and is claimed."""
    if _unkeepable(sim) and stake_left_wei and sim.rng.random() < p_promise_outstanding(sim):
        _claim_omission(sim, node, stake_left_wei)


def claim_leavers(sim, honest_active) -> None:
    """Attack 3b: each honest node leaving this hour runs `verillm node unbond` as the guide says
    (the node stops promising, posts what it promised, then deregisters). Before keepability
    `deregister` unlisted it at once and a promise outstanding could not be posted: claimed, the
    stake slashed. After it, the batch lands; the leaver withdraws whole."""
    p = p_promise_outstanding(sim)
    for node in _leavers(sim, honest_active):
        stake = sim.pool.stake_wei(node)
        sim.pool.stake_units[node] = 0  # it leaves (the run does not replace it)
        if _unkeepable(sim) and sim.rng.random() < p:
            _claim_omission(sim, node, stake)
