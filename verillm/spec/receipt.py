"""Receipts: the EIP-712 digest a worker signs, signing and recovery.

The typed struct (what `Jobs.sol` re-hashes when a receipt is proven or contested):

    Receipt(bytes32 jobHash,bytes32 modelId,bytes32 inputHash,bytes32 outputHash,
            uint32 temperatureMilli,uint32 topK,uint32 topPPpm,uint64 seed,
            uint32 maxNewTokens,bytes32 commitmentRoot,uint32 numPositions,uint32 inputTokens,
            uint32 outputTokens,uint64 auditableUntilBlock,address worker)

`inputHash` hashes the input tokens and `outputHash` the whole transcript, input ‖ output
(`compute_tokens_hash` over the concatenation), so a verification job's receipt, whose input is
the worker's input ‖ output, has inputHash = the worker's outputHash and inputTokens = P + N:
`Jobs.postCommitteeReceipt` binds a member's job to the worker's with no token data on-chain,
and every receipt looks the same, so a member cannot tell a verification job from the hashes.

`auditableUntilBlock` is the receipt's audit horizon: the last block an audit of it may start
in (`Jobs.openAudit` skips a selected start and refuses a request after it). The worker signs its
chain head + RECEIPT_HORIZON_BLOCKS (`compute_auditable_until_block`); whoever keeps the receipt
— the dispatcher before it promises to batch it, the client when the promise arrives — checks it
reaches the promise's deadline + the start span (`verify_receipt_horizon`), so a receipt batched
in time is auditable whenever its batch is drawn, and a worker that signs a short horizon to
escape audits has its receipt refused. The worker's duties for the job end at
`compute_receipt_duties_end_block`; it keeps the trace until then.

The domain is (name "VeriLLM", version "1", chainId, verifyingContract = the Jobs contract),
so a receipt signed for one deployment is worthless on another. The receipt hash (the EIP-712
struct hash) is the leaf that receipt batches commit on-chain.
"""

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass

from eth_keys import keys
from eth_keys.exceptions import BadSignature, ValidationError

from verillm.errors import InvalidProof, InvalidSignature
from verillm.spec.hashing import keccak256
from verillm.spec.job import compute_job_hash, compute_num_positions, compute_tokens_hash, compute_transcript_hash
from verillm.spec.params import Preset, compute_timeline
from verillm.spec.types import Job, Receipt

RECEIPT_TYPE = (
    b"Receipt(bytes32 jobHash,bytes32 modelId,bytes32 inputHash,bytes32 outputHash,"
    b"uint32 temperatureMilli,uint32 topK,uint32 topPPpm,uint64 seed,"
    b"uint32 maxNewTokens,bytes32 commitmentRoot,uint32 numPositions,uint32 inputTokens,uint32 outputTokens,"
    b"uint64 auditableUntilBlock,address worker)"
)
RECEIPT_TYPEHASH = keccak256(RECEIPT_TYPE)
DOMAIN_TYPEHASH = keccak256(b"EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)")
EMPTY_SIGNATURE = b"\x00" * 65


@dataclass(frozen=True)
class SigningDomain:
    """Which deployment a signature is for."""

    chain_id: int = 31337
    verifying_contract: bytes = b"\x00" * 20


def _word(value: int | bytes) -> bytes:
    return value.rjust(32, b"\x00") if isinstance(value, bytes) else value.to_bytes(32, "big")


@functools.lru_cache(maxsize=16)
def compute_domain_separator(domain: SigningDomain) -> bytes:
    """Return the EIP-712 domain separator."""
    return keccak256(
        DOMAIN_TYPEHASH + keccak256(b"VeriLLM") + keccak256(b"1") + _word(domain.chain_id) + _word(domain.verifying_contract)
    )


def compute_receipt_hash(receipt: Receipt) -> bytes:
    """Return the EIP-712 struct hash of ``receipt`` (its signature excluded)."""
    s = receipt.sampling
    fields = (
        receipt.job_hash, receipt.model_id, receipt.input_hash, receipt.output_hash,
        s.temperature_milli, s.top_k, s.top_p_ppm, s.seed,
        receipt.max_new_tokens, receipt.commitment_root, receipt.num_positions, receipt.input_tokens, receipt.output_tokens,
        receipt.auditable_until_block, receipt.worker,
    )
    return keccak256(RECEIPT_TYPEHASH + b"".join(_word(v) for v in fields))


def compute_signing_digest(receipt: Receipt, domain: SigningDomain) -> bytes:
    """Return the digest the worker signs: keccak256(0x1901 ‖ domain ‖ struct hash)."""
    return keccak256(b"\x19\x01" + compute_domain_separator(domain) + compute_receipt_hash(receipt))


def sign_receipt(receipt: Receipt, private_key: bytes, domain: SigningDomain) -> Receipt:
    """Return ``receipt`` signed by ``private_key`` (r ‖ s ‖ v with v in {27, 28})."""
    raw = sign_digest(compute_signing_digest(receipt, domain), private_key, receipt.worker, "the receipt's worker")
    return dataclasses.replace(receipt, signature=raw)


def sign_digest(digest: bytes, private_key: bytes, signer: bytes, role: str) -> bytes:
    """Return r ‖ s ‖ v (v in {27, 28}) over an EIP-712 ``digest``; the key must be ``signer``'s
    (``role`` names it in the error), so a node never signs in another party's name."""
    key = _load_private_key(private_key)
    if key.public_key.to_canonical_address() != signer:
        raise InvalidSignature(f"the signing key is not {role}")
    signature = key.sign_msg_hash(digest)
    return signature.r.to_bytes(32, "big") + signature.s.to_bytes(32, "big") + bytes([signature.v + 27])


