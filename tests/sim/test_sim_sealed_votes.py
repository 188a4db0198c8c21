"""Sealed votes (issue 20, aa89393: `sealVote` before any `openAndVote`) in the simulator: a lazy
member can no longer copy the votes it sees, each member sends one more transaction and each
round takes one more block; and on the contracts, a seal never opened settles as a missed
opening exactly as the simulator's arithmetic says."""

import numpy as np
import pytest

from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilProcess
from verillm.spec.hashing import keccak256
from verillm.spec.params import MAINNET
from verillm.spec.settlement import AGREE, DISAGREE, FAIL
from verillm.sim.audit import AuditContext, Behaviour, run_audit
from verillm.sim.gas import STEPS_11, GasModel
from verillm.sim.latency import audit_latency_blocks
from verillm.sim.replay import Replayer, sample_cases
from verillm.sim.rules import BEFORE_ISSUE20, MAIN
from verillm.sim.sortition import GWEI, Pool


def _lazy_on_a_cheat(rules):
    """A cheat audited by two honest members and one lazy colluder (the first seed that seats so)."""
    adversarial = np.arange(12) < 4
    pool = Pool(np.full(12, MAINNET.MIN_STAKE_WEI // GWEI, dtype=np.int64), adversarial)
    ctx = AuditContext(MAINNET, rules, pool, Behaviour(lazy=True), d=1.0, mu=0.0)
    for k in range(256):
        out = run_audit(ctx, 0, 1, True, keccak256(b"lazy seat" + bytes([k])), np.random.default_rng(k))
        lazy = [s for s in out.trace[0]["seats"] if adversarial[s]]
        if len(lazy) == 1:
            return out, lazy[0]
    raise AssertionError("no committee with exactly one lazy seat in 256 seeds")


def test_a_lazy_member_votes_blind_under_sealed_votes_and_loses_the_minority_penalty():
    """Before sealed votes the lazy colluder opens last and copies the honest DISAGREE (no loss);
    sealed, it must vote without seeing them: its blind AGREE is the minority, MEMBER_PENALTY_BPS."""
    before, seat = _lazy_on_a_cheat(BEFORE_ISSUE20)
    after, seat_after = _lazy_on_a_cheat(MAIN)
    assert seat == seat_after and before.trace[0]["seats"] == after.trace[0]["seats"]
    slot = after.trace[0]["seats"].index(seat)
    assert before.trace[0]["votes"] == [DISAGREE] * 3
    assert after.trace[0]["votes"][slot] == AGREE and after.trace[0]["votes"].count(DISAGREE) == 2
    assert before.verdict == after.verdict == FAIL and 0 in before.slashed_wei and 0 in after.slashed_wei
    assert seat not in before.slashed_wei
    assert after.slashed_wei[seat] == MAINNET.MIN_STAKE_WEI * MAINNET.MEMBER_PENALTY_BPS // 10_000


def test_sealed_votes_cost_one_transaction_and_one_block_more_per_round():
    sealed, open_ = GasModel.for_rules(MAIN), GasModel.for_rules(BEFORE_ISSUE20)
    assert (sealed.member_txs(), open_.member_txs()) == (3, 2)
    assert sealed.member_gas() - open_.member_gas() == STEPS_11["seal_vote"]
    assert sealed.audit_path(1000, 3) - open_.audit_path(1000, 3) == 3 * STEPS_11["seal_vote"]
    for escalated, rounds in ((False, 1), (True, 2)):
        later = audit_latency_blocks(MAINNET, MAIN, 12.0, False, 0, rounds, escalated)
        assert later - audit_latency_blocks(MAINNET, BEFORE_ISSUE20, 12.0, False, 0, rounds, escalated) == rounds


@pytest.fixture(scope="module")
def replayer(anvil_installed):
    with AnvilProcess() as anvil:
        yield Replayer(RpcChain(anvil.url), seed=0)


def test_a_seal_never_opened_and_no_seal_both_settle_as_a_missed_opening(replayer):
    """Withholding members either seal and never open, or never seal: the contracts slash both as
    the simulator's missed opening, to the wei."""
    cases = [c for c in sample_cases(18 * 12, replayer.adversarial, seed=3) if c.kind == "withhold-openings"]
    results = []
    for case in cases:
        results.append(replayer.replay(case))
        if sum(r.sealed_unopened for r in results) and sum(r.unsealed for r in results):
            break
    assert [r.mismatches for r in results] == [[]] * len(results)
    assert sum(r.sealed_unopened for r in results) > 0 and sum(r.unsealed for r in results) > 0
