"""End-to-end fixtures: whole networks on loopback — a real anvil process (the chain layer's
`AnvilProcess`), the contracts deployed with the `minimal` preset, and every node a separate
`devnode` process (tiny model, its own key, SQLite store and port), registered and staked.
Helpers live in `e2e_network.py` (a unique module name: test folders are not packages).

A network takes ~35 s to start on 2 cores (five Python processes importing torch); each
module shares one (`scope="module"`).
"""

