"""Protocol records: frozen dataclasses with wire-typed fields, no behaviour.

Every record has one canonical encoding (`verillm.spec.encoding`). Ids and digests derived
from records live in the modules that define their meaning (`job.py`, `manifest.py`,
`receipt.py`, `commitment.py`).
"""

from dataclasses import dataclass

from verillm.spec.encoding import (
    F32List,
    U8,
    U16,
    U32,
    U64,
    Bytes20,
    Bytes32,
    Bytes65,
    Text,
    U16List,
    U32List,
)
from verillm.spec.merkle import MerkleProof


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen. Integers with units, so contracts read them exactly.

    temperature_milli = 0 is greedy decoding; top_k = 0 and top_p_ppm = 1_000_000 disable
    those filters. The seed keys the sampler's per-position noise.
    """

    temperature_milli: U32 = 0
    top_k: U32 = 0
    top_p_ppm: U32 = 1_000_000
    seed: U64 = 0


@dataclass(frozen=True)
class Job:
    """A unit of work. Inference and verification jobs are the same record.

    An audit of job J sends the committee `Job(input = J.input ‖ J.output, max_new_tokens = 1)`
    with J's model and sampling params: to the member, an ordinary scoring request.
    """

    model_id: Bytes32
    input_tokens: U32List
    sampling: SamplingParams
    max_new_tokens: U32
    nonce: Bytes32


@dataclass(frozen=True)
class ModelManifest:
    """What a model id commits to. Its keccak256 hash is the model id on-chain."""

    name: Text
    weights_digest: Bytes32
    tokenizer_digest: Bytes32
    chat_template_digest: Bytes32
    dtype: Text
    hidden_size: U32
    vocab_size: U32
    num_layers: U16
    committed_layers: U16List
    fingerprint_dims: U8
    stop_tokens: U32List
    max_context_tokens: U32
    token_margin_micrologits: U32
    kernel_class: Text = ""
    """Empty: tolerance mode (fingerprints compared within a calibrated profile). Otherwise the
    kernel class whose engines reproduce each other bit for bit (exact mode, `docs/protocol.md`
    §9): the comparison has zero tolerance and the token margin is 0."""


@dataclass(frozen=True)
class Leaf:
    """One committed (position, hidden-state layer).

    `fingerprint`: the seeded projections of the hidden vector divided by its norm (fp32).
    `flags`: the token check, as this party's own sampler sees it at this position:
    FLAG_NEXT_WITHIN_MARGIN if the sequence's next token scores within the model's token
    margin of the token the sampler emits here; FLAG_STOP_WITHIN_MARGIN if a stop token does.
    A committee member's flags at the positions that predict the worker's output tokens are
    its verdict on each of those tokens (`docs/protocol.md` §Token check).
    """

    position: U32
    layer: U16
    fingerprint: F32List
    flags: U8




@dataclass(frozen=True)
class LeafOpening:
    """A leaf with the Merkle proof that places it under a commitment root."""

    leaf: Leaf
    proof: MerkleProof


@dataclass(frozen=True)
class Opening:
    """Leaves a party reveals for a challenge, all under the same root."""

    root: Bytes32
    leaves: tuple[LeafOpening, ...]


@dataclass(frozen=True)
class Receipt:
    """What every job produces: the worker's signed statement of what it computed."""

    job_hash: Bytes32
    model_id: Bytes32
    input_hash: Bytes32
    output_hash: Bytes32
    sampling: SamplingParams
    max_new_tokens: U32
    commitment_root: Bytes32
    num_positions: U32
    worker: Bytes20
    signature: Bytes65
    input_tokens: U32 = 0
    """P, signed: with output_tokens it binds the output length (num_positions = P + N − 1)."""
    output_tokens: U32 = 0
    """N, signed. 0 only in receipts built by hand for tests that never reach a contract."""
    auditable_until_block: U64 = 0
    """The last block an audit of this receipt may start in: the worker's chain head when it
    signed + RECEIPT_HORIZON_BLOCKS. Past it the worker owes nothing for the job (docs/protocol.md
    §12 "Receipt horizons"); 0 (expired) only on nodes with no chain."""


@dataclass(frozen=True)
class Challenge:
    """What an audit opens: sampled positions at every committed layer, and the token range.

    `positions`: positions whose leaves are opened at every committed layer.
    `token_positions`: positions whose last-layer leaf is opened for the token check
    (every position that predicts an output token, plus the one after the last).
    """

    seed: Bytes32
    positions: U32List
    layers: U16List
    token_positions: U32List
