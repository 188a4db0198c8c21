"""The audit draw, committees, the audit state machine and on-chain adjudication arithmetic,
as the contracts run them.

Everything here has a twin in `contracts/src` (Batches.sol, Jobs.sol, Registry.sol/Sortition.sol,
Disputes.sol/Fingerprint.sol), checked by shared vectors (`tests/vectors/audit.json`,
`fingerprint.json`) and property tests. The rules are in `docs/protocol.md §12`, the state
machine's table in §12 "The audit state machine": `Phase`, `TRANSITIONS`,
`compute_round_deadlines` and `compute_due_steps` below are its twin (Jobs.sol `_at`,
`_deadlines` and the guard of each function).

    batch draw seed   keccak256(0x13 ‖ batch root ‖ blockhash(posted block + AUDIT_DRAW_DELAY_BLOCKS))
    β                 the dispatcher's BLS-VRF output over that seed (`verillm.spec.vrf`)
    job audited       uint256(keccak256(0x17 ‖ β ‖ u32 index)) mod 10000 < AUDIT_RATE_BPS
    committee seed    keccak256(0x1c ‖ u64 audit id ‖ u8 round ‖ blockhash(entered block + delay) [‖ secret])
                      (every round, entered at the start or the escalation: nobody knows a
                      committee before its audit is paid for and started; a first round its
                      dispatcher started with commitment keccak256(0x1d ‖ secret) is drawn with
                      the secret, privately, and revealed with the members' receipts)
    draw i            uint256(keccak256(0x19 ‖ committee seed ‖ u8 attempt ‖ u32 i)) mod (stake in play)
    challenge seed    keccak256(0x1a ‖ committee seed ‖ blockhash(ready block + delay))
    vote seal         keccak256(0x1e ‖ u64 audit id ‖ u8 round ‖ u8 slot ‖ u8 vote ‖ opening hash ‖ salt)
                      (a member seals its vote and opening before any member's is shown: no copying)

One VRF draw per batch, not per job: a per-job BLS check costs ~170k gas, far over the
5,000 gas per job budget, and a draw posted only when a job is audited lets a dispatcher hide
the audits it dislikes. A batch draw is mandatory (a missed draw is slashed), and each job's
audit bit is still unpredictable to everyone when its receipt is batched.
"""

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from verillm.errors import EncodingError, InvalidInput
from verillm.spec.constants import BPS, FLAG_NEXT_WITHIN_MARGIN, PPB
from verillm.spec.encoding import decode, encode
from verillm.spec.hashing import (
    DOMAIN_AUDIT_PICK,
    DOMAIN_AUDIT_SEED,
    DOMAIN_CHALLENGE_SEED,
    DOMAIN_COMMITTEE,
    DOMAIN_DRAW_SECRET,
    DOMAIN_ESCALATION,
    DOMAIN_ROUND_SEED,
    DOMAIN_SORTITION,
    DOMAIN_VOTE_SEAL,
    keccak256,
)
from verillm.spec.merkle import MerkleProof, compute_leaf_hash, compute_merkle_levels, compute_merkle_proof
from verillm.spec.policy import ToleranceProfile
from verillm.spec.types import Leaf, ModelManifest, Opening

CLAMP_PPB = 1 << 96


# --- receipt batches ------------------------------------------------------------------------

def compute_batch_levels(receipt_hashes: Sequence[bytes]) -> list[list[bytes]]:
    """Return the Merkle levels over receipt hashes (each leaf hashed as sha256(0x00 ‖ hash))."""
    return compute_merkle_levels([compute_leaf_hash(h) for h in receipt_hashes])


def compute_batch_proof(levels: list[list[bytes]], index: int) -> MerkleProof:
    """Return the proof that receipt ``index`` is in the batch."""
    return compute_merkle_proof(levels, index)


# --- the draw -------------------------------------------------------------------------------

def compute_draw_seed(batch_root: bytes, seed_blockhash: bytes) -> bytes:
    """Return the VRF input of a batch."""
    return keccak256(DOMAIN_AUDIT_SEED + batch_root + seed_blockhash)


