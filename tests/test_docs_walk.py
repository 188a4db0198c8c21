"""Every command of README.md and the user guides is run by a walk or skipped with its reason
(tests/helpers/docs_plan.py), and the quick walk runs here, in the default suite: a node key,
`verillm chain anvil` with its printed dev keys, the faucet, mining, a deployment, the chain
library snippet, a tiny checkpoint and its manifest, all as the docs write them. The walks that
need a devnet or a node are tests/e2e/test_docs_walk_slow.py."""

import json
import re

import pytest

from helpers import docs_plan as plan
from helpers.docs_walk import Shell, all_commands, compute_shown_output, free_port, run_python, substitute


def _python_walked(command) -> bool:
    """sdk.md's python blocks all run on the devnet, in order (one session), unless skipped."""
    return command.doc == "docs/sdk.md" and command.lang == "python"


def test_every_documented_command_is_walked_or_skipped_with_a_reason():
    commands = all_commands()
    listed = {(c.doc, c.key) for c in commands}
    listing_blocks = {(c.doc, c.block) for c in commands for doc, first in plan.LISTING_BLOCKS if c.doc == doc and c.key.startswith(first)}
    assert len(listing_blocks) == len(plan.LISTING_BLOCKS), "a listing block the plan names is gone"
    in_listing = {(c.doc, c.key) for c in commands if (c.doc, c.block) in listing_blocks}
    unplaced = [str(c) for c in commands if (c.doc, c.key) not in plan.walked() | set(plan.SKIPS) | in_listing and not _python_walked(c)]
    assert unplaced == [], "documented commands no walk runs and no skip names (tests/helpers/docs_plan.py):\n" + "\n".join(unplaced)
    stale = sorted(f"{doc}: {key}" for doc, key in plan.walked() | set(plan.SKIPS) if (doc, key) not in listed)
    assert stale == [], "the plan names commands the docs no longer have:\n" + "\n".join(stale)
    assert plan.walked() & set(plan.SKIPS) == set()
    assert all(len(reason) > 20 for reason in plan.SKIPS.values())


def test_the_extraction_finds_commands_and_snippets_where_the_docs_have_them():
    found = {(c.doc, c.lang) for c in all_commands()}
    assert {("docs/sdk.md", "python"), ("docs/sdk.md", "bash"), ("docs/operators.md", "bash"), ("docs/devnet.md", ""),
            ("docs/auditors.md", ""), ("docs/chain.md", "python"), ("docs/benchmarks.md", "bash")} <= found
    keys = [c.key for c in all_commands()]
    assert "curl -s localhost:8000/v1/completions -H 'content-type: application/json' -d " \
           "'{\"model\": \"smollm2\", \"prompt\": \"The capital of France is\", \"max_tokens\": 8, \"temperature\": 0}'" in keys  # `\` joined
    assert not any(key.startswith(("Replay of job", "verillm/spec/")) for key in keys)  # printouts and the layout are not commands


def _command(doc: str, key: str):
    return next(c for c in all_commands() if (c.doc, c.key) == (doc, key))


@pytest.mark.usefixtures("anvil_installed")
def test_the_quick_walk_runs_as_written(tmp_path):
    shell = Shell(tmp_path / "walk")
    port = free_port()
    values = {"8545": str(port), "/srv/verillm/profiles": str(tmp_path / "srv/verillm/profiles")}
    try:
        for doc, key in plan.QUICK:
            command = _command(doc, key)
            if command.lang == "python":
                out = run_python(shell, [command], values)
                assert re.search(r"\[docs/chain.md:\d+\] 42$", out, re.M), out  # `probe.call("values", 1)  # 42`
                continue
            text = substitute(command.text, values)
            if key.startswith("verillm chain anvil"):
                out = shell.start(text, ready=r"account \(0\) is the usual deployer")
                values["0x<hex>"] = re.search(r"\(0\) 0x[0-9a-fA-F]{40}\s+key (0x[0-9a-f]{64})", out).group(1)
                continue
            out = shell.run(text, expect=plan.EXIT_CODES.get((doc, key), 0))
            if key.startswith("verillm keys new"):
                values["0xADDRESS"] = out.split()[0]
            if key.startswith("export OWNER_KEY"):
                assert shell.env["OWNER_KEY"] == values["0x<hex>"], "the doc's OWNER_KEY is not dev account (0) that anvil printed"
            if key.startswith("verillm chain fund"):
                assert "balance now 1.5 ETH" in out, out
            if "--next-epoch" in key:
                epoch = json.loads((shell.cwd / "addresses.json").read_text())
                assert "mined" in out and epoch["addresses"]["Registry"], out
            if key.startswith("verillm model inspect"):  # prints what the doc shows (the checkpoint is seeded)
                printed = " ".join(out.split())
                shown = [substitute(line, {**values, "~": shell.env["HOME"]}) for line in compute_shown_output(command)]
                assert len(shown) >= 6 and [line for line in shown if line not in printed] == [], out
        assert (shell.cwd / "node.toml").read_text() == (shell.cwd / "ops/node.toml").read_text()
    finally:
        codes = shell.stop_all()
    assert codes == [(substitute(_command("docs/operators.md", "verillm chain anvil --port 8545").text, values), 0)], codes
