"""The dispatcher role of the node daemon, on a real chain: routing, audits, the chain watcher.

    local.py         the Dispatcher protocol and LocalDispatcher (a node that routes to itself)
    router.py        NetworkDispatcher: client jobs → registered workers (signed native API),
                     receipts checked and kept for batching; RegistryView of the workers
    peer.py          the client of other nodes' native API (jobs, openings)
    batches.py       receipt batches (Merkle root on-chain), the VRF draw, audit starts
    promises.py      batching promises: signed at receipt, kept, answered when claimed
    audit/           one audit's life:
      driver.py        the dispatcher's checks of openings: contest, adjudicate, escalate, finalize, settle
      committee.py     verification jobs to the drawn members (ordinary jobs), their receipts on-chain
      duties.py        what every node owes as a party: the worker's opening, a member's opening and
                       vote, answers to contests
      delivery.py      withheld committee jobs: claims and publication
      hunt.py          after its appeal passed, the worker contests and adjudicates the first-round liars;
                       after an appeal FAIL, its "disagree" voters do the first-round agrees it contradicts
    watcher.py       the loop: follow the contracts' events, advance every pending item
    watcher_thread.py  the watcher and its batch posts on a thread and event loop of their own
    tasks.py         keyed background steps with retry
    chainio.py       the typed chain bindings off the event loop, gas recorded
    readiness.py     why this node cannot serve (its standing, the network's size)
    status.py        a dispatched job's status
    service.py       DispatchService: the role's parts in one object (wired into the app by node/dispatcher_role.py)

The pure rules of a vote are `verillm/spec/honest.py`; the tables are `node/store/dispatcher_*.py`;
the routes are `node/api/dispatcher_views.py`; its config section is
`node/dispatcher_config.py`; a local network for the devnet is `verillm/devnet/`.

Every pending chain action lives in SQLite before it is acted on, and each step reads the
chain's state first, so a restarted node resumes where it stopped.
"""
