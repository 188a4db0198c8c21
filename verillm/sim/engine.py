"""The network over simulated time: a block-level discrete-event simulation.

Every block: jobs arrive (Poisson at ``jobs_per_s``) and go to active workers uniformly. The
honest un-audited bulk is counted in closed form (a binomial draw of how many are audited);
every job of an adversarial worker gets the spec's audit bit (`is_audited` over the block's
batch β), and every audited job is simulated individually (`verillm.sim.audit.run_audit`),
its committee seeded by the spec's `compute_committee_seed(β, index)`. An audit's outcome is
decided at its start; its slashes and credits land at its settlement block, so a cheater keeps
serving, and cheating, until then. β stands in for the dispatcher's VRF output (uniform bytes).
"""

import heapq
import math
import sys
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from verillm.errors import ConfigError
from verillm.spec.audit import compute_committee_seed, is_audited
from verillm.spec.hashing import keccak256
from verillm.spec.params import get_preset
from verillm.sim.audit import AuditContext, run_audit
from verillm.sim.gas import BLOCK_GAS_LIMIT, GasModel
from verillm.sim.grief import draw_contest
from verillm.sim.inputs import PAPER_GPU_VERIFY_OVER_GENERATE, load_detection
from verillm.sim.latency import audit_latency_blocks
from verillm.sim.montecarlo import make_pool
from verillm.sim.moves import claim_leavers, front_run_settle, hold_leavers, shop
from verillm.sim.rules import get_rules
from verillm.spec.constants import BPS
from verillm.sim.strategies import choose_adaptive_rate, get_strategy
from verillm.sim.summary import summarize

WEI = 10**18
HUNT_QUANTILE = 0.9
"""appeal-hunter appeals only workers staked at least this quantile of the honest stakes."""


@dataclass(frozen=True)
class Scenario:
    preset: str = "mainnet"
    rules: str = "main"
    workers: int = 1000
    stake: str = "equal"
    adversary_share: float = 0.1
    strategy: str = "cheat-always"
    attack: str = "int8"
    dtype: str = "float32"
    detection_bound: str = "point"
    jobs_per_s: float = 10.0
    duration_s: float = 86_400.0
    block_s: float = 12.0
    offline: float = 0.0
    outage_s: float = 0.0
    """Mean length of an honest node's outage (exponential). 0: a contested worker misses the proof
    window with probability ``offline``; > 0: with offline × exp(−PROOF_WINDOW_BLOCKS·block_s / outage_s)
    (it must be down when the contest lands and stay down through the window)."""
    lazy_share: float = 0.0
    job_cost_eth: float = 1.7e-6
    """Inference cost of one job (70B, 4k tokens at $5e-3 and $3,000/ETH: economics-check)."""
    saved_fraction: float = 0.4
    """Share of the job's cost the attack saves (int8 weights: 40%)."""
    batch_size: int = 128
    self_dispatch: float = 1.0
    """Share of jobs a worker's own node dispatches (the node default runs every job itself)."""
    enforce_block_gas_limit: bool = True
    preset_overrides: tuple = ()
    """(name, value) pairs replacing preset parameters, e.g. (("SLASH_REWARD_BPS", 0),)."""
    rule_overrides: tuple = ()
    """(name, value) pairs replacing rule flags, e.g. (("omission_possible", False),)."""
    seed: int = 0

    def validate(self) -> None:
        if not 10 <= self.workers <= 100_000:
            raise ConfigError("workers must be in [10, 100000]")
        if not 0 <= self.adversary_share < 1 or not 0 <= self.offline < 1 or not 0 <= self.lazy_share < 1:
            raise ConfigError("shares and probabilities must be in [0, 1)")
        if self.jobs_per_s <= 0 or self.duration_s <= 0 or self.block_s <= 0 or self.batch_size < 1:
            raise ConfigError("jobs_per_s, duration_s, block_s and batch_size must be positive")


