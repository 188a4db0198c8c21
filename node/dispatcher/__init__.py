"""The dispatcher role of the node daemon, on a real chain: routing, audits, the chain watcher.

    router.py        NetworkDispatcher: client jobs → registered workers (signed native API),
                     receipts checked and kept for batching; RegistryView of the workers
    batches.py       receipt batches (Merkle root on-chain), the VRF draw, audit starts
    committee.py     verification jobs to the drawn members (ordinary jobs), their receipts on-chain
    judging.py       the dispatcher's checks of openings: contest, adjudicate, escalate, finalize, settle
    duties.py        what every node owes as a party: the worker's opening, a member's opening and
                     vote, answers to contests
    votes.py         the pure rules: a member's vote, a provable lie, when to escalate
    watcher.py       the loop: follow the contracts' events, advance every pending item
    tasks.py         keyed background steps with retry
    chainio.py       the typed chain bindings off the event loop, gas recorded
    schema.py        migration 3 of the node store; tables.py its reads and writes
    status.py        a dispatched job's status and its replay evidence
    service.py       wiring into the aiohttp app (installed by `node/app.py`), the routes

    localnet.py      a whole network on loopback (chain, contracts, node processes) for
                     `verillm devnet` and the end-to-end tests; devnode.py one node process,
                     honest or dishonest; embedded_chain.py eth-tester over loopback JSON-RPC

Every pending chain action lives in SQLite before it is acted on, and each step reads the
chain's state first, so a restarted node resumes where it stopped.
"""
