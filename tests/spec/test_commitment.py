"""Spec tests for `verillm.spec.commitment`: how a worker commits to its hidden states.

A worker reduces the hidden vector h at every (position, committed layer) to a fingerprint
f = Rᵀh / ‖h‖, writes one leaf per cell (position-major: index = position × L + slot) and
commits to all of them with one Merkle root. Later it opens the cells a challenge asks for;
`verify_opening` checks each opened leaf against the root or raises InvalidProof saying why.

Most tests use one hand-sized trace: 2 positions × 2 committed layers (1 and 4) × 2 dims,
fingerprints 1.0 … 8.0, flags 1 at position 0 and 3 at position 1.
"""

import dataclasses
import hashlib

import numpy as np
import pytest

from verillm.errors import InvalidInput, InvalidProof
from verillm.spec.commitment import JobTrace, compute_commitment, compute_fingerprints, compute_leaf, compute_leaf_bytes
from verillm.spec.commitment import compute_leaf_index, compute_opening, compute_projection, verify_opening
from verillm.spec.encoding import encode
from verillm.spec.merkle import compute_leaf_hash, is_valid_merkle_proof
from verillm.spec.types import Leaf, LeafOpening, Opening

LAYERS = (1, 4)
FINGERPRINTS = np.array([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]], dtype=np.float32)
FLAGS = np.array([1, 3], dtype=np.uint8)
ALL_CELLS = [(0, 1), (0, 4), (1, 1), (1, 4)]


def make_trace(fingerprints=FINGERPRINTS, flags=FLAGS) -> JobTrace:
    return JobTrace(output_tokens=(9,), fingerprints=fingerprints.copy(), flags=flags.copy())


def open_all():
    trace = make_trace()
    commitment = compute_commitment(trace, LAYERS)
    return commitment, compute_opening(trace, commitment, ALL_CELLS)


def tamper(opening: Opening, index: int, **changes) -> Opening:
    """Return ``opening`` with its ``index``-th leaf (or proof, via proof_* keys) changed."""
    item = opening.leaves[index]
    proof_changes = {k[len("proof_"):]: v for k, v in changes.items() if k.startswith("proof_")}
    leaf_changes = {k: v for k, v in changes.items() if not k.startswith("proof_")}
    changed = LeafOpening(dataclasses.replace(item.leaf, **leaf_changes), dataclasses.replace(item.proof, **proof_changes))
    return dataclasses.replace(opening, leaves=opening.leaves[:index] + (changed,) + opening.leaves[index + 1 :])


# --- fingerprints ---------------------------------------------------------------------------


def test_a_fingerprint_is_the_projection_of_the_unit_hidden_vector():
    hidden = np.array([3.0, 4.0])  # ‖h‖ = 5
    projection = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)  # two columns: e₁, e₂
    assert compute_fingerprints(hidden, projection).tolist() == pytest.approx([0.6, 0.8])


def test_a_fingerprint_does_not_depend_on_the_scale_of_the_hidden_vector():
    projection = compute_projection(b"\x07" * 32, layer=1, hidden_size=4, dims=3)
    hidden = np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)
    np.testing.assert_allclose(compute_fingerprints(1000 * hidden, projection), compute_fingerprints(hidden, projection), rtol=1e-6)


def test_the_zero_vector_has_a_zero_fingerprint_not_a_division_by_zero():
    projection = np.ones((3, 1), dtype=np.float32)
    assert compute_fingerprints(np.zeros(3), projection).tolist() == [0.0]


def test_the_projection_is_fixed_by_model_and_layer_and_differs_between_them():
    first = compute_projection(b"\x01" * 32, layer=1, hidden_size=8, dims=2)
    assert first.shape == (8, 2) and first.dtype == np.float32
    assert np.array_equal(first, compute_projection(b"\x01" * 32, layer=1, hidden_size=8, dims=2))
    assert not np.array_equal(first, compute_projection(b"\x01" * 32, layer=2, hidden_size=8, dims=2))
    assert not np.array_equal(first, compute_projection(b"\x02" * 32, layer=1, hidden_size=8, dims=2))


# --- leaves and root ------------------------------------------------------------------------


def test_leaves_are_ordered_position_major():
    # index = position × num_layers + slot: both layers of position 0 come before position 1.
    assert [compute_leaf_index(p, s, num_layers=2) for p in (0, 1) for s in (0, 1)] == [0, 1, 2, 3]
    assert compute_leaf_index(position=5, layer_slot=2, num_layers=3) == 17


def test_a_leaf_holds_position_layer_fingerprint_and_the_positions_flags():
    leaf = compute_leaf(make_trace(), LAYERS, position=1, layer_slot=1)
    assert leaf == Leaf(position=1, layer=4, fingerprint=(7.0, 8.0), flags=3)


def test_a_leaf_encodes_to_19_hand_checkable_bytes():
    # u32 position 0 | u16 layer 4 | u32 count 2 | f32 3.0 | f32 4.0 | u8 flags 1
    expected = bytes.fromhex("00000000" "0004" "00000002" "40400000" "40800000" "01")
    assert compute_leaf_bytes(make_trace(), LAYERS)[1] == expected
    assert encode(compute_leaf(make_trace(), LAYERS, 0, 1)) == expected


