"""Verifier fixtures (helpers in `verifier_evidence.py`)."""

import pytest

from verillm.spec.types import Job, SamplingParams


@pytest.fixture(scope="session")
def tiny_job(tiny_engine, tiny_prompts):
    return Job(model_id=tiny_engine.model_id, input_tokens=tuple(tiny_prompts[0]), sampling=SamplingParams(), max_new_tokens=12, nonce=b"\x05" * 32)
