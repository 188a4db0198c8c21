"""The dispatcher role of the node daemon, on a real chain: routing, audits, the chain watcher.

    router.py      NetworkDispatcher: client jobs → registered workers (signed native API),
                   receipts checked and kept for batching
    batches.py     receipt batches (Merkle root on-chain), the VRF draw, audit starts
    committee.py   verification jobs to the drawn members (ordinary jobs), their receipts on-chain
    judging.py     the dispatcher's checks of openings: contest, adjudicate, escalate, finalize, settle
    duties.py      what every node owes as a party: the worker's opening, a member's opening and vote,
                   answers to contests
    watcher.py     the loop: follow the contracts' events, advance every pending item
    service.py     wiring into the aiohttp app (installed by `node/app.py`), the status route

Every pending chain action lives in SQLite (`schema.py`, migration 3) before it is acted on,
and each step reads the chain's state first, so a restarted node resumes where it stopped.
"""