@dataclass
class Tally:
    jobs: int = 0
    cheated_served: int = 0
    cheated_omitted: int = 0
    cheated_unaudited: int = 0
    cheated_audited: int = 0
    cheated_audits_caught: int = 0
    audits: int = 0
    audits_unstartable: int = 0
    abandoned: int = 0
    escalations: int = 0
    lapsed_escalations: int = 0
    honest_slashed_events: dict = field(default_factory=lambda: {"worker": 0, "member": 0, "dispatcher": 0})
    honest_slashed_wei: int = 0
    honest_beyond_penalty_wei: int = 0
    """Of ``honest_slashed_wei``: takings beyond the member penalty, issue 34's bound for a party that
    acted honestly (counted above twice MEMBER_PENALTY_BPS of the stake left: a penalty computed on
    the stake its audit saw may land after another penalty)."""
    honest_silent_penalty_wei: int = 0
    adversary_silent_penalties: int = 0
    adversary_appeals: int = 0
    """Appeals the adversary sent against honest workers (appeal-griefer, appeal-hunter)."""
    unkeepable_omissions: int = 0
    """Honest dispatchers slashed by `slashOmission` for a promise a penalty or unbond made unkeepable."""
    honest_no_answer_penalised: int = 0
    adversary_savings_wei: int = 0
    adversary_credits_wei: int = 0
    adversary_slashed_wei: int = 0
    honest_credits_wei: int = 0
    tx_count: int = 0
    gas: int = 0
    latencies_s: list = field(default_factory=list)
    detection_s: list = field(default_factory=list)


