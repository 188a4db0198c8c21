"""Gas per protocol step as a function of the number of nodes serving the model.

Defaults: docs/gas.md (anvil, MAINNET, 11 nodes, 64+64 tokens, 7 layers) and the sortition
curve measured with `verillm bench gas --nodes N` at 11, 201, 1,001 and 2,001 nodes
(../shared/notes/economics-check.md §2g). `load_gas_json` replaces them with one or more
`verillm bench gas --json` reports (each names its node count). Past the last measured N the
curve is extended with its last slope (sortition is O(N)).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from verillm.errors import ConfigError

BLOCK_GAS_LIMIT = 30_000_000

STEPS_11 = {
    "post_batch": 93_932, "audit_draw": 215_648, "committee_receipt": 107_455, "draw_challenge": 59_068,
    "open": 121_930, "open_and_vote": 123_250, "verdict": 53_414, "settle": 209_126, "escalate": 142_834,
    "replace_missing": 300_000,  # not measured (docs/gas.md "Not measured"): assumed ≈ a 3-seat redraw
}
START_AUDIT_BY_NODES = {11: 681_931, 201: 1_710_000, 1001: 6_000_000, 2001: 11_840_000}
DRAW_ESCALATION_BY_NODES = {11: 602_924, 201: 1_850_000, 1001: 7_170_000, 2001: 14_060_000}


@dataclass
class GasModel:
    steps: dict = field(default_factory=lambda: dict(STEPS_11))
    start_audit: dict = field(default_factory=lambda: dict(START_AUDIT_BY_NODES))
    draw_escalation: dict = field(default_factory=lambda: dict(DRAW_ESCALATION_BY_NODES))
    source: str = "docs/gas.md + economics-check §2g"

    def start_audit_gas(self, nodes: int) -> int:
        return _curve(self.start_audit, nodes)

    def draw_escalation_gas(self, nodes: int) -> int:
        return _curve(self.draw_escalation, nodes)

    def per_job_happy(self, batch_size: int) -> float:
        return (self.steps["post_batch"] + self.steps["audit_draw"]) / batch_size

    def audit_path(self, nodes: int, committee: int) -> int:
        """One first round through settlement, every party answering."""
        s = self.steps
        return (self.start_audit_gas(nodes) + committee * (s["committee_receipt"] + s["open_and_vote"])
                + s["draw_challenge"] + s["open"] + s["verdict"] + s["settle"])

    def escalation_path(self, nodes: int, committee: int) -> int:
        s = self.steps
        return (s["escalate"] + self.draw_escalation_gas(nodes) + committee * (s["committee_receipt"] + s["open_and_vote"])
                + s["draw_challenge"] + s["open"] + s["verdict"])

    def largest_startable(self) -> int:
        """The largest N whose `startAudit` fits one block (O(n) sortition)."""
        n = 11
        while self.start_audit_gas(n + 1) <= BLOCK_GAS_LIMIT:
            n += max(1, (BLOCK_GAS_LIMIT - self.start_audit_gas(n)) // 20_000)
        return n

    def largest_nodes(self) -> int:
        """The largest N whose `startAudit` and `drawEscalation` fit one block."""
        n = 11
        while self.start_audit_gas(n) <= BLOCK_GAS_LIMIT and self.draw_escalation_gas(n) <= BLOCK_GAS_LIMIT:
            n += 10
        return n - 10


def _curve(points: dict, nodes: int) -> int:
    xs = np.array(sorted(points), dtype=float)
    ys = np.array([points[int(x)] for x in xs], dtype=float)
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
