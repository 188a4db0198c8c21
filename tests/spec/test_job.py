"""Spec tests for `verillm.spec.job`: ids and digests of jobs, tokens and models; admission.

A model id is keccak256(0x14 ‖ encode(manifest)); a job hash is keccak256(0x15 ‖ encode(job));
token sequences hash with blake3(0x16 ‖ u32 big-endian tokens). A job of P input tokens that
outputs N tokens covers P + N − 1 positions. To audit it, a committee member runs the
verification job: the same model and sampling over prompt ‖ output, with 1 new token.
`verify_job_admission` refuses a job that cannot run on a model, saying why.
"""

import dataclasses

import blake3
import pytest
from Crypto.Hash import keccak

from verillm.errors import InvalidInput, PromptTooLong
from verillm.spec.encoding import encode
from verillm.spec.job import (
    compute_job_hash,
    compute_model_id,
    compute_num_positions,
    compute_tokens_hash,
    compute_transcript_hash,
    compute_verification_job,
    verify_job_admission,
)
from verillm.spec.types import Job, ModelManifest, SamplingParams

MANIFEST = ModelManifest(
    name="toy",
    weights_digest=b"\x01" * 32,
    tokenizer_digest=b"\x02" * 32,
    chat_template_digest=b"\x03" * 32,
    dtype="float32",
    hidden_size=16,
    vocab_size=100,
    num_layers=4,
    committed_layers=(1, 2, 4),
    fingerprint_dims=1,
    stop_tokens=(99,),
    max_context_tokens=10,
    token_margin_micrologits=1000,
)
MODEL_ID = compute_model_id(MANIFEST)
JOB = Job(model_id=MODEL_ID, input_tokens=(5, 6, 7), sampling=SamplingParams(), max_new_tokens=4, nonce=b"\x00" * 32)


def keccak256(data: bytes) -> bytes:
    return keccak.new(digest_bits=256, data=data).digest()


# --- ids and digests ------------------------------------------------------------------------


def test_the_model_id_is_the_keccak_of_the_model_domain_tag_and_the_encoded_manifest():
    assert MODEL_ID == keccak256(b"\x14" + encode(MANIFEST))


@pytest.mark.parametrize(
    "change",
    [{"weights_digest": b"\x09" * 32}, {"dtype": "bfloat16"}, {"committed_layers": (1, 4)}, {"max_context_tokens": 11}, {"kernel_class": "cpu-exact"}],
)
def test_anything_in_the_manifest_changes_the_model_id(change):
    # Exact mode (a kernel class) and tolerance mode of the same weights are different models.
    assert compute_model_id(dataclasses.replace(MANIFEST, **change)) != MODEL_ID


def test_the_job_hash_is_the_keccak_of_the_job_domain_tag_and_the_encoded_job():
    assert compute_job_hash(JOB) == keccak256(b"\x15" + encode(JOB))
    assert compute_job_hash(dataclasses.replace(JOB)) == compute_job_hash(JOB)  # equal jobs, equal hashes


@pytest.mark.parametrize(
    "change",
    [
        {"model_id": b"\x09" * 32},
        {"input_tokens": (5, 6, 8)},
        {"input_tokens": (5, 6)},
        {"max_new_tokens": 5},
        {"nonce": b"\x00" * 31 + b"\x01"},
        {"sampling": SamplingParams(temperature_milli=700)},
        {"sampling": SamplingParams(top_k=40)},
        {"sampling": SamplingParams(top_p_ppm=900_000)},
        {"sampling": SamplingParams(seed=1)},
    ],
)
def test_every_field_of_a_job_changes_its_hash(change):
    assert compute_job_hash(dataclasses.replace(JOB, **change)) != compute_job_hash(JOB)


def test_a_tokens_hash_is_blake3_of_the_tokens_domain_tag_and_u32_big_endian_tokens():
    assert compute_tokens_hash((1, 258)) == blake3.blake3(b"\x16" + b"\x00\x00\x00\x01" + b"\x00\x00\x01\x02").digest()
    assert compute_tokens_hash((1, 258)) != compute_tokens_hash((258, 1))


def test_the_transcript_hash_is_the_tokens_hash_of_input_then_output():
    assert compute_transcript_hash((5, 6, 7), (8, 9)) == compute_tokens_hash((5, 6, 7, 8, 9))


# --- positions and the verification job -----------------------------------------------------


def test_a_job_covers_every_input_position_and_every_output_position_but_the_last():
    # 3 input + 4 output tokens: positions 0..5 (the 4th output token is never fed back).
    assert compute_num_positions(JOB, num_output_tokens=4) == 6
    assert compute_num_positions(JOB, num_output_tokens=1) == 3


def test_the_verification_job_scores_prompt_and_output_with_one_new_token():
    output = (8, 9)
    audit = compute_verification_job(JOB, output, nonce=b"\x42" * 32)
    assert audit == Job(MODEL_ID, (5, 6, 7, 8, 9), JOB.sampling, 1, b"\x42" * 32)
    # Its input hash is the worker's output hash, and it covers one more position.
    assert compute_tokens_hash(audit.input_tokens) == compute_transcript_hash(JOB.input_tokens, output)
    assert compute_num_positions(audit, 1) == compute_num_positions(JOB, len(output)) + 1


# --- admission ------------------------------------------------------------------------------


def test_a_job_that_fits_the_model_is_admitted():
    verify_job_admission(JOB, MANIFEST)
    verify_job_admission(JOB, MANIFEST, model_id=MODEL_ID)


def test_a_job_for_another_model_is_refused_naming_the_manifest():
    with pytest.raises(InvalidInput, match="not toy"):
        verify_job_admission(dataclasses.replace(JOB, model_id=b"\x09" * 32), MANIFEST)


def test_a_job_without_input_tokens_is_refused():
    with pytest.raises(InvalidInput, match="at least one input token"):
        verify_job_admission(dataclasses.replace(JOB, input_tokens=()), MANIFEST)


def test_a_job_asking_for_no_new_tokens_is_refused():
    with pytest.raises(InvalidInput, match="max_new_tokens must be at least 1"):
        verify_job_admission(dataclasses.replace(JOB, max_new_tokens=0), MANIFEST)


def test_a_token_id_outside_the_vocabulary_is_refused_naming_it():
    verify_job_admission(dataclasses.replace(JOB, input_tokens=(5, 99)), MANIFEST)  # the last id is fine
    with pytest.raises(InvalidInput, match=r"token ids \[100\] are outside the vocabulary of 100"):
        verify_job_admission(dataclasses.replace(JOB, input_tokens=(5, 100)), MANIFEST)


def test_a_job_may_fill_the_context_exactly_but_not_one_token_more():
    verify_job_admission(dataclasses.replace(JOB, max_new_tokens=7), MANIFEST)  # 3 + 7 = 10
    with pytest.raises(PromptTooLong, match="3 input \\+ 8 new tokens exceed the context of 10 for toy"):
        verify_job_admission(dataclasses.replace(JOB, max_new_tokens=8), MANIFEST)


def test_a_prompt_too_long_is_an_invalid_input():
    assert issubclass(PromptTooLong, InvalidInput)
