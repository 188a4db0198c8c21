"""Gas per protocol step as a function of the number of nodes serving the model.

Defaults: docs/gas.md (anvil, MAINNET, 11 nodes, 64+64 tokens, 7 layers) and the sortition
curve measured with `verillm bench gas --nodes N` at 11, 201, 1,001 and 2,001 nodes
(../shared/notes/economics-check.md §2g). `load_gas_json` replaces them with one or more
`verillm bench gas --json` reports (each names its node count). Past the last measured N the
curve is extended with its last slope (sortition is O(N)).

`GasModel.log_n()` is the stake tree's (main since de774f2): `drawCommittee` of 3 measured on anvil
at 6, 128, 256, 1,000 and 10,000 registered nodes (docs/protocol.md §13 "Scale"), `startAudit`
= 775,370 gas at 10,000 nodes (measured) − the draw there + the draw at N; interpolated and
extended in log2(N) (~10k gas per doubling), so `startAudit` never reaches a block. Not measured:
`drawEscalation` under the tree, modelled as the 11-node measurement + 2.5 × the draw's growth.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from verillm.errors import ConfigError

BLOCK_GAS_LIMIT = 30_000_000

STEPS_11 = {
    "post_batch": 93_932, "audit_draw": 215_648, "committee_receipt": 107_455, "draw_challenge": 59_068,
    "open": 121_930, "verdict": 53_414, "settle": 209_126, "escalate": 142_834,
    # a member's two transactions (sealed votes, docs/gas.md "Sealed votes"): MAINNET, measured
    "seal_vote": 70_396, "open_and_vote": 124_620,
    "replace_missing": 300_000,  # not measured (docs/gas.md "Not measured"): assumed ≈ a 3-seat redraw
}
START_AUDIT_BY_NODES = {11: 681_931, 201: 1_710_000, 1001: 6_000_000, 2001: 11_840_000}
DRAW_ESCALATION_BY_NODES = {11: 602_924, 201: 1_850_000, 1001: 7_170_000, 2001: 14_060_000}

# the stake tree (O(log n)): drawCommittee of 3 (2 excluded) by registered nodes, and startAudit
DRAW_LOG_N = {6: 80_000, 128: 116_000, 256: 126_000, 1000: 143_000, 10_000: 175_149}
START_AUDIT_10K_LOG_N = 775_370
ESCALATION_DRAW_FACTOR = 2.5  # a 7-member drawEscalation ≈ 2.5× a 3-member draw (protocol.md §13)


@dataclass
class GasModel:
    steps: dict = field(default_factory=lambda: dict(STEPS_11))
    start_audit: dict = field(default_factory=lambda: dict(START_AUDIT_BY_NODES))
    draw_escalation: dict = field(default_factory=lambda: dict(DRAW_ESCALATION_BY_NODES))
    source: str = "docs/gas.md + economics-check §2g"
    log_n: bool = False
    """The curves are in log2(N) (the stake tree): interpolated and extended in log2(N)."""
    sealed_votes: bool = True
    """Each member seals its vote (`sealVote`) before it opens (`rules.sealed_votes`). False: one
    `openAndVote` (the sealed one's figure: it carries one more calldata word, the salt)."""

    @classmethod
    def log_n_tree(cls) -> "GasModel":
        draw11 = _curve(DRAW_LOG_N, 11, log=True)
        start = {n: START_AUDIT_10K_LOG_N - DRAW_LOG_N[10_000] + g for n, g in DRAW_LOG_N.items()}
        esc = {n: DRAW_ESCALATION_BY_NODES[11] + int(ESCALATION_DRAW_FACTOR * (g - draw11)) for n, g in DRAW_LOG_N.items()}
        return cls(start_audit=start, draw_escalation=esc, source="docs/gas.md + the stake tree (protocol.md §13 Scale)", log_n=True)

    @classmethod
    def for_rules(cls, rules) -> "GasModel":
        model = cls.log_n_tree() if rules.sortition_log_n else cls()
        model.sealed_votes = rules.sealed_votes
        return model

    def start_audit_gas(self, nodes: int) -> int:
        return _curve(self.start_audit, nodes, self.log_n)

    def draw_escalation_gas(self, nodes: int) -> int:
        return _curve(self.draw_escalation, nodes, self.log_n)

    def per_job_happy(self, batch_size: int) -> float:
        return (self.steps["post_batch"] + self.steps["audit_draw"]) / batch_size

    def member_txs(self) -> int:
        """One member's transactions in a round: its receipt, its seal (sealed votes), its opening."""
        return 3 if self.sealed_votes else 2

    def member_gas(self) -> int:
        s = self.steps
        return s["committee_receipt"] + (s["seal_vote"] if self.sealed_votes else 0) + s["open_and_vote"]

    def audit_path(self, nodes: int, committee: int) -> int:
        """One first round through settlement, every party answering."""
        s = self.steps
        return (self.start_audit_gas(nodes) + committee * self.member_gas()
                + s["draw_challenge"] + s["open"] + s["verdict"] + s["settle"])

    def escalation_path(self, nodes: int, committee: int) -> int:
        s = self.steps
        return (s["escalate"] + self.draw_escalation_gas(nodes) + committee * self.member_gas()
                + s["draw_challenge"] + s["open"] + s["verdict"])

    def largest_startable(self) -> int | None:
        """The largest N whose `startAudit` fits one block (O(n) sortition); None: every N (log n)."""
        if self.log_n:
            return None
        n = 11
        while self.start_audit_gas(n + 1) <= BLOCK_GAS_LIMIT:
            n += max(1, (BLOCK_GAS_LIMIT - self.start_audit_gas(n)) // 20_000)
        return n

    def largest_nodes(self) -> int | None:
        """The largest N whose `startAudit` and `drawEscalation` fit one block; None: every N."""
        if self.log_n:
            return None
        n = 11
        while self.start_audit_gas(n) <= BLOCK_GAS_LIMIT and self.draw_escalation_gas(n) <= BLOCK_GAS_LIMIT:
            n += 10
        return n - 10


def _curve(points: dict, nodes: int, log: bool = False) -> int:
    xs = np.array(sorted(points), dtype=float)
    ys = np.array([points[int(x)] for x in xs], dtype=float)
    if log:  # gas grows with the tree's depth: linear in log2(N)
        xs, nodes = np.log2(xs), float(np.log2(max(nodes, 1)))
    if nodes <= xs[-1] or len(xs) == 1:
        return int(np.interp(nodes, xs, ys))
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return int(ys[-1] + slope * (nodes - xs[-1]))


def load_gas_json(paths) -> GasModel:
    """Build the model from `verillm bench gas --json` reports (one per node count)."""
    model = GasModel(source=", ".join(str(p) for p in paths))
    model.start_audit, model.draw_escalation = {}, {}
    for path in paths:
        try:
            report = json.loads(Path(path).read_text())
            nodes = int(report.get("nodes", 11))
            model.start_audit[nodes] = int(report["start_audit"])
            model.draw_escalation[nodes] = int(report["draw_escalation"])
            for key in STEPS_11:
                if key in report:
                    model.steps[key] = int(report[key])
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError(f"{path} is not a `verillm bench gas` JSON: {exc}") from exc
    return model
