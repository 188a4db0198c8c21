"""Fault injection for the crash matrix: SIGKILL this process at a named durable step.

    VERILLM_FAULT_POINT=engine_returned        # kill the first time the step is reached
    VERILLM_FAULT_POINT=engine_returned@3      # ... the third time

The variable is read once, at import; unset (every production run), `reach` is one dict
lookup. Tests (tests/node/test_crash_matrix.py) start a real daemon with it, let it die where
named, restart it on the same store and check nothing was lost, duplicated or re-signed.
Kill points, in the order a job meets them (docs/operators.md lists what each test checks):

    migration_<n>       inside migration n's transaction, before its COMMIT
    nonce_recorded      a native job's envelope nonce stored, the job not yet
    job_accepted        a job durable as `received`, not yet answered (?wait=0) or run
    engine_returned     the engine returned the batch (committed, signed), nothing stored
    receipt_written     receipt and trace written inside the batch's transaction, before COMMIT
    outcomes_recorded   the batch's outcomes committed, no caller answered yet
    opening_served      an opening's trace blob read, the opening not yet computed or sent

The dispatcher role's chain actions (node/dispatcher/chainio.py; <function> is the `Protocol`
method, snake case: post_batch, draw_audit, start_audit, post_committee_receipt, finalize,
open_worker, settle, draw_challenge, ...; tests/e2e/test_dispatcher_crash_matrix.py):

    tx_sent_<function>      the transaction signed and submitted, not yet mined, nothing recorded
                            (here <function> is the contract's, snake case: `open_worker` sends
                            `openWorker`, so its point is tx_sent_open_worker)
    tx_mined_<function>     its receipt back (mined), its hash not yet recorded in chain_txs
    tx_recorded_<function>  its hash recorded, the step's own state (batch posted, audit
                            started, seat posted, ...) not yet updated
"""

import os
import signal

from verillm import envs

FAULT_ENV = envs.FAULT_POINT


def _parse(value: str) -> tuple[str, int]:
    name, _, count = value.partition("@")
    return name.strip(), int(count) if count.strip().isdigit() else 1


_TARGET = _parse(envs.get_fault_point()) if envs.get_fault_point() else None
_seen: dict[str, int] = {}


def reach(name: str) -> None:
    """Mark that this process reached the durable step ``name``; SIGKILL it if that is the fault point."""
    if _TARGET is None or _TARGET[0] != name:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] == _TARGET[1]:
        os.kill(os.getpid(), signal.SIGKILL)
