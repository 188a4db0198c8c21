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

BLOCKHASH_RANGE = 256
"""blockhash() sees the last 256 blocks: a window that ends in a blockhash read is shorter."""
TRANSCRIPT_TOKENS_LIMIT = 8_192
"""Params.MAX_TRANSCRIPT_TOKENS: the most a deployment may set MAX_TRANSCRIPT_TOKENS to (a
publication of 8,192 tokens costs ≈ 9 M gas, under a third of a 30 M block)."""
PUBLICATION_GAS_AT_MAX_TRANSCRIPT = 8_989_340
"""Delivery.publishTranscript's gas at TRANSCRIPT_TOKENS_LIMIT tokens with one claim's bond paid
out, measured on anvil (tests/contracts/test_issue20_attacks.py, 2026-11-28; 8,901,681 before the
bonds): what a delivery claim can force a worker to spend."""


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
    PRIVATE_REVEAL_GRACE_BLOCKS: int = 100
    """Blocks after DRAW_WINDOW_BLOCKS in which a private draw may still be revealed
    (`Jobs.revealRound`): a late reveal is the same draw (its seed was fixed by the secret committed
    before the seed block), so it costs the dispatcher MEMBER_PENALTY_BPS, not its stake; only
    after this grace does `lapse` re-roll the round publicly and slash (docs/protocol.md §12
    "Private draws"). DRAW_WINDOW_BLOCKS + this < 256: the late reveal still reads the seed
    block's hash."""
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
    UNBONDING_BLOCKS: int = 2_800
    """Blocks a node that unbonds waits before withdrawing its stake: at least the longest duty it
    can still have (`Timeline.leaver_duty_span`) and 2 epochs."""
    EPOCH_BLOCKS: int = 600
    """Blocks per stake epoch: a change of stake or models weighs in draws from the next epoch
    on, and a round's draws read the weights of the epoch the round was entered in (its start or
    escalation). At least a round's draw span (`Timeline.round_draw_span`); the rest is the slack
    a late redraw has before its epoch stops being readable."""
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
    DELIVERY_GAS_PRICE_WEI: int = 30 * 10**9
    """The gas price a transcript publication is paid at out of the delivery claims' bonds (its
    gas measured on-chain × this, not the transaction's own price: that would let a proposer
    publishing itself set its pay, and is 0 in a gas estimate)."""
    DELIVERY_CLAIM_BOND_WEI: int = 3 * 10**17
    """A delivery claim's bond (Delivery.claimUndelivered; docs/protocol.md §12 "Undelivered
    jobs"): a claim forces the worker to publish its transcript, so it carries what that costs at
    the bound, PUBLICATION_GAS_AT_MAX_TRANSCRIPT (8,989,340 gas at MAX_TRANSCRIPT_TOKENS,
    measured) × DELIVERY_GAS_PRICE_WEI (≈ 2.70e17 wei here, rounded up). A publication pays the
    publisher its measured gas at that price out of the bonds and returns the rest; a default or
    a round whose receipts all came returns them whole."""
    AUDIT_HORIZON_BLOCKS: int = 300
    """A worker that unbonds at block U stays auditable only on batches posted by U + this
    (≥ BATCH_BY_BLOCKS: every receipt it served before leaving is batched in time under its
    promise); a later start of its receipt is skipped, a request refused (attack: hostage)."""
    RECEIPT_HORIZON_BLOCKS: int = 600
    """A worker signs every receipt auditable until its chain head + this (the receipt's
    auditableUntilBlock); no audit of it starts later, whoever holds it, so the worker knows from
    the receipt alone when its duties for the job end (`Timeline.receipt_duty_span` after
    signing). At least BATCH_BY_BLOCKS + the start span (502): a receipt batched by its promise's
    deadline is still auditable at its batch's last start. The rest (98 blocks, ≈ 20 min) is the
    lag tolerated between the worker's signing head and its dispatcher's promising head: a
    dispatcher and a client refuse a receipt whose horizon ends before promise + start span."""
    # --- limits ---
    MAX_BATCH_RECEIPTS: int = 1_024
    MAX_TRANSCRIPT_TOKENS: int = 8_192
    """Input + output tokens a receipt may sign and still be auditable: a publication of the
    transcript (Delivery.publishTranscript, ≈ 1.1k gas per token, measured) fits a third of a
    block. A longer receipt cannot be started (its dispatcher must not batch it), and a node
    refuses a job whose prompt + max_new_tokens exceed it."""

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
    UNBONDING_BLOCKS=670,  # ≥ the leaver's duty span (30 + 91 + 526 = 647: round 0, the appeal and its decider) and 2 epochs (checked by the contracts)
    EPOCH_BLOCKS=150,  # ≥ the round's draw span 22 (private fallback) + 1 + 10 + 1 × 21 + 2 × 20 = 94
    MAX_BATCH_RECEIPTS=64,
    DRAW_WINDOW_BLOCKS=10,
    PRIVATE_REVEAL_GRACE_BLOCKS=10,  # = DRAW_WINDOW_BLOCKS: a reveal mined late on a loaded machine still lands
    START_WINDOW_BLOCKS=80,  # every job of a batch is audited in MINIMAL: one start tx each
    PROOF_WINDOW_BLOCKS=5,
    MAX_COMMITTEE_REDRAWS=1,
    BATCH_BY_BLOCKS=30,  # the node posts every ≤ 3 s and at the latest BATCH_POST_MARGIN before this
    OMISSION_CLAIM_WINDOW_BLOCKS=100,  # 30 + 100 < UNBONDING_BLOCKS = 300
    OMISSION_CLAIM_BOND_WEI=10**14,
    DELIVERY_GAS_PRICE_WEI=10**9,
    DELIVERY_CLAIM_BOND_WEI=10**16,  # 8,989,340 gas × 1 gwei ≈ 9.0e15, rounded up
    AUDIT_HORIZON_BLOCKS=30,  # = BATCH_BY_BLOCKS
    RECEIPT_HORIZON_BLOCKS=200,  # ≥ BATCH_BY_BLOCKS + the start span (30 + 91 = 121); 79 blocks of lag on a chain mining per transaction
)