def is_audited(beta: bytes, index: int, audit_rate_bps: int) -> bool:
    """Return whether job ``index`` of a batch whose VRF output is ``beta`` is audited."""
    word = keccak256(DOMAIN_AUDIT_PICK + beta + struct.pack(">I", index))
    return int.from_bytes(word, "big") % BPS < audit_rate_bps


def compute_round_seed(audit_id: int, round_index: int, seed_blockhash: bytes, secret: bytes = b"") -> bytes:
    """Return a round's committee seed: the blockhash is of the round's entered block + delay;
    ``secret`` is the dispatcher's for a private draw (`Jobs.revealRound`), empty for a public one."""
    if secret and len(secret) != 32:
        raise InvalidInput(f"a draw secret is 32 bytes, got {len(secret)}")
    return keccak256(DOMAIN_ROUND_SEED + struct.pack(">QB", audit_id, round_index) + seed_blockhash + secret)


def compute_private_draw_bond(preset) -> int:
    """Return what a private start deposits (`Batches.startPrivateAudit`): what a requested audit
    pays, COMMITTEE_SIZE × AUDIT_FEE_WEI; returned at the reveal, forfeited to the pool at a missed
    one, so each refused private committee costs its dispatcher at least this, slashed or not."""
    return preset.COMMITTEE_SIZE * preset.AUDIT_FEE_WEI


def compute_draw_commitment(secret: bytes) -> bytes:
    """Return what a dispatcher posts with a start it will draw privately: keccak256(0x1d ‖ secret).
    Fixed before the seed block's hash exists, so the secret cannot be chosen to pick a committee."""
    if len(secret) != 32:
        raise InvalidInput(f"a draw secret is 32 bytes, got {len(secret)}")
    return keccak256(DOMAIN_DRAW_SECRET + secret)


def compute_committee_seed(beta: bytes, index: int) -> bytes:
    """The β-seeded first-round seed of the contracts before issue 20: anyone could compute it
    as soon as a batch was drawn (committee shopping). Kept for the simulator's older rule sets."""
    return keccak256(DOMAIN_COMMITTEE + beta + struct.pack(">I", index))


def compute_escalation_seed(audit_id: int, seed_blockhash: bytes) -> bytes:
    """The escalation seed of the contracts before issue 20 (the simulator's older rule sets)."""
    return keccak256(DOMAIN_ESCALATION + struct.pack(">Q", audit_id) + seed_blockhash)


def compute_challenge_seed(committee_seed: bytes, seed_blockhash: bytes) -> bytes:
    """Return a round's challenge seed (feed it to `verillm.spec.challenge.compute_challenge`)."""
    return keccak256(DOMAIN_CHALLENGE_SEED + committee_seed + seed_blockhash)


def compute_draw_value(seed: bytes, attempt: int, i: int) -> int:
    """Return the 256-bit number behind draw ``i`` of ``attempt``."""
    return int.from_bytes(keccak256(DOMAIN_SORTITION + seed + bytes([attempt]) + struct.pack(">I", i)), "big")


def compute_committee(seed: bytes, attempt: int, size: int, candidates: Sequence[bytes], weights: Sequence[int]) -> tuple[bytes, ...]:
    """Draw ``size`` distinct candidates, each with probability proportional to its weight.

    Stake-weighted sampling without replacement: draw i picks the first candidate (in list
    order, drawn ones skipped) whose running weight exceeds r = draw value mod weight in play.
    Weight 0 (the worker, members drawn before, no stake) is never drawn.
    """
    if len(candidates) != len(weights):
        raise InvalidInput("one weight per candidate")
    weights = list(weights)
    total = sum(weights)
    chosen = []
    for i in range(size):
        if total == 0:
            raise InvalidInput(f"not enough candidates: wanted {size}, drew {i}")
        r = compute_draw_value(seed, attempt, i) % total
        picked = _walk(r, weights)
        chosen.append(candidates[picked])
        total -= weights[picked]
        weights[picked] = 0
    return tuple(chosen)


