import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from verillm.spec.merkle import (
    MerkleProof,
    compute_leaf_hash,
    compute_merkle_levels,
    compute_merkle_proof,
    compute_merkle_root,
    compute_node_hash,
    is_valid_merkle_proof,
)

leaf_lists = st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=70)


@given(leaf_lists, st.data())
@settings(max_examples=200, deadline=None)
def test_every_leaf_proves_into_the_root(leaves, data):
    hashes = [compute_leaf_hash(leaf) for leaf in leaves]
    levels = compute_merkle_levels(hashes)
    index = data.draw(st.integers(0, len(leaves) - 1))
    proof = compute_merkle_proof(levels, index)
    assert is_valid_merkle_proof(hashes[index], proof, levels[-1][0])


@given(leaf_lists, st.data())
@settings(max_examples=200, deadline=None)
def test_a_proof_does_not_verify_at_another_index_or_with_another_leaf(leaves, data):
    hashes = [compute_leaf_hash(bytes([i % 256]) + leaf) for i, leaf in enumerate(leaves)]
    levels = compute_merkle_levels(hashes)
    index = data.draw(st.integers(0, len(leaves) - 1))
    proof = compute_merkle_proof(levels, index)
    root = levels[-1][0]
    assert not is_valid_merkle_proof(compute_leaf_hash(b"forged"), proof, root)
    if len(leaves) > 1:
        other = (index + 1) % len(leaves)
        moved = MerkleProof(index=other, leaf_count=proof.leaf_count, siblings=proof.siblings)
        assert not is_valid_merkle_proof(hashes[index], moved, root)


@given(leaf_lists)
@settings(max_examples=100, deadline=None)
def test_leaf_count_is_bound_no_duplicate_padding_collision(leaves):
    hashes = [compute_leaf_hash(leaf) for leaf in leaves]
    if len(hashes) % 2:
        # Bitcoin's tree duplicates the odd node, so [a, b, c] and [a, b, c, c] collide; ours must not.
        assert compute_merkle_root(hashes) != compute_merkle_root(hashes + hashes[-1:])


def test_leaves_and_nodes_are_domain_separated():
    left, right = compute_leaf_hash(b"a"), compute_leaf_hash(b"b")
    node = compute_node_hash(left, right)
    # An inner node's preimage presented as a leaf must not hash to the node.
    assert compute_leaf_hash(left + right) != node
    assert node == hashlib.sha256(b"\x01" + left + right).digest()


def test_truncated_or_padded_proofs_are_rejected():
    hashes = [compute_leaf_hash(bytes([i])) for i in range(13)]
    levels = compute_merkle_levels(hashes)
    proof = compute_merkle_proof(levels, 12)  # the promoted last leaf: fewer siblings
    root = levels[-1][0]
    assert is_valid_merkle_proof(hashes[12], proof, root)
    assert not is_valid_merkle_proof(hashes[12], MerkleProof(12, 13, proof.siblings[:-1]), root)
    assert not is_valid_merkle_proof(hashes[12], MerkleProof(12, 13, proof.siblings + (root,)), root)
    assert not is_valid_merkle_proof(hashes[12], MerkleProof(12, 14, proof.siblings), root)
    assert not is_valid_merkle_proof(hashes[12], MerkleProof(13, 13, proof.siblings), root)


def test_single_leaf_tree_root_is_the_leaf():
    leaf = compute_leaf_hash(b"only")
    levels = compute_merkle_levels([leaf])
    assert levels[-1][0] == leaf
    assert is_valid_merkle_proof(leaf, compute_merkle_proof(levels, 0), leaf)


def test_a_million_leaves_build_and_prove():
    hashes = [hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(1_000_000)]
    levels = compute_merkle_levels(hashes)
    proof = compute_merkle_proof(levels, 123_456)
    assert len(proof.siblings) == 20
    assert is_valid_merkle_proof(hashes[123_456], proof, levels[-1][0])
