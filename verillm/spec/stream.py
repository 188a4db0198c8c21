"""Signed streams: a worker signs every prefix of the output it streams, as it streams it.

A streamed token reaches a client before the job's receipt exists, so the receipt cannot
cover it. Instead the worker signs, with the key that signs its receipts and under the same
EIP-712 domain (chain id, Jobs contract), each prefix it sends:

    StreamPrefix(bytes32 jobHash,uint32 tokenCount,bytes32 prefixHash,address worker)

`prefixHash` is the running hash of the first `tokenCount` output tokens (never the input):

    h_0 = 0x00…00,   h_i = keccak256(0x1f ‖ h_{i-1} ‖ u32 big-endian token_i)

so a prefix that extends another is checked from the new tokens alone (`compute_prefix_hash`),
and a contract recomputes it from the tokens in calldata (contracts/src/Coverage.sol). A relay
or a client shows a token only once a signed prefix covers it and extends the prefix it showed
before (`process_stream_chunk`); the final receipt must sign an output that the last signed
prefix is the start of (`verify_receipt_extends_prefix`).

A worker that signs a prefix and a receipt (or a longer prefix) whose output does not start
with it has signed two outputs for one job: that pair is equivocation, slashable on-chain by
anyone who holds it (`is_prefix_contradicted`; Coverage.slashStreamEquivocation; docs/protocol.md
§12 "Signed streams").
"""

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from verillm.errors import InvalidProof, InvalidSignature
from verillm.spec.hashing import DOMAIN_STREAM_PREFIX, keccak256
from verillm.spec.job import compute_transcript_hash
from verillm.spec.receipt import SigningDomain, compute_domain_separator, recover_digest_signer, sign_digest, verify_receipt_signature
from verillm.spec.types import Receipt

STREAM_PREFIX_TYPE = b"StreamPrefix(bytes32 jobHash,uint32 tokenCount,bytes32 prefixHash,address worker)"
STREAM_PREFIX_TYPEHASH = keccak256(STREAM_PREFIX_TYPE)
EMPTY_PREFIX_HASH = b"\x00" * 32
"""The running hash of no tokens."""


@dataclass(frozen=True)
class StreamPrefix:
    """What a worker signs about the first ``token_count`` tokens it streamed for a job."""

    job_hash: bytes
    token_count: int
    prefix_hash: bytes
    worker: bytes


@dataclass(frozen=True)
class SignedPrefix:
    """A `StreamPrefix` and its worker's r ‖ s ‖ v signature."""

    prefix: StreamPrefix
    signature: bytes


def compute_prefix_hash(previous: bytes, tokens: Sequence[int]) -> bytes:
    """Return the running hash after ``tokens`` follow the prefix whose hash is ``previous``."""
    digest = previous
    for token in tokens:
        digest = keccak256(DOMAIN_STREAM_PREFIX + digest + struct.pack(">I", token))
    return digest


def compute_prefix_struct_hash(prefix: StreamPrefix) -> bytes:
    """Return the EIP-712 struct hash of ``prefix``."""
    return keccak256(STREAM_PREFIX_TYPEHASH + prefix.job_hash + prefix.token_count.to_bytes(32, "big")
                     + prefix.prefix_hash + prefix.worker.rjust(32, b"\x00"))


def compute_prefix_digest(prefix: StreamPrefix, domain: SigningDomain) -> bytes:
    """Return the digest a worker signs: keccak256(0x1901 ‖ domain ‖ struct hash), the receipts' domain."""
    return keccak256(b"\x19\x01" + compute_domain_separator(domain) + compute_prefix_struct_hash(prefix))


def sign_prefix(prefix: StreamPrefix, private_key: bytes, domain: SigningDomain) -> SignedPrefix:
    """Return ``prefix`` signed by ``private_key``, which must be its worker's."""
    return SignedPrefix(prefix, sign_digest(compute_prefix_digest(prefix, domain), private_key, prefix.worker, "the stream's worker"))


def verify_prefix_signature(signed: SignedPrefix, domain: SigningDomain) -> None:
    """Check ``signed`` is signed by the worker it names; raise InvalidSignature if not."""
    signer = recover_digest_signer(compute_prefix_digest(signed.prefix, domain), signed.signature, "stream prefix")
    if signer != signed.prefix.worker:
        raise InvalidSignature(f"stream prefix is signed by 0x{signer.hex()}, not its worker 0x{signed.prefix.worker.hex()}")


@dataclass(frozen=True)
class StreamState:
    """What a reader of one job's stream has accepted: the last signed prefix (None before the first)."""

    job_hash: bytes
    worker: bytes | None = None
    last: SignedPrefix | None = None

    @property
    def token_count(self) -> int:
        return 0 if self.last is None else self.last.prefix.token_count

    @property
    def prefix_hash(self) -> bytes:
        return EMPTY_PREFIX_HASH if self.last is None else self.last.prefix.prefix_hash


