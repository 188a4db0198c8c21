"""Protocol parameters, in presets. Units are in the names.

`MAINNET` is the reference network; `MINIMAL` keeps every rule but shrinks windows, stakes
and committees so tests run in seconds. Contracts take the same values at deploy
(`verillm chain deploy --preset ...`). Per-model tolerance thresholds are not here: they are
calibrated per model and dtype and live in tolerance profiles (`verillm.spec.policy`).
"""

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass

from verillm.errors import ConfigError


@dataclass(frozen=True)
class Preset:
    """One complete set of protocol parameters."""

    name: str
    # --- commitment ---
    FINGERPRINT_DIMS: int = 1
    """Projections per committed vector; 1 = 4 bytes per position per layer."""
    # --- audits ---
    AUDIT_RATE_BPS: int = 500
    """Share of jobs audited, in basis points (500 = 5%)."""
    COMMITTEE_SIZE: int = 3
    """Members in a first-round committee (odd, so a majority always exists)."""
    ESCALATION_COMMITTEE_SIZE: int = 7
    """Members in a dispute's second committee."""
    CHALLENGE_POSITIONS: int = 32
    """Positions opened at every committed layer per audit."""
    MAX_COMMITTEE_REDRAWS: int = 2
    """Times missing committee seats are redrawn before an audit is abandoned."""
    # --- money ---
    MIN_STAKE_WEI: int = 10**18
    JOB_FEE_WEI: int = 10**15
    """Levy per batched job, paid by the dispatcher into the audit fee pool."""
    AUDIT_FEE_WEI: int = 10**15
    """Paid from the pool to each committee member on the verdict's side, and to a passed worker."""
    DISPUTE_BOND_WEI: int = 10**17
    SLASH_FRACTION_BPS: int = 10_000
    """Share of a loser's stake slashed (10_000 = all of it)."""
    SLASH_REWARD_BPS: int = 1_000
    """Share of slashed stake paid to the parties that proved the fault."""
    MEMBER_PENALTY_BPS: int = 100
    """Share of a member's stake taken for a minority vote or a missed opening (not a provable
    lie: a lie proven by adjudication or a contest costs SLASH_FRACTION_BPS)."""
    # --- windows ---
    AUDIT_DRAW_DELAY_BLOCKS: int = 2
    """Blocks between a receipt batch and the block whose hash seeds its audit draw."""
    DRAW_WINDOW_BLOCKS: int = 100
    """Blocks after the seed block in which the dispatcher must post its VRF draw (< 256)."""
    START_WINDOW_BLOCKS: int = 100
    """Blocks after the draw in which every audited job of the batch must be started."""
    COMMIT_WINDOW_BLOCKS: int = 50
    """Blocks a committee has to post its receipts."""
    OPEN_WINDOW_BLOCKS: int = 50
    """Blocks every party has to post its openings after the challenge draw."""
    DISPUTE_WINDOW_BLOCKS: int = 100
    """Blocks after a verdict during which anyone may escalate."""
    PROOF_WINDOW_BLOCKS: int = 50
    """Blocks a contested party has to prove its opened leaves on-chain."""
    UNBONDING_BLOCKS: int = 1_000
    """Blocks a deregistered worker waits before withdrawing its stake (≥ 2 epochs)."""
    EPOCH_BLOCKS: int = 400
    """Blocks per stake epoch: a change of stake or models weighs in draws from the next epoch
    on, and a round's draws read the weights of the epoch its batch (or escalation) began in.
    At least a round's draw span: draw delay + draw + start windows + (redraws + 1) × commit window."""
    # --- batching promises (docs/protocol.md §12, "Batching promises") ---
    BATCH_BY_BLOCKS: int = 300
    """Blocks a dispatcher promises, with every job, to post the batch holding its receipt in
    (an hour at 12 s blocks: a batcher posts every few seconds, so this covers a congested
    mempool and a restart; its batch posting turns deadline-driven well before)."""
    OMISSION_CLAIM_WINDOW_BLOCKS: int = 600
    """Blocks after a promise's batchByBlock in which its holder may claim the omission
    (BATCH_BY_BLOCKS + this < UNBONDING_BLOCKS: a promise is claimable before its dispatcher can
    withdraw)."""
    OMISSION_CLAIM_BOND_WEI: int = 10**16
    """An omission claim's bond. When the dispatcher proves inclusion it is paid
    OMISSION_ANSWER_GAS × the answer's gas price out of it (all of it from ≈ 53 gwei on: a griefer
    pays for the answer it forces), and the claimant gets the rest back."""
    OMISSION_ANSWER_GAS: int = 190_000
    """Gas units an inclusion proof (Coverage.proveIncluded) is paid for: its gas for a
    MAX_BATCH_RECEIPTS-leaf batch with both credits new, plus a margin. Measured on anvil
    (tests/contracts/test_coverage.py): 162,364 for 3 leaves (2 tree levels), 169,243 for 64 (6
    levels), ≈ 1.7k per level (a sha256 call and a calldata word), so ≈ 176k for 1,024 (10
    levels); 190k leaves ≈ 8% for a cold-slot repricing. A withholding dispatcher farms at most
    this surplus over its real gas; less would leave an honest one out of pocket."""
    # --- limits ---
    MAX_BATCH_RECEIPTS: int = 1_024

    @classmethod
    def from_contract_params(cls, params: Mapping[str, int], name: str = "onchain") -> "Preset":
        """Return the preset a deployment runs, from its contracts' parameter structs (camelCase
        field names, as `Jobs.params()` and Coverage return them). Every on-chain value is taken;
        a field the contracts do not hold (FINGERPRINT_DIMS: per model, in the Registry) keeps
        its default. An unknown on-chain name is an error: the contracts and this class drifted."""
        return cls(name=name).replace(**{compute_preset_name(field): int(value) for field, value in params.items()})

    def replace(self, **changes) -> "Preset":
        """Return a copy with some parameters changed; unknown names are an error."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"unknown protocol parameters: {sorted(unknown)}")
        return dataclasses.replace(self, **changes)


def compute_preset_name(field: str) -> str:
    """Return the preset attribute for a contract struct field: ``minStakeWei`` -> ``MIN_STAKE_WEI``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", field).upper()


