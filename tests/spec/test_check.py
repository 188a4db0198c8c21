"""The pair check on synthetic traces: every rejection reason, and acceptance inside the band."""

import dataclasses

import numpy as np
import pytest

from verillm.spec.commitment import JobTrace, compute_commitment
from verillm.node.worker.trace_blob import decode_trace_blob, encode_trace_blob
from verillm.spec.encoding import encode
from verillm.spec.policy import LayerTolerance, ToleranceProfile
from verillm.spec.types import Job, LeafOpening, ModelManifest, Opening, SamplingParams
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN
from verillm.spec.job import compute_model_id
from verillm.verifier.local import Party, check_pair, commit_runs, compute_member_jobs

LAYERS = (1, 2, 4)
STOP = 99
MANIFEST = ModelManifest("synthetic", b"\x01" * 32, b"\x02" * 32, b"\x03" * 32, "float32", 16, 100, 4, LAYERS, 1, (STOP,), 512, 1000)
PROFILE = ToleranceProfile("synthetic", "float32", tuple(LayerTolerance(l, 1e-4, 5e-5) for l in LAYERS), min_cells_for_rms=4)
PROMPT = (5, 6, 7, 8, 9, 10)


def make_job(max_new=4):
    return Job(compute_model_id(MANIFEST), PROMPT, SamplingParams(), max_new, b"\x00" * 32)


def honest_pair(output=(11, 12, 13, 14), max_new=4, member_output=(STOP,), noise=1e-7, seed=0):
    rng = np.random.default_rng(seed)
    job = make_job(max_new)
    positions = len(PROMPT) + len(output)
    truth = rng.standard_normal((positions, len(LAYERS), 1)).astype(np.float32)
    worker_flags = np.full(positions - 1, FLAG_NEXT_WITHIN_MARGIN, np.uint8)
    worker_trace = JobTrace(tuple(output), truth[:-1].copy(), worker_flags)
    member_flags = np.full(positions, FLAG_NEXT_WITHIN_MARGIN, np.uint8)
    member_fp = (truth + rng.normal(scale=noise, size=truth.shape)).astype(np.float32)
    member_trace = JobTrace(tuple(member_output), member_fp, member_flags)
    return job, worker_trace, member_trace


def check(job, worker_trace, member_trace, tamper_opening=None):
    worker_run = commit_runs([job], [worker_trace], MANIFEST, Party(b"\x11" * 32))[0]
    member_job = compute_member_jobs([worker_run])[0]
    member_run = commit_runs([member_job], [member_trace], MANIFEST, Party(b"\x22" * 32))[0]
    if tamper_opening:
        original = worker_run.result

        def tampered(challenge):
            result = original(challenge)
            return dataclasses.replace(result, opening=tamper_opening(result.opening))

        object.__setattr__(worker_run, "result", tampered)
    return check_pair(worker_run, member_run, MANIFEST, PROFILE, challenge_positions=8)


def test_honest_pair_is_accepted():
    result = check(*honest_pair())
    assert result.accepted, result.reasons
    assert {s.layer for s in result.measurement.layers} == set(LAYERS)
    assert all(s.max_error < 1e-6 for s in result.measurement.layers)


def test_fingerprint_outside_the_band_is_rejected_naming_the_layer():
    job, worker, member = honest_pair()
    fp = worker.fingerprints.copy()
    fp[:, 2, :] += 1e-2
    result = check(job, dataclasses.replace(worker, fingerprints=fp), member)
    assert not result.accepted
    assert result.reason_kinds == {"fingerprint"}
    assert any("layer 4" in r.detail for r in result.reasons)


def test_a_disputed_output_token_is_rejected_naming_it():
    job, worker, member = honest_pair()
    flags = member.flags.copy()
    flags[len(PROMPT) - 1 + 2] = 0
    result = check(job, worker, dataclasses.replace(member, flags=flags))
    assert result.reason_kinds == {"token"}
    assert "#2 (token 13)" in result.reasons[0].detail


def test_early_stop_without_stop_token_is_truncation_unless_the_member_would_stop():
    job, worker, member = honest_pair(output=(11, 12), max_new=8, member_output=(42,))
    assert check(job, worker, member).reason_kinds == {"truncation"}
    job, worker, member = honest_pair(output=(11, 12), max_new=8, member_output=(STOP,))
    assert check(job, worker, member).accepted
    job, worker, member = honest_pair(output=(11, 12), max_new=8, member_output=(42,))
    flags = member.flags.copy()
    flags[-1] |= FLAG_STOP_WITHIN_MARGIN
    assert check(job, worker, dataclasses.replace(member, flags=flags)).accepted


def test_a_forged_leaf_fails_its_proof():
    def forge(opening: Opening) -> Opening:
        first = opening.leaves[0]
        leaf = dataclasses.replace(first.leaf, fingerprint=(first.leaf.fingerprint[0] + 1.0,))
        return dataclasses.replace(opening, leaves=(LeafOpening(leaf, first.proof),) + opening.leaves[1:])

    result = check(*honest_pair(), tamper_opening=forge)
    assert result.reason_kinds == {"proof"}
    assert "worker opening" in result.reasons[0].detail


def test_a_leaf_from_another_position_cannot_stand_in():
    def swap(opening: Opening) -> Opening:
        a, b = opening.leaves[0], opening.leaves[1]
        return dataclasses.replace(opening, leaves=(LeafOpening(b.leaf, a.proof),) + opening.leaves[1:])

    assert check(*honest_pair(), tamper_opening=swap).reason_kinds == {"proof"}


def test_output_continuing_after_a_stop_token_is_inconsistent():
    job, worker, member = honest_pair(output=(11, STOP, 13, 14))
    assert "consistency" in check(job, worker, member).reason_kinds


def test_trace_blob_round_trip_rebuilds_the_same_root():
    _, worker, _ = honest_pair()
    again = decode_trace_blob(encode_trace_blob(worker))
    assert compute_commitment(again, LAYERS).root == compute_commitment(worker, LAYERS).root
    assert again.output_tokens == worker.output_tokens


def test_leaf_bytes_are_the_canonical_encoding():
    from verillm.spec.commitment import compute_leaf, compute_leaf_bytes

    _, worker, _ = honest_pair()
    raw = compute_leaf_bytes(worker, LAYERS)
    assert raw[7] == encode(compute_leaf(worker, LAYERS, 2, 1))