@functools.lru_cache(maxsize=8)
def _load_private_key(private_key: bytes) -> keys.PrivateKey:
    """The key object of ``private_key`` (deriving its public key is an EC multiplication: a streaming
    worker signs per chunk, so it is done once per key)."""
    return keys.PrivateKey(private_key)


def recover_digest_signer(digest: bytes, sig: bytes, what: str) -> bytes:
    """Return the address whose r ‖ s ‖ v signature ``sig`` is over ``digest``; raise
    InvalidSignature (naming ``what`` was signed) if it is malformed or recovers no key."""
    if len(sig) != 65:
        raise InvalidSignature(f"{what} signature is {len(sig)} bytes, expected 65 (r ‖ s ‖ v)")
    if sig[64] not in (27, 28):
        raise InvalidSignature(f"{what} signature v byte is {sig[64]}, expected 27 or 28")
    try:
        signature = keys.Signature(vrs=(sig[64] - 27, int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:64], "big")))
        public = signature.recover_public_key_from_msg_hash(digest)
    except (BadSignature, ValidationError) as exc:
        raise InvalidSignature(f"{what} signature does not recover: {exc}") from None
    return public.to_canonical_address()


def recover_receipt_signer(receipt: Receipt, domain: SigningDomain) -> bytes:
    """Return the address that signed ``receipt``; raise InvalidSignature if none can."""
    return recover_digest_signer(compute_signing_digest(receipt, domain), receipt.signature, "receipt")


def verify_receipt_signature(receipt: Receipt, domain: SigningDomain) -> None:
    """Check that ``receipt`` is signed by its own worker; raise InvalidSignature if not."""
    signer = recover_receipt_signer(receipt, domain)
    if signer != receipt.worker:
        raise InvalidSignature(f"receipt is signed by 0x{signer.hex()}, not its worker 0x{receipt.worker.hex()}")


def compute_receipt(job: Job, output_tokens: Sequence[int], commitment_root: bytes, worker: bytes, auditable_until_block: int) -> Receipt:
    """Return the unsigned receipt for ``job`` with ``output_tokens`` under ``commitment_root``,
    auditable until ``auditable_until_block`` (`compute_auditable_until_block`)."""
    return Receipt(
        job_hash=compute_job_hash(job),
        model_id=job.model_id,
        input_hash=compute_tokens_hash(job.input_tokens),
        output_hash=compute_transcript_hash(job.input_tokens, output_tokens),
        sampling=job.sampling,
        max_new_tokens=job.max_new_tokens,
        commitment_root=commitment_root,
        num_positions=compute_num_positions(job, len(output_tokens)),
        worker=worker,
        signature=EMPTY_SIGNATURE,
        input_tokens=len(job.input_tokens),
        output_tokens=len(output_tokens),
        auditable_until_block=auditable_until_block,
    )


def verify_receipt_binding(receipt: Receipt, job: Job, output_tokens: Sequence[int]) -> None:
    """Check that ``receipt`` is about ``job`` and ``output_tokens``; raise InvalidProof naming the mismatch."""
    checks = {
        "job hash": receipt.job_hash == compute_job_hash(job),
        "model id": receipt.model_id == job.model_id,
        "input hash": receipt.input_hash == compute_tokens_hash(job.input_tokens),
        "output hash": receipt.output_hash == compute_transcript_hash(job.input_tokens, output_tokens),
        "sampling params": receipt.sampling == job.sampling and receipt.max_new_tokens == job.max_new_tokens,
        "number of positions": receipt.num_positions == compute_num_positions(job, len(output_tokens)),
        "token counts": (receipt.input_tokens, receipt.output_tokens) == (len(job.input_tokens), len(output_tokens)),
    }
    wrong = [name for name, ok in checks.items() if not ok]
    if wrong:
        raise InvalidProof(f"receipt does not match the completion: {', '.join(wrong)}")


def compute_auditable_until_block(signed_at_block: int, p: Preset) -> int:
    """Return the horizon an honest worker signs at chain head ``signed_at_block``."""
    return signed_at_block + p.RECEIPT_HORIZON_BLOCKS


def compute_least_auditable_until_block(batch_by_block: int, p: Preset) -> int:
    """Return the shortest horizon a receipt promised for ``batch_by_block`` may carry: the last
    block an audit of a batch posted by then can start in (posted + draw delay + draw + start)."""
    return batch_by_block + compute_timeline(p).start_span


def verify_receipt_horizon(receipt: Receipt, batch_by_block: int, p: Preset) -> None:
    """Check ``receipt`` is still auditable when the batch its promise (due ``batch_by_block``)
    posts is drawn and started; raise InvalidProof naming both blocks. A worker signing a shorter
    horizon would make its receipt unauditable before any audit of it could start."""
    least = compute_least_auditable_until_block(batch_by_block, p)
    if receipt.auditable_until_block < least:
        raise InvalidProof(f"the receipt is auditable only until block {receipt.auditable_until_block}, before block {least} "
                           f"(its batch due by {batch_by_block} + {compute_timeline(p).start_span} blocks to start its audit): "
                           "a worker that signs a short horizon escapes its audit")


def compute_receipt_duties_end_block(receipt: Receipt, p: Preset) -> int:
    """Return the block by which every audit of ``receipt`` has settled (its horizon + the audit
    span, every call at its first block): the worker keeps its trace until then, and no longer."""
    return receipt.auditable_until_block + compute_timeline(p).audit_span
