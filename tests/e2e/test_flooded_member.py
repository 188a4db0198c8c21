"""A flooded committee member still commits in its window, and the audit completes (issue 22, item 1).

The attack as the issue ran it: committee members are named on-chain, so a cheating worker floods
its own auditors. Here one node (node 4) is flooded from the moment audited jobs are sent until
they settle, two ways at once: correctly signed native jobs from a fresh key per request (free to
make), and native jobs from a staked peer's key (node 1: accountable, so admitted up to its
quota), each asking for 256 new tokens. (The OpenAI route's own bounds are tests/node/test_abuse.py's:
there node 4 is a gateway that routes the flood's jobs to other workers and audits every one on
MINIMAL, which loads the whole network rather than node 4.) Before: anonymous senders took the queue slots kept for committee jobs, the
member's seats were refused `queue_full`, the redraw exhausted the pool and the audit was
abandoned. Now anonymous senders get 403, the peer 429 past its share, and committee jobs of the
audits node 4 sits on run in the committee lane: every seat of node 4 is posted within its
commit window and every audit settles. The figures are printed (`-s`) for the closing note.

A devnet as `verillm devnet` runs it (anvil with 1 s blocks, 60 s windows), five honest nodes
(node 0 the gateway and every audit's dispatcher), tiny model; a few minutes.
"""

import json
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

import pytest

from verillm.devnet.network import LocalNetwork, NodeSpec
from verillm.devnet.windows import compute_timed_preset
from verillm.node.envelope import encode_envelope_json, sign_envelope
from verillm.node.keys import compute_node_key, new_node_key
from verillm.spec.encoding import encode
from verillm.spec.params import MINIMAL
from verillm.spec.types import Job, SamplingParams

from e2e_network import send_jobs, wait_settled

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("anvil_installed")]
JOBS_PATH = "/v1/verillm/jobs"
WINDOW_S = 60.0


def post(url: str, body: bytes, timeout_s: float = 30.0) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code
    except (urllib.error.URLError, TimeoutError, ConnectionError):
        return 0


class Flood:
    """Threads hammering one node until stopped; counts every answer by kind and status."""

    def __init__(self, url: str, recipient: bytes, model_id: bytes, peer_key):
        self.url, self.recipient, self.model_id, self.peer_key = url, recipient, model_id, peer_key
        self.stop, self.counts, self.lock, self.threads = threading.Event(), Counter(), threading.Lock(), []

    def _job(self, n: int) -> bytes:
        return encode(Job(self.model_id, (5, 6, 7, 8 + n % 500), SamplingParams(), 256, n.to_bytes(32, "big")))

    def _native(self, key, n: int) -> int:
        envelope = encode_envelope_json(sign_envelope(JOBS_PATH, self._job(n), key.private_key, self.recipient))
        return post(f"{self.url}{JOBS_PATH}?wait=0", envelope)

    def _loop(self, kind: str, send, offset: int) -> None:
        n = offset
        while not self.stop.is_set():
            status = send(n)
            with self.lock:
                self.counts[(kind, status)] += 1
            n += 1
            if status in (429, 503):
                time.sleep(0.05)  # a polite retry pace; the anonymous flood never waits

    def start(self) -> None:
        kinds = [("anonymous", lambda n: self._native(new_node_key(), n), 0)] * 4
        kinds += [("staked peer", lambda n: self._native(self.peer_key, n), 10**6)] * 2
        for i, (kind, send, offset) in enumerate(kinds):
            thread = threading.Thread(target=self._loop, args=(kind, send, offset + i * 10**5), daemon=True)
            thread.start()
            self.threads.append(thread)

    def finish(self) -> Counter:
        self.stop.set()
        for thread in self.threads:
            thread.join(150)
        return self.counts


def get_seats(gateway_db: str, member: str) -> list[tuple[int, int, int, int | None]]:
    """(audit, round, draw block, receipt block or None) of every seat ``member`` was drawn to, from the gateway's events."""
    with sqlite3.connect(f"file:{gateway_db}?mode=ro", uri=True) as db:
        events = [(name, audit, block, json.loads(args)) for name, audit, block, args in
                  db.execute("SELECT name, audit_id, block_number, args FROM chain_events WHERE name IN ('CommitteeDrawn', 'CommitteeReceiptPosted') "
                             "ORDER BY block_number, log_index")]
    seats = []
    for name, audit, block, args in events:
        if name == "CommitteeDrawn" and member in [m.lower() for m in args["members"]]:
            posted = [b for n, a, b, x in events if n == "CommitteeReceiptPosted" and a == audit and x["round"] == args["round"]
                      and x["member"].lower() == member]
            seats.append((audit, args["round"], block, posted[0] if posted else None))
    return seats


def test_a_flooded_committee_member_commits_in_its_window_and_every_audit_settles(tmp_path):
    preset = compute_timed_preset(MINIMAL, 1.0, WINDOW_S)
    with LocalNetwork(tmp_path / "net", [NodeSpec() for _ in range(5)], preset=preset, chain="anvil", block_time_s=1.0, log=lambda line: None) as net:
        net.wait_gateway_sees_all()
        target = net.nodes[4]
        peer_key = compute_node_key(bytes.fromhex(json.loads(net.nodes[1].key_file.read_text())["private_key"][2:]))
        flood = Flood(target.url, bytes.fromhex(target.address[2:]), net.model_id, peer_key)
        flood.start()
        started = time.monotonic()
        try:
            completions = send_jobs(net, 4)
            bodies = wait_settled(net, completions, timeout_s=480)
        finally:
            counts = flood.finish()
        flooded_s = time.monotonic() - started
        seats = get_seats(str(net.nodes[0].key_file.parent / "node.sqlite"), target.address.lower())
    delays = [posted - drawn for _, _, drawn, posted in seats if posted is not None]
    print(f"\nflood of node 4 for {flooded_s:.0f} s: " + ", ".join(f"{kind} {status or 'no answer'}: {n}" for (kind, status), n in sorted(counts.items())))
    print(f"node 4's seats: {len(seats)}, posted {len(delays)}, commit delay (blocks after the draw) {sorted(delays)} "
          f"of a {preset.COMMIT_WINDOW_BLOCKS}-block window; audits: {[b['audit']['status'] + '/' + b['status'] for b in bodies]}")
    assert counts[("anonymous", 403)] > 0 and not any(status in (200, 202) for (kind, status) in counts if kind == "anonymous")
    assert counts[("staked peer", 202)] > 0 and counts[("staked peer", 429)] > 0  # admitted, within its quota
    assert all(b["audit"]["status"] == "settled" and b["status"] == "final" for b in bodies), bodies
    assert seats and all(posted is not None and posted - drawn <= preset.COMMIT_WINDOW_BLOCKS for _, _, drawn, posted in seats), seats
