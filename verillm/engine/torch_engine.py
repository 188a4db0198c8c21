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
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import DynamicCache

from verillm.engine.exact import MACHINE_FORM, exact_kernels, get_fingerprint_function, get_kernel_form, is_exact
from verillm.engine.exact_attention import make_exact_cache
from verillm.engine.kernel_class import verify_kernel_class
from verillm.engine.families import get_layer_module
from verillm.errors import ConfigError
from verillm.spec.commitment import JobTrace, compute_projection
from verillm.spec.job import compute_model_id, verify_job_admission
from verillm.spec.sampling import compute_position_flags, compute_sample_and_gaps, compute_token_gaps, is_greedy, is_token_accepted
from verillm.spec.types import Job, ModelManifest
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN

# Rows of prompt positions whose logits are materialised at once (bounds memory: 256 × vocab).
LOGIT_CHUNK_ROWS = 256
# Decode steps whose raw hidden states wait before being fingerprinted together (bounds memory:
# 64 × batch × committed layers × hidden floats).
FLUSH_STEPS = 64


@dataclass
class _Row:
    """One job's state inside a batch."""

    slot: int  # index of the job in the batch
    job: Job  # the job as executed (after transform_job)
    outputs: list[int] = field(default_factory=list)
    prompt_flags: torch.Tensor | None = None  # uint8 [P - 1]: positions that predict a prompt token
    output_flags: list[int] = field(default_factory=list)  # one per emitted token, at its predicting position

    @property
    def prompt_len(self) -> int:
        return len(self.job.input_tokens)

    @property
    def next_position(self) -> int:
        """Absolute position of the token fed next (the last output token)."""
        return self.prompt_len + len(self.outputs) - 1


@dataclass
class _Captured:
    """A batch's fingerprints, kept on the device until the batch ends (no per-step sync).

    Decode steps leave their raw [B, 1, H] layer outputs in `pending` (references, no work);
    every FLUSH_STEPS steps they are fingerprinted together, so the per-step cost of capture
    is a few list appends instead of a handful of small tensor ops (which on a small model
    cost several percent of a decode step).
    """

    prefill: torch.Tensor | None = None  # [B, width, L, dims]
    steps: list[torch.Tensor] = field(default_factory=list)  # per flushed decode step, in order: [B_active, L, dims]
    step_slots: list[list[int]] = field(default_factory=list)  # per decode step: the job slot of each row
    pending: list[list[torch.Tensor]] = field(default_factory=list)  # per unflushed step: L tensors [B_active, 1, H]

    def flush(self, projections: list[torch.Tensor], fingerprint=None) -> None:
        """Fingerprint every pending step in one pass per layer (``fingerprint``: the mode's function)."""
        if not self.pending:
            return
        fingerprint = fingerprint or compute_fingerprints_torch
        sizes = [step[0].shape[0] for step in self.pending]
        per_layer = [
            fingerprint(torch.cat([step[slot][:, 0] for step in self.pending]), projection)
            for slot, projection in enumerate(projections)
        ]
        self.steps.extend(torch.stack(per_layer, dim=1).split(sizes))  # each [B_active, L, dims]
        self.pending.clear()

    def get_per_job(self, rows: list["_Row"], projections: list[torch.Tensor], fingerprint=None) -> list[np.ndarray]:
        """Return each job's fingerprints [positions, L, dims] in position order."""
        self.flush(projections, fingerprint)
        width = self.prefill.shape[1]
        prefill = self.prefill.cpu().numpy()
        per_job = [[prefill[row.slot, width - row.prompt_len :]] for row in rows]
        if self.steps:
            steps = torch.cat(self.steps).cpu().numpy()
            slots = np.concatenate([np.asarray(s) for s in self.step_slots])
            for row in rows:
                per_job[row.slot].append(steps[slots == row.slot])
        return [np.concatenate(parts) for parts in per_job]


