"""The honest-noise matrix: the same jobs across engine configurations, audited pairwise.

Worker configurations generate (decode path); verifier configurations replay (prefill
path). Each (worker config, verifier config, job) is one honest audit. The matrix covers
thread counts (1 vs 2), batch sizes with left padding (1, 4, 8), prefill vs decode, greedy
and sampled jobs, and repetition (every worker config's runs are independent).
"""

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from verillm.engine.torch_engine import TorchEngine
from verillm.errors import EngineError
from verillm.spec.policy import CheckResult, LayerTolerance, ToleranceProfile
from verillm.spec.types import Job, ModelManifest
from verillm.verifier.local import Party, check_pair, commit_runs, compute_member_jobs


@dataclass(frozen=True)
class EngineConfig:
    """How an engine instance runs: threads and batch size."""

    threads: int
    batch: int
    attention: str = "sdpa"

    @property
    def label(self) -> str:
        suffix = "" if self.attention == "sdpa" else f",attention={self.attention}"
        return f"threads={self.threads},batch={self.batch}{suffix}"


WORKER_CONFIGS = (EngineConfig(threads=2, batch=8), EngineConfig(threads=1, batch=1))
VERIFIER_CONFIGS_FULL = (
    EngineConfig(1, 1), EngineConfig(2, 1), EngineConfig(1, 4), EngineConfig(2, 4),
    EngineConfig(1, 8), EngineConfig(2, 8), EngineConfig(2, 2), EngineConfig(1, 2),
)
VERIFIER_CONFIGS_SHORT = (EngineConfig(1, 1), EngineConfig(2, 1), EngineConfig(2, 8), EngineConfig(1, 4))
# Exact mode: the same matrix with half the verifiers on eager attention (the kernel class
# fixes the attention kernel, so the model's own choice must not matter).
EXACT_VERIFIER_CONFIGS_FULL = tuple(EngineConfig(c.threads, c.batch, "eager" if i % 2 else "sdpa") for i, c in enumerate(VERIFIER_CONFIGS_FULL))
EXACT_VERIFIER_CONFIGS_SHORT = tuple(EngineConfig(c.threads, c.batch, "eager" if i % 2 else "sdpa") for i, c in enumerate(VERIFIER_CONFIGS_SHORT))

WORKER_PARTY = Party(b"\x57" * 32)
MEMBER_PARTY = Party(b"\x4d" * 32)


def compute_permissive_profile(manifest: ModelManifest) -> ToleranceProfile:
    """Return a profile that accepts every fingerprint: for measuring, not deciding."""
    layers = tuple(LayerTolerance(layer, math.inf, math.inf) for layer in manifest.committed_layers)
    return ToleranceProfile(model=manifest.name, dtype=manifest.dtype, layers=layers)


def build_engine(model, tokenizer, manifest, config: EngineConfig) -> TorchEngine:
    """Return an engine over shared weights with ``config``'s threads, batch size and attention."""
    if config.attention != model.config._attn_implementation:
        # A copy: every attention module reads the config it was built with.
        model = copy.deepcopy(model)
        model.config._attn_implementation = config.attention
    return TorchEngine(model, tokenizer, manifest, max_batch_size=config.batch, num_threads=config.threads)


@dataclass(frozen=True)
class HonestAudit:
    """One honest audit of the matrix: its result, and the error of every cell a challenge can draw."""

    worker: str
    verifier: str
    result: CheckResult
    cell_errors: np.ndarray = field(repr=False, compare=False)
    """float64 (output positions, committed layers): the fingerprint error at every position
    in [P − 1, P + N − 1), whether or not this audit's challenge drew it."""


def compute_every_cell_error(worker_run, member_run) -> np.ndarray:
    """Return the fingerprint error (spec `compute_cell_error`) of every drawable cell of one honest pair.

    Calibration reads these, not only the challenged cells: an outlier at a position the local
    challenge skipped is still one a real audit may draw.
    """
    first = len(worker_run.job.input_tokens) - 1
    last = first + len(worker_run.trace.output_tokens)
    worker = worker_run.trace.fingerprints[first:last].astype(np.float64)
    member = member_run.trace.fingerprints[first:last].astype(np.float64)
    if worker.shape != member.shape:
        raise EngineError(f"honest pair has {worker.shape} worker cells but {member.shape} member cells")
    return np.linalg.norm(worker - member, axis=-1) / math.sqrt(worker.shape[-1])


def run_honest_matrix(
    model, tokenizer, manifest: ModelManifest, jobs: Sequence[Job], profile: ToleranceProfile,
    challenge_positions: int, worker_configs=WORKER_CONFIGS, verifier_configs=VERIFIER_CONFIGS_FULL, progress=None,
) -> list[HonestAudit]:
    """Run every job under every worker config and audit it under every verifier config."""
    audits = []
    for worker_config in worker_configs:
        if progress:  # each worker config generates every job first: minutes on a small CPU (issue 36)
            progress(f"honest: generating {len(jobs)} jobs as worker {worker_config.label}…")
        worker = build_engine(model, tokenizer, manifest, worker_config)
        worker_runs = commit_runs(jobs, worker.run(jobs), manifest, WORKER_PARTY)
        member_jobs = compute_member_jobs(worker_runs)
        for verifier_config in verifier_configs:
            verifier = build_engine(model, tokenizer, manifest, verifier_config)
            member_runs = commit_runs(member_jobs, verifier.run(member_jobs), manifest, MEMBER_PARTY)
            for worker_run, member_run in zip(worker_runs, member_runs, strict=True):
                result = check_pair(worker_run, member_run, manifest, profile, challenge_positions)
                audits.append(HonestAudit(worker_config.label, verifier_config.label, result, compute_every_cell_error(worker_run, member_run)))
            if progress:
                progress(f"honest: worker {worker_config.label} vs verifier {verifier_config.label}: {len(audits)} audits")
    return audits
