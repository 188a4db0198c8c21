"""Hypothesis settings shared by the fuzz targets (see conftest.py)."""

import os

from hypothesis import HealthCheck, settings

DEFAULT_EXAMPLES = 150
FUZZ_EXAMPLES = int(os.environ.get("VERILLM_FUZZ_EXAMPLES", "100000"))


def fuzz_settings(examples: int) -> settings:
    """Hypothesis settings for a target: no deadline (a shared 2-core box), no example database."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=examples == DEFAULT_EXAMPLES,  # the default suite is reproducible; long runs explore
        suppress_health_check=list(HealthCheck),
    )


_cases = {"count": 0}


def tally() -> None:
    """Count one generated case (called first in every target's body); conftest reports the total per test."""
    _cases["count"] += 1


def take_tally() -> int:
    """Return the cases counted since the last call, and reset."""
    count, _cases["count"] = _cases["count"], 0
    return count
