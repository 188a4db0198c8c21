"""The devnet's protocol windows, sized in seconds rather than blocks (issue 11).

MINIMAL's deadlines are 10-20 blocks (the draw 10, a committee's receipts 20, openings 20, a
contested proof 5): at one block a second they are 10-20 s, which an honest node on a loaded
2-core machine misses (measured: `verillm bench devnet-load`, 6 node processes, a CPU hog,
32 jobs: drawAudit and postCommitteeReceipt reverted `TooLate`, batches missed, honest
audits abandoned), and which a dispatcher restart (25-70 s of start-up there) cannot fit.
60 s deadlines passed three runs of four and failed one: node 0 (gateway, dispatcher and the
job's worker, the busiest process) opened ~85 s after its challenge and was slashed; the
devnet's default is 120 s.
`compute_timed_preset` keeps every MINIMAL rule and converts deadlines given in seconds into
blocks at the devnet's block time. Only deadlines grow: the happy path waits for none of them
(a round finalizes as soon as everyone has opened), so a devnet run is not slower; only an
absent party is waited for longer. The waiting periods (draw delay, dispute window) stay.
"""

import math

from verillm.spec.params import Preset, compute_sized_preset

BLOCKHASH_RANGE = 256  # drawWindowBlocks and openWindowBlocks must be below it (Params.sol)


def compute_timed_preset(base: Preset, block_time_s: float, window_s: float) -> Preset:
    """``base`` with commit, open and proof windows of ``window_s`` seconds at ``block_time_s``
    per block, draw and start windows twice that (a dispatcher restart must fit in them; the draw
    at most 170 blocks, a private reveal's grace a window within the blockhash range), and
    the epoch, the audit horizon and the unbonding period grown as the timeline requires
    (`compute_sized_preset`); batching promises and their claim window at least a window each."""
    if block_time_s <= 0 or window_s <= 0:
        raise ValueError(f"block time and window must be positive, got {block_time_s} s and {window_s} s")
    blocks = math.ceil(window_s / block_time_s)
    commit = max(base.COMMIT_WINDOW_BLOCKS, blocks)
    opening = min(BLOCKHASH_RANGE - 1, max(base.OPEN_WINDOW_BLOCKS, blocks))
    # A private draw's late reveal reads its seed block's hash: draw + grace < 256, the draw two
    # thirds of that at most, the grace (a reveal mined late: a penalty, not the stake) a window.
    draw = min((BLOCKHASH_RANGE - 1) * 2 // 3, max(base.DRAW_WINDOW_BLOCKS, 2 * blocks))
    grace = min(BLOCKHASH_RANGE - 1 - draw, max(base.PRIVATE_REVEAL_GRACE_BLOCKS, blocks))
    start = max(base.START_WINDOW_BLOCKS, 2 * blocks)
    # A batching promise covers a restart too (a window), and its claims a window more; both
    # must close before a node that leaves can withdraw (Params.validateCoverage).
    batch_by = max(base.BATCH_BY_BLOCKS, blocks)
    claims = max(base.OMISSION_CLAIM_WINDOW_BLOCKS, blocks)
    timed = base.replace(COMMIT_WINDOW_BLOCKS=commit, OPEN_WINDOW_BLOCKS=opening, PROOF_WINDOW_BLOCKS=max(base.PROOF_WINDOW_BLOCKS, blocks),
                         DRAW_WINDOW_BLOCKS=draw, PRIVATE_REVEAL_GRACE_BLOCKS=grace, START_WINDOW_BLOCKS=start, BATCH_BY_BLOCKS=batch_by, OMISSION_CLAIM_WINDOW_BLOCKS=claims)
    # The epoch, the audit horizon and the unbonding period grow as the timeline needs (one
    # place: verillm.spec.params.compute_timeline, the contracts' Params.timeline), in whole 50s.
    sized = compute_sized_preset(timed)
    return sized.replace(EPOCH_BLOCKS=_round_up(sized.EPOCH_BLOCKS, 50), UNBONDING_BLOCKS=max(
        _round_up(sized.UNBONDING_BLOCKS, 50), 2 * _round_up(sized.EPOCH_BLOCKS, 50)))


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step
