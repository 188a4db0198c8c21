"""An audit is closed and counted once, however many of its steps find it settled.

The watcher lists the open audits on its own thread and hands each one's step to the main loop
(issue 35); a step still running when the next tick lists the audit again means two steps of one
audit can both read the chain's SETTLED phase. Each then records the settlement; the store's
compare-and-set (`DispatcherTables.close_audit`) lets one of them count it. Before, the second
counted a verified audit twice (CI: verillm_dispatcher_verdicts_total{verdict="verified"} 5 for 4
audits). On the node's real store, one connection per thread, as the node runs it.
"""

import dataclasses
import threading

from verillm.chain.protocol import AuditState
from verillm.node.dispatcher.audit.driver import record_settlement
from verillm.node.metrics import NodeMetrics
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.store.store import open_store
from verillm.spec.settlement import FAIL, PASS

WORKER = "0x" + "0b" * 20
SETTLED = AuditState(audit_id=0, worker=WORKER, model_id=b"\x01" * 32, num_positions=4, output_tokens=2, round=0, phase=0,
                     verdict_block=9, challenge_seed=b"\x00" * 32, committee_size=3, batch_id=0, index=0, dispatcher="0x" + "0d" * 20,
                     escalator="0x" + "00" * 20, verdict=PASS, worker_slashed=False, pending_contests=0, requested=False)


def _open_audits(tables: DispatcherTables, count: int) -> None:
    for audit_id in range(count):
        tables.insert_audit(audit_id, bytes([audit_id]) * 32, 1, audit_id, requested=False)


def _count(metrics: NodeMetrics, verdict: str) -> float:
    return metrics.registry.get_sample_value("verillm_dispatcher_verdicts_total", {"verdict": verdict}) or 0.0


def test_two_steps_that_find_an_audit_settled_count_it_once(tmp_path):
    store = open_store(tmp_path / "node.sqlite")
    tables, metrics = DispatcherTables(store.db), NodeMetrics()
    _open_audits(tables, 2)
    failed = dataclasses.replace(SETTLED, audit_id=1, verdict=FAIL, worker_slashed=True)
    assert record_settlement(tables, metrics, 0, SETTLED)
    assert not record_settlement(tables, metrics, 0, SETTLED)  # the second step: nothing counted
    assert record_settlement(tables, metrics, 1, failed) and not record_settlement(tables, metrics, 1, failed)
    assert _count(metrics, "verified") == 1 and _count(metrics, "slashed") == 1
    assert [(r["status"], r["verdict"]) for r in tables.get_audit_rows()] == [("settled", PASS), ("settled", FAIL)]


def test_the_watchers_thread_and_the_main_loop_racing_on_every_audit_count_each_once(tmp_path):
    """The two threads of a node, each on its own connection to the store, settle the same audits at
    the same moment: each audit is counted by exactly one of them."""
    audits = 40
    store = open_store(tmp_path / "node.sqlite")
    tables, metrics = DispatcherTables(store.db), NodeMetrics()
    _open_audits(tables, audits)
    barrier = threading.Barrier(2)
    won: list[list[int]] = [[], []]

    def settle_all(side: int) -> None:
        for audit_id in range(audits):
            barrier.wait(timeout=60)
            if record_settlement(tables, metrics, audit_id, dataclasses.replace(SETTLED, audit_id=audit_id)):
                won[side].append(audit_id)

    threads = [threading.Thread(target=settle_all, args=(side,)) for side in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(won[0] + won[1]) == list(range(audits))  # every audit counted, by one side only
    assert _count(metrics, "verified") == audits
    store.db.close_all()
