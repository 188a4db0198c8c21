"""The simulator's sortition is the spec's, draw for draw (and, through anvil, the contract's)."""

import numpy as np
import pytest

from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilProcess
from verillm.chain.protocol import Protocol
from verillm.errors import InvalidInput
from verillm.spec.audit import compute_committee
from verillm.spec.hashing import keccak256
from verillm.spec.params import MAINNET, MINIMAL
from verillm.sim.audit import Behaviour
from verillm.sim.montecarlo import make_pool, run_cell
from verillm.sim.rules import FIRST_LANDING, ISSUE9
from verillm.sim.sortition import GWEI, Pool, draw_committee


def test_fast_walk_equals_spec_compute_committee():
    rng = np.random.default_rng(1)
    for trial in range(200):
        n = int(rng.integers(4, 40))
        pool = Pool(rng.integers(0, 5, n).astype(np.int64) * 10**9 + rng.integers(1, 10**6, n), np.zeros(n, dtype=bool))
        excluded = set(rng.choice(n, size=int(rng.integers(0, 3)), replace=False).tolist())
        weights = [0 if i in excluded else int(pool.stake_units[i]) * GWEI for i in range(n)]
        size = min(3, sum(1 for w in weights if w))
        if size == 0:
            continue
        seed = keccak256(b"sortition test" + bytes([trial]))
        attempt = trial % 3
        want = compute_committee(seed, attempt, size, [f"n{i}".encode() for i in range(n)], weights)
        got = draw_committee(pool, seed, attempt, size, excluded)
        assert [f"n{i}".encode() for i in got] == list(want)


def test_drawing_more_than_the_candidates_is_an_error():
    pool = Pool(np.array([1, 1], dtype=np.int64), np.zeros(2, dtype=bool))
    with pytest.raises(InvalidInput):
        draw_committee(pool, b"\x00" * 32, 0, 2, {0})


@pytest.fixture(scope="module")
def registry(anvil_installed):
    with AnvilProcess() as anvil:
        chain = RpcChain(anvil.url)
        yield Protocol.deploy(chain, MINIMAL, chain.dev_accounts[0]).registry


def test_simulated_audits_draw_the_contracts_committees(registry):
    """150 simulated audits (75 per rule set, redraws, fresh draws and escalations included): every
    committee the simulator drew is what the Registry's `computeCommittee` returns for the same inputs."""
    rng = np.random.default_rng(7)
    pool = make_pool(40, 0.3, MAINNET.MIN_STAKE_WEI, rng)
    pool.stake_units += rng.integers(0, 10**6, pool.size)  # unequal stakes
    pool.trace = []
    for rules in (FIRST_LANDING, ISSUE9):
        run_cell(MAINNET, rules, 0.3, Behaviour(collude=True, withhold=True), 75, dispatcher_adversarial=True, pool=pool)
    assert len(pool.trace) >= 180, len(pool.trace)
    addresses = [f"0x{i + 1:040x}" for i in range(pool.size)]
    checksummed = [registry.chain.w3.to_checksum_address(a) for a in addresses]
    for seed, attempt, size, weights, chosen in pool.trace:
        got = registry.call("computeCommittee", seed, attempt, size, checksummed, weights)
        assert [g.lower() for g in got] == [addresses[i] for i in chosen]