def compute_round_committee(seed: bytes, attempt: int, size: int, candidates: Sequence[bytes], weights: Sequence[int],
                            out_blocks: Sequence[int], seed_block: int) -> tuple[bytes, ...]:
    """Draw as `Registry.drawCommittee`: `compute_committee`, and while a pick is out of the
    draw at or before ``seed_block`` (``out_blocks[i]``, `Registry.outBlock`: the block it
    unbonded in or, in the draw's epoch or later, was first slashed or left below the minimum
    stake; 0 = never), its
    weight goes to 0 and the draw is repeated. ``weights`` already 0 for the round's exclusions
    (worker, dispatcher, drawn). Every input is fixed at ``seed_block``: nothing after it (a
    leave, a slash) changes the committee."""
    weights = list(weights)
    while True:
        chosen = compute_committee(seed, attempt, size, candidates, weights)
        gone = [c for c in chosen if 0 < out_blocks[candidates.index(c)] <= seed_block]
        if not gone:
            return chosen
        for c in gone:
            weights[candidates.index(c)] = 0


def _walk(r: int, weights: list[int]) -> int:
    running = 0
    for j, weight in enumerate(weights):
        running += weight
        if r < running:
            return j
    raise InvalidInput("draw value outside the total weight")  # unreachable: r < Σ weights


def compute_excluded_weights(candidates: Sequence[bytes], stakes: Sequence[int], excluded: Sequence[bytes]) -> list[int]:
    """Return the sortition weights: each candidate's stake, 0 for the excluded."""
    banned = set(excluded)
    return [0 if c in banned else s for c, s in zip(candidates, stakes, strict=True)]


def compute_epoch(block_number: int, epoch_blocks: int) -> int:
    """Return the stake epoch of a block (`Registry.epochOf`)."""
    if epoch_blocks <= 0:
        raise InvalidInput("epoch_blocks must be positive")
    return block_number // epoch_blocks


def compute_weight_at(checkpoints: Sequence[tuple[int, int]], epoch: int) -> int:
    """Return a (model, node)'s sortition weight in ``epoch`` (`Registry.weightAt`).

    ``checkpoints``: (from_epoch, weight) in increasing from_epoch, one per epoch in which the
    node's stake, models or activity changed (each effective from the epoch after the change,
    a slash too: `compute_out_block` says from when a slashed node sits out draws before that).
    """
    for from_epoch, weight in reversed(checkpoints):
        if from_epoch <= epoch:
            return weight
    return 0


def compute_out_block(left_block: int, taken_blocks: Sequence[int], epoch: int, epoch_blocks: int) -> int:
    """Return the first block from which a node takes no seat in draws of ``epoch``
    (`Registry.outBlock`; 0: none): the block it unbonded in (``left_block``, 0 = has not), or the
    first block of ``epoch`` or later in which it was slashed or left below the minimum stake
    (``taken_blocks``: the first of each epoch the contract keeps, 0 = none; a penalty that
    leaves the minimum is none). One in an earlier epoch is in ``epoch``'s weights."""
    out = left_block
    for taken in taken_blocks:
        if taken and compute_epoch(taken, epoch_blocks) >= epoch and (out == 0 or taken < out):
            out = taken
    return out


def compute_round_exclusions(worker: bytes, dispatcher: bytes, drawn: Sequence[bytes]) -> tuple[bytes, ...]:
    """Return who a round's draw excludes: the worker, the batch's dispatcher, every member drawn so far."""
    return (worker, dispatcher, *drawn)


# --- the audit state machine (Jobs.sol) ------------------------------------------------------

class Phase(IntEnum):
    """The phase of an audit round (contracts/src/AuditTypes.sol `Phase`): the codes, once."""

    NONE = 0
    COMMITTING = 1
    OPENING = 2
    DECIDED = 3
    DRAWING = 4
    SETTLED = 5
    ABANDONED = 6
    LAPSED = 7


TERMINAL_PHASES = (Phase.SETTLED, Phase.ABANDONED)
"""Where an audit ends (its current round's phase). LAPSED ends an escalation round only: the
audit goes back to its first round, DECIDED, and settles it."""
PHASE_NAMES = {p: p.name.lower() for p in Phase}


