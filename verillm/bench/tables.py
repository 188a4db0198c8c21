"""Plain-text tables and JSON output shared by the benchmark commands."""

import json
from pathlib import Path

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "float32": "float32", "bfloat16": "bfloat16"}


def format_table(headers: list[str], rows: list[list]) -> str:
    """Return ``rows`` as an aligned text table."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def write_json(path: str | None, payload: dict) -> None:
    """Write ``payload`` as indented JSON to ``path`` (no-op when None)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
