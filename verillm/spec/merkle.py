"""Binary Merkle tree with domain-separated leaves and nodes.

    leaf hash = sha256(0x00 || leaf bytes)
    node hash = sha256(0x01 || left || right)

A level with an odd number of nodes promotes its last node unchanged to the next level (no
duplication, so no two different leaf lists share a root: the CVE-2012-2459 trap of
Bitcoin's tree). A proof is the list of siblings from the leaf upward; the verifier needs the
leaf index and the leaf count to know at which levels the node was promoted without a sibling.
The contracts implement `is_valid_merkle_proof` identically (`contracts/src/MerkleLib.sol`).
"""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from verillm.errors import InvalidInput
from verillm.spec.encoding import U32, Bytes32List
from verillm.spec.hashing import DOMAIN_MERKLE_LEAF, DOMAIN_MERKLE_NODE

_sha256 = hashlib.sha256


def compute_leaf_hash(leaf_bytes: bytes) -> bytes:
    """Return the domain-separated hash of one encoded leaf."""
    return _sha256(DOMAIN_MERKLE_LEAF + leaf_bytes).digest()


def compute_node_hash(left: bytes, right: bytes) -> bytes:
    """Return the domain-separated hash of an inner node."""
    return _sha256(DOMAIN_MERKLE_NODE + left + right).digest()


def _next_level(level: Sequence[bytes]) -> list[bytes]:
    node = DOMAIN_MERKLE_NODE
    parents = [_sha256(node + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)]
    if len(level) % 2:
        parents.append(level[-1])  # promoted: no sibling at this level
    return parents


def compute_merkle_levels(leaf_hashes: Sequence[bytes]) -> list[list[bytes]]:
    """Return every level of the tree, leaves first and the root level last."""
    if not leaf_hashes:
        raise InvalidInput("a Merkle tree needs at least one leaf")
    levels = [list(leaf_hashes)]
    while len(levels[-1]) > 1:
        levels.append(_next_level(levels[-1]))
    return levels


def compute_merkle_root(leaf_hashes: Sequence[bytes]) -> bytes:
    """Return the root over ``leaf_hashes``."""
    return compute_merkle_levels(leaf_hashes)[-1][0]


@dataclass(frozen=True)
class MerkleProof:
    """Siblings from the leaf to the root, with the position that fixes the path."""

    index: U32
    leaf_count: U32
    siblings: Bytes32List


def compute_merkle_proof(levels: list[list[bytes]], index: int) -> MerkleProof:
    """Return the proof for leaf ``index`` from the levels of a tree."""
    leaf_count = len(levels[0])
    if not 0 <= index < leaf_count:
        raise InvalidInput(f"leaf index {index} outside a tree of {leaf_count} leaves")
    siblings = []
    position = index
    for level in levels[:-1]:
        sibling = position ^ 1
        if sibling < len(level):
            siblings.append(level[sibling])
        position //= 2
    return MerkleProof(index=index, leaf_count=leaf_count, siblings=tuple(siblings))


def compute_root_from_proof(leaf_hash: bytes, proof: MerkleProof) -> bytes | None:
    """Walk ``proof`` up from ``leaf_hash``; None when the proof has the wrong shape."""
    if not 0 <= proof.index < proof.leaf_count:
        return None
    node, position, width, used = leaf_hash, proof.index, proof.leaf_count, 0
    while width > 1:
        if position ^ 1 < width:
            if used == len(proof.siblings):
                return None
            sibling = proof.siblings[used]
            used += 1
            node = compute_node_hash(sibling, node) if position & 1 else compute_node_hash(node, sibling)
        position, width = position // 2, (width + 1) // 2
    return node if used == len(proof.siblings) else None


def is_valid_merkle_proof(leaf_hash: bytes, proof: MerkleProof, root: bytes) -> bool:
    """Check that ``leaf_hash`` sits at ``proof.index`` in the tree whose root is ``root``."""
    return compute_root_from_proof(leaf_hash, proof) == root