MAINNET = Preset(name="mainnet")

MINIMAL = Preset(
    name="minimal",
    AUDIT_RATE_BPS=10_000,
    COMMITTEE_SIZE=3,
    ESCALATION_COMMITTEE_SIZE=5,
    CHALLENGE_POSITIONS=8,
    MIN_STAKE_WEI=10**16,
    JOB_FEE_WEI=10**13,
    AUDIT_FEE_WEI=2 * 10**12,  # every job is audited: the levy pays (committee + worker) × this
    DISPUTE_BOND_WEI=10**15,
    AUDIT_DRAW_DELAY_BLOCKS=1,
    COMMIT_WINDOW_BLOCKS=20,
    OPEN_WINDOW_BLOCKS=20,
    DISPUTE_WINDOW_BLOCKS=10,
    UNBONDING_BLOCKS=300,  # ≥ 2 epochs and ≥ draw delay + draw window + start window (checked by the contracts)
    EPOCH_BLOCKS=150,  # ≥ 1 + 10 + 80 + 2 × 20 = 131, the round's draw span
    MAX_BATCH_RECEIPTS=64,
    DRAW_WINDOW_BLOCKS=10,
    START_WINDOW_BLOCKS=80,  # every job of a batch is audited in MINIMAL: one start tx each
    PROOF_WINDOW_BLOCKS=5,
    MAX_COMMITTEE_REDRAWS=1,
    BATCH_BY_BLOCKS=30,  # the node posts every ≤ 3 s and at the latest BATCH_POST_MARGIN before this
    OMISSION_CLAIM_WINDOW_BLOCKS=100,  # 30 + 100 < UNBONDING_BLOCKS = 300
    OMISSION_CLAIM_BOND_WEI=10**14,
)

PRESETS = {p.name: p for p in (MAINNET, MINIMAL)}


def get_preset(name: str) -> Preset:
    """Return the preset called ``name``."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]
