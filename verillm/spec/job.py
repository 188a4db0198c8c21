"""Ids and digests of jobs, token sequences and model manifests; the verification job."""

import struct
from collections.abc import Sequence

from verillm.errors import InvalidInput, PromptTooLong
from verillm.spec.encoding import encode
from verillm.spec.hashing import DOMAIN_JOB, DOMAIN_MODEL_ID, DOMAIN_TOKENS, blake3_digest, keccak256
from verillm.spec.types import Job, ModelManifest


def compute_model_id(manifest: ModelManifest) -> bytes:
    """Return the model id: keccak256 of the manifest's canonical encoding."""
    return keccak256(DOMAIN_MODEL_ID + encode(manifest))


def compute_tokens_hash(tokens: Sequence[int]) -> bytes:
    """Return the blake3 digest of a token sequence (u32 big-endian each)."""
    return blake3_digest(DOMAIN_TOKENS + struct.pack(f">{len(tokens)}I", *tokens))


def compute_transcript_hash(input_tokens: Sequence[int], output_tokens: Sequence[int]) -> bytes:
    """Return a receipt's outputHash: the tokens hash of input ‖ output (a verification job's
    input, so its receipt's inputHash equals the worker's outputHash)."""
    return compute_tokens_hash(tuple(input_tokens) + tuple(output_tokens))


def compute_job_hash(job: Job) -> bytes:
    """Return the job hash: keccak256 over the job's canonical encoding."""
    return keccak256(DOMAIN_JOB + encode(job))


def compute_num_positions(job: Job, num_output_tokens: int) -> int:
    """Return how many positions a job's commitment covers.

    One per forward-pass position: every input token, and every output token but the last
    (the last one is sampled, never fed back).
    """
    return len(job.input_tokens) + num_output_tokens - 1


def compute_verification_job(job: Job, output_tokens: Sequence[int], nonce: bytes) -> Job:
    """Return the job a committee member runs to audit ``job``: prompt ‖ output, 1 new token."""
    return Job(
        model_id=job.model_id,
        input_tokens=tuple(job.input_tokens) + tuple(output_tokens),
        sampling=job.sampling,
        max_new_tokens=1,
        nonce=nonce,
    )


def verify_job_admission(job: Job, manifest: ModelManifest, model_id: bytes | None = None) -> None:
    """Check that ``job`` can run on ``manifest``'s model; raise with the reason if not.

    ``model_id``: `compute_model_id(manifest)`, when the caller holds it (an engine or a node
    serving one model): it costs an encoding of the whole manifest and a keccak per call.
    """
    if job.model_id != (compute_model_id(manifest) if model_id is None else model_id):
        raise InvalidInput(f"job is for model {job.model_id.hex()}, not {manifest.name}")
    if not job.input_tokens:
        raise InvalidInput("a job needs at least one input token")
    if job.max_new_tokens < 1:
        raise InvalidInput("max_new_tokens must be at least 1")
    bad = [t for t in job.input_tokens if t >= manifest.vocab_size]
    if bad:
        raise InvalidInput(f"token ids {bad[:5]} are outside the vocabulary of {manifest.vocab_size}")
    total = len(job.input_tokens) + job.max_new_tokens
    if total > manifest.max_context_tokens:
        raise PromptTooLong(
            f"{len(job.input_tokens)} input + {job.max_new_tokens} new tokens exceed "
            f"the context of {manifest.max_context_tokens} for {manifest.name}"
        )
