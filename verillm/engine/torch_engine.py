"""The reference engine: a Hugging Face causal LM run by our own batched decode loop.

One prefill over the left-padded batch, then one-token KV-cache decode steps until every job
has emitted a stop token or its max_new_tokens. Forward hooks on the committed layers turn
each captured [B, T, H] hidden-state tensor into fingerprints on the spot (fp32, same math as
`verillm.spec.commitment.compute_fingerprints`), so full hidden vectors are never kept.
Sampling follows `verillm.spec.sampling` at every position (prompt positions too, for the
token-check flags); greedy rows take a vectorised torch path that equals the spec function.

Subclasses change what is computed through four small override points (the attack suite in
`attacks.py` uses them): the model object itself, `transform_job`, `transform_kv` and
`force_token`.
"""

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import DynamicCache

from verillm.spec.commitment import JobTrace, compute_projection
from verillm.spec.job import compute_model_id, process_job_admission
from verillm.spec.sampling import compute_sampled_token, compute_token_gaps, is_greedy
from verillm.spec.types import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN, Job, ModelManifest

# Rows of prompt positions whose logits are materialised at once (bounds memory: 256 × vocab).
LOGIT_CHUNK_ROWS = 256


@dataclass
class _Row:
    """One job's state inside a batch."""

    slot: int  # index of the job in the batch
    job: Job  # the job as executed (after transform_job)
    outputs: list[int] = field(default_factory=list)
    fingerprints: list[torch.Tensor] = field(default_factory=list)  # [T, L, dims] pieces, in position order
    flags: list[torch.Tensor] = field(default_factory=list)  # uint8 [T] pieces, in position order

    @property
    def prompt_len(self) -> int:
        return len(self.job.input_tokens)

    @property
    def next_position(self) -> int:
        """Absolute position of the token fed next (the last output token)."""
        return self.prompt_len + len(self.outputs) - 1


