"""The audit check of one (worker, committee member) pair, from public data only.

Input: the job, the worker's output and receipt and opening, the member's output and
receipt and opening, the challenge, the model manifest and its tolerance profile. Steps:
receipts must bind the job and outputs; openings must verify against the receipts' roots;
the worker's own flags must agree with its output; then measurement (`compare`) and policy.
A failure of the first steps is a rejection with reason "proof" or "consistency", never an
exception: an auditor wants the verdict and why.
"""

from dataclasses import dataclass

from verillm.errors import InvalidProof
from verillm.spec.compare import compute_audit_measurement
from verillm.spec.job import compute_job_hash, compute_num_positions, compute_tokens_hash, compute_transcript_hash
from verillm.spec.commitment import verify_opening
from verillm.spec.policy import REASON_CONSISTENCY, REASON_PROOF, CheckResult, Reason, ToleranceProfile, compute_check_result
from verillm.spec.types import Challenge, Job, ModelManifest, Opening, Receipt
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN


@dataclass(frozen=True)
class PartyResult:
    """What one party (worker or member) returned for its job, and its opening."""

    job: Job
    output_tokens: tuple[int, ...]
    receipt: Receipt
    opening: Opening


def compute_receipt_binding_reasons(party: str, result: PartyResult) -> list[Reason]:
    """Return reasons if ``result``'s receipt does not bind its job and output."""
    receipt, job = result.receipt, result.job
    expected = {
        "job hash": (receipt.job_hash, compute_job_hash(job)),
        "model id": (receipt.model_id, job.model_id),
        "input hash": (receipt.input_hash, compute_tokens_hash(job.input_tokens)),
        "output hash": (receipt.output_hash, compute_transcript_hash(job.input_tokens, result.output_tokens)),
        "position count": (receipt.num_positions, compute_num_positions(job, len(result.output_tokens))),
        "token counts": ((receipt.input_tokens, receipt.output_tokens), (len(job.input_tokens), len(result.output_tokens))),
    }
    reasons = [Reason(REASON_CONSISTENCY, f"{party} receipt {name} does not match its job/output") for name, (got, want) in expected.items() if got != want]
    if receipt.sampling != job.sampling or receipt.max_new_tokens != job.max_new_tokens:
        reasons.append(Reason(REASON_CONSISTENCY, f"{party} receipt sampling parameters differ from the job's"))
    return reasons


def compute_worker_self_reasons(worker_cells, prompt_len: int, output_tokens: tuple[int, ...], manifest: ModelManifest) -> list[Reason]:
    """Return reasons if the worker's own leaves or output contradict its output tokens."""
    reasons = []
    early_stops = [i for i, t in enumerate(output_tokens[:-1]) if t in manifest.stop_tokens]
    if early_stops:
        reasons.append(Reason(REASON_CONSISTENCY, f"worker kept generating after a stop token at output #{early_stops[0]}"))
    denied = [p - prompt_len + 1 for (p, layer), leaf in worker_cells.items() if p >= prompt_len - 1 and not leaf.flags & FLAG_NEXT_WITHIN_MARGIN]
    if denied:
        reasons.append(Reason(REASON_CONSISTENCY, f"worker's own commitment disowns output tokens {sorted(set(denied))[:5]}"))
    return reasons


def _verified_cells(party: str, result: PartyResult, layers: tuple[int, ...]):
    try:
        return verify_opening(result.opening, result.receipt.commitment_root, layers, result.receipt.num_positions)
    except InvalidProof as exc:
        raise InvalidProof(f"{party} opening: {exc}") from None


def compute_pair_check(
    worker: PartyResult,
    member: PartyResult,
    challenge: Challenge,
    manifest: ModelManifest,
    profile: ToleranceProfile,
) -> CheckResult:
    """Check one worker against one committee member; return the verdict with reasons."""
    prompt_len = len(worker.job.input_tokens)
    reasons = compute_receipt_binding_reasons("worker", worker) + compute_receipt_binding_reasons("member", member)
    layers = tuple(manifest.committed_layers)
    try:
        worker_cells = _verified_cells("worker", worker, layers)
        member_cells = _verified_cells("member", member, layers)
    except InvalidProof as exc:
        return CheckResult(accepted=False, reasons=tuple(reasons) + (Reason(REASON_PROOF, str(exc)),), measurement=None)
    reasons += compute_worker_self_reasons(worker_cells, prompt_len, worker.output_tokens, manifest)
    measurement = compute_audit_measurement(
        worker_cells, member_cells, challenge, prompt_len, worker.output_tokens,
        worker.job.max_new_tokens, member.output_tokens, tuple(manifest.stop_tokens),
    )
    verdict = compute_check_result(measurement, profile, worker.output_tokens)
    all_reasons = tuple(reasons) + verdict.reasons
    return CheckResult(accepted=not all_reasons, reasons=all_reasons, measurement=measurement)
