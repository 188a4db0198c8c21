"""Equivocation on a signed stream, slashed on-chain (issue 35, finding 2; contracts/src/Coverage.sol
`slashStreamEquivocation`, docs/protocol.md §12 "Signed streams"). A worker signs each prefix it streams;
one whose receipt (or a second prefix) for the same job does not start with a signed prefix has signed
two outputs for one job, and anyone holding both statements takes its stake (slashRewardBps to them).

The evidence is built the way the gateway builds it (`router.verify_stream_receipt` from a real
`PrefixSigner` and a receipt the worker signs), and each case is decided by the contract and by the
spec's mirror (`verify_equivocation`) alike. Real anvil, the real deployment of helpers.contracts."""

import dataclasses

import pytest

from helpers.chain import reverts
from helpers.contracts import PRESET
from verillm.node.dispatcher.peer import WorkerReply
from verillm.node.dispatcher.router import StreamEquivocation, verify_stream_receipt
from verillm.node.keys import compute_node_key
from verillm.node.worker.stream_signer import PrefixSigner
from verillm.spec.job import compute_job_hash
from verillm.spec.receipt import compute_receipt, sign_receipt
from verillm.spec.stream import Equivocation, StreamState, process_stream_chunk, verify_equivocation
from verillm.spec.types import Job, SamplingParams

INPUT = (101, 102, 103, 104)
STREAMED = (7, 8, 9)
GAS_BOUND = 400_000  # a 4-token prompt, a 3–5-token output: two recoveries, a BLAKE3 and the slash


def _job(world) -> Job:
    return Job(model_id=b"\x01" * 32, input_tokens=INPUT, sampling=SamplingParams(), max_new_tokens=8, nonce=b"\x02" * 32)


def _stream(world, node, job: Job, tokens=STREAMED) -> StreamState:
    """What a gateway accepted of ``node``'s stream: ``tokens`` in two chunks, each signed as the worker signs them."""
    signer = PrefixSigner(compute_job_hash(job), compute_node_key(node.account.key), world.domain)
    state = StreamState(compute_job_hash(job), worker=signer.key.address)
    for part in (tokens[:1], tokens[1:]):
        state = process_stream_chunk(state, part, signer.sign(part), world.domain)
    return state


def _reply(world, node, job: Job, output, state) -> WorkerReply:
    receipt = compute_receipt(job, output, b"\x09" * 32, bytes.fromhex(node.address[2:]), world.chain.get_block_number() + 100)
    return WorkerReply(compute_job_hash(job), tuple(output), sign_receipt(receipt, node.account.key, world.domain), "", state)


def _gateway_evidence(world, node, output) -> Equivocation:
    job = _job(world)
    with pytest.raises(StreamEquivocation) as caught:
        verify_stream_receipt(_reply(world, node, job, output, _stream(world, node, job)), job)
    return caught.value.evidence


def _stake(world, node) -> int:
    return world.protocol.get_node(node.address)["stake_wei"]


def test_a_receipt_contradicting_a_signed_prefix_slashes_the_worker_and_rewards_the_caller(world):
    worker = world.nodes[0]
    evidence = _gateway_evidence(world, worker, (7, 99, 9, 10))  # streamed 7 8 9, signed a receipt for 7 99 9 10
    verify_equivocation(evidence, world.domain)
    stake, credit = _stake(world, worker), world.protocol.jobs.call("credits", world.outsider.address)
    tx = world.protocol.slash_stream_equivocation(world.outsider, evidence)
    assert tx.value == stake * PRESET.SLASH_FRACTION_BPS // 10_000 > 0 and _stake(world, worker) == stake - tx.value
    assert world.protocol.jobs.call("credits", world.outsider.address) - credit == tx.value * PRESET.SLASH_REWARD_BPS // 10_000
    assert tx.gas_used < GAS_BOUND, tx.gas_used
    with reverts("AlreadySlashed"):  # one job, one slash
        world.protocol.slash_stream_equivocation(world.outsider, evidence)


def test_a_receipt_shorter_than_the_signed_prefix_is_equivocation(world):
    evidence = _gateway_evidence(world, world.nodes[1], (7, 8))
    verify_equivocation(evidence, world.domain)
    assert world.protocol.slash_stream_equivocation(world.outsider, evidence).value > 0


def test_two_signed_prefixes_of_one_job_that_disagree_slash_the_worker(world):
    worker, job = world.nodes[2], _job(world)
    first, second = _stream(world, worker, job, (7, 8, 9)), _stream(world, worker, job, (7, 8, 10, 11))
    evidence = Equivocation(first.last, (7, 8, 10, 11), other=second.last)
    verify_equivocation(evidence, world.domain)
    assert world.protocol.slash_stream_equivocation(world.outsider, evidence).value > 0


def test_an_honest_stream_and_its_receipt_cannot_be_slashed(world):
    worker, job = world.nodes[3], _job(world)
    state = _stream(world, worker, job)
    output = STREAMED + (10,)
    verify_stream_receipt(_reply(world, worker, job, output, state), job)  # the gateway keeps it
    receipt = _reply(world, worker, job, output, state).receipt
    honest = Equivocation(state.last, INPUT + output, receipt=receipt)
    with pytest.raises(Exception, match="no equivocation"):
        verify_equivocation(honest, world.domain)
    with reverts("NotEquivocation"):
        world.protocol.slash_stream_equivocation(world.outsider, honest)
    longer = _stream(world, worker, job, STREAMED + (10,))
    with reverts("NotEquivocation"):  # a longer prefix that extends it
        world.protocol.slash_stream_equivocation(world.outsider, Equivocation(state.last, STREAMED + (10,), other=longer.last))
    assert _stake(world, worker) > 0


def test_forged_or_mismatched_evidence_is_refused(world):
    victim, forger = world.nodes[4], world.nodes[5]
    evidence = _gateway_evidence(world, victim, (7, 99, 9, 10))
    forged_prefix = dataclasses.replace(evidence.prefix, signature=_gateway_evidence(world, forger, (7, 99, 9, 10)).prefix.signature)
    with reverts("BadSignature"):  # a prefix the victim never signed
        world.protocol.slash_stream_equivocation(world.outsider, dataclasses.replace(evidence, prefix=forged_prefix))
    with reverts("NotEquivocation"):  # a transcript that is not the receipt's
        world.protocol.slash_stream_equivocation(world.outsider, dataclasses.replace(evidence, tokens=INPUT + (7, 99, 9, 11)))
    other_job = dataclasses.replace(evidence.receipt, job_hash=b"\x33" * 32)
    with reverts("NotEquivocation"):  # a receipt for another job
        world.protocol.slash_stream_equivocation(world.outsider, dataclasses.replace(evidence, receipt=other_job))
    assert _stake(world, victim) > 0