def compute_fingerprints_torch(hidden: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """Return Rᵀh / ‖h‖ in fp32 for hidden [..., H] and projection [H, dims] (spec `compute_fingerprints`)."""
    hidden = hidden.float()
    norms = torch.linalg.vector_norm(hidden, dim=-1, keepdim=True).clamp_min(1e-30)
    return (hidden @ projection) / norms


def get_layer_module(model: torch.nn.Module, hidden_index: int) -> torch.nn.Module:
    """Return the module whose output is hidden state ``hidden_index`` (HF output_hidden_states order)."""
    decoder = model.get_decoder()
    num_layers = len(decoder.layers)
    if hidden_index == 0:
        return decoder.embed_tokens
    if hidden_index == num_layers:
        return decoder.norm
    return decoder.layers[hidden_index - 1]


class TorchEngine:
    """Reference Engine over a transformers causal LM (Llama family), CPU or CUDA."""

    def __init__(self, model, tokenizer, manifest: ModelManifest, max_batch_size: int = 8, num_threads: int | None = None, capture: bool = True):
        self.model = model
        self.tokenizer = tokenizer
        self.manifest = manifest
        self.model_id = compute_model_id(manifest)
        self.max_batch_size = max_batch_size
        self.num_threads = num_threads
        self.capture = capture
        self.device = next(model.parameters()).device
        self.margin_logits = manifest.token_margin_micrologits / 1_000_000
        self.stop_ids = torch.tensor(manifest.stop_tokens, dtype=torch.long, device=self.device)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else manifest.stop_tokens[0]
        self.projections = [
            torch.from_numpy(compute_projection(self.model_id, layer, manifest.hidden_size, manifest.fingerprint_dims)).to(self.device)
            for layer in manifest.committed_layers
        ]
        self._captured: list[torch.Tensor | None] = [None] * len(manifest.committed_layers)

    # --- override points ----------------------------------------------------------------

    def transform_job(self, job: Job) -> Job:
        """Return the job actually executed for ``job`` (honest: the job itself)."""
        return job

    def transform_kv(self, cache: DynamicCache, attention_mask: torch.Tensor, num_new: int) -> torch.Tensor:
        """Called after every forward pass with the cache and its 2-D mask; return the mask for the next step.

        ``num_new``: how many trailing cache entries that pass just wrote. Honest: no change.
        """
        return attention_mask

    def force_token(self, job: Job, output_index: int, token: int, logits: torch.Tensor) -> int:
        """Return the token emitted as output ``output_index``; the sampler chose ``token`` from fp32 ``logits`` [V]."""
        return token

    # --- Engine protocol ----------------------------------------------------------------

    def run(self, jobs: Sequence[Job]) -> list[JobTrace]:
        """Run ``jobs`` in batches of at most max_batch_size; one trace per job, in order."""
        for job in jobs:
            process_job_admission(job, self.manifest)
        traces = []
        with self._threads(), self._hooks(), torch.inference_mode():
            for start in range(0, len(jobs), self.max_batch_size):
                traces.extend(self._run_batch([self.transform_job(job) for job in jobs[start : start + self.max_batch_size]]))
        return traces

    # --- the loop -----------------------------------------------------------------------

    def _run_batch(self, jobs: list[Job]) -> list[JobTrace]:
        rows = [_Row(slot=i, job=job) for i, job in enumerate(jobs)]
        cache = DynamicCache(config=self.model.config)
        mask = self._prefill(rows, cache)
        active = rows
        while True:
            still = [i for i, row in enumerate(active) if not self._is_done(row)]
            if not still:
                return [self._finish(row) for row in rows]
            if len(still) < len(active):
                mask = self._select_rows(cache, mask, still)
                active = [active[i] for i in still]
            mask = self._decode_step(active, cache, mask)

    def _prefill(self, rows: list[_Row], cache: DynamicCache) -> torch.Tensor:
        width = max(row.prompt_len for row in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, row in enumerate(rows):
            input_ids[b, width - row.prompt_len :] = torch.tensor(row.job.input_tokens)
            mask[b, width - row.prompt_len :] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        hidden = self._forward(input_ids, mask, positions, cache)
        if self.capture:
            fingerprints = torch.stack(self._captured, dim=2)  # [B, width, L, dims]
            for b, row in enumerate(rows):
                row.fingerprints.append(fingerprints[b, width - row.prompt_len :])
            self._prompt_flags(rows, hidden, width)
        last = self._logits(hidden[:, -1])
        self._emit(rows, last)
        return self.transform_kv(cache, mask, width)

    def _decode_step(self, rows: list[_Row], cache: DynamicCache, mask: torch.Tensor) -> torch.Tensor:
        input_ids = torch.tensor([[row.outputs[-1]] for row in rows], dtype=torch.long, device=self.device)
        positions = torch.tensor([[row.next_position] for row in rows], dtype=torch.long, device=self.device)
        mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
        hidden = self._forward(input_ids, mask, positions, cache)
        if self.capture:
            fingerprints = torch.stack(self._captured, dim=2)  # [B, 1, L, dims]
            for b, row in enumerate(rows):
                row.fingerprints.append(fingerprints[b])
        self._emit(rows, self._logits(hidden[:, 0]))
        return self.transform_kv(cache, mask, 1)

    def _forward(self, input_ids, mask, positions, cache) -> torch.Tensor:
        """Run the decoder; return the final-norm hidden states [B, T, H] (the hooks fill _captured)."""
        output = self.model.get_decoder()(
            input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        )
        return output.last_hidden_state

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.get_output_embeddings()(hidden).float()

    def _select_rows(self, cache: DynamicCache, mask: torch.Tensor, keep: list[int]) -> torch.Tensor:
        """Drop finished rows from the cache and mask so later steps compute only live jobs."""
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        for layer in cache.layers:
            layer.batch_select_indices(index)
        return mask[index]

    def _is_done(self, row: _Row) -> bool:
        return len(row.outputs) >= row.job.max_new_tokens or row.outputs[-1] in self.manifest.stop_tokens

    # --- sampling and flags ---------------------------------------------------------------

    def _emit(self, rows: list[_Row], logits: torch.Tensor) -> None:
        """Sample each row's next output token from its logits [B, V]; record it and its flags."""
        chosen = self._sample(rows, logits)
        tokens = [self.force_token(row.job, len(row.outputs), token, logits[b]) for b, (row, token) in enumerate(zip(rows, chosen))]
        if self.capture:
            positions = [row.prompt_len - 1 + len(row.outputs) for row in rows]
            flags = self._flags(rows, logits, positions, tokens)
            for b, row in enumerate(rows):
                row.flags.append(flags[b : b + 1])
        for row, token in zip(rows, tokens):
            row.outputs.append(token)

    def _sample(self, rows: list[_Row], logits: torch.Tensor) -> list[int]:
        tokens = logits.argmax(dim=-1).tolist()  # first maximum, as np.argmax
        for b, row in enumerate(rows):
            if not is_greedy(row.job.sampling):
                position = row.prompt_len - 1 + len(row.outputs)
                tokens[b] = compute_sampled_token(logits[b].cpu().numpy(), row.job.sampling, position)
        return tokens

    def _flags(self, rows: list[_Row], logits: torch.Tensor, positions: list[int], next_tokens: list[int]) -> torch.Tensor:
        """Return uint8 flags [N] for N positions given their logits [N, V] and the sequence's next tokens."""
        next_ids = torch.tensor(next_tokens, dtype=torch.long, device=logits.device)
        flags = compute_greedy_flags(logits, next_ids, self.stop_ids, self.margin_logits)
        for n, row in enumerate(rows):
            if not is_greedy(row.job.sampling):
                flags[n] = self._spec_flags(logits[n], row.job, positions[n], next_tokens[n])
        return flags

    def _spec_flags(self, logits: torch.Tensor, job: Job, position: int, next_token: int) -> int:
        stops = list(self.manifest.stop_tokens)
        gaps = compute_token_gaps(logits.cpu().numpy(), job.sampling, position, [next_token] + stops)
        next_flag = FLAG_NEXT_WITHIN_MARGIN if gaps[0] <= self.margin_logits else 0
        stop_flag = FLAG_STOP_WITHIN_MARGIN if any(g <= self.margin_logits for g in gaps[1:]) else 0
        return next_flag | stop_flag

    def _prompt_flags(self, rows: list[_Row], hidden: torch.Tensor, width: int) -> None:
        """Flags at every prompt position that predicts another prompt token (all but the last)."""
        for b, row in enumerate(rows):
            states = hidden[b, width - row.prompt_len : width - 1]
            nexts = list(row.job.input_tokens[1:])
            pieces = []
            for start in range(0, len(nexts), LOGIT_CHUNK_ROWS):
                chunk = nexts[start : start + LOGIT_CHUNK_ROWS]
                logits = self._logits(states[start : start + len(chunk)])
                positions = list(range(start, start + len(chunk)))
                pieces.append(self._flags([row] * len(chunk), logits, positions, chunk))
            if pieces:
                row.flags.append(torch.cat(pieces))

    def _finish(self, row: _Row) -> JobTrace:
        dims = self.manifest.fingerprint_dims
        layers = len(self.manifest.committed_layers)
        if not self.capture:
            return JobTrace(tuple(row.outputs), np.zeros((0, layers, dims), np.float32), np.zeros(0, np.uint8))
        fingerprints = torch.cat(row.fingerprints).cpu().numpy()
        flags = torch.cat(row.flags).cpu().numpy()
        # The last output token is sampled, never fed back: its position is not covered.
        count = row.prompt_len + len(row.outputs) - 1
        return JobTrace(output_tokens=tuple(row.outputs), fingerprints=fingerprints[:count], flags=flags[:count])

    # --- capture hooks and threads -----------------------------------------------------

    @contextlib.contextmanager
    def _hooks(self):
        """Register the fingerprint hooks for one run (so engines sharing a model don't interfere)."""
        if not self.capture:
            yield
            return
        handles = [
            get_layer_module(self.model, layer).register_forward_hook(self._make_hook(slot))
            for slot, layer in enumerate(self.manifest.committed_layers)
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _make_hook(self, slot: int):
        projection = self.projections[slot]

        def hook(module, args, output):
            hidden = output[0] if isinstance(output, tuple) else output
            self._captured[slot] = compute_fingerprints_torch(hidden, projection)

        return hook

    @contextlib.contextmanager
    def _threads(self):
        if self.num_threads is None:
            yield
            return
        previous = torch.get_num_threads()
        torch.set_num_threads(self.num_threads)
        try:
            yield
        finally:
            torch.set_num_threads(previous)


def compute_greedy_flags(logits: torch.Tensor, next_ids: torch.Tensor, stop_ids: torch.Tensor, margin: float) -> torch.Tensor:
    """Vectorised flags for greedy sampling: gap = max logit − token logit, in float64 like the spec."""
    best = logits.max(dim=-1).values.double()
    next_gap = best - logits.gather(1, next_ids[:, None])[:, 0].double()
    stop_gap = best[:, None] - logits[:, stop_ids].double()
    next_flag = (next_gap <= margin).to(torch.uint8) * FLAG_NEXT_WITHIN_MARGIN
    stop_flag = (stop_gap <= margin).any(dim=-1).to(torch.uint8) * FLAG_STOP_WITHIN_MARGIN
    return next_flag | stop_flag
