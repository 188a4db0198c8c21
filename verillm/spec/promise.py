"""Batching promises and the omission challenge, as `contracts/src/Coverage.sol` runs them. The
rule is in docs/protocol.md §12, "Batching promises".

With every job its dispatcher (the node that served the client; in self-dispatch the worker
itself) returns a promise signed with its node key, EIP-712 over

    BatchPromise(bytes32 receiptHash,address dispatcher,uint64 batchByBlock)

in the domain (name "VeriLLM", version "1", chainId, verifyingContract = the Coverage contract):
the receipt's struct hash (the batch leaf) will be in a batch it posts by block
batchByBlock = the block it served at + BATCH_BY_BLOCKS. Nothing of it goes on-chain unless
the promise is claimed.

    claim    anyone holding the signed promise, with OMISSION_CLAIM_BOND_WEI, in the blocks
             (batchByBlock, batchByBlock + OMISSION_CLAIM_WINDOW_BLOCKS], once per promise, the
             signature recovering to the dispatcher, the dispatcher registered: its stake is
             locked, prove deadline = block + PROOF_WINDOW_BLOCKS
    answer   anyone, block ≤ prove deadline: a Merkle proof of the receipt hash in a batch whose
             dispatcher is the promise's and whose posted block ≤ batchByBlock. The dispatcher
             is credited min(bond, OMISSION_ANSWER_GAS × the answer's gas price), the claimant
             the rest of its bond, the lock released
    slash    anyone, block > prove deadline, claim unanswered: the dispatcher is slashed
             (SLASH_FRACTION_BPS); the claimant is credited its bond + SLASH_REWARD_BPS of the
             slashed stake, the rest goes to the audit fee pool
    keep     (Keepability) `Batches.postBatch` is open to an active node, and to a registered
             node that stopped being active at block X (unbonded, or a penalty or slash left it
             below the minimum stake) until X + AUDIT_HORIZON_BLOCKS (≥ BATCH_BY_BLOCKS): every
             promise it gave while active falls due by then, so neither a penalty, an unbond nor
             the order of anyone's `settle` makes a promise unkeepable (`is_batch_allowed`)
"""

from dataclasses import dataclass

from verillm.errors import InvalidInput, InvalidProof, InvalidSignature
from verillm.spec.audit import compute_batch_levels, compute_batch_proof
from verillm.spec.constants import BPS
from verillm.spec.hashing import keccak256
from verillm.spec.merkle import MerkleProof, compute_leaf_hash, is_valid_merkle_proof
from verillm.spec.receipt import SigningDomain, compute_domain_separator, recover_digest_signer, sign_digest

PROMISE_TYPE = b"BatchPromise(bytes32 receiptHash,address dispatcher,uint64 batchByBlock)"
PROMISE_TYPEHASH = keccak256(PROMISE_TYPE)

OPEN, ANSWERED, SLASHED = 1, 2, 3
"""Coverage.Claim.state."""


@dataclass(frozen=True)
class BatchPromise:
    """A dispatcher's promise to batch ``receipt_hash`` by block ``batch_by_block``."""

    receipt_hash: bytes
    dispatcher: bytes
    batch_by_block: int


@dataclass(frozen=True)
class SignedPromise:
    """A promise and its dispatcher's signature (r ‖ s ‖ v, v in {27, 28})."""

    promise: BatchPromise
    signature: bytes


@dataclass(frozen=True)
class BatchRecord:
    """What `Batches.getBatch` says of a batch that an answer proves into."""

    root: bytes
    dispatcher: bytes
    count: int
    posted_block: int


def compute_batch_by_block(served_block: int, batch_by_blocks: int) -> int:
    """Return the promised block for a job served when the chain head was ``served_block``."""
    if served_block < 0 or batch_by_blocks <= 0:
        raise InvalidInput(f"served block {served_block} and BATCH_BY_BLOCKS {batch_by_blocks} must be ≥ 0 and > 0")
    return served_block + batch_by_blocks


def compute_promise_hash(promise: BatchPromise) -> bytes:
    """Return the EIP-712 struct hash of ``promise`` (the key of its one claim on-chain)."""
    if len(promise.receipt_hash) != 32 or len(promise.dispatcher) != 20:
        raise InvalidInput("a promise needs a 32-byte receipt hash and a 20-byte dispatcher address")
    if not 0 <= promise.batch_by_block < 1 << 64:
        raise InvalidInput(f"batchByBlock {promise.batch_by_block} does not fit in a uint64")
    words = (promise.receipt_hash, promise.dispatcher.rjust(32, b"\x00"), promise.batch_by_block.to_bytes(32, "big"))
    return keccak256(PROMISE_TYPEHASH + b"".join(words))


def compute_promise_digest(promise: BatchPromise, domain: SigningDomain) -> bytes:
    """Return the digest the dispatcher signs: keccak256(0x1901 ‖ domain ‖ struct hash)."""
    return keccak256(b"\x19\x01" + compute_domain_separator(domain) + compute_promise_hash(promise))


def sign_promise(promise: BatchPromise, private_key: bytes, domain: SigningDomain) -> SignedPromise:
    """Return ``promise`` signed by ``private_key``, which must be its dispatcher's."""
    return SignedPromise(promise, sign_digest(compute_promise_digest(promise, domain), private_key, promise.dispatcher,
                                              "the promise's dispatcher"))