@dataclass(frozen=True)
class Transition:
    """One row of docs/protocol.md §12's table: ``call`` runs in ``phase`` within ``window``
    (by ``who``), and leaves the round in one of ``to``."""

    phase: Phase
    call: str
    """The Protocol method (verillm.chain.protocol) sending it."""
    who: str
    window: str
    to: tuple[Phase, ...]
    permissionless: bool = True


TRANSITIONS = (
    Transition(Phase.DRAWING, "draw_round", "anyone (a public draw, the worker's receipt on-chain)", "(entered + delay, entered + delay + draw]",
               (Phase.COMMITTING, Phase.ABANDONED)),
    Transition(Phase.DRAWING, "reveal_round", "the dispatcher (a private draw: its secret, the worker's receipt, the members' receipts)",
               "(entered + delay, entered + delay + draw + grace], after draw at the penalty", (Phase.COMMITTING, Phase.OPENING, Phase.ABANDONED), False),
    Transition(Phase.DRAWING, "supply_receipt", "anyone holding the worker's receipt (after a missed private draw)", "≤ entered + delay + draw",
               (Phase.DRAWING,), False),
    Transition(Phase.DRAWING, "lapse", "anyone", "> entered + delay + draw (+ grace while a private draw waits)",
               (Phase.LAPSED, Phase.ABANDONED, Phase.DRAWING)),
    Transition(Phase.COMMITTING, "post_committee_receipt", "anyone (a member's signed receipt)", "≤ commit deadline", (Phase.COMMITTING, Phase.OPENING), False),
    Transition(Phase.COMMITTING, "claim_undelivered", "a drawn member without a receipt", "≤ commit deadline, ≤ publish deadline once claimed, nothing published", (Phase.COMMITTING,), False),
    Transition(Phase.COMMITTING, "publish_transcript", "anyone (the worker)", "≤ publish deadline", (Phase.COMMITTING,), False),
    Transition(Phase.COMMITTING, "slash_undelivered", "anyone", "> publish deadline, nothing published", (Phase.DECIDED,)),
    Transition(Phase.COMMITTING, "replace_missing", "anyone", "> commit deadline, no claim standing unpublished", (Phase.COMMITTING, Phase.ABANDONED)),
    Transition(Phase.OPENING, "draw_challenge", "anyone", "(ready + delay, ready + delay + open]", (Phase.OPENING,)),
    Transition(Phase.OPENING, "open_worker", "the worker", "(ready + delay, ready + delay + open]", (Phase.OPENING,), False),
    Transition(Phase.OPENING, "seal_vote", "a member, after the worker: keccak256(0x1e ‖ seat ‖ vote ‖ opening hash ‖ salt)",
               "≤ ready + delay + 2·open", (Phase.OPENING,), False),
    Transition(Phase.OPENING, "open_and_vote", "a member that sealed: its leaves, vote and salt", "(every member sealed, or > ready + delay + 2·open) ≤ ready + delay + 3·open",
               (Phase.OPENING,), False),
    Transition(Phase.OPENING, "finalize", "anyone", "every member opened its vote, or > ready + delay + open (worker silent) / + 3·open", (Phase.DECIDED,)),
    Transition(Phase.DECIDED, "escalate", "a party with standing (bond): the worker against a FAIL or TIE, the dispatcher, a round-0 dissenter", "round 0, ≤ verdict + dispute, worker opened and not slashed", (Phase.DRAWING,), False),
    Transition(Phase.DECIDED, "settle", "anyone", "> verdict + dispute, no contest pending; an appeal that contradicts round 0 enters its decider (round 2)",
               (Phase.SETTLED, Phase.DRAWING)),
)


@dataclass(frozen=True)
class RoundDeadlines:
    """A round's deadlines (Jobs `Deadlines`): a window "(a, b]" opens the block after a; 0 = not known yet."""

    entered_block: int
    draw_after: int
    draw_by: int
    commit_by: int
    challenge_after: int
    worker_open_by: int
    members_seal_by: int
    members_open_by: int
    verdict_block: int
    dispute_by: int
    reveal_by: int = 0
    """draw_by + PRIVATE_REVEAL_GRACE_BLOCKS: a private draw revealed after draw_by (the same draw)
    costs its dispatcher MEMBER_PENALTY_BPS; `lapse` re-rolls it only after this. Not in Jobs'
    `Deadlines` (the grace is an immutable there, out of every other deadline's gas): the chain
    reader adds it from the deployment's preset."""


