"""What the worker computes around the engine, in the engine thread: commit, sign, retain.

These functions block (numpy, sha256 over every leaf, secp256k1) and never touch the store
or the event loop; `worker.py` calls them through the engine queue's thread or an executor.
"""

import dataclasses
import inspect
import time
from collections.abc import Callable, Sequence

from verillm.engine.base import Engine
from verillm.errors import EngineError, VerillmError
from verillm.node.worker.trace_blob import decode_trace_blob, encode_trace_blob
from verillm.spec.commitment import JobTrace, compute_commitment, compute_opening
from verillm.spec.job import compute_job_hash, compute_num_positions
from verillm.spec.receipt import SigningDomain, compute_receipt, sign_receipt
from verillm.spec.types import Job, Opening, Receipt

from verillm.node.keys import NodeKey
from verillm.node.metrics import NodeMetrics
from verillm.node.store.outputs import JobOutput


def compute_job_output(job: Job, trace: JobTrace, committed_layers: tuple[int, ...], key: NodeKey, domain: SigningDomain, retain_trace: bool = True,
                       auditable_until_block: int = 0) -> JobOutput:
    """Commit to ``trace``, sign the receipt (auditable until ``auditable_until_block``: 0 on a
    node with no chain, whose receipts no contract sees) and pack the blob the worker retains
    (empty when the trace is rebuilt from the tokens on demand: exact mode, `compute_rebuilt_trace`)."""
    expected = compute_num_positions(job, len(trace.output_tokens))
    if trace.num_positions != expected:
        raise EngineError(f"engine returned {trace.num_positions} positions for a job that covers {expected}")
    commitment = compute_commitment(trace, committed_layers)
    receipt = compute_receipt(job, trace.output_tokens, commitment.root, key.address, auditable_until_block)
    signed = sign_receipt(receipt, key.private_key, domain)
    return JobOutput(receipt=signed, output_tokens=tuple(trace.output_tokens), trace_blob=encode_trace_blob(trace) if retain_trace else b"")


class BatchRunner:
    """The engine queue's `run_batch`: engine.run, then commit and sign each job.

    Returns one `JobOutput` or one exception per job, so one bad job fails alone: a batch
    whose engine call raises is re-run job by job to find which job it was.
    """

    def __init__(self, engine: Engine, key: NodeKey, domain: SigningDomain, metrics: NodeMetrics, retain_traces: bool = True):
        self.engine = engine
        self.key = key
        self.domain = domain
        self.metrics = metrics
        self.retain_traces = retain_traces
        self.horizon: Callable[[], int] = lambda: 0
        """The auditableUntilBlock to sign now: the chain head + RECEIPT_HORIZON_BLOCKS, set by
        the network dispatcher (`compute_auditable_until_block`); 0 on a node with no chain."""

    def __call__(self, jobs: Sequence[Job], on_token: Callable[[int, int], None] | None = None) -> list[JobOutput | VerillmError]:
        """``on_token(i, token)``: passed to an engine whose `run` streams (the reference engine does)."""
        started = time.perf_counter()
        streams = on_token is not None and "on_token" in inspect.signature(self.engine.run).parameters
        try:
            traces = self.engine.run(jobs, on_token=on_token) if streams else self.engine.run(jobs)
        except Exception as exc:  # the engine's own errors (torch, CUDA OOM, ...): isolate, record, report
            if len(jobs) > 1:
                return [result for job in jobs for result in self([job])]
            return [EngineError(f"engine failed: {type(exc).__name__}: {exc}")]
        self.metrics.generation_seconds.observe(time.perf_counter() - started)
        if len(traces) != len(jobs):
            return [EngineError(f"engine returned {len(traces)} traces for {len(jobs)} jobs")] * len(jobs)
        return [self._commit(job, trace) for job, trace in zip(jobs, traces)]

    def _commit(self, job: Job, trace: JobTrace) -> JobOutput | VerillmError:
        started = time.perf_counter()
        try:
            output = compute_job_output(job, trace, self.engine.manifest.committed_layers, self.key, self.domain, self.retain_traces,
                                        self.horizon())
        except VerillmError as exc:
            return exc
        self.metrics.commit_seconds.observe(time.perf_counter() - started)
        return output


def compute_opening_from_blob(blob: bytes, receipt: Receipt, committed_layers: tuple[int, ...], cells: list[tuple[int, int]]) -> Opening:
    """Rebuild the committed tree from a retained trace blob and open ``cells`` under the receipt's root."""
    trace = decode_trace_blob(blob)
    commitment = compute_commitment(trace, committed_layers)
    if commitment.root != receipt.commitment_root:
        raise VerillmError(f"retained trace of job {receipt.job_hash.hex()} does not rebuild its committed root")
    return compute_opening(trace, commitment, cells)


def compute_rebuilt_trace(engine: Engine, job: Job, output_tokens: tuple[int, ...]) -> JobTrace:
    """Recompute a finished job's trace from its tokens alone (exact mode; blocks for one prefill).

    One prefill over input ‖ output[:-1] with the job's sampling: exact kernels give every
    position the bits the decode committed (`docs/protocol.md` §9), and the flags are the
    same function of the same logits; the last position's emitted token is the sampler's
    choice, i.e. the job's last output token.
    """
    if not output_tokens:
        raise EngineError(f"job {compute_job_hash(job).hex()} has no output to rebuild a trace for")
    replay = dataclasses.replace(job, input_tokens=tuple(job.input_tokens) + tuple(output_tokens[:-1]), max_new_tokens=1)
    trace = engine.run([replay])[0]
    return JobTrace(output_tokens=tuple(output_tokens), fingerprints=trace.fingerprints, flags=trace.flags)


def compute_opening_from_rebuild(engine: Engine, job: Job, output_tokens: tuple[int, ...], receipt: Receipt, committed_layers: tuple[int, ...], cells: list[tuple[int, int]]) -> Opening:
    """Rebuild the trace from the tokens, check it gives the receipt's root, and open ``cells``."""
    trace = compute_rebuilt_trace(engine, job, output_tokens)
    commitment = compute_commitment(trace, committed_layers)
    if commitment.root != receipt.commitment_root:
        raise VerillmError(f"the trace rebuilt from the tokens of job {receipt.job_hash.hex()} does not give its committed root")
    return compute_opening(trace, commitment, cells)
