"""Fixed-point units and flag bits every part of the protocol shares (each typed once, here).

    BPS   basis points: 10,000 = 100% (fees, slash fractions, reward shares)
    PPB   parts per billion: 10⁹ = 1.0 (on-chain tolerance thresholds)

A position's flags (one byte per position in the commitment) record what the sampler saw:

    FLAG_NEXT_WITHIN_MARGIN   the next token is within the sampling margin of the sampler's choice
    FLAG_STOP_WITHIN_MARGIN   stopping here is within the margin (EOS close to the top)
"""

BPS = 10_000
PPB = 10**9

FLAG_NEXT_WITHIN_MARGIN = 1
FLAG_STOP_WITHIN_MARGIN = 2

MAX_CONTEST_CELLS = 16
"""Cells one contest may name (Disputes.MAX_CONTEST_CELLS): its answer stays far below a block."""
