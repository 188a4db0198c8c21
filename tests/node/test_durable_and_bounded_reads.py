"""Smaller items of issue 22, each replayed: a batching promise is written at synchronous=FULL, the
explorer's ``?limit=`` is bounded, and a job's evidence is never built for someone who may not read it."""

import pytest

from verillm.node.api import dispatcher_views
from verillm.node.api.explorer_views import MAX_LIMIT, compute_int_param
from verillm.node.appkeys import APP_KEY, APP_SERVICE, APP_STORE
from verillm.node.dispatcher.service import DispatchService
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.store.store import open_store
from verillm.spec.receipt import SigningDomain, compute_receipt, sign_receipt
from verillm.spec.types import Job, SamplingParams
from verillm.errors import InvalidInput

KEY = b"\x07" * 32
JOB = Job(b"\x01" * 32, (1, 2, 3), SamplingParams(), 4, b"\x02" * 32)
JOB_HASH = b"\x0a" * 32


def _receipt():
    from eth_keys import keys

    worker = keys.PrivateKey(KEY).public_key.to_canonical_address()
    return sign_receipt(compute_receipt(JOB, (5, 6), b"\x09" * 32, worker, 1_000), KEY, SigningDomain(31337, b"\x33" * 20))


def test_a_promise_and_the_receipt_it_covers_are_written_at_synchronous_full(tmp_path):
    """A lost promise (or the receipt it promises to batch) after a power cut is an omission the dispatcher
    cannot answer: its stake. Both commits run at FULL on a connection whose own mode is NORMAL."""
    store = open_store(tmp_path / "node.sqlite", synchronous="NORMAL")
    tables = DispatcherTables(store.db)
    statements = []
    store.db.conn.set_trace_callback(statements.append)
    tables.insert_dispatched_job(b"\x0a" * 32, JOB, b"\x0b" * 20, "", (5, 6), _receipt(), False)
    tables.insert_promise(b"\x0a" * 32, b"\x0c" * 32, 99, b"\x0d" * 65)
    store.db.conn.set_trace_callback(None)
    for table in ("dispatch_jobs", "batch_promises"):
        insert = next(i for i, s in enumerate(statements) if s.startswith(f"INSERT OR IGNORE INTO {table}"))
        before = [s for s in statements[:insert] if s.startswith("PRAGMA synchronous =")]
        after = [s for s in statements[insert:] if s.startswith("PRAGMA synchronous =")]
        assert before[-1] == "PRAGMA synchronous = 2" and after[0] == "PRAGMA synchronous = 1", statements
        assert statements.index("COMMIT", insert) < statements.index(after[0], insert)  # committed while FULL
    assert store.db.execute("PRAGMA synchronous").fetchone()[0] == 1  # the connection's own mode is back


@pytest.mark.parametrize("raw, expected", [(None, 50), ("1", 1), (str(MAX_LIMIT), MAX_LIMIT)])
def test_explorer_limits_within_bounds_are_taken(raw, expected):
    query = {} if raw is None else {"limit": raw}
    assert compute_int_param(query, "limit", 50, 1, MAX_LIMIT) == expected


async def test_explorer_limit_minus_one_is_refused_not_unlimited(node, http):
    """SQLite reads LIMIT -1 as no limit: ?limit=-1 listed every job the node ever dispatched."""
    for raw in ("-1", "0", str(MAX_LIMIT + 1), "ten"):
        async with http.get(f"{node.url}/v1/verillm/explorer/jobs?limit={raw}") as response:
            body = await response.json()
            assert response.status == 400 and body["error"]["code"] == "invalid_input" and "limit" in body["error"]["message"], body
    with pytest.raises(InvalidInput, match="expected an integer from 1 to"):
        compute_int_param({"limit": "-1"}, "limit", 50, 1, MAX_LIMIT)


async def test_evidence_is_not_built_for_a_reader_who_may_not_read_it(node, http, monkeypatch):
    """Anonymous callers made the node build a job's evidence (every opening, every member's job)
    before the access check refused them."""
    tables = DispatcherTables(node.app[APP_STORE].db)
    tables.insert_dispatched_job(b"\x0a" * 32, JOB, b"\x0b" * 20, "", (5, 6), _receipt(), False)
    node.app[APP_SERVICE] = DispatchService(None, tables, None, None, None)
    built = []
    real = dispatcher_views.compute_evidence
    monkeypatch.setattr(dispatcher_views, "compute_evidence", lambda *args: built.append(args) or real(*args))
    url = f"{node.url}/v1/verillm/audits/0x{'0a' * 32}/evidence"
    async with http.get(url) as response:
        assert response.status == 401 and built == []
    from verillm.node.api.access import compute_read_token

    token = compute_read_token(node.app[APP_KEY], JOB_HASH)
    async with http.get(f"{url}?token={token}") as response:
        assert response.status == 200 and len(built) == 1