PRESETS = {p.name: p for p in (MAINNET, MINIMAL)}


# --- the timeline (contracts/src/Params.sol `timeline` and `_validateWindows`) ---------------

@dataclass(frozen=True)
class Timeline:
    """Every span of the protocol, composed in one place from a preset's windows (Params.sol
    `Timeline`; docs/protocol.md §12 "One timeline"). Each is the longest the windows allow
    when every party acts at the last block of its window and every permissionless call comes
    at its first: a round entered at E draws in (E + delay, E + delay + draw]; a redraw comes
    the block after a commit deadline and adds a commit window; the round's one claim window
    adds at most two commit windows; a first round drawn privately whose dispatcher never reveals
    (not even in its grace) is drawn publicly after a lapse (``private_fallback``)."""

    claim_extension: int
    private_fallback: int
    """delay + draw + grace + 1: a missed private draw's window and its reveal grace, then a lapse,
    before the public draw window."""
    round_draw_span: int
    """E → the round's last draw (redraws and the claim window included)."""
    round_span: int
    """E → the round's verdict."""
    start_span: int
    """A batch's posting → its last audit start."""
    audit_span: int
    """A start → the last settle (round, dispute, escalation round, dispute, proof window, settle)."""
    leaver_duty_span: int
    """An unbond → the end of the node's last duty (horizon, start span, audit span)."""
    receipt_duty_span: int
    """A receipt signed at S → the last settle of its audit (RECEIPT_HORIZON_BLOCKS, audit span)."""


