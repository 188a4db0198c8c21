"""The Engine protocol: what every inference engine (reference, vLLM, attacked) implements.

An engine runs jobs and returns, per job, a `JobTrace`: the output tokens and what the
commitment needs (fingerprints at every position and committed layer, token-check flags).
It never learns whether a job is an inference or an audit: a verification job is the same
call with input = prompt ‖ output and max_new_tokens = 1.

Semantics every engine must keep (the differential tests check them):
- positions: a job with input length P that outputs N tokens covers positions 0 … P+N−2
  (`compute_num_positions`): every position a forward pass ran on. Fingerprints for the
  prompt come from the prefill, for generated tokens from the decode steps.
- committed layers are hidden-state indices as in HF `output_hidden_states`: 0 = embeddings,
  i = output of decoder layer i, num_layers = after the final norm.
- sampling: token at position i = `verillm.spec.sampling.compute_sampled_token(logits_i,
  job.sampling, i)` over fp32 logits; generation stops after a stop token (which is kept in the
  output) or after max_new_tokens.
- flags at position i (`verillm.spec.constants.FLAG_*`): NEXT_WITHIN_MARGIN when the sequence's
  token at i+1 (input, or the token just sampled) has a gap ≤ the manifest's token margin;
  STOP_WITHIN_MARGIN when some stop token does.
"""

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from verillm.spec.commitment import JobTrace
from verillm.spec.types import Job, ModelManifest


@runtime_checkable
class Engine(Protocol):
    """Runs jobs for one model and returns what it computed, ready to commit."""

    manifest: ModelManifest
    model_id: bytes
    max_batch_size: int

    def run(self, jobs: Sequence[Job]) -> list[JobTrace]:
        """Run ``jobs`` (batched as the engine sees fit); one trace per job, in order."""
        ...