def test_the_root_is_the_sha256_merkle_root_of_the_four_leaves():
    leaves = [hashlib.sha256(b"\x00" + raw).digest() for raw in compute_leaf_bytes(make_trace(), LAYERS)]
    left = hashlib.sha256(b"\x01" + leaves[0] + leaves[1]).digest()
    right = hashlib.sha256(b"\x01" + leaves[2] + leaves[3]).digest()
    assert compute_commitment(make_trace(), LAYERS).root == hashlib.sha256(b"\x01" + left + right).digest()


def test_the_root_changes_when_any_single_fingerprint_bit_or_flag_changes():
    root = compute_commitment(make_trace(), LAYERS).root
    for cell in np.ndindex(FINGERPRINTS.shape):
        changed = FINGERPRINTS.copy()
        changed.view(np.uint32)[cell] ^= 1  # one ulp: the lowest mantissa bit
        assert compute_commitment(make_trace(fingerprints=changed), LAYERS).root != root, cell
    for position in range(2):
        flags = FLAGS.copy()
        flags[position] ^= 2
        assert compute_commitment(make_trace(flags=flags), LAYERS).root != root, position


def test_the_root_commits_to_which_layers_were_captured():
    assert compute_commitment(make_trace(), (1, 4)).root != compute_commitment(make_trace(), (1, 3)).root


def test_a_trace_with_a_different_layer_count_than_the_manifest_is_refused():
    with pytest.raises(InvalidInput, match="2 layers, manifest commits 3"):
        compute_commitment(make_trace(), (1, 2, 4))


# --- openings -------------------------------------------------------------------------------


def test_an_honest_opening_verifies_and_returns_the_leaves_by_position_and_layer():
    commitment, opening = open_all()
    leaves = verify_opening(opening, commitment.root, LAYERS, num_positions=2)
    assert sorted(leaves) == ALL_CELLS
    assert leaves[(1, 1)].fingerprint == (5.0, 6.0) and leaves[(1, 1)].flags == 3


def test_each_opened_leafs_merkle_proof_reaches_the_root_at_its_leaf_index():
    commitment, opening = open_all()
    for item, expected_index in zip(opening.leaves, [0, 1, 2, 3]):
        assert item.proof.index == expected_index and item.proof.leaf_count == 4
        assert is_valid_merkle_proof(compute_leaf_hash(encode(item.leaf)), item.proof, commitment.root)


def test_only_cells_inside_the_commitment_can_be_opened():
    trace = make_trace()
    commitment = compute_commitment(trace, LAYERS)
    for cell in [(2, 1), (0, 2), (-1, 4)]:
        with pytest.raises(InvalidInput, match="no leaf at"):
            compute_opening(trace, commitment, [cell])


def test_a_flipped_fingerprint_bit_does_not_reach_the_root():
    commitment, opening = open_all()
    value = np.float32(3.0)
    flipped = float((value.view(np.uint32) ^ np.uint32(1)).view(np.float32))
    forged = tamper(opening, 1, fingerprint=(flipped, 4.0))
    with pytest.raises(InvalidProof, match="leaf at position 0, layer 4 does not reach the root"):
        verify_opening(forged, commitment.root, LAYERS, 2)


def test_changed_flags_do_not_reach_the_root():
    commitment, opening = open_all()
    with pytest.raises(InvalidProof, match="position 0, layer 1 does not reach the root"):
        verify_opening(tamper(opening, 0, flags=0), commitment.root, LAYERS, 2)


def test_a_leaf_under_a_wrong_index_is_refused():
    commitment, opening = open_all()
    with pytest.raises(InvalidProof, match="position 1, layer 4 claims index 2"):
        verify_opening(tamper(opening, 3, proof_index=2), commitment.root, LAYERS, 2)


def test_a_proof_claiming_another_leaf_count_is_refused():
    commitment, opening = open_all()
    with pytest.raises(InvalidProof, match="claims 8 leaves, commitment has 4"):
        verify_opening(tamper(opening, 0, proof_leaf_count=8), commitment.root, LAYERS, 2)


@pytest.mark.parametrize("cell", [(2, 1), (0, 2)])
def test_a_leaf_outside_the_commitment_is_refused(cell):
    commitment, opening = open_all()
    position, layer = cell
    with pytest.raises(InvalidProof, match=f"position {position}, layer {layer} is outside the commitment"):
        verify_opening(tamper(opening, 0, position=position, layer=layer), commitment.root, LAYERS, 2)


def test_an_opening_under_another_root_is_refused():
    commitment, opening = open_all()
    with pytest.raises(InvalidProof, match="opening is for root"):
        verify_opening(opening, b"\xee" * 32, LAYERS, 2)


def test_an_opening_checked_against_a_wrong_position_count_is_refused():
    commitment, opening = open_all()
    # The first leaf's proof says 4 leaves; 1 position × 2 layers would be 2.
    with pytest.raises(InvalidProof, match="claims 4 leaves, commitment has 2"):
        verify_opening(opening, commitment.root, LAYERS, num_positions=1)
