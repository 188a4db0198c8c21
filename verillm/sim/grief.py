"""Griefing by contest: the adversary bonds DISPUTE_BOND_WEI to demand that an honest worker
prove its opened leaves (`Disputes.contest`). An honest worker that answers within
PROOF_WINDOW_BLOCKS gets the bond (`answerContest`); one that is offline then is slashed in
full and the challenger earns SLASH_REWARD_BPS of the stake plus its bond back
(`resolveContest`), and the audit settles as the worker's default. So the honest loss is the
worker's chance of missing the window times its stake (`verillm.sim.settle_paths`).
"""

import numpy as np

from verillm.sim.settle_paths import Contest


def draw_contest(pool, rng: np.random.Generator, p_miss: float) -> Contest:
    """The adversary's contest of an honest worker's audit: missed with probability ``p_miss``."""
    challenger = int(np.flatnonzero(pool.adversarial)[0])
    return Contest(challenger, answered=not (p_miss and rng.random() < p_miss))
