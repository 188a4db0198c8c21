"""Griefing by contest: the adversary bonds DISPUTE_BOND_WEI to demand that an honest worker
prove its opened leaves (`Disputes.contest`). An honest worker that answers within
PROOF_WINDOW_BLOCKS gets the bond (`answerContest`); one that is offline then is slashed in
full and the challenger earns SLASH_REWARD_BPS of the stake plus its bond back
(`resolveContest`). So the honest loss is the worker's downtime times its stake.
"""

import numpy as np

from verillm.spec.settlement import compute_slash, compute_slash_split


def apply_contest(ctx, out, worker: int, rng: np.random.Generator, p_miss: float | None = None) -> None:
    """Add one contest of ``worker`` by the adversary to the audit's outcome; ``p_miss``: the
    probability that the worker misses the proof window (default: its offline probability)."""
    pool, preset = ctx.pool, ctx.preset
    adversary = int(np.flatnonzero(pool.adversarial)[0])
    bond = preset.DISPUTE_BOND_WEI
    p_miss = ctx.offline if p_miss is None else p_miss
    if p_miss and rng.random() < p_miss:  # missed the proof window
        amount = compute_slash(pool.stake_wei(worker), preset)
        reward, _ = compute_slash_split(amount, preset)
        out.slashed_wei[worker] = out.slashed_wei.get(worker, 0) + amount
        out.credits_wei[adversary] = out.credits_wei.get(adversary, 0) + reward
        out.honest_slashed.append(("worker", worker, amount))
        return
    out.credits_wei[adversary] = out.credits_wei.get(adversary, 0) - bond
    out.credits_wei[worker] = out.credits_wei.get(worker, 0) + bond