def verify_promise_signature(signed: SignedPromise, domain: SigningDomain) -> None:
    """Raise InvalidSignature unless ``signed`` is signed by its dispatcher for ``domain``."""
    signer = recover_digest_signer(compute_promise_digest(signed.promise, domain), signed.signature, "promise")
    if signer != signed.promise.dispatcher:
        raise InvalidSignature(f"promise is signed by 0x{signer.hex()}, not its dispatcher")


def verify_promise_terms(promise: BatchPromise, receipt_hash: bytes, head_block: int, batch_by_blocks: int) -> None:
    """Raise InvalidProof unless a promise just received is about ``receipt_hash`` and due between
    the head and head + BATCH_BY_BLOCKS: a dispatcher that promised a far block could never be
    claimed before it could leave, and one that backdated its promise (due before the job was
    served) may have let its claim window close already: nobody could ever claim it."""
    if promise.receipt_hash != receipt_hash:
        raise InvalidProof("the promise is about another receipt")
    if promise.batch_by_block < head_block:
        raise InvalidProof(f"the promise is due at block {promise.batch_by_block}, before head {head_block}: backdated")
    if promise.batch_by_block > head_block + batch_by_blocks:
        raise InvalidProof(f"the promise is due at block {promise.batch_by_block}, later than head {head_block} + BATCH_BY_BLOCKS {batch_by_blocks}")


def verify_claim(promise: BatchPromise, block: int, claim_window_blocks: int) -> None:
    """Raise InvalidInput unless a claim on ``promise`` may be made at ``block``."""
    if block <= promise.batch_by_block:
        raise InvalidInput(f"the promise is due at block {promise.batch_by_block}: claims open at {promise.batch_by_block + 1}")
    if block > promise.batch_by_block + claim_window_blocks:
        raise InvalidInput(f"claims on this promise closed at block {promise.batch_by_block + claim_window_blocks + 1}")


def compute_prove_deadline(claim_block: int, proof_window_blocks: int) -> int:
    """Return the last block a claim made at ``claim_block`` may be answered in."""
    return claim_block + proof_window_blocks


def is_inclusion_proof(promise: BatchPromise, batch: BatchRecord, proof: MerkleProof) -> bool:
    """Return whether ``proof`` answers a claim on ``promise``: the dispatcher's own batch, posted
    by batchByBlock, holding the receipt hash at ``proof.index`` (`verify_inclusion_proof`)."""
    try:
        verify_inclusion_proof(promise, batch, proof)
    except InvalidProof:
        return False
    return True


def verify_inclusion_proof(promise: BatchPromise, batch: BatchRecord, proof: MerkleProof) -> None:
    """Raise InvalidProof, naming the first failed condition, unless ``proof`` answers a claim on
    ``promise`` (the rule Coverage.proveIncluded applies): what a client runs on a proof the
    dispatcher shows off-chain before it decides to claim."""
    if batch.dispatcher != promise.dispatcher:
        raise InvalidProof(f"batch is 0x{batch.dispatcher.hex()}'s, not the promise's dispatcher 0x{promise.dispatcher.hex()}")
    if batch.posted_block > promise.batch_by_block:
        raise InvalidProof(f"batch posted at block {batch.posted_block}, after the promised block {promise.batch_by_block}")
    if proof.leaf_count != batch.count:
        raise InvalidProof(f"proof over {proof.leaf_count} leaves, the batch has {batch.count}")
    if not is_valid_merkle_proof(compute_leaf_hash(promise.receipt_hash), proof, batch.root):
        raise InvalidProof("the Merkle proof does not lead from the receipt hash to the batch root")


def compute_inclusion_proof(receipt_hashes: list[bytes], receipt_hash: bytes) -> MerkleProof:
    """Return the proof of ``receipt_hash`` in the batch over ``receipt_hashes``."""
    if receipt_hash not in receipt_hashes:
        raise InvalidInput(f"receipt 0x{receipt_hash.hex()} is not in this batch")
    return compute_batch_proof(compute_batch_levels(receipt_hashes), receipt_hashes.index(receipt_hash))


def is_batch_allowed(active: bool, inactive_since_block: int, block: int, audit_horizon_blocks: int) -> bool:
    """Whether `Batches.postBatch` accepts a batch from a node at ``block``: it is active, or
    registered and inactive since ``inactive_since_block`` (0: not registered) at most
    ``audit_horizon_blocks`` ago. A promise made while active (batchByBlock ≤ the block it went
    inactive + BATCH_BY_BLOCKS ≤ that + AUDIT_HORIZON_BLOCKS) stays keepable until it falls due."""
    if active:
        return True
    return inactive_since_block != 0 and block <= inactive_since_block + audit_horizon_blocks


def compute_omission_payout(slashed_wei: int, bond_wei: int, slash_reward_bps: int) -> tuple[int, int]:
    """Return (the claimant's credit, the fee pool's share) of an omission slash."""
    reward = slashed_wei * slash_reward_bps // BPS
    return bond_wei + reward, slashed_wei - reward


def compute_answer_payout(bond_wei: int, answer_gas: int, gas_price_wei: int) -> tuple[int, int]:
    """Return (the dispatcher's credit, the claimant's refund) of an answered claim: the answer's
    cost at its gas price, capped at the bond, and the rest of the bond."""
    if min(bond_wei, answer_gas, gas_price_wei) < 0:
        raise InvalidInput("bond, answer gas and gas price must be non-negative")
    paid = min(bond_wei, answer_gas * gas_price_wei)
    return paid, bond_wei - paid
