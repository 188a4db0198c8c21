"""Every chain write the daemon makes names a `Protocol` method: `ChainIO.send(name, ...)` looks the
method up by name at run time, so a renamed method (`verdict` → `finalize`, `open` →
`open_worker`) fails only when an audit reaches that step: every worker default-failed and
every audit stalled on a devnet (issue 23). Read the names from the source and check them all."""

import re
from pathlib import Path

from verillm.chain.protocol import Protocol

ROOT = Path(__file__).parents[3] / "node"
SEND = re.compile(r"""(?:chainio\.send|_send_once)\(\s*["']([a-z_]+)["']""")


def test_every_send_names_a_protocol_method():
    names = {(path.name, name) for path in ROOT.rglob("*.py") for name in SEND.findall(path.read_text())}
    assert len(names) >= 15, names  # the reader finds the daemon's sends
    missing = sorted((file, name) for file, name in names if not callable(getattr(Protocol, name, None)))
    assert missing == [], f"ChainIO.send names no Protocol method: {missing}"
