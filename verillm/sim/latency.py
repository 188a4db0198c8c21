"""How long an audit holds stake, in blocks, from its batch to its settlement (docs/protocol.md §12).

Parties act within one block when prompt; a party playing for time uses its whole window
(the adversary's dispatcher and cheating worker do). After the worker opens, the members open
the next block, or, under sealed votes, seal the next block and open the one after (every
member sealed: no window waited out); then `finalize`. The dispute window always runs out
before `settle`. Under rules with windows in seconds, a window of W blocks in the preset is
W × 12 s (the L1 block the presets were written for), whatever the chain's block time.
"""

import math

from verillm.spec.params import Preset
from verillm.sim.rules import RuleSet

PRESET_BLOCK_S = 12.0


def window_blocks(blocks: int, rules: RuleSet, block_s: float) -> int:
    if rules.windows_in_seconds:
        return max(1, math.ceil(blocks * PRESET_BLOCK_S / block_s))
    return blocks


def audit_latency_blocks(preset: Preset, rules: RuleSet, block_s: float, stalling: bool, redraws: int, rounds: int, escalated: bool) -> int:
    """Blocks from the batch to `settle`. ``stalling``: the dispatcher and worker use every window."""
    w = lambda b: window_blocks(b, rules, block_s)  # noqa: E731
    act = (lambda b: w(b)) if stalling else (lambda b: 1)
    delay = preset.AUDIT_DRAW_DELAY_BLOCKS
    votes = (2 if rules.sealed_votes else 1) + 1  # the members' seal and opening (or opening), finalize
    first = (delay + act(preset.DRAW_WINDOW_BLOCKS) + act(preset.START_WINDOW_BLOCKS) + 1 + delay
             + act(preset.OPEN_WINDOW_BLOCKS) + votes + w(preset.DISPUTE_WINDOW_BLOCKS))
    waits = redraws * w(preset.COMMIT_WINDOW_BLOCKS)
    extra_rounds = max(0, rounds - (2 if escalated else 1)) * (w(preset.COMMIT_WINDOW_BLOCKS) * (preset.MAX_COMMITTEE_REDRAWS + 1))
    second = (delay + 1 + delay + act(preset.OPEN_WINDOW_BLOCKS) + votes + w(preset.DISPUTE_WINDOW_BLOCKS)) if escalated else 0
    return first + waits + extra_rounds + second