def compute_timeline(p: Preset) -> Timeline:
    """Return the composed spans of ``p`` (`Params.timeline`)."""
    commit = p.COMMIT_WINDOW_BLOCKS
    claim = 2 * commit
    fallback = p.AUDIT_DRAW_DELAY_BLOCKS + p.DRAW_WINDOW_BLOCKS + p.PRIVATE_REVEAL_GRACE_BLOCKS + 1
    round_draw = fallback + p.AUDIT_DRAW_DELAY_BLOCKS + p.DRAW_WINDOW_BLOCKS + p.MAX_COMMITTEE_REDRAWS * (commit + 1) + claim
    round_span = round_draw + commit + p.AUDIT_DRAW_DELAY_BLOCKS + 3 * p.OPEN_WINDOW_BLOCKS + 1  # worker, seals, their openings
    start = p.AUDIT_DRAW_DELAY_BLOCKS + p.DRAW_WINDOW_BLOCKS + p.START_WINDOW_BLOCKS
    # round 0 may carry the private fallback; the appeal and its decider (round 2) are drawn publicly;
    # the decider is entered by the appeal's settle, which waits out a contest (proof + 1)
    audit = 3 * (round_span + p.DISPUTE_WINDOW_BLOCKS) - 2 * fallback + 2 * (p.PROOF_WINDOW_BLOCKS + 1)
    return Timeline(claim, fallback, round_draw, round_span, start, audit, p.AUDIT_HORIZON_BLOCKS + start + audit, p.RECEIPT_HORIZON_BLOCKS + audit)


@dataclass(frozen=True)
class LeaverSchedule:
    """What a node that unbonded at ``left_block`` still owes, and until when (docs/protocol.md
    §12 "Stake locks and unbonding"): it must stay up until ``duties_end_block``."""

    left_block: int
    seated_until_block: int
    """The last block a draw can still seat it: redraws of rounds seeded before it left (no round
    seeded at or after ``left_block`` draws it)."""
    last_start_block: int
    """The last block an audit of one of its receipts can start (batches posted by the horizon)."""
    duties_end_block: int
    """Every audit that can lock it has settled by this block when every call comes at its first
    block (openings, votes and answers are its own duties until then)."""
    withdraw_from_block: int


def compute_leaver_schedule(left_block: int, p: Preset) -> LeaverSchedule:
    """Return the schedule of a node that unbonded at ``left_block`` (`Params.timeline`)."""
    t = compute_timeline(p)
    return LeaverSchedule(
        left_block=left_block,
        seated_until_block=left_block - 1 - p.AUDIT_DRAW_DELAY_BLOCKS + t.round_draw_span,
        last_start_block=left_block + p.AUDIT_HORIZON_BLOCKS + t.start_span,
        duties_end_block=left_block + t.leaver_duty_span,
        withdraw_from_block=left_block + p.UNBONDING_BLOCKS,
    )