def compute_round_deadlines(entered_block: int, commit_deadline: int, ready_block: int, verdict_block: int, preset) -> RoundDeadlines:
    """Return a round's deadlines from the blocks it recorded (`Jobs._deadlines`)."""
    delay, opening = preset.AUDIT_DRAW_DELAY_BLOCKS, preset.OPEN_WINDOW_BLOCKS
    draw_after = entered_block + delay
    challenge_after = ready_block + delay if ready_block else 0
    return RoundDeadlines(
        entered_block, draw_after, draw_after + preset.DRAW_WINDOW_BLOCKS, commit_deadline, challenge_after,
        challenge_after + opening if ready_block else 0, challenge_after + 2 * opening if ready_block else 0,
        challenge_after + 3 * opening if ready_block else 0,
        verdict_block, verdict_block + preset.DISPUTE_WINDOW_BLOCKS if verdict_block else 0,
        draw_after + preset.DRAW_WINDOW_BLOCKS + preset.PRIVATE_REVEAL_GRACE_BLOCKS,
    )


@dataclass(frozen=True)
class RoundState:
    """A round as the state machine sees it (`Jobs.getRoundState`)."""

    phase: Phase
    round: int
    attempt: int
    members: int
    receipts: int
    seals: int
    opens: int
    worker_opened: bool
    challenge_drawn: bool
    published: bool
    pending_contests: int
    publish_deadline: int
    deadlines: RoundDeadlines
    private_draw: bool = False
    """DRAWING, and only its dispatcher may draw it (`reveal_round`): by draw_by, or late by reveal_by
    at MEMBER_PENALTY_BPS (the same draw); after reveal_by, `lapse` slashes the dispatcher and opens a
    public draw window (the round is entered again)."""
    receipt_known: bool = True
    """The worker's receipt is on-chain. False for a private start until its reveal shows the
    receipt, and after a missed reveal until someone holding it calls `supply_receipt`: no public
    draw before that (nothing to check the members' receipts against)."""


def is_claim_standing(state: RoundState) -> bool:
    """Return whether a member's claim waits for a publication: only that, or the worker's
    default, can end the round then (no redraw, no abandonment)."""
    return state.publish_deadline != 0 and not state.published


def compute_due_steps(state: RoundState, block: int) -> tuple[str, ...]:
    """Return the permissionless calls (Protocol method names) the contract accepts in ``block``
    for this round, in the order a driver should send them. Empty: only a party can act (a
    receipt, an opening, a vote, a publication) or nothing is due before a later block."""
    d = state.deadlines
    if state.phase == Phase.DRAWING:
        if block > (d.reveal_by if state.private_draw else d.draw_by):
            return ("lapse",)
        return ("draw_round",) if d.draw_after < block and not state.private_draw and state.receipt_known else ()
    if state.phase == Phase.COMMITTING:
        if is_claim_standing(state):
            return ("slash_undelivered",) if block > state.publish_deadline else ()
        return ("replace_missing",) if block > d.commit_by else ()
    if state.phase == Phase.OPENING:
        steps = []
        if not state.challenge_drawn and d.challenge_after < block <= d.worker_open_by:
            steps.append("draw_challenge")
        all_opened = state.worker_opened and state.opens == state.members
        if all_opened or block > (d.members_open_by if state.worker_opened else d.worker_open_by):
            steps.append("finalize")
        return tuple(steps)
    if state.phase == Phase.DECIDED:
        return ("settle",) if block > d.dispute_by and state.pending_contests == 0 else ()
    return ()


LEAF_FIXED_BYTES = 11  # encode(Leaf): u32 position, u16 layer, u32 count, u8 flags; + 4 bytes per dim


# --- openings on-chain ----------------------------------------------------------------------

def compute_prompt_len(num_positions: int, output_tokens: int) -> int:
    """Return P from the worker's num_positions = P + N − 1 and N."""
    if not 1 <= output_tokens <= num_positions:
        raise InvalidInput(f"{output_tokens} output tokens do not fit {num_positions} positions")
    return num_positions + 1 - output_tokens


