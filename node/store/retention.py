"""How long a node keeps what an audit may still ask of it: jobs, receipts, retained traces.

A receipt can be touched by an audit until its own horizon has passed and the longest audit
after it (`compute_audit_horizon_blocks`): no audit of it starts after the auditableUntilBlock it
carries (the worker signed its head + RECEIPT_HORIZON_BLOCKS; `Jobs.openAudit` skips or refuses a
later start, whoever holds the receipt), and an audit started then settles within the timeline's
audit span (`verillm.spec.params.compute_timeline`, the one place the windows are composed,
`Params.timeline`'s twin: two rounds each with every redraw and the delivery claim's windows,
openings, disputes, the proof window, settle): `Timeline.receipt_duty_span` after signing,
`verillm.spec.receipt.compute_receipt_duties_end_block` for one receipt. And the dispatcher's
omission answer after its promise's deadline. Past that horizon nothing can open the job's cells
or ask for its receipt, so `Store.prune_finished` may delete it; before it, the node would lose
stake if it could not answer.

``store.retention_s`` is the operator's setting in seconds; a node with a chain checks at startup
that it covers the horizon at the chain's measured block interval (`verify_retention`), with a
factor of two for a chain that slows down.
"""

from verillm.errors import ConfigError
from verillm.spec.params import Preset, compute_timeline

SAFETY_FACTOR = 2
"""Retention over the horizon at the measured block interval: blocks may come slower later."""


def compute_audit_horizon_blocks(preset: Preset) -> int:
    """Blocks after a job is served past which no audit or omission claim can involve its receipt."""
    t = compute_timeline(preset)
    omission = preset.BATCH_BY_BLOCKS + preset.OMISSION_CLAIM_WINDOW_BLOCKS + preset.PROOF_WINDOW_BLOCKS
    return max(t.receipt_duty_span, omission)


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
