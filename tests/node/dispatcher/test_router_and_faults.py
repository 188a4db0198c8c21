"""A worker's answer is kept only when its receipt holds; the lazy member's engine commits to a
made-up trace without running the model; failed steps are retried after a pause."""

import asyncio
import dataclasses

import numpy as np
import pytest

from verillm.errors import InvalidProof, InvalidSignature
from verillm.devnet.devnode import LazyEngine
from verillm.node.dispatcher.router import verify_worker_receipt
from verillm.node.dispatcher.tasks import KeyedTasks
from verillm.spec.job import compute_verification_job
from verillm.spec.receipt import SigningDomain, compute_receipt, sign_receipt
from verillm.spec.types import Job, SamplingParams
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN

DOMAIN = SigningDomain(chain_id=31337, verifying_contract=b"\x33" * 20)
KEY, OTHER = b"\x07" * 32, b"\x08" * 32
JOB = Job(model_id=b"\x01" * 32, input_tokens=(1, 2, 3), sampling=SamplingParams(), max_new_tokens=4, nonce=b"\x02" * 32)


def _address(key: bytes) -> bytes:
    from eth_keys import keys

    return keys.PrivateKey(key).public_key.to_canonical_address()


def _receipt(output=(5, 6), key=KEY, domain=DOMAIN):
    return sign_receipt(compute_receipt(JOB, output, b"\x09" * 32, _address(key), 1_000), key, domain)


def test_a_valid_answer_passes():
    verify_worker_receipt(_receipt(), JOB, (5, 6), _address(KEY), DOMAIN)


@pytest.mark.parametrize("receipt, output, worker, error", [
    (lambda: _receipt(), (5, 6), _address(OTHER), InvalidSignature),                      # another node signed it
    (lambda: _receipt(domain=SigningDomain(1, b"\x33" * 20)), (5, 6), _address(KEY), InvalidSignature),  # another deployment
    (lambda: _receipt(), (5, 7), _address(KEY), InvalidProof),                            # output differs from the receipt
    (lambda: dataclasses.replace(_receipt(), num_positions=9), (5, 6), _address(KEY), InvalidSignature),  # edited after signing
])
def test_a_bad_answer_is_refused(receipt, output, worker, error):
    with pytest.raises(error):
        verify_worker_receipt(receipt(), JOB, output, worker, DOMAIN)


def test_the_lazy_engine_makes_up_scoring_jobs_and_runs_the_rest(tiny_engine, tiny_prompts):
    lazy = LazyEngine(tiny_engine)
    job = Job(tiny_engine.model_id, tuple(tiny_prompts[3]), SamplingParams(), 3, b"\x00" * 32)
    honest = tiny_engine.run([job])[0]
    served = lazy.run([job])[0]
    assert served.output_tokens == honest.output_tokens and np.array_equal(served.fingerprints, honest.fingerprints)
    scoring = compute_verification_job(job, honest.output_tokens, b"\x01" * 32)
    made_up = lazy.run([scoring])[0]
    assert made_up.num_positions == len(scoring.input_tokens) and not made_up.fingerprints.any()
    assert (made_up.flags == FLAG_NEXT_WITHIN_MARGIN).all()
    assert not np.array_equal(made_up.fingerprints, tiny_engine.run([scoring])[0].fingerprints)


async def test_keyed_tasks_run_once_per_key_and_back_off_after_a_failure():
    tasks, calls = KeyedTasks(backoff_s=0.2), []

    async def step(fail: bool):
        calls.append(fail)
        await asyncio.sleep(0.01)
        if fail:
            raise ValueError("chain unreachable")

    assert tasks.spawn("a", lambda: step(True)) and not tasks.spawn("a", lambda: step(False))
    await tasks.wait_idle()
    assert tasks.failures == {"a": "ValueError: chain unreachable"} and not tasks.spawn("a", lambda: step(False))
    await asyncio.sleep(0.25)
    assert tasks.spawn("a", lambda: step(False))
    await tasks.wait_idle()
    assert calls == [True, False] and tasks.failures == {}


async def test_keyed_tasks_give_up_on_a_final_revert_with_one_error(caplog):
    from verillm.chain import TransactionReverted

    tasks = KeyedTasks(backoff_s=0.01, give_up_s=0.2)

    async def late():
        raise TransactionReverted("Jobs.openWorker reverted: TooLate(sinceBlock=9)", error="TooLate", args={"sinceBlock": 9})

    with caplog.at_level("WARNING", logger="verillm.node.dispatcher.tasks"):
        for _ in range(3):
            assert tasks.spawn("audit:1", late) or tasks.is_busy("audit:1")
            await tasks.wait_idle()
            await asyncio.sleep(0.02)  # past backoff_s, not give_up_s: no retry storm
            assert tasks.is_busy("audit:1")
    errors = [r for r in caplog.records if "giving up" in r.getMessage()]
    assert len(errors) == 1 and not [r for r in caplog.records if "retrying" in r.getMessage()]
    assert tasks.given_up == {"audit:1": "TooLate"}



def test_a_job_whose_transcript_could_exceed_the_bound_is_refused():
    """Issue 20, attack 4: a receipt over MAX_TRANSCRIPT_TOKENS cannot be audited (startAudit
    refuses it), so the dispatcher refuses the job before serving or promising it."""
    from verillm.errors import PromptTooLong
    from verillm.spec.delivery import verify_transcript_bound
    from verillm.spec.params import MAINNET

    verify_transcript_bound(4_096, 4_096, MAINNET.MAX_TRANSCRIPT_TOKENS)  # exactly the bound: served
    with pytest.raises(PromptTooLong, match="8193 exceeds the deployment's MAX_TRANSCRIPT_TOKENS = 8192"):
        verify_transcript_bound(4_097, 4_096, MAINNET.MAX_TRANSCRIPT_TOKENS)
    with pytest.raises(PromptTooLong):  # attack 4's job: 26,000 + 4,000 tokens
        verify_transcript_bound(26_000, 4_000, MAINNET.MAX_TRANSCRIPT_TOKENS)