def compute_appeal_cells(prompt_len: int, output_tokens: int, committed_layers: Sequence[int]) -> set[tuple[int, int]]:
    """The cells every round opens and token-checks: the last committed layer at the N positions
    that predict an output token (P − 1 … P + N − 2). A first-round member whose committed data
    fail there, after an appeal round decided PASS, is a provable liar (Disputes.adjudicate); so
    is a first-round "agree" whose data fail there against an appeal "disagree" voter's, after
    the appeal decided FAIL (Disputes.adjudicateAcrossRounds)."""
    return {(position, committed_layers[-1]) for position in range(prompt_len - 1, prompt_len - 1 + output_tokens)}


def encode_opening_leaves(opening: Opening) -> bytes:
    """Return what a party posts on-chain: its opened leaves, encoded, in opening order."""
    return b"".join(encode(item.leaf) for item in opening.leaves)


def decode_opening_leaves(data: bytes, dims: int) -> list[Leaf]:
    """Inverse of `encode_opening_leaves`: split posted opening bytes into leaves of ``dims`` values."""
    size = LEAF_FIXED_BYTES + 4 * dims
    if len(data) % size:
        raise EncodingError(f"opening of {len(data)} bytes is not a whole number of {size}-byte leaves")
    return [decode(Leaf, data[i : i + size]) for i in range(0, len(data), size)]


def compute_opening_hash(opening: Opening) -> bytes:
    """Return the keccak256 the contract keeps for an opening."""
    return keccak256(encode_opening_leaves(opening))


def compute_vote_seal(audit_id: int, round_index: int, slot: int, agree: bool, opening_hash: bytes, salt: bytes) -> bytes:
    """Return what a member posts with `Jobs.sealVote`: its vote (1 agree, 2 disagree) and the
    keccak256 of its opening, bound to its seat (``slot`` counts members from 0) and hidden by
    ``salt``. `Jobs.openAndVote` later shows the leaves, vote and salt that hash to it."""
    if len(opening_hash) != 32 or len(salt) != 32:
        raise InvalidInput("a vote seal needs a 32-byte opening hash and a 32-byte salt")
    vote = 1 if agree else 2
    return keccak256(DOMAIN_VOTE_SEAL + struct.pack(">QBBB", audit_id, round_index, slot, vote) + opening_hash + salt)


def compute_vote_salt(secret: bytes, audit_id: int, round_index: int, slot: int) -> bytes:
    """Return a member's salt for one seat, derived from a secret only it holds: a node that
    restarts between its seal and its opening derives the same salt, and nobody else can (a
    guessable salt would let anyone try both votes against the seal). The secret must differ per
    deployment (the node hashes its key with the Jobs address): audit ids restart at 1 in a new
    one, and a salt an earlier opening showed would unseal the same seat there."""
    if len(secret) < 32:
        raise InvalidInput("a vote salt needs a secret of at least 32 bytes")
    # keccak256 has no length extension: keccak(tag ‖ secret ‖ seat) is a keyed hash of the seat
    return keccak256(b"verillm vote salt" + secret + struct.pack(">QBB", audit_id, round_index, slot))


def compute_opened_cell_count(output_tokens: int, num_layers: int, challenge_positions: int, is_member: bool) -> int:
    """Return how many cells a party opens: k·L + N (+1 for a member) − k, k = min(N, count)."""
    k = min(output_tokens, challenge_positions)
    return k * (num_layers - 1) + output_tokens + (1 if is_member else 0)


# --- adjudication arithmetic (Fingerprint.sol) -----------------------------------------------

def compute_fixed_ppb(bits: int) -> int | None:
    """Return an f32 (given as its 32 bits) in parts per billion, truncated toward zero and
    clamped to ±2^96; None for NaN and infinities."""
    exponent = (bits >> 23) & 0xFF
    if exponent == 0xFF:
        return None
    mantissa = bits & 0x7FFFFF
    if exponent == 0:
        exponent = 1
    else:
        mantissa |= 0x800000
    scaled = mantissa * PPB
    magnitude = scaled << (exponent - 150) if exponent >= 150 else scaled >> (150 - exponent)
    magnitude = min(magnitude, CLAMP_PPB)
    return -magnitude if bits >> 31 else magnitude