def compute_timeline_problems(p: Preset) -> list[str]:
    """Return every window rule of `Params.validate` / `validateCoverage` that ``p`` breaks
    (empty: the contracts accept it). Same order and wording as the contracts' reasons."""
    problems = []
    if p.MAX_BATCH_RECEIPTS <= 0 or p.MAX_BATCH_RECEIPTS > 0xFFFF:
        problems.append("maxBatchReceipts must be positive, maxBatchReceipts < 65536")
    if not 2 <= p.MAX_TRANSCRIPT_TOKENS <= TRANSCRIPT_TOKENS_LIMIT:
        problems.append("maxTranscriptTokens must be in [2, 8192]: a publication fits a third of a block")
    if p.AUDIT_DRAW_DELAY_BLOCKS <= 0:
        problems.append("auditDrawDelayBlocks must be positive")
    if not 0 < p.DRAW_WINDOW_BLOCKS < BLOCKHASH_RANGE:
        problems.append("drawWindowBlocks must be in [1, 255]")
    if p.PRIVATE_REVEAL_GRACE_BLOCKS <= 0 or p.DRAW_WINDOW_BLOCKS + p.PRIVATE_REVEAL_GRACE_BLOCKS >= BLOCKHASH_RANGE:
        problems.append("privateRevealGraceBlocks must be positive, drawWindowBlocks + privateRevealGraceBlocks < 256")
    if not 0 < p.OPEN_WINDOW_BLOCKS < BLOCKHASH_RANGE:
        problems.append("openWindowBlocks must be in [1, 255]")
    if min(p.START_WINDOW_BLOCKS, p.COMMIT_WINDOW_BLOCKS, p.DISPUTE_WINDOW_BLOCKS, p.PROOF_WINDOW_BLOCKS) <= 0:
        problems.append("every window must be positive")
    if problems:
        return problems
    t = compute_timeline(p)
    if p.EPOCH_BLOCKS < t.round_draw_span:
        problems.append("epochBlocks shorter than a round's draws")
    if p.UNBONDING_BLOCKS < t.leaver_duty_span:
        problems.append("unbondingBlocks shorter than a leaver's duties")
    if p.UNBONDING_BLOCKS < 2 * p.EPOCH_BLOCKS:
        problems.append("unbondingBlocks shorter than two epochs")
    if p.BATCH_BY_BLOCKS + p.OMISSION_CLAIM_WINDOW_BLOCKS >= p.UNBONDING_BLOCKS:
        problems.append("batchByBlocks + omissionClaimWindowBlocks must be shorter than unbondingBlocks")
    if p.BATCH_BY_BLOCKS > p.AUDIT_HORIZON_BLOCKS:
        problems.append("auditHorizonBlocks shorter than batchByBlocks")
    if p.RECEIPT_HORIZON_BLOCKS < p.BATCH_BY_BLOCKS + t.start_span:
        problems.append("receiptHorizonBlocks shorter than batchByBlocks + a batch's start span")
    if p.DELIVERY_CLAIM_BOND_WEI <= 0 or p.DELIVERY_GAS_PRICE_WEI <= 0:
        problems.append("delivery claim bond and gas price must be positive")
    return problems


def verify_timeline(p: Preset) -> None:
    """Raise ConfigError naming every window rule ``p`` breaks (the contracts would refuse it)."""
    problems = compute_timeline_problems(p)
    if problems:
        raise ConfigError(f"preset {p.name!r}: " + "; ".join(problems))


def compute_sized_preset(p: Preset) -> Preset:
    """Return ``p`` with EPOCH_BLOCKS, UNBONDING_BLOCKS, AUDIT_HORIZON_BLOCKS and
    RECEIPT_HORIZON_BLOCKS grown to the least the timeline needs (windows unchanged): for presets
    whose windows were rescaled. A grown receipt horizon keeps a third of BATCH_BY_BLOCKS of lag."""
    horizon = max(p.AUDIT_HORIZON_BLOCKS, p.BATCH_BY_BLOCKS)
    least_receipt = p.BATCH_BY_BLOCKS + compute_timeline(p).start_span
    receipt = p.RECEIPT_HORIZON_BLOCKS if p.RECEIPT_HORIZON_BLOCKS >= least_receipt else least_receipt + p.BATCH_BY_BLOCKS // 3
    sized = p.replace(AUDIT_HORIZON_BLOCKS=horizon, RECEIPT_HORIZON_BLOCKS=receipt)
    t = compute_timeline(sized)
    epoch = max(p.EPOCH_BLOCKS, t.round_draw_span)
    unbonding = max(p.UNBONDING_BLOCKS, t.leaver_duty_span, 2 * epoch, p.BATCH_BY_BLOCKS + p.OMISSION_CLAIM_WINDOW_BLOCKS + 1)
    return sized.replace(EPOCH_BLOCKS=epoch, UNBONDING_BLOCKS=unbonding)


def get_preset(name: str) -> Preset:
    """Return the preset called ``name``."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]