class Simulation:
    def __init__(self, scenario: Scenario, gas: GasModel | None = None, progress: bool = False):
        scenario.validate()
        self.s, self.progress = scenario, progress
        self.preset = get_preset(scenario.preset).replace(**dict(scenario.preset_overrides))
        self.rules = _with_rule_overrides(get_rules(scenario.rules), scenario.rule_overrides)
        self.strategy = get_strategy(scenario.strategy)
        det = load_detection(dtype=scenario.dtype)
        self.d, self.mu = det.d(scenario.attack, scenario.detection_bound), det.mu(scenario.detection_bound)
        # a model from `bench gas` reports counts the members' transactions of the rules run
        self.gas_model = replace(gas, sealed_votes=self.rules.sealed_votes) if gas else GasModel.for_rules(self.rules)
        self.rng = np.random.default_rng(scenario.seed)
        self.pool = make_pool(scenario.workers, scenario.adversary_share, self.preset.MIN_STAKE_WEI, self.rng, scenario.stake)
        lazy = (~self.pool.adversarial) & (self.rng.random(scenario.workers) < scenario.lazy_share) if scenario.lazy_share else None
        rich = 0
        if self.strategy.behaviour.appeal_rich_only:  # the hunter's targets: the top decile of honest stakes
            rich = int(np.quantile(self.pool.stake_units[~self.pool.adversarial], HUNT_QUANTILE)) * self.pool.unit_wei
        self.ctx = AuditContext(self.preset, self.rules, self.pool, self.strategy.behaviour, self.d, self.mu, scenario.offline, lazy, rich)
        self.a = self.preset.AUDIT_RATE_BPS / 10_000
        self.gain_wei = int(scenario.job_cost_eth * scenario.saved_fraction * WEI)
        self.cheat_rate = self.strategy.cheat_rate
        self.first_cheat_s: dict[int, float] = {}
        self.events: list = []  # (settle block, seq, outcome, locked wei, participants)
        self.locked_wei = 0
        self.t = Tally()
        self.series = {"time_s": [], "locked_eth": [], "cheater_profit_eth": [], "active_adversaries": [], "calls_per_block": []}
        self.cheat_audit_results = [0, 0]  # (slashed, escaped) of audited cheats, pooled knowledge for the adaptive adversary
        self.flood_identities = self._flood_identities()
        candidates = scenario.workers + self.flood_identities
        self.startable = not scenario.enforce_block_gas_limit or self.rules.sortition_log_n or (
            self.gas_model.start_audit_gas(candidates) <= BLOCK_GAS_LIMIT)
        self.verify_gain_wei = int(scenario.job_cost_eth * PAPER_GPU_VERIFY_OVER_GENERATE * WEI)

    def _flood_identities(self) -> int:
        """Identities the flooding adversary adds so that `startAudit` passes the block gas limit."""
        limit = self.gas_model.largest_startable()
        if not self.strategy.flood or self.rules.sortition_log_n or limit is None:
            return 0
        return max(0, limit + 1 - self.s.workers)

    # --- the loop -------------------------------------------------------------------------
    def run(self) -> dict:
        s = self.s
        blocks = int(math.ceil(s.duration_s / s.block_s))
        sample_every = max(1, blocks // 400)
        started, next_report, calls_window = time.monotonic(), 0.0, 0
        for block in range(blocks):
            self._settle_due(block)
            calls_before = self.t.tx_count
            self._serve_block(block)
            calls_window += self.t.tx_count - calls_before
            if self.strategy.adaptive and block % max(1, int(3600 / s.block_s)) == 0:
                self._adapt()
            if block % sample_every == 0:
                self._sample(block, calls_window / sample_every)
                calls_window = 0
            if self.progress and block / blocks >= next_report:
                print(f"  sim {100 * block / blocks:5.1f}%  t={block * s.block_s / 3600:6.2f} h  audits={self.t.audits}  wall={time.monotonic() - started:6.1f}s",
                      file=sys.stderr, flush=True)
                next_report += 0.1
        self._settle_due(10**12)
        self._sample(blocks, 0.0)
        return self._summary(time.monotonic() - started)

    def _serve_block(self, block: int) -> None:
        s, pool = self.s, self.pool
        n = int(self.rng.poisson(s.jobs_per_s * s.block_s))
        if n == 0:
            return
        self.t.jobs += n
        active = pool.stake_units > 0
        adv_active = np.flatnonzero(active & pool.adversarial)
        honest_active = np.flatnonzero(active & ~pool.adversarial)
        n_adv = int(self.rng.binomial(n, len(adv_active) / max(1, len(adv_active) + len(honest_active))))
        batches = max(1, math.ceil(n / s.batch_size))
        self.t.tx_count += 2 * batches
        self.t.gas += int(self.gas_model.per_job_happy(s.batch_size) * n)
        beta = keccak256(b"verillm sim beta" + s.seed.to_bytes(8, "big") + block.to_bytes(8, "big"))
        for k in range(n_adv):
            self._adversary_job(block, beta, k, int(self.rng.choice(adv_active)))
        n_hon = n - n_adv if len(honest_active) else 0  # every honest node slashed out: no honest service
        for k in range(int(self.rng.binomial(n_hon, self.a))):
            worker = int(self.rng.choice(honest_active))
            self._start_audit(block, compute_committee_seed(beta, n_adv + k), worker, self._dispatcher(worker), False)
        if self.strategy.shop and len(adv_active):
            shop(self, block, beta, honest_active, n_hon)
        if block % max(1, int(3600 / s.block_s)) == 0:
            if self.strategy.hostage:
                hold_leavers(self, honest_active)
            if self.strategy.front_run:
                claim_leavers(self, honest_active)

    def _dispatcher(self, worker: int) -> int:
        if self.rng.random() < self.s.self_dispatch:
            return worker
        return int(self.rng.integers(self.pool.size))

    def _adversary_job(self, block: int, beta: bytes, index: int, worker: int) -> None:
        cheat = self.rng.random() < self.cheat_rate
        dispatcher = self._dispatcher(worker)
        now = block * self.s.block_s
        if cheat:
            self.t.cheated_served += 1
            self.t.adversary_savings_wei += self.gain_wei
            self.first_cheat_s.setdefault(worker, now)
            if self.strategy.omit and self.rules.omission_possible and self.pool.adversarial[dispatcher]:
                # never batched: no audit, and the JOB_FEE_WEI levy the client paid for is kept
                self.t.cheated_omitted += 1
                self.t.adversary_savings_wei += self.preset.JOB_FEE_WEI
                return
        if not is_audited(beta, index, self.preset.AUDIT_RATE_BPS):
            self.t.cheated_unaudited += cheat
            return
        self._start_audit(block, compute_committee_seed(beta, index), worker, dispatcher, cheat)

    def _start_audit(self, block: int, seed: bytes, worker: int, dispatcher: int, cheated: bool) -> None:
        if not self.startable:
            self.t.audits_unstartable += 1
            self.t.cheated_unaudited += cheated
            return
        self.t.audits += 1
        self.t.cheated_audited += cheated
        contest = None
        if self.strategy.contest and not self.pool.adversarial[worker]:
            contest = draw_contest(self.pool, self.rng, self._p_miss_proof())
        out = run_audit(self.ctx, worker, dispatcher, cheated, seed, self.rng, audit_id=self.t.audits, contest=contest)
        self.t.tx_count += 2 * out.contested
        if self.strategy.behaviour.lazy:  # each lazy seat skipped a verification job's prefill
            self.t.adversary_savings_wei += self.verify_gain_wei * sum(
                1 for r in out.trace for s in r.get("seats", ()) if self.pool.adversarial[s])
        stalling = bool(self.pool.adversarial[dispatcher]) and cheated
        latency = audit_latency_blocks(self.preset, self.rules, self.s.block_s, stalling, out.redraws, out.rounds, out.escalated)
        parties = {worker, dispatcher} | set(out.slashed_wei) | set(out.credits_wei)
        locked = sum(self.pool.stake_wei(p) for p in parties) + (self.preset.COMMITTEE_SIZE - 1) * self.preset.MIN_STAKE_WEI
        self.locked_wei += locked
        self._count_chain(out)
        heapq.heappush(self.events, (block + latency, self.t.audits, out, locked, worker))
        self.t.latencies_s.append(latency * self.s.block_s)

    def _p_miss_proof(self) -> float:
        s = self.s
        if not s.outage_s:
            return s.offline
        return s.offline * math.exp(-self.preset.PROOF_WINDOW_BLOCKS * s.block_s / s.outage_s)

    def _count_chain(self, out) -> None:
        g, m = self.gas_model, self.preset.COMMITTEE_SIZE
        self.t.tx_count += g.member_txs() * m + 5 + out.redraws
        self.t.gas += g.audit_path(self.s.workers, m) + out.redraws * g.steps["replace_missing"]
        if out.escalated:
            self.t.tx_count += g.member_txs() * self.preset.ESCALATION_COMMITTEE_SIZE + 5
            self.t.gas += g.escalation_path(self.s.workers, self.preset.ESCALATION_COMMITTEE_SIZE)

    def _settle_due(self, block: int) -> None:
        while self.events and self.events[0][0] <= block:
            settle_block, _, out, locked, worker = heapq.heappop(self.events)
            self.locked_wei -= locked
            self._apply(settle_block, out, worker)

    def _apply(self, settle_block: int, out, worker: int) -> None:
        t, pool = self.t, self.pool
        t.abandoned += out.abandoned
        t.escalations += out.escalated
        t.lapsed_escalations += out.lapsed_escalation
        if out.cheated:
            caught = worker in out.slashed_wei
            t.cheated_audits_caught += caught
            self.cheat_audit_results[0 if caught else 1] += 1
            if caught and worker in self.first_cheat_s and pool.stake_units[worker] > 0:
                t.detection_s.append(settle_block * self.s.block_s - self.first_cheat_s[worker])
        honest_roles = {node: role for role, node, _wei in out.honest_slashed}
        for source in (out.slashed_wei, out.hunted_wei, out.silent_penalty_wei):
            for node, wei in source.items():
                self._take(node, wei, honest_roles.get(node), silent=source is out.silent_penalty_wei)
        for credits in (out.credits_wei, out.hunt_credits_wei):
            for node, wei in credits.items():
                if pool.adversarial[node]:
                    t.adversary_credits_wei += wei
                else:
                    t.honest_credits_wei += wei
        t.honest_no_answer_penalised += sum(1 for n in out.no_answer_penalised if not pool.adversarial[n])
        t.adversary_appeals += bool(out.escalated and pool.adversarial[out.escalator] and not pool.adversarial[worker])

    def _take(self, node: int, wei: int, role: str | None, silent: bool = False) -> None:
        """Take ``wei`` from ``node`` (a node slashed by an earlier settlement has less, or nothing,
        left); ``role``: the node followed the protocol in that role."""
        t, pool = self.t, self.pool
        before = int(pool.stake_units[node]) * pool.unit_wei
        units = min(int(pool.stake_units[node]), wei // pool.unit_wei)
        pool.stake_units[node] -= units
        taken = units * pool.unit_wei
        if pool.adversarial[node]:
            t.adversary_slashed_wei += taken
            t.adversary_silent_penalties += bool(silent and units)
        elif silent:
            t.honest_silent_penalty_wei += taken
        elif role is not None and units:
            t.honest_slashed_events[role] += 1
            t.honest_slashed_wei += taken
            # twice the penalty: a penalty computed on the stake its audit saw may land after another one
            t.honest_beyond_penalty_wei += taken if taken * BPS > 2 * self.preset.MEMBER_PENALTY_BPS * before else 0
        if pool.adversarial[node] and self.strategy.top_up and units:
            pool.stake_units[node] = max(int(pool.stake_units[node]), -(-self.preset.MIN_STAKE_WEI // pool.unit_wei))
        if pool.stake_units[node] * pool.unit_wei < self.preset.MIN_STAKE_WEI:
            left = int(pool.stake_units[node]) * pool.unit_wei
            pool.stake_units[node] = 0  # below MIN_STAKE: out of the sortition lists and of service
            if units and not pool.adversarial[node]:
                front_run_settle(self, node, left)

    def _adapt(self) -> None:
        slashed, escaped = self.cheat_audit_results
        p_slash = (1 + slashed) / (2 + slashed + escaped)
        adv = int((self.pool.adversarial & (self.pool.stake_units > 0)).sum())
        if adv == 0:
            return
        jobs_per_hour = self.s.jobs_per_s * 3600 * adv / max(1, int((self.pool.stake_units > 0).sum())) / adv
        self.cheat_rate = choose_adaptive_rate(jobs_per_hour, self.a, p_slash, self.gain_wei, self.preset.MIN_STAKE_WEI)

    def _sample(self, block: int, calls_per_block: float) -> None:
        t = self.t
        self.series["time_s"].append(block * self.s.block_s)
        self.series["locked_eth"].append(self.locked_wei / WEI)
        self.series["cheater_profit_eth"].append((t.adversary_savings_wei + t.adversary_credits_wei - t.adversary_slashed_wei) / WEI)
        self.series["active_adversaries"].append(int((self.pool.adversarial & (self.pool.stake_units > 0)).sum()))
        self.series["calls_per_block"].append(calls_per_block)

    def _summary(self, wall_s: float) -> dict:
        return summarize(self, wall_s)


def _with_rule_overrides(rules, overrides):
    unknown = {name for name, _ in overrides} - set(asdict(rules))
    if unknown:
        raise ConfigError(f"unknown rule flags: {sorted(unknown)}")
    return rules.with_changes(**dict(overrides), name=rules.name + "".join(f"+{k}={v}" for k, v in overrides)) if overrides else rules


def run_scenario(scenario: Scenario, gas: GasModel | None = None, progress: bool = False) -> dict:
    return Simulation(scenario, gas, progress).run()


__all__ = ["Scenario", "Simulation", "run_scenario", "asdict"]
