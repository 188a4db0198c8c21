"""The explorer's reads of the node store: pages of jobs and audits with filters, events by batch,
transaction, block, audit and address, counts for the network summary, and block timestamps.

Every query here is served by an index (migrations 3, 5 and 7); pages are bounded by the caller
(`limit` ≤ the explorer's maximum). Runs on the event-loop thread, like the dispatcher's tables.
"""

import json

from sqlite_utils import Database

from verillm.spec.outcome import AuditOutcome, EventRecord, compute_audit_outcome, compute_tx_key

from verillm.node.store.migrations import transaction

# A dispatched job's status, as `verillm.node.dispatcher.status.compute_job_status` derives it,
# in SQL so that a page can be filtered on it (tests/node/test_explorer_tables.py keeps the two equal).
JOB_ROWS = """
SELECT d.job_hash, d.worker, d.created_at, d.audit_requested, lower(hex(substr(d.job, 1, 32))) AS model_id,
       b.id AS batch_row, b.batch_id, b.status AS batch_status, b.posted_block, d.batch_index,
       a.audit_id, a.status AS audit_status, a.verdict,
       (SELECT json_extract(e.args, '$.verdict') FROM chain_events e WHERE e.audit_id = a.audit_id AND e.name = 'RoundDecided'
        ORDER BY e.block_number DESC, e.log_index DESC LIMIT 1) AS round_verdict,
       (SELECT e.block_number FROM chain_events e WHERE e.batch_id = b.batch_id AND e.name = 'AuditDrawn'
        ORDER BY e.block_number LIMIT 1) AS drawn_block
FROM dispatch_jobs d
LEFT JOIN dispatch_batches b ON b.id = d.batch_row AND b.status != 'posting'
LEFT JOIN dispatch_audits a ON b.id IS NOT NULL AND a.batch_row = d.batch_row AND a.batch_index = d.batch_index
"""

JOB_STATUS = """
CASE
    WHEN batch_row IS NULL THEN 'dispatched'
    WHEN audit_id IS NULL THEN
        CASE WHEN batch_status IN ('drawn', 'started') AND drawn_block IS NOT NULL AND :head > drawn_block + :start_window
             THEN 'final' ELSE 'committed' END
    WHEN audit_status = 'abandoned' THEN 'abandoned'
    ELSE CASE (CASE WHEN audit_status = 'settled' THEN verdict ELSE round_verdict END)
        WHEN 2 THEN 'slashed' WHEN 4 THEN 'slashed' WHEN 3 THEN 'tie'
        WHEN 1 THEN (CASE WHEN audit_status = 'settled' THEN 'final' ELSE 'verified' END)
        ELSE 'audited' END
END
"""

# An audit's outcome from the chain's events: 'open' until it settles or is abandoned.
AUDIT_ROWS = """
SELECT s.audit_id, s.block_number AS started_block, s.tx_hash, s.args,
       (SELECT json_extract(e.args, '$.verdict') FROM chain_events e WHERE e.audit_id = s.audit_id AND e.name = 'AuditSettled' LIMIT 1) AS settled,
       (SELECT e.block_number FROM chain_events e WHERE e.audit_id = s.audit_id AND e.name IN ('AuditSettled', 'AuditAbandoned') LIMIT 1) AS ended_block,
       EXISTS (SELECT 1 FROM chain_events e WHERE e.audit_id = s.audit_id AND e.name = 'AuditAbandoned') AS abandoned
FROM chain_events s
"""

AUDIT_VERDICT = """
CASE WHEN abandoned THEN 'abandoned' WHEN settled = 1 THEN 'pass' WHEN settled = 2 THEN 'fail' WHEN settled = 3 THEN 'tie'
     WHEN settled = 4 THEN 'worker-default' ELSE 'open' END
"""


def _event(row: dict) -> dict:
    return {**row, "args": json.loads(row["args"])}


def compute_event_records(rows: list[dict]) -> list[EventRecord]:
    """Recorded event rows (args decoded) as the spec's `EventRecord`s."""
    return [EventRecord(r["name"], r["args"], r["block_number"], r.get("log_index", 0), compute_tx_key(r.get("tx_hash") or "")) for r in rows]


