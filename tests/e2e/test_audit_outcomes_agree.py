"""Issue 36, "one truth": on the two-cheater devnet (an int8 worker and a lazy member, tiny model),
every view of every audit says the same thing — the votes that counted, the votes proven lies, who
lost what under which rule — because each renders `verillm.spec.outcome` over the chain's events:
`verillm audit chain --json` (from a JSON-RPC node), the explorer's audit page and list (from the
gateway's store), the status route and the SDK (the status body), and the devnet's own summary
and progress lines. The devnet is the session's (tests/e2e/conftest.py), shared with the explorer's
browser test."""

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from verillm.client import Client
from verillm.devnet.run import compute_vote_cell

pytestmark = pytest.mark.usefixtures("anvil_installed")
VERILLM = str(Path(sys.executable).parent / "verillm")
CATCH_UP_S = 120  # the gateway records the chain's events as it follows the head: wait for it to have them


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def _comparable(outcome: dict) -> dict:
    """What every view must agree on (addresses in one case: the chain's checksums, the store's JSON)."""
    return {
        "audit_id": outcome["audit_id"], "state": outcome["state"], "verdict": outcome["verdict"], "worker": outcome["worker"].lower(),
        "rounds": [(r["round_index"], r["verdict"], r["agree"], r["disagree"], r["counted"]["agree"], r["counted"]["disagree"]) for r in outcome["rounds"]],
        "votes": [(v["round_index"], v["slot"], v["node"].lower(), v["vote"], v["lie"], v["counted"]) for v in outcome["votes"]],
        "slashes": [(s["node"].lower(), s["role"], s["amount_wei"], s["rule"], s["meaning"], s["penalty"], s["lie"], s["tx_hash"]) for s in outcome["slashes"]],
        "paid": [(p["node"].lower(), p["amount_wei"], p["tx_hash"]) for p in outcome["paid"]],
    }


def _audit_chain(devnet) -> dict:
    """`verillm audit chain --json` over the devnet: what a JSON-RPC node's events say."""
    run = subprocess.run([VERILLM, "audit", "chain", "--rpc-url", devnet["rpc_url"], "--addresses", devnet["addresses_file"], "--json"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(run.stdout)


def _settled_audits(report: dict) -> dict[int, dict]:
    return {a["audit_id"]: a for a in report["audits"] if a["state"] != "open"}


def test_every_view_reports_the_same_outcome_for_every_audit(two_cheater_devnet):
    devnet = two_cheater_devnet
    report = _audit_chain(devnet)
    assert report["inconsistencies"] == 0
    audits = _settled_audits(report)
    assert len(audits) >= 10, report["audits"]
    roles = {n["address"].lower(): n["role"] for n in devnet["nodes"]}
    lazy = next(a for a, role in roles.items() if role == "lazy member")
    cheater = next(a for a, role in roles.items() if role.startswith("cheater"))
    base = devnet["gateway_url"] + "/v1/verillm/"

    # the explorer's audit page, from the gateway's store: equal to the chain's, once it has recorded the events
    deadline = time.monotonic() + CATCH_UP_S
    for audit_id, outcome in sorted(audits.items()):
        while True:
            page = _get(f"{base}explorer/audits/{audit_id}")
            if _comparable(page["chain_outcome"]) == _comparable(outcome) or time.monotonic() > deadline:
                break
            time.sleep(1.0)  # the gateway follows the chain's head: the condition is re-read, not assumed
        assert _comparable(page["chain_outcome"]) == _comparable(outcome), audit_id
        assert page["outcome"] == outcome["verdict"]
        assert [(s["node"].lower(), s["amount_wei"], s["rule"], s["reason"]) for s in page["slashed"]] == \
            [(s["node"].lower(), s["amount_wei"], s["rule"], s["meaning"]) for s in outcome["slashes"]]
        lies = {v["node"].lower() for v in outcome["votes"] if v["lie"]}
        assert {node for node, c in page["conduct"].items() if c["lie"] and node != outcome["worker"].lower()} == lies, audit_id

    # the explorer's list: every audit's votes marked as they turned out, and its slashes
    listed = {a["audit_id"]: a for a in _get(f"{base}explorer/audits?limit=200")["audits"]}
    for audit_id, outcome in audits.items():
        brief = listed[audit_id]
        assert brief["outcome"] == outcome["verdict"]
        lies = {v["node"].lower() for v in outcome["votes"] if v["lie"]}
        assert {v["node"].lower() for v in brief["votes"] if v["lie"]} == lies
        assert [(s["node"].lower(), s["amount_wei"], s["rule"]) for s in brief["slashed"]] == \
            [(s["node"].lower(), s["amount_wei"], s["rule"]) for s in outcome["slashes"]]

    # the status route and the SDK, for every job the devnet sent: the same outcome, the same slashes
    client = Client(devnet["gateway_url"])
    for job in devnet["jobs"]:
        body = _get(f"{base}audits/{job['job_hash']}")
        without_head = lambda status: {k: v for k, v in status.items() if k != "head"}  # noqa: E731 (the block each was read at)
        assert without_head(client.get_audit_status(job["job_hash"])) == without_head(body)
        audit = body["audit"]
        outcome = audits[audit["audit_id"]]
        assert _comparable(audit["chain_outcome"]) == _comparable(outcome), job
        assert [(s["node"].lower(), s["amount_wei"], s["rule"], s["reason"], s["penalty"]) for s in audit["slashed"]] == \
            [(s["node"].lower(), s["amount_wei"], s["rule"], s["meaning"], s["penalty"]) for s in outcome["slashes"]]

    # `audit chain` names each slash with its node, amount (ETH and wei) and rule
    for outcome in audits.values():
        for slash in outcome["slashes"]:
            assert any(slash["node"] in line and f"{slash['amount_eth']} ETH = {slash['amount_wei']} wei" in line and f'rule "{slash["rule"]}"' in line
                       for line in report["caught"]), slash

    # what the two cheaters came to, in the chain's own words
    rules = {(s["node"].lower(), s["rule"]) for o in audits.values() for s in o["slashes"]}
    assert (cheater, "failed audit") in rules
    lied = [v for o in audits.values() for v in o["votes"] if v["lie"]]
    assert lied and {v["node"].lower() for v in lied} == {lazy} and all(not v["counted"] for v in lied)
    assert (lazy, "Adjudicated") in rules

    # the devnet's summary and progress lines: the same votes, a proven lie shown as a lie
    if devnet.get("log") is None:
        pytest.skip("a reused devnet without its log: the summary cannot be read")
    text = devnet["log"].read_text()
    by_job = {job["n"]: audits[_get(f"{base}audits/{job['job_hash']}")["audit"]["audit_id"]] for job in devnet["jobs"]}
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\s+(\d+)\s+(?:node \d+|0x\S+)\s+\S+\s+(\S+)", text, re.M)}
    assert set(rows) == set(by_job), rows
    for n, outcome in by_job.items():
        assert rows[n] == compute_vote_cell(outcome["votes"]), (n, rows[n], outcome["votes"])
    assert "(lie)" in "".join(rows.values()) and "✓(lie): a vote proven a lie" in text
    assert "proven a lie: not counted" in text  # a progress line said so as it happened
    caught = text[text.index("chain audit:"):]  # the devnet's own run of the auditor printed the same lines
    ids = {o["audit_id"] for o in by_job.values()}
    assert all(line in caught for line in report["caught"] if int(line.split(":")[0].split()[1]) in ids)