def process_stream_chunk(state: StreamState, tokens: Sequence[int], signed: SignedPrefix, domain: SigningDomain) -> StreamState:
    """Accept ``tokens`` following what ``state`` accepted, covered by ``signed``; return the new state.

    Raises InvalidProof / InvalidSignature naming what is wrong: another job, another worker than
    the stream's first chunk named (``state.worker``, when set), a count or running hash that does not
    extend the accepted prefix by exactly these tokens, or a signature not by the named worker."""
    p = signed.prefix
    if p.job_hash != state.job_hash:
        raise InvalidProof(f"a stream chunk is signed for job 0x{p.job_hash.hex()}, not 0x{state.job_hash.hex()}")
    if state.worker is not None and p.worker != state.worker:
        raise InvalidProof(f"a stream chunk names worker 0x{p.worker.hex()}, the stream's is 0x{state.worker.hex()}")
    if not tokens:
        raise InvalidProof("a stream chunk carries no token")
    if p.token_count != state.token_count + len(tokens):
        raise InvalidProof(f"a stream chunk signs {p.token_count} tokens, {state.token_count} accepted + {len(tokens)} sent")
    if p.prefix_hash != compute_prefix_hash(state.prefix_hash, tokens):
        raise InvalidProof(f"a stream chunk's running hash does not extend the accepted {state.token_count} tokens")
    verify_prefix_signature(signed, domain)
    return StreamState(state.job_hash, p.worker, signed)


def is_prefix_contradicted(prefix: StreamPrefix, output_tokens: Sequence[int]) -> bool:
    """Whether ``output_tokens`` (an output the same worker signed for the same job) does not start
    with the tokens ``prefix`` signs: the rule Coverage.slashStreamEquivocation applies."""
    if prefix.token_count > len(output_tokens):
        return True
    return compute_prefix_hash(EMPTY_PREFIX_HASH, output_tokens[: prefix.token_count]) != prefix.prefix_hash


def verify_receipt_extends_prefix(receipt: Receipt, output_tokens: Sequence[int], state: StreamState) -> None:
    """Check the final ``receipt`` (already bound to ``output_tokens``) is the stream's: same job and
    worker, and its output starts with the last signed prefix; raise InvalidProof otherwise (the pair
    is then equivocation evidence)."""
    if receipt.job_hash != state.job_hash:
        raise InvalidProof(f"the receipt is for job 0x{receipt.job_hash.hex()}, the stream was 0x{state.job_hash.hex()}")
    if state.last is None:
        return
    if receipt.worker != state.worker:
        raise InvalidProof(f"the receipt is signed by 0x{receipt.worker.hex()}, the stream by 0x{state.worker.hex()}")
    if is_prefix_contradicted(state.last.prefix, output_tokens):
        raise InvalidProof(f"the receipt's output does not start with the {state.token_count} tokens the worker "
                           "signed as it streamed them: equivocation")


# --- equivocation evidence (Coverage.slashStreamEquivocation) -----------------------------------


@dataclass(frozen=True)
class Equivocation:
    """Two statements one worker signed about one job's output that disagree: ``prefix``, and either
    its ``receipt`` with the job's transcript (``tokens`` = input ‖ output) or an ``other`` prefix no
    shorter, with its tokens (``tokens`` = the other prefix's output tokens)."""

    prefix: SignedPrefix
    tokens: tuple[int, ...]
    receipt: Receipt | None = None
    other: SignedPrefix | None = None

    @property
    def packed_tokens(self) -> bytes:
        """``tokens`` as the contract takes them: u32 big-endian each."""
        return struct.pack(f">{len(self.tokens)}I", *self.tokens)


def compute_output_of_evidence(evidence: Equivocation) -> tuple[int, ...]:
    """Return the output the second statement signs; raise InvalidProof if it does not hold (the
    contract's checks: same worker and job, tokens bound by the output hash or the running hash)."""
    p = evidence.prefix.prefix
    if (evidence.receipt is None) == (evidence.other is None):
        raise InvalidProof("equivocation evidence needs exactly one of a receipt or a second prefix")
    if evidence.receipt is not None:
        r = evidence.receipt
        if (r.worker, r.job_hash) != (p.worker, p.job_hash):
            raise InvalidProof("the receipt is another worker's or another job's")
        if len(evidence.tokens) != r.input_tokens + r.output_tokens:
            raise InvalidProof("the transcript's length is not the receipt's input + output tokens")
        if compute_transcript_hash(evidence.tokens[: r.input_tokens], evidence.tokens[r.input_tokens:]) != r.output_hash:
            raise InvalidProof("the transcript does not hash to the receipt's outputHash")
        return evidence.tokens[r.input_tokens:]
    q = evidence.other.prefix
    if (q.worker, q.job_hash) != (p.worker, p.job_hash):
        raise InvalidProof("the second prefix is another worker's or another job's")
    if q.token_count < p.token_count or len(evidence.tokens) != q.token_count:
        raise InvalidProof("the second prefix is shorter than the first, or its tokens are not its count")
    if compute_prefix_hash(EMPTY_PREFIX_HASH, evidence.tokens) != q.prefix_hash:
        raise InvalidProof("the second prefix's tokens do not hash to its running hash")
    return evidence.tokens


def verify_equivocation(evidence: Equivocation, domain: SigningDomain) -> None:
    """Check ``evidence`` proves equivocation as Coverage.slashStreamEquivocation does; raise
    InvalidProof / InvalidSignature naming what fails."""
    verify_prefix_signature(evidence.prefix, domain)
    output = compute_output_of_evidence(evidence)
    if evidence.receipt is not None:
        verify_receipt_signature(evidence.receipt, domain)
    else:
        verify_prefix_signature(evidence.other, domain)
    if not is_prefix_contradicted(evidence.prefix.prefix, output):
        raise InvalidProof("the output starts with the signed prefix: no equivocation")