class ExplorerTables:
    """Indexed reads for the explorer's JSON routes."""

    def __init__(self, db: Database):
        self.db = db

    def _rows(self, sql: str, params: dict | list | tuple = ()) -> list[dict]:
        return list(self.db.query(sql, params))

    # --- jobs this node dispatched ------------------------------------------------------------

    def get_job_page(self, head: int, start_window: int, limit: int, offset: int, status: str | None = None,
                     worker: bytes | None = None, model: bytes | None = None) -> tuple[int, list[dict]]:
        """Return (how many jobs match, the page of them newest first), each with its status."""
        where, params = [], {"head": head, "start_window": start_window, "limit": limit, "offset": offset}
        if worker is not None:
            where.append("d.worker = :worker")
            params["worker"] = worker.hex()
        if model is not None:
            where.append("substr(d.job, 1, 32) = :model")  # the expression of dispatch_jobs_by_model
            params["model"] = model
        inner = JOB_ROWS + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY d.created_at DESC, d.job_hash"
        outer = f"SELECT * FROM (SELECT *, {JOB_STATUS} AS status FROM ({inner}))" + (" WHERE status = :status" if status else "")
        params["status"] = status
        total = self.db.execute(f"SELECT COUNT(*) FROM ({outer})", params).fetchone()[0]
        return total, self._rows(outer + " LIMIT :limit OFFSET :offset", params)

    def get_job_rows(self, job_hashes: list[str], head: int, start_window: int) -> list[dict]:
        """Return the rows (with status) of those of ``job_hashes`` (hex, no 0x) that this node dispatched."""
        if not job_hashes:
            return []
        params = {"head": head, "start_window": start_window, **{f"h{i}": h for i, h in enumerate(job_hashes)}}
        marks = ", ".join(f":h{i}" for i in range(len(job_hashes)))
        return self._rows(f"SELECT *, {JOB_STATUS} AS status FROM ({JOB_ROWS} WHERE d.job_hash IN ({marks}))", params)

    def get_jobs_of_batch(self, batch_id: int, head: int, start_window: int) -> list[dict]:
        """Return this node's jobs in the chain's batch ``batch_id``, by leaf index."""
        sql = f"SELECT *, {JOB_STATUS} AS status FROM ({JOB_ROWS} WHERE b.batch_id = :batch_id) ORDER BY batch_index"
        return self._rows(sql, {"batch_id": batch_id, "head": head, "start_window": start_window})

    def get_job_by_receipt_or_committee_hash(self, digest: bytes) -> tuple[str, int | None] | None:
        """Return ('job', None) for a receipt hash of a dispatched job, ('audit', id) for a committee job's hash."""
        rows = self._rows("SELECT job_hash FROM dispatch_jobs WHERE receipt_hash = ?", [digest.hex()])
        if rows:
            return rows[0]["job_hash"], None
        rows = self._rows("SELECT audit_id FROM committee_jobs WHERE job_hash = ? LIMIT 1", [digest.hex()])
        return ("", rows[0]["audit_id"]) if rows else None

    def has_job(self, job_hash: bytes) -> bool:
        return bool(self.db.execute("SELECT 1 FROM dispatch_jobs WHERE job_hash = ?", [job_hash.hex()]).fetchone())

    # --- audits, from the chain's events ------------------------------------------------------

    def get_audit_page(self, limit: int, offset: int, verdict: str | None = None, worker: bytes | None = None) -> tuple[int, list[dict]]:
        """Return (how many audits match, the page of them newest first), every audit the chain started."""
        params: dict = {"limit": limit, "offset": offset, "verdict": verdict}
        source = AUDIT_ROWS + " WHERE s.name = 'AuditStarted'"
        if worker is not None:
            source = AUDIT_ROWS + (" JOIN chain_event_parties p ON p.block_number = s.block_number AND p.log_index = s.log_index"
                                   " WHERE s.name = 'AuditStarted' AND p.address = :worker AND p.role = 'worker'")
            params["worker"] = "0x" + worker.hex()
        outer = f"SELECT * FROM (SELECT *, {AUDIT_VERDICT} AS outcome FROM ({source}))" + (" WHERE outcome = :verdict" if verdict else "")
        total = self.db.execute(f"SELECT COUNT(*) FROM ({outer})", params).fetchone()[0]
        rows = self._rows(outer + " ORDER BY started_block DESC, audit_id DESC LIMIT :limit OFFSET :offset", params)
        return total, [_event(r) for r in rows]

    def get_audit_outcome(self, audit_id: int) -> dict | None:
        rows = self._rows(f"SELECT *, {AUDIT_VERDICT} AS outcome FROM ({AUDIT_ROWS} WHERE s.name = 'AuditStarted' AND s.audit_id = ?)", [audit_id])
        return _event(rows[0]) if rows else None

    def find_audit_by_receipt_hash(self, receipt_hash: bytes) -> int | None:
        """The audit started on ``receipt_hash`` (any dispatcher's: the receipt hash is in AuditStarted)."""
        row = self.db.execute("SELECT audit_id FROM chain_events WHERE name = 'AuditStarted' AND json_extract(args, '$.receiptHash') = ?",
                              ["0x" + receipt_hash.hex()]).fetchone()
        return row[0] if row else None

    def count_audits_by_outcome(self) -> dict[str, int]:
        return dict(self.db.execute(f"SELECT {AUDIT_VERDICT} AS outcome, COUNT(*) FROM ({AUDIT_ROWS} WHERE s.name = 'AuditStarted') GROUP BY outcome").fetchall())

    def get_dispatched_audit(self, audit_id: int) -> dict | None:
        """Return this node's dispatch_audits row of ``audit_id`` (None: another dispatcher's audit)."""
        rows = self._rows("SELECT * FROM dispatch_audits WHERE audit_id = ?", [audit_id])
        return rows[0] if rows else None

    # --- events ---------------------------------------------------------------------------------

    def get_audit_events(self, audit_id: int) -> list[dict]:
        """Every recorded event of one audit (those carrying its id), in chain order."""
        return [_event(r) for r in self._rows("SELECT * FROM chain_events WHERE audit_id = ? ORDER BY block_number, log_index", [audit_id])]

    def get_outcome_events(self, audit_id: int) -> list[dict]:
        """What `verillm.spec.outcome` reads for one audit: its events, its contests' `ContestLost` (they
        name no audit) and the Registry's `Slashed` (an adjudication's amount) and Jobs' `Credited` (who was
        paid) of the same transactions."""
        own = self.get_audit_events(audit_id)
        lost = [e for e in self.get_contest_events(sorted({e["contest_id"] for e in own if e["name"] == "Contested"})) if e["name"] == "ContestLost"]
        taken = [e for e in self.get_txs_events(sorted({e["tx_hash"] for e in own + lost})) if e["name"] in ("Slashed", "Credited")]
        return own + lost + taken

    def get_outcome(self, audit_id: int, worker: str | None = None) -> AuditOutcome | None:
        """The audit's outcome (`verillm.spec.outcome.compute_audit_outcome`); None before its start is
        recorded, unless the caller knows its ``worker`` (a dispatcher knows its own audits')."""
        events = self.get_outcome_events(audit_id)
        if worker is None and not any(e["name"] == "AuditStarted" for e in events):
            return None
        return compute_audit_outcome(compute_event_records(events), worker)

    def get_batch_events(self, batch_id: int) -> list[dict]:
        return [_event(r) for r in self._rows("SELECT * FROM chain_events WHERE batch_id = ? ORDER BY block_number, log_index", [batch_id])]

    def get_tx_events(self, tx_hash: bytes) -> list[dict]:
        return [_event(r) for r in self._rows("SELECT * FROM chain_events WHERE tx_hash = ? ORDER BY log_index", [tx_hash.hex()])]

    def get_txs_events(self, tx_hashes: list[str]) -> list[dict]:
        """Events of several transactions (hex, no 0x): e.g. the Registry's `Slashed` beside an audit's `PartySlashed`."""
        if not tx_hashes:
            return []
        marks = ", ".join("?" * len(tx_hashes))
        return [_event(r) for r in self._rows(f"SELECT * FROM chain_events WHERE tx_hash IN ({marks}) ORDER BY block_number, log_index", tx_hashes)]

    def get_block_events(self, block: int) -> list[dict]:
        return [_event(r) for r in self._rows("SELECT * FROM chain_events WHERE block_number = ? ORDER BY log_index", [block])]

    def get_contest_events(self, contest_ids: list[int]) -> list[dict]:
        if not contest_ids:
            return []
        marks = ", ".join("?" * len(contest_ids))
        return [_event(r) for r in self._rows(f"SELECT * FROM chain_events WHERE contest_id IN ({marks}) ORDER BY block_number, log_index", contest_ids)]

    def get_events_naming(self, address: bytes, names: tuple[str, ...], limit: int, role: str | None = None) -> list[dict]:
        """The newest ``limit`` events called one of ``names`` that name ``address`` (as ``role``, if given)."""
        marks = ", ".join("?" * len(names))
        sql = (f"SELECT DISTINCT e.*, p.role FROM chain_event_parties p JOIN chain_events e ON e.block_number = p.block_number AND e.log_index = p.log_index"
               f" WHERE p.address = ? AND e.name IN ({marks})" + (" AND p.role = ?" if role else "") +
               " ORDER BY e.block_number DESC, e.log_index DESC LIMIT ?")
        return [_event(r) for r in self._rows(sql, ["0x" + address.hex(), *names, *([role] if role else []), limit])]

    def count_events_naming(self, address: bytes) -> dict[str, int]:
        """How many events of each name name ``address``."""
        rows = self.db.execute("SELECT e.name, COUNT(DISTINCT e.block_number || ':' || e.log_index) FROM chain_event_parties p JOIN chain_events e"
                               " ON e.block_number = p.block_number AND e.log_index = p.log_index WHERE p.address = ? GROUP BY e.name",
                               ["0x" + address.hex()]).fetchall()
        return dict(rows)

    def is_known_address(self, address: bytes) -> bool:
        return bool(self.db.execute("SELECT 1 FROM chain_event_parties WHERE address = ? LIMIT 1", ["0x" + address.hex()]).fetchone())

    def get_events(self, name: str, limit: int | None = None) -> list[dict]:
        """Recorded events called ``name``, oldest first (the newest ``limit`` of them when given)."""
        if limit is None:
            return [_event(r) for r in self._rows("SELECT * FROM chain_events WHERE name = ? ORDER BY block_number, log_index", [name])]
        rows = self._rows("SELECT * FROM chain_events WHERE name = ? ORDER BY block_number DESC, log_index DESC LIMIT ?", [name, limit])
        return [_event(r) for r in reversed(rows)]

    def count_events(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT name, COUNT(*) FROM chain_events GROUP BY name").fetchall())

    def count_in_blocks(self, name: str, edges: list[int], count_arg: str | None = None) -> list[int]:
        """Events called ``name`` (or the sum of their ``count_arg``) in each block range [edges[i], edges[i+1])."""
        value = f"SUM(json_extract(args, '$.{count_arg}'))" if count_arg else "COUNT(*)"
        return [self.db.execute(f"SELECT COALESCE({value}, 0) FROM chain_events WHERE name = ? AND block_number >= ? AND block_number < ?",
                                [name, low, high]).fetchone()[0] for low, high in zip(edges, edges[1:])]

    def get_first_block(self, name: str) -> int | None:
        """The block of the first recorded event called ``name`` (None if there is none)."""
        return self.db.execute("SELECT MIN(block_number) FROM chain_events WHERE name = ?", [name]).fetchone()[0]

    def count_events_where(self, name: str, arg: str, value) -> int:
        """Events called ``name`` whose argument ``arg`` equals ``value``."""
        return self.db.execute("SELECT COUNT(*) FROM chain_events WHERE name = ? AND json_extract(args, '$.' || ?) = ?", [name, arg, value]).fetchone()[0]

    def sum_small_arg(self, name: str, arg: str) -> int:
        """The sum of an integer argument that fits SQLite's 64 bits (a batch's receipt count; never wei)."""
        return self.db.execute("SELECT COALESCE(SUM(json_extract(args, '$.' || ?)), 0) FROM chain_events WHERE name = ?", [arg, name]).fetchone()[0]

    def count_dispatched_jobs(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM dispatch_jobs").fetchone()[0]

    # --- block timestamps -------------------------------------------------------------------------

    def get_block_times(self, blocks: list[int]) -> dict[int, int]:
        if not blocks:
            return {}
        marks = ", ".join("?" * len(blocks))
        return dict(self.db.execute(f"SELECT block_number, timestamp FROM chain_block_times WHERE block_number IN ({marks})", blocks).fetchall())

    def insert_block_times(self, times: dict[int, int]) -> None:
        with transaction(self.db):
            self.db.conn.executemany("INSERT OR IGNORE INTO chain_block_times VALUES (?, ?)", list(times.items()))
