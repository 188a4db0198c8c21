"""Hidden-state commitments: fingerprints, leaves, the Merkle root, openings, retained data.

A worker captures the hidden state h at every position and committed layer, keeps only its
fingerprint f = Rᵀh / ‖h‖ (R: a seeded Gaussian projection, `FINGERPRINT_DIMS` columns,
fixed per model and layer), and commits a leaf per (position, layer). Dividing by ‖h‖ makes
f a unit-free number of order 1, so one tolerance in absolute units fits every layer's
scale, and `|f_worker − f_verifier|` estimates the relative L2 error of the whole vector
(times a |N(0,1)| factor that the aggregate statistics average out).

Leaves are ordered position-major: leaf index = position × num_layers + layer slot.
"""

import hashlib
from dataclasses import dataclass, field

import numpy as np

from verillm.errors import InvalidInput, InvalidProof
from verillm.spec.hashing import DOMAIN_MERKLE_LEAF, DOMAIN_PROJECTION, blake3_digest
from verillm.spec.merkle import compute_merkle_levels, compute_merkle_proof, is_valid_merkle_proof
from verillm.spec.encoding import encode
from verillm.spec.types import Leaf, LeafOpening, Opening


def compute_projection(model_id: bytes, layer: int, hidden_size: int, dims: int) -> np.ndarray:
    """Return the (hidden_size × dims) float32 Gaussian projection for one committed layer."""
    key = blake3_digest(DOMAIN_PROJECTION + model_id + layer.to_bytes(2, "big"))
    generator = np.random.Generator(np.random.Philox(key=np.frombuffer(key[:16], dtype="<u8")))
    return generator.standard_normal((hidden_size, dims), dtype=np.float32)


def compute_fingerprints(hidden: np.ndarray, projection: np.ndarray) -> np.ndarray:
    """Return fingerprints (…, dims) of hidden vectors (…, hidden_size): Rᵀh / ‖h‖ in fp32."""
    hidden = np.asarray(hidden, dtype=np.float32)
    norms = np.linalg.norm(hidden, axis=-1, keepdims=True)
    return (hidden @ projection) / np.maximum(norms, np.float32(1e-30))


@dataclass(frozen=True)
class JobTrace:
    """What an engine hands the commitment for one job: its outputs and what it captured.

    `fingerprints`: float32 (num_positions, num_layers, dims).
    `flags`: uint8 (num_positions,) — FLAG_* bits per position (same for every layer).
    `output_tokens`: the sampled tokens, stop token included if one was sampled.
    """

    output_tokens: tuple[int, ...]
    fingerprints: np.ndarray = field(repr=False)
    flags: np.ndarray = field(repr=False)

    @property
    def num_positions(self) -> int:
        return int(self.fingerprints.shape[0])


def compute_leaf_index(position: int, layer_slot: int, num_layers: int) -> int:
    """Return the index of the leaf for (position, layer slot)."""
    return position * num_layers + layer_slot


def _leaf_dtype(dims: int) -> np.dtype:
    # Mirrors encode(Leaf): u32 position, u16 layer, u32 length + f32[dims], u8 flags.
    return np.dtype([("position", ">u4"), ("layer", ">u2"), ("count", ">u4"), ("fingerprint", ">f4", (dims,)), ("flags", "u1")])


def compute_leaf_bytes(trace: JobTrace, committed_layers: tuple[int, ...]) -> list[bytes]:
    """Return every leaf's canonical encoding, in leaf-index order (vectorised `encode(Leaf)`)."""
    positions, num_layers, dims = trace.fingerprints.shape
    records = np.zeros((positions, num_layers), dtype=_leaf_dtype(dims))
    records["position"] = np.arange(positions)[:, None]
    records["layer"] = np.asarray(committed_layers)[None, :]
    records["count"] = dims
    records["fingerprint"] = trace.fingerprints
    records["flags"] = trace.flags[:, None]
    raw = records.tobytes()
    size = records.dtype.itemsize
    return [raw[i : i + size] for i in range(0, len(raw), size)]


