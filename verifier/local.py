"""Local audits: run a worker engine and a verifier engine on the same jobs and check them.

This is the whole protocol of one audit without the network or the chain: the worker runs
the job and commits; the member runs the verification job (prompt ‖ output, 1 new token)
and commits; a challenge is drawn; both open; `compute_pair_check` decides. The detection
and calibration benchmarks, `verillm demo verify` and `verillm audit replay` all go through
here, so what they measure is the code path the network runs.
"""

import os
from collections.abc import Sequence
from dataclasses import dataclass

from verillm.engine.base import Engine
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.check import PartyResult, compute_pair_check
from verillm.spec.commitment import Commitment, JobTrace, compute_commitment, compute_opening
from verillm.spec.hashing import keccak256
from verillm.spec.job import compute_job_hash, compute_verification_job
from verillm.spec.policy import CheckResult, ToleranceProfile
from verillm.spec.receipt import SigningDomain, compute_receipt, sign_receipt
from verillm.spec.types import Challenge, Job, ModelManifest

from eth_keys import keys

DEFAULT_DOMAIN = SigningDomain()


@dataclass(frozen=True)
class Party:
    """A signing identity for local runs."""

    private_key: bytes

    @property
    def address(self) -> bytes:
        return keys.PrivateKey(self.private_key).public_key.to_canonical_address()


@dataclass(frozen=True)
class CommittedRun:
    """One party's job, trace, commitment and signed receipt."""

    job: Job
    trace: JobTrace
    commitment: Commitment
    party: Party
    receipt: object

    def result(self, challenge: Challenge) -> PartyResult:
        cells = compute_opened_cells(challenge, self.commitment.num_positions)
        opening = compute_opening(self.trace, self.commitment, cells)
        return PartyResult(job=self.job, output_tokens=self.trace.output_tokens, receipt=self.receipt, opening=opening)


def commit_runs(jobs: Sequence[Job], traces: Sequence[JobTrace], manifest: ModelManifest, party: Party, domain: SigningDomain = DEFAULT_DOMAIN) -> list[CommittedRun]:
    """Commit and sign each trace as ``party`` would."""
    runs = []
    for job, trace in zip(jobs, traces, strict=True):
        commitment = compute_commitment(trace, tuple(manifest.committed_layers))
        receipt = compute_receipt(job, trace.output_tokens, commitment.root, party.address, 0)  # no chain: no contract sees it
        runs.append(CommittedRun(job, trace, commitment, party, sign_receipt(receipt, party.private_key, domain)))
    return runs


def compute_member_jobs(worker_runs: Sequence[CommittedRun]) -> list[Job]:
    """Return the verification job for each worker run."""
    return [compute_verification_job(r.job, r.trace.output_tokens, nonce=keccak256(b"audit" + compute_job_hash(r.job))) for r in worker_runs]


def compute_audit_challenge(worker_run: CommittedRun, challenge_positions: int) -> Challenge:
    """Draw the challenge for a worker run from a seed bound to its receipt."""
    seed = keccak256(b"local-challenge" + worker_run.receipt.commitment_root + compute_job_hash(worker_run.job))
    return compute_challenge(seed, len(worker_run.job.input_tokens), len(worker_run.trace.output_tokens), tuple(worker_run.commitment.committed_layers), challenge_positions)


def check_pair(worker_run: CommittedRun, member_run: CommittedRun, manifest: ModelManifest, profile: ToleranceProfile, challenge_positions: int) -> CheckResult:
    """Challenge, open and check one (worker, member) pair."""
    challenge = compute_audit_challenge(worker_run, challenge_positions)
    return compute_pair_check(worker_run.result(challenge), member_run.result(challenge), challenge, manifest, profile)


def run_local_audits(
    worker: Engine,
    verifier: Engine,
    jobs: Sequence[Job],
    profile: ToleranceProfile,
    challenge_positions: int,
    worker_party: Party | None = None,
    member_party: Party | None = None,
) -> list[CheckResult]:
    """Run ``jobs`` on ``worker``, audit each on ``verifier``; one result per job."""
    worker_party = worker_party or Party(os.urandom(32))
    member_party = member_party or Party(os.urandom(32))
    manifest = verifier.manifest
    worker_runs = commit_runs(jobs, worker.run(jobs), manifest, worker_party)
    member_jobs = compute_member_jobs(worker_runs)
    member_runs = commit_runs(member_jobs, verifier.run(member_jobs), manifest, member_party)
    return [check_pair(w, m, manifest, profile, challenge_positions) for w, m in zip(worker_runs, member_runs, strict=True)]
