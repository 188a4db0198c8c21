"""Undelivered committee jobs: the claim, the publication and the worker's default, as
`contracts/src/Delivery.sol` (its own contract) runs them. The rule is in docs/protocol.md §12,
"Undelivered jobs".

    claim       a drawn member without a posted receipt, round committing, block ≤ commit deadline,
                transcript not yet published. The first claim of a round (or the first after an
                unanswered window) opens a window:  publish deadline = block + COMMIT_WINDOW_BLOCKS,
                commit deadline ← max(commit deadline, publish deadline + COMMIT_WINDOW_BLOCKS)
    publish     anyone, block ≤ publish deadline, once per audit:  len(tokens) = P + N and
                compute_tokens_hash(tokens) = the worker's outputHash and the sampling = the
                receipt's;  commit deadline ← max(commit deadline, block + COMMIT_WINDOW_BLOCKS)
    default     anyone, block > publish deadline, unpublished, the round still committing and a
                claimant without a receipt:  the worker is slashed (SLASH_FRACTION_BPS, the
                caller gets SLASH_REWARD_BPS of it) and the round is decided WORKER_DEFAULT
    bonds       (Standing) every claim carries DELIVERY_CLAIM_BOND_WEI. A publication pays the
                publisher its cost (gas measured + PUBLISH_BASE_GAS + PAYOUT_GAS per payout +
                CALLDATA_GAS_PER_BYTE × calldata bytes, at DELIVERY_GAS_PRICE_WEI) out of the round's bonds, capped at them,
                the rest back to the claimants in equal shares; a default, or a round whose every
                receipt came with nothing published, returns every bond (`compute_claim_bond_payout`)

The contract checks the tokens hash with its own BLAKE3 (`contracts/src/Blake3.sol`), so what
is published is exactly the transcript the worker signed.
"""

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from verillm.errors import InvalidInput, PromptTooLong
from verillm.spec.hashing import keccak256
from verillm.spec.job import compute_transcript_hash
from verillm.spec.types import SamplingParams


PUBLISH_BASE_GAS = 26_000
"""Delivery.PUBLISH_BASE_GAS: the base transaction, with the event's and the bond list's share,
outside the publication's measured gas."""
PAYOUT_GAS = 40_000
"""Delivery.PAYOUT_GAS: one credit written in Jobs, per payout (the publisher and each claimant)."""
CALLDATA_GAS_PER_BYTE = 16
"""Delivery.CALLDATA_GAS_PER_BYTE: calldata at its nonzero-byte price (an upper bound)."""


@dataclass(frozen=True)
class Transcript:
    """A published job: the worker's input ‖ output tokens and the sampling its receipt signed."""

    tokens: tuple[int, ...]
    sampling: SamplingParams


def encode_transcript_tokens(tokens: Sequence[int]) -> bytes:
    """Return the tokens as published: u32 big-endian each (compute_tokens_hash's preimage
    without its domain byte)."""
    if any(t < 0 or t >= 1 << 32 for t in tokens):
        raise InvalidInput("a token id does not fit in a u32")
    return struct.pack(f">{len(tokens)}I", *tokens)


def decode_transcript_tokens(data: bytes) -> tuple[int, ...]:
    """Return the token ids of published transcript bytes."""
    if len(data) % 4:
        raise InvalidInput(f"published transcript of {len(data)} bytes is not whole u32 tokens")
    return struct.unpack(f">{len(data) // 4}I", data)


def compute_sampling_key(sampling: SamplingParams) -> bytes:
    """Return Jobs' samplingKey: keccak256(abi.encode(temperatureMilli, topK, topPPpm, seed))."""
    words = (sampling.temperature_milli, sampling.top_k, sampling.top_p_ppm, sampling.seed)
    return keccak256(b"".join(w.to_bytes(32, "big") for w in words))


def verify_transcript(tokens: Sequence[int], input_tokens: int, output_tokens: int, output_hash: bytes) -> None:
    """Raise unless ``tokens`` are the transcript a receipt with these counts and outputHash signed."""
    if len(tokens) != input_tokens + output_tokens:
        raise InvalidInput(f"transcript has {len(tokens)} tokens, the receipt signed {input_tokens} + {output_tokens}")
    if compute_transcript_hash(tokens[:input_tokens], tokens[input_tokens:]) != output_hash:
        raise InvalidInput("transcript does not hash to the receipt's outputHash")


def verify_transcript_bound(input_tokens: int, max_new_tokens: int, max_transcript_tokens: int) -> None:
    """Raise PromptTooLong unless a job's longest transcript (its prompt and every token it may
    generate) fits MAX_TRANSCRIPT_TOKENS: a longer receipt cannot be audited (`Jobs.openAudit`
    refuses it), so a dispatcher must not serve, promise or batch it."""
    if input_tokens + max_new_tokens > max_transcript_tokens:
        raise PromptTooLong(f"prompt + max_new_tokens = {input_tokens + max_new_tokens} exceeds the deployment's "
                            f"MAX_TRANSCRIPT_TOKENS = {max_transcript_tokens}: its receipt could not be audited")


def compute_publish_deadline(claim_block: int, commit_window_blocks: int) -> int:
    """Return the last block a claim opened at ``claim_block`` may be answered in."""
    return claim_block + commit_window_blocks


def compute_commit_deadline_after_claim(commit_deadline: int, claim_block: int, commit_window_blocks: int) -> int:
    """Return the round's commit deadline once a claim opened a publication window."""
    return max(commit_deadline, compute_publish_deadline(claim_block, commit_window_blocks) + commit_window_blocks)


def compute_commit_deadline_after_publish(commit_deadline: int, publish_block: int, commit_window_blocks: int) -> int:
    """Return the round's commit deadline once the transcript is published: a fresh window."""
    return max(commit_deadline, publish_block + commit_window_blocks)


def compute_claim_bond_payout(claimants: int, bond_wei: int, publication_cost_wei: int | None) -> tuple[int, int]:
    """Return (the publisher's credit, each claimant's refund) when a round's ``claimants`` delivery
    claims are resolved (Delivery._resolveBonds): with a publication (``publication_cost_wei``,
    its measured gas × DELIVERY_GAS_PRICE_WEI: `compute_publication_cost`) the publisher gets its cost capped at the bonds, plus the
    wei an equal split leaves; without one (None: a default, or every receipt came) each claimant
    gets its bond back."""
    if claimants < 0 or bond_wei < 0 or (publication_cost_wei is not None and publication_cost_wei < 0):
        raise InvalidInput("claimants, bond and publication cost must be non-negative")
    if claimants == 0:
        return 0, 0
    held = claimants * bond_wei
    share = (held - min(publication_cost_wei or 0, held)) // claimants
    return held - share * claimants, share


def compute_publication_cost(measured_gas: int, calldata_bytes: int, claimants: int, gas_price_wei: int) -> int:
    """Return what a publication is paid for (Delivery.publishTranscript): the gas measured inside
    it, PUBLISH_BASE_GAS, PAYOUT_GAS per payout (``claimants`` + the publisher) and the calldata at
    CALLDATA_GAS_PER_BYTE, at ``gas_price_wei``."""
    payouts = claimants + 1
    return (measured_gas + PUBLISH_BASE_GAS + PAYOUT_GAS * payouts + CALLDATA_GAS_PER_BYTE * calldata_bytes) * gas_price_wei