def compute_leaf(trace: JobTrace, committed_layers: tuple[int, ...], position: int, layer_slot: int) -> Leaf:
    """Return one leaf as a record."""
    return Leaf(
        position=position,
        layer=committed_layers[layer_slot],
        fingerprint=tuple(float(v) for v in trace.fingerprints[position, layer_slot]),
        flags=int(trace.flags[position]),
    )


@dataclass(frozen=True)
class Commitment:
    """A built commitment: the root and the tree levels needed to answer openings."""

    root: bytes
    levels: list[list[bytes]] = field(repr=False)
    committed_layers: tuple[int, ...]
    num_positions: int


def compute_commitment(trace: JobTrace, committed_layers: tuple[int, ...]) -> Commitment:
    """Build the Merkle commitment over every leaf of ``trace``."""
    if trace.fingerprints.shape[1] != len(committed_layers):
        raise InvalidInput(f"trace has {trace.fingerprints.shape[1]} layers, manifest commits {len(committed_layers)}")
    prefix = DOMAIN_MERKLE_LEAF
    hashes = [hashlib.sha256(prefix + leaf).digest() for leaf in compute_leaf_bytes(trace, committed_layers)]
    levels = compute_merkle_levels(hashes)
    return Commitment(root=levels[-1][0], levels=levels, committed_layers=committed_layers, num_positions=trace.num_positions)


def compute_opening(trace: JobTrace, commitment: Commitment, cells: list[tuple[int, int]]) -> Opening:
    """Open the leaves at (position, layer) ``cells`` with their proofs."""
    slots = {layer: slot for slot, layer in enumerate(commitment.committed_layers)}
    num_layers = len(commitment.committed_layers)
    leaves = []
    for position, layer in cells:
        if layer not in slots or not 0 <= position < commitment.num_positions:
            raise InvalidInput(f"no leaf at position {position}, layer {layer}")
        index = compute_leaf_index(position, slots[layer], num_layers)
        leaf = compute_leaf(trace, commitment.committed_layers, position, slots[layer])
        leaves.append(LeafOpening(leaf=leaf, proof=compute_merkle_proof(commitment.levels, index)))
    return Opening(root=commitment.root, leaves=tuple(leaves))


def verify_opening(opening: Opening, root: bytes, committed_layers: tuple[int, ...], num_positions: int) -> dict[tuple[int, int], Leaf]:
    """Verify every leaf of ``opening`` against ``root``; return them keyed by (position, layer).

    Raises InvalidProof naming the first leaf whose proof, index or leaf count is wrong.
    """
    if opening.root != root:
        raise InvalidProof(f"opening is for root {opening.root.hex()[:16]}…, receipt commits {root.hex()[:16]}…")
    slots = {layer: slot for slot, layer in enumerate(committed_layers)}
    expected_count = num_positions * len(committed_layers)
    leaves = {}
    for item in opening.leaves:
        leaf, proof = item.leaf, item.proof
        where = f"position {leaf.position}, layer {leaf.layer}"
        if leaf.layer not in slots or leaf.position >= num_positions:
            raise InvalidProof(f"leaf at {where} is outside the commitment")
        if proof.index != compute_leaf_index(leaf.position, slots[leaf.layer], len(committed_layers)):
            raise InvalidProof(f"leaf at {where} claims index {proof.index}")
        if proof.leaf_count != expected_count:
            raise InvalidProof(f"proof for {where} claims {proof.leaf_count} leaves, commitment has {expected_count}")
        if not is_valid_merkle_proof(hashlib.sha256(DOMAIN_MERKLE_LEAF + encode(leaf)).digest(), proof, root):
            raise InvalidProof(f"Merkle proof for the leaf at {where} does not reach the root")
        leaves[(leaf.position, leaf.layer)] = leaf
    return leaves