def compute_f32_bits(value: float) -> int:
    """Return the IEEE-754 single-precision bits of ``value``."""
    return struct.unpack(">I", struct.pack(">f", value))[0]


def compute_cell_squared_error(worker_bits: Sequence[int], member_bits: Sequence[int]) -> int | None:
    """Return Σ (f_W − f_M)² in ppb², or None when a value is not finite (the cell fails)."""
    worker = [compute_fixed_ppb(b) for b in worker_bits]
    member = [compute_fixed_ppb(b) for b in member_bits]
    if None in worker or None in member:
        return None
    return sum((w - m) ** 2 for w, m in zip(worker, member, strict=True))


def is_cell_within(sum_sq: int | None, dims: int, max_cell_error_ppb: int) -> bool:
    """Return whether a cell's error ‖Δ‖/√d is within the threshold: Σ Δ² ≤ d · threshold²."""
    return sum_sq is not None and sum_sq <= dims * max_cell_error_ppb**2


def compute_threshold_ppb(threshold: float) -> int:
    """Return a tolerance-profile threshold (unit-free, see `verillm.spec.policy`) in ppb, rounded up."""
    return math.ceil(threshold * PPB)


@dataclass(frozen=True)
class OnchainModel:
    """A model's on-chain adjudication config (Registry.addModel): thresholds in ppb."""

    model_id: bytes
    committed_layers: tuple[int, ...]
    fingerprint_dims: int
    max_cell_error_ppb: tuple[int, ...]
    rms_error_ppb: tuple[int, ...]
    min_cells_for_rms: int

    @classmethod
    def from_profile(cls, model_id: bytes, manifest: ModelManifest, profile: ToleranceProfile) -> "OnchainModel":
        """Take the thresholds of a calibrated tolerance profile, rounded up to whole ppb."""
        layers = tuple(manifest.committed_layers)
        return cls(
            model_id=model_id, committed_layers=layers, fingerprint_dims=manifest.fingerprint_dims,
            max_cell_error_ppb=tuple(compute_threshold_ppb(profile.for_layer(l).max_cell_error) for l in layers),
            rms_error_ppb=tuple(compute_threshold_ppb(profile.for_layer(l).rms_error) for l in layers),
            min_cells_for_rms=profile.min_cells_for_rms,
        )


def is_onchain_agreement(worker: dict, member: dict, model: "OnchainModel", prompt_len: int, output_tokens: int) -> bool:
    """Return the member's on-chain verdict on the worker over the worker's opened cells
    (Disputes._compare): every cell within its layer's max cell error, every output token
    flagged FLAG_NEXT_WITHIN_MARGIN by the member, and each layer's RMS within bounds when it
    has at least min_cells_for_rms cells. ``worker``/``member`` map (position, layer) → Leaf;
    ``model`` has committed_layers, fingerprint_dims and the ppb thresholds (`OnchainModel`).
    """
    layers = tuple(model.committed_layers)
    sums, counts = [0] * len(layers), [0] * len(layers)
    agrees = True
    for (position, layer), w in sorted(worker.items()):
        slot = layers.index(layer)
        sum_sq = compute_cell_squared_error(_leaf_bits(w), _leaf_bits(member[(position, layer)]))
        agrees &= is_cell_within(sum_sq, model.fingerprint_dims, model.max_cell_error_ppb[slot])
        if slot == len(layers) - 1 and prompt_len - 1 <= position < prompt_len - 1 + output_tokens:
            agrees &= bool(member[(position, layer)].flags & FLAG_NEXT_WITHIN_MARGIN)
        sums[slot] = None if sum_sq is None or sums[slot] is None else sums[slot] + sum_sq
        counts[slot] += 1
    for slot, (total, cells) in enumerate(zip(sums, counts)):
        if cells >= model.min_cells_for_rms:
            agrees &= total is not None and total <= cells * model.fingerprint_dims * model.rms_error_ppb[slot] ** 2
    return agrees


def _leaf_bits(leaf) -> list[int]:
    return [compute_f32_bits(v) for v in leaf.fingerprint]