def compute_fingerprints_torch(hidden: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """Return Rᵀh / ‖h‖ in fp32 for hidden [..., H] and projection [H, dims] (spec `compute_fingerprints`)."""
    hidden = hidden.float()
    norms = torch.linalg.vector_norm(hidden, dim=-1, keepdim=True).clamp_min(1e-30)
    return (hidden @ projection) / norms


def verify_model_matches(model, manifest: ModelManifest) -> None:
    """Raise ConfigError when ``model``'s shape is not the one ``manifest`` commits to."""
    config = model.config
    have = (config.hidden_size, config.vocab_size, config.num_hidden_layers)
    want = (manifest.hidden_size, manifest.vocab_size, manifest.num_layers)
    if have != want:
        raise ConfigError(f"model has (hidden, vocab, layers) = {have}, manifest {manifest.name} says {want}")


_MODEL_LOCKS: "weakref.WeakKeyDictionary[torch.nn.Module, threading.Lock]" = weakref.WeakKeyDictionary()
_MODEL_LOCKS_GUARD = threading.Lock()


def get_model_lock(model: torch.nn.Module) -> threading.Lock:
    """Return the lock that serialises runs over ``model``: a run registers capture hooks on the
    model's layers and writes what they capture into its engine, so two runs at once (two nodes
    or two engines sharing one loaded model in a process) would mix each other's hidden states."""
    with _MODEL_LOCKS_GUARD:
        return _MODEL_LOCKS.setdefault(model, threading.Lock())


class TorchEngine:
    """Reference Engine over a transformers causal LM (Llama family), CPU or CUDA.

    One `run` at a time per loaded model (the hooks write into the engine): `run` holds the
    model's lock, so engines and nodes that share a model in one process queue behind each other. ``capture=False`` runs the same loop without hooks and flags and returns
    traces with no fingerprints: only for measuring what capture costs.
    """

    def __init__(self, model, tokenizer, manifest: ModelManifest, max_batch_size: int = 8, num_threads: int | None = None, capture: bool = True):
        verify_model_matches(model, manifest)
        verify_kernel_class(manifest, model)
        if max_batch_size < 1 or (num_threads is not None and num_threads < 1):
            raise ConfigError(f"max_batch_size ({max_batch_size}) and num_threads ({num_threads}) must be at least 1")
        self.model = model
        self.tokenizer = tokenizer
        self.manifest = manifest
        self.model_id = compute_model_id(manifest)
        self.max_batch_size = max_batch_size
        self.num_threads = num_threads
        self.capture = capture
        # Exact mode (a kernel class in the manifest): row-invariant kernels and fingerprints.
        self.exact = is_exact(manifest)
        self.kernel_form = get_kernel_form(manifest.kernel_class) if self.exact else MACHINE_FORM
        self._fingerprint = get_fingerprint_function(self.kernel_form) if self.exact else compute_fingerprints_torch
        self.device = next(model.parameters()).device
        self.margin_logits = manifest.token_margin_micrologits / 1_000_000
        self.stop_list = list(manifest.stop_tokens)
        self.stop_ids = torch.tensor(self.stop_list, dtype=torch.long, device=self.device)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else manifest.stop_tokens[0]
        self.projections = [
            torch.from_numpy(compute_projection(self.model_id, layer, manifest.hidden_size, manifest.fingerprint_dims)).to(self.device)
            for layer in manifest.committed_layers
        ]
        self.projection_stack = torch.stack(self.projections)  # [L, H, dims]
        self._captured: list[torch.Tensor | None] = [None] * len(manifest.committed_layers)
        self._on_token: Callable[[int, int], None] | None = None  # run()'s streaming callback, per batch

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

    def run(self, jobs: Sequence[Job], on_token: Callable[[int, int], None] | None = None) -> list[JobTrace]:
        """Run ``jobs`` in batches of at most max_batch_size; one trace per job, in order.

        ``on_token(i, token)``, when given, is called in this thread as each output token of
        ``jobs[i]`` is sampled (streaming); it must be quick and must not raise.
        """
        for job in jobs:
            verify_job_admission(job, self.manifest, self.model_id)
        traces = []
        kernels = exact_kernels(self.model, form=self.kernel_form) if self.exact else contextlib.nullcontext()
        with get_model_lock(self.model), self._threads(), kernels, self._hooks(), torch.inference_mode():
            for start in range(0, len(jobs), self.max_batch_size):
                self._on_token = None if on_token is None else (lambda slot, token, start=start: on_token(start + slot, token))
                try:
                    traces.extend(self._run_batch([self.transform_job(job) for job in jobs[start : start + self.max_batch_size]]))
                finally:
                    self._on_token = None
        return traces

    # --- the loop -----------------------------------------------------------------------

    def _run_batch(self, jobs: list[Job]) -> list[JobTrace]:
        rows = [_Row(slot=i, job=job) for i, job in enumerate(jobs)]
        captured = _Captured()
        cache = make_exact_cache(self.model.config) if self.exact else DynamicCache(config=self.model.config)
        mask = self._prefill(rows, cache, captured)
        active = rows
        while True:
            still = [i for i, row in enumerate(active) if not self._is_done(row)]
            if not still:
                return self._finish(rows, captured)
            if len(still) < len(active):
                mask = self._select_rows(cache, mask, still)
                active = [active[i] for i in still]
            mask = self._decode_step(active, cache, mask, captured)

    def _prefill(self, rows: list[_Row], cache: DynamicCache, captured: _Captured) -> torch.Tensor:
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
            captured.prefill = self._collect_fingerprints(width)
            self._prompt_flags(rows, hidden, width)
        self._emit(rows, self._logits(hidden[:, -1]))
        return self.transform_kv(cache, mask, width)

    def _decode_step(self, rows: list[_Row], cache: DynamicCache, mask: torch.Tensor, captured: _Captured) -> torch.Tensor:
        input_ids = torch.tensor([[row.outputs[-1]] for row in rows], dtype=torch.long, device=self.device)
        positions = torch.tensor([[row.next_position] for row in rows], dtype=torch.long, device=self.device)
        mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
        hidden = self._forward(input_ids, mask, positions, cache)
        if self.capture:
            captured.pending.append(list(self._captured))
            captured.step_slots.append([row.slot for row in rows])
            if len(captured.pending) >= FLUSH_STEPS:
                captured.flush(self.projections, self._fingerprint)
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

    def _finish(self, rows: list[_Row], captured: _Captured) -> list[JobTrace]:
        layers, dims = len(self.manifest.committed_layers), self.manifest.fingerprint_dims
        if not self.capture:
            return [JobTrace(tuple(r.outputs), np.zeros((0, layers, dims), np.float32), np.zeros(0, np.uint8)) for r in rows]
        traces = []
        for row, fingerprints in zip(rows, captured.get_per_job(rows, self.projections, self._fingerprint)):
            flags = np.concatenate([row.prompt_flags.cpu().numpy(), np.asarray(row.output_flags, np.uint8)])
            # The last output token is sampled, never fed back: its position is not covered.
            count = row.prompt_len + len(row.outputs) - 1
            traces.append(JobTrace(output_tokens=tuple(row.outputs), fingerprints=fingerprints[:count], flags=flags[:count]))
        return traces

    # --- sampling and flags ---------------------------------------------------------------

    def _emit(self, rows: list[_Row], logits: torch.Tensor) -> None:
        """Sample each row's next output token from its logits [B, V]; record it and its flags."""
        best, argmax = logits.max(dim=-1)  # first maximum on ties, as np.argmax
        chosen = argmax.tolist()
        stop_gaps: list[list[float] | None] = [None] * len(rows)
        for b, row in enumerate(rows):
            if not is_greedy(row.job.sampling):
                chosen[b], stop_gaps[b] = compute_sample_and_gaps(logits[b].cpu().numpy(), row.job.sampling, self._emit_position(row), self.stop_list)
        tokens = [self.force_token(row.job, len(row.outputs), token, logits[b]) for b, (row, token) in enumerate(zip(rows, chosen))]
        if self.capture:
            # One small device→host copy per step: each row's best logit and its stop-token logits.
            # Python floats are float64, so best − logit below is the spec's float64 gap, exactly.
            table = torch.cat([best[:, None], logits.index_select(1, self.stop_ids)], dim=1).tolist()
            for b, row in enumerate(rows):
                greedy_stop_gaps = [table[b][0] - s for s in table[b][1:]]
                gaps = stop_gaps[b] if stop_gaps[b] is not None else greedy_stop_gaps
                next_gap = 0.0 if tokens[b] == chosen[b] else self._forced_gap(row, logits[b], table[b][0], tokens[b])
                row.output_flags.append(self._compute_flags(tokens[b], chosen[b], next_gap, gaps))
        for row, token in zip(rows, tokens):
            row.outputs.append(token)
            if self._on_token is not None:
                self._on_token(row.slot, token)

    def _emit_position(self, row: _Row) -> int:
        return row.prompt_len - 1 + len(row.outputs)

    def _forced_gap(self, row: _Row, logits: torch.Tensor, best: float, token: int) -> float:
        """Gap of a token that force_token put in place of the sampler's choice."""
        if is_greedy(row.job.sampling):
            return best - float(logits[token])
        return compute_token_gaps(logits.cpu().numpy(), row.job.sampling, self._emit_position(row), [token])[0]

    def _compute_flags(self, token: int, chosen: int, next_gap: float, stop_gaps: list[float]) -> int:
        """Flags of an emitted ``token`` where the sampler chose ``chosen`` (the tie rule: `spec.sampling.is_token_accepted`)."""
        margin = self.margin_logits
        next_flag = FLAG_NEXT_WITHIN_MARGIN if is_token_accepted(token, chosen, next_gap, margin) else 0
        stops = any(is_token_accepted(stop, chosen, gap, margin) for stop, gap in zip(self.stop_list, stop_gaps))
        return next_flag | (FLAG_STOP_WITHIN_MARGIN if stops else 0)

    def _spec_flags(self, logits: torch.Tensor, job: Job, position: int, next_token: int) -> int:
        return compute_position_flags(logits.cpu().numpy(), job.sampling, position, next_token, self.stop_list, self.margin_logits)

    def _prompt_flags(self, rows: list[_Row], hidden: torch.Tensor, width: int) -> None:
        """Flags at every prompt position that predicts another prompt token (all but the last)."""
        for row in rows:
            states = hidden[row.slot, width - row.prompt_len : width - 1]
            nexts = torch.tensor(row.job.input_tokens[1:], dtype=torch.long, device=self.device)
            pieces = [torch.zeros(0, dtype=torch.uint8, device=self.device)]
            for start in range(0, len(nexts), LOGIT_CHUNK_ROWS):
                logits = self._logits(states[start : start + LOGIT_CHUNK_ROWS])
                pieces.append(compute_greedy_flags(logits, nexts[start : start + len(logits)], self.stop_ids, self.margin_logits))
                if not is_greedy(row.job.sampling):
                    for n in range(len(logits)):
                        pieces[-1][n] = self._spec_flags(logits[n], row.job, start + n, int(nexts[start + n]))
            row.prompt_flags = torch.cat(pieces)

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
            # Decode steps ([B, 1, H], tiny) keep the vector until the pass ends, so all layers'
            # fingerprints take 4 ops instead of 3 per layer; prefill folds it here (memory).
            self._captured[slot] = hidden if hidden.shape[1] == 1 else self._fingerprint(hidden, projection)

        return hook

    def _collect_fingerprints(self, width: int) -> torch.Tensor:
        """Return the pass's fingerprints [B, width, L, dims] from what the hooks left."""
        if width > 1:
            return torch.stack(self._captured, dim=2)
        if self.exact:
            fingerprints = torch.stack([self._fingerprint(h[:, 0], p) for h, p in zip(self._captured, self.projections)], dim=1)
            self._captured = [None] * len(self._captured)
            return fingerprints[:, None]
        hidden = torch.cat(self._captured, dim=1).float()  # [B, L, H]
        norms = torch.linalg.vector_norm(hidden, dim=-1, keepdim=True).clamp_min_(1e-30)
        fingerprints = (hidden.unsqueeze(2) @ self.projection_stack)[:, :, 0] / norms  # [B, L, dims]
        self._captured = [None] * len(self._captured)
        return fingerprints[:, None]

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
    """Vectorised flags for greedy sampling: gap = max logit − token logit, in float64 like the spec.

    Margin 0: the token must be the argmax itself (first maximum: the spec's tie rule), not a tie.
    """
    if margin == 0:
        chosen = logits.argmax(dim=-1)
        next_flag = (chosen == next_ids).to(torch.uint8) * FLAG_NEXT_WITHIN_MARGIN
        return next_flag | torch.isin(chosen, stop_ids).to(torch.uint8) * FLAG_STOP_WITHIN_MARGIN
    best = logits.max(dim=-1).values.double()
    next_gap = best - logits.gather(1, next_ids[:, None])[:, 0].double()
    stop_gap = best[:, None] - logits[:, stop_ids].double()
    next_flag = (next_gap <= margin).to(torch.uint8) * FLAG_NEXT_WITHIN_MARGIN
    stop_flag = (stop_gap <= margin).any(dim=-1).to(torch.uint8) * FLAG_STOP_WITHIN_MARGIN
    return next_flag | stop_flag
