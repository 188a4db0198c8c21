"""How long a node keeps what an audit may still ask of it: jobs, receipts, retained traces.

A receipt can be touched by an audit until the longest path through the protocol's windows has
passed since it was signed (`compute_audit_horizon_blocks`): batched by its promise's deadline,
drawn, started, then two rounds (the first and an escalation), each with every commit-window
redraw and the delivery claim's extensions, the opening, the dispute window and the proof window
of a contest; and the dispatcher's omission answer after its promise's deadline. Past that
horizon nothing can open the job's cells or ask for its receipt, so `Store.prune_finished` may
delete it; before it, the node would lose stake if it could not answer.

``store.retention_s`` is the operator's setting in seconds; a node with a chain checks at startup
that it covers the horizon at the chain's measured block interval (`verify_retention`), with a
factor of two for a chain that slows down.
"""

from verillm.errors import ConfigError
from verillm.spec.params import Preset

DELIVERY_EXTENSION_WINDOWS = 3
"""Commit windows a delivery claim and the transcript's publication can add to one round
(docs/protocol.md §12 "Undelivered jobs": D = claim + W, deadline ≥ D + W, then publish + W)."""
SAFETY_FACTOR = 2
"""Retention over the horizon at the measured block interval: blocks may come slower later."""


def compute_round_blocks(preset: Preset) -> int:
    """The longest one audit round can stay open, in blocks, from its draw to the end of its proof window."""
    commits = (preset.MAX_COMMITTEE_REDRAWS + 1 + DELIVERY_EXTENSION_WINDOWS) * preset.COMMIT_WINDOW_BLOCKS
    return commits + preset.OPEN_WINDOW_BLOCKS + preset.DISPUTE_WINDOW_BLOCKS + preset.PROOF_WINDOW_BLOCKS


def compute_audit_horizon_blocks(preset: Preset) -> int:
    """Blocks after a job is served past which no audit or omission claim can involve its receipt."""
    start = preset.AUDIT_DRAW_DELAY_BLOCKS + preset.DRAW_WINDOW_BLOCKS + preset.START_WINDOW_BLOCKS
    audit = start + 2 * compute_round_blocks(preset)  # the first round and one escalation
    omission = preset.OMISSION_CLAIM_WINDOW_BLOCKS + preset.PROOF_WINDOW_BLOCKS
    return preset.BATCH_BY_BLOCKS + max(audit, omission)


def compute_min_retention_s(preset: Preset, seconds_per_block: float) -> float:
    """The shortest ``store.retention_s`` that covers the audit horizon on a chain with this block interval."""
    return SAFETY_FACTOR * compute_audit_horizon_blocks(preset) * seconds_per_block


def verify_retention(retention_s: float, preset: Preset, seconds_per_block: float) -> None:
    """Check ``retention_s`` covers the audit horizon; raise ConfigError naming the minimum."""
    needed = compute_min_retention_s(preset, seconds_per_block)
    if retention_s < needed:
        raise ConfigError(f"store.retention_s = {retention_s:g} s is shorter than the audit horizon: "
                          f"{compute_audit_horizon_blocks(preset)} blocks at {seconds_per_block:.2f} s per block, "
                          f"times {SAFETY_FACTOR}, needs at least {needed:.0f} s")
