"""Measured inputs: detection and false rejection (`verillm bench detect` JSON), verification
cost (`verillm bench cost` JSON) and gas (docs/gas.md or a `verillm bench gas` JSON).

Every rate carries its 95% interval (Wilson; with no event in n trials the upper bound is the
rule of three, 3/n), so a result can be run at the point estimate or at a pessimistic bound.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

from verillm.errors import ConfigError

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
# The detection runs the simulator uses by default, per dtype: the shipped tolerance profiles
# (bf16: the safety-factor-2 profile measured with the fresh seed; the older bf16 run used a
# profile that was replaced because of its 20/96 false rejections).
DEFAULT_DETECT = {"float32": "detect-smollm2-fp32.json", "bfloat16": "detect-smollm2-bf16-seed2.json"}
DEFAULT_COST = "cost-smollm2.json"
PAPER_GPU_VERIFY_OVER_GENERATE = 0.01
"""Verification (one prefill) over generation on GPU: ≈1% (VeriLLM paper; DESIGN.md §targets)."""


@dataclass(frozen=True)
class Rate:
    successes: int
    trials: int

    @property
    def value(self) -> float:
        return self.successes / self.trials if self.trials else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        """95% interval: Wilson, except 0 or n events, where the rule of three bounds the gap."""
        n, k = self.trials, self.successes
        if n == 0:
            return 0.0, 1.0
        if k == 0:
            return 0.0, min(1.0, 3 / n)
        if k == n:
            return max(0.0, 1 - 3 / n), 1.0
        z = 1.96
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class DetectionModel:
    """Per-audit detection of each attack by one honest member, and honest false rejection."""

    source: str
    model: str
    dtype: str
    detection: dict[str, Rate]
    false_rejection: Rate

    def d(self, attack: str, bound: str = "point") -> float:
        if attack not in self.detection:
            raise ConfigError(f"attack {attack!r} not in {self.source}; measured: {sorted(self.detection)}")
        return _pick(self.detection[attack], bound, low_is_pessimistic=True)

    def mu(self, bound: str = "point") -> float:
        return _pick(self.false_rejection, bound, low_is_pessimistic=False)


def _pick(rate: Rate, bound: str, low_is_pessimistic: bool) -> float:
    if bound == "point":
        return rate.value
    if bound != "pessimistic":
        raise ConfigError(f"bound must be 'point' or 'pessimistic', not {bound!r}")
    low, high = rate.interval
    return low if low_is_pessimistic else high


def load_detection(path: str | Path | None = None, dtype: str = "float32") -> DetectionModel:
    """Load a `verillm bench detect` JSON (default: the shipped run for ``dtype``)."""
    if path is None:
        if dtype not in DEFAULT_DETECT:
            raise ConfigError(f"no default detection run for dtype {dtype!r}; known: {sorted(DEFAULT_DETECT)}")
        path = RESULTS / DEFAULT_DETECT[dtype]
    data = _load(path)
    try:
        detection = {name: Rate(a["detected"], a["audits"]) for name, a in data["attacks"].items()}
        honest = Rate(data["honest"]["false_rejections"], data["honest"]["audits"])
        return DetectionModel(Path(path).name, data["model"], data["dtype"], detection, honest)
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is not a `verillm bench detect` JSON: missing {exc}") from exc


@dataclass(frozen=True)
class CostModel:
    source: str
    verify_over_generate: float
    """Measured on this machine's CPU (process CPU time, one thread)."""


def load_cost(path: str | Path | None = None) -> CostModel:
    path = path or RESULTS / DEFAULT_COST
    data = _load(path)
    if "verify_over_generate" not in data:
        raise ConfigError(f"{path} is not a `verillm bench cost` JSON (no verify_over_generate)")
    return CostModel(Path(path).name, float(data["verify_over_generate"]))


def _load(path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"no such results file: {path}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from exc
