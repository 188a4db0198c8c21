"""The half of the vLLM engine that runs inside vLLM's worker process: capture and sampling.

`install_capture(worker, config)` (sent through `LLM.collective_rpc`) registers forward hooks
on the loaded vLLM model and links the `SpecSampler` logits processor to them. Per forward
pass (one engine step, requests flattened into one token batch):

- the committed layers' hooks turn the [T, H] hidden states into fingerprints on the spot
  (same math as the reference engine); vLLM's Llama decoder layer returns (hidden, residual),
  so the residual stream after a layer is their sum, taken before the next layer's fused
  add-norm overwrites both in place;
- the final-norm hook maps the flattened rows back to (request, position) from the model
  runner's batch layout (request order, query_start_loc, tokens already computed), stores the
  fingerprints per job, and computes the token-check flags of every row whose next token is
  already known (prompt positions) from logits it computes with vLLM's own LM head;
- for the one row per request that vLLM samples, `SpecSampler` (a non-argmax-invariant
  logits processor, so vLLM applies it before greedy sampling) picks the spec sampler's token
  from vLLM's logits, records it and its flags, and masks every other token: vLLM's greedy
  step then emits exactly that token.

`collect_traces(worker, keys)` hands the captured arrays back and forgets them. Only jobs whose
`SamplingParams.extra_args` carry `CAPTURE_ARG` are captured; other requests run untouched.
"""

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from verillm.engine.exact import compute_exact_fingerprints
from verillm.engine.torch_engine import compute_fingerprints_torch, compute_greedy_flags
from verillm.errors import EngineError
from verillm.spec.commitment import compute_projection
from verillm.spec.sampling import compute_position_flags, compute_sampled_token, is_greedy, is_token_accepted
from verillm.spec.types import SamplingParams
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN

CAPTURE_ARG = "verillm"
"""Key in vLLM `SamplingParams.extra_args`: {"key": job key, "sampling": [temperature_milli, top_k,
top_p_ppm, seed], "force": [[output index, rule], ...]}. "force" replaces the sampler's choice at
an output index (the attack suite's token substitution; honest jobs have none): a rule is a
token id, "next_id" (the sampler's token + 1) or "runner_up" (the better of the top two logits
that the sampler did not pick)."""

# Prompt rows whose logits are materialised at once (bounds memory: 256 × vocab floats).
LOGIT_CHUNK_ROWS = 256

try:  # vLLM is optional: this module is only imported inside the vLLM environment.
    from vllm.v1.sample.logits_processor import LogitsProcessor as _VllmLogitsProcessor
except ImportError:  # pragma: no cover - exercised only where vllm is absent
    _VllmLogitsProcessor = object


@dataclass(frozen=True)
class CaptureConfig:
    """What the worker needs to capture one model's commitment.

    Sent over vLLM's msgpack RPC, which turns dataclasses into dicts: build it back with
    `CaptureConfig(**sent)`. Projections are re-derived from the model id in the worker.
    """

    model_id_hex: str
    hidden_size: int
    vocab_size: int
    fingerprint_dims: int
    committed_layers: tuple[int, ...]
    stop_tokens: tuple[int, ...]
    margin_logits: float
    exact_fingerprints: bool = False  # exact mode: float64 fixed-order fingerprints (`engine.exact`)

    def compute_projections(self) -> list[np.ndarray]:
        model_id = bytes.fromhex(self.model_id_hex)
        return [compute_projection(model_id, layer, self.hidden_size, self.fingerprint_dims) for layer in self.committed_layers]


@dataclass
class _JobCapture:
    """Everything captured for one job, as pieces in arrival order (later pieces win)."""

    sampling: SamplingParams
    prompt_len: int
    length: int  # prompt + max new tokens: an upper bound on positions
    forced: dict[int, int | str] = field(default_factory=dict)  # output index -> rule (see CAPTURE_ARG)
    fingerprints: list[tuple[int, torch.Tensor]] = field(default_factory=list)  # (first position, [n, L, dims])
    flags: list[tuple[int, torch.Tensor]] = field(default_factory=list)  # (first position, uint8 [n])
    sampled: dict[int, tuple[int, int]] = field(default_factory=dict)  # position -> (token, flags)


def get_capture_args(params) -> dict | None:
    """Return the VeriLLM capture arguments of a vLLM request, or None for foreign requests."""
    extra = getattr(params, "extra_args", None) or {}
    return extra.get(CAPTURE_ARG)


def compute_spec_sampling(values: list[int]) -> SamplingParams:
    """Return the spec sampling params packed as [temperature_milli, top_k, top_p_ppm, seed]."""
    temperature_milli, top_k, top_p_ppm, seed = values
    return SamplingParams(temperature_milli=temperature_milli, top_k=top_k, top_p_ppm=top_p_ppm, seed=seed)


def get_sequence_token(request, position: int) -> int:
    """Return the request's token at ``position`` (prompt, then outputs so far)."""
    prompt = request.prompt_token_ids
    if position < len(prompt):
        return prompt[position]
    return request.output_token_ids[position - len(prompt)]


class CaptureState:
    """Hooks and captured data for one model runner."""

    def __init__(self, runner, config: CaptureConfig):
        self.runner = runner
        self.config = config
        device = next(runner.model.parameters()).device
        self.projections = [torch.from_numpy(p).to(device) for p in config.compute_projections()]
        self.fingerprint = compute_exact_fingerprints if config.exact_fingerprints else compute_fingerprints_torch
        self.stop_ids = torch.tensor(config.stop_tokens, dtype=torch.long, device=device)
        self.jobs: dict[str, _JobCapture] = {}
        self.pending: list[torch.Tensor | None] = [None] * len(config.committed_layers)
        self.input_ids: torch.Tensor | None = None  # of the current forward pass
        self.positions: torch.Tensor | None = None
        self.sampling_rows: list[tuple[int, str, int]] = []  # (logits row, job key, position) of this pass
        self.handles: list = []
        self.busy_s = 0.0  # wall time spent in the hooks and the sampler (the capture's own cost)
        self.prompt_flags_s = 0.0  # the part of busy_s spent on logits + flags of rows vLLM does not sample

    # --- hooks ----------------------------------------------------------------------------

    def install(self) -> None:
        decoder = self.runner.model.model
        num_layers = len(decoder.layers)
        # vLLM's compiled-model wrapper calls LlamaModel.forward directly (no module hooks on the
        # decoder itself): read the token ids off the embedding and the positions off layer 0.
        self.handles.append(decoder.embed_tokens.register_forward_pre_hook(self._timed(self._on_input_ids)))
        self.handles.append(decoder.layers[0].register_forward_pre_hook(self._timed(self._on_positions)))
        for slot, layer in enumerate(self.config.committed_layers):
            module = decoder.embed_tokens if layer == 0 else decoder.norm if layer == num_layers else decoder.layers[layer - 1]
            self.handles.append(module.register_forward_hook(self._timed(self._make_layer_hook(slot))))
        # Registered after the committed-layer hooks: on the final norm it must run last.
        self.handles.append(decoder.norm.register_forward_hook(self._timed(self._on_final_norm)))

    def _timed(self, hook):
        def timed(*args):
            start = time.perf_counter()
            try:
                return hook(*args)
            finally:
                self.busy_s += time.perf_counter() - start

        return timed

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def _on_input_ids(self, module, args) -> None:
        self.input_ids = args[0]
        self.positions = None

    def _on_positions(self, module, args) -> None:
        if self.input_ids is None:
            raise EngineError("vLLM ran the model from embeddings, not token ids: capture needs the token ids")
        self.positions = args[0]

    def _make_layer_hook(self, slot: int):
        projection = self.projections[slot]

        def hook(module, args, output):
            if isinstance(output, tuple):
                # Decoder layer: (hidden, residual), stream = sum. Final norm: (normed, residual).
                hidden = output[0] if module is self.runner.model.model.norm else output[0] + output[1]
            else:
                hidden = output
            self.pending[slot] = self.fingerprint(hidden, projection)

        return hook

    def _on_final_norm(self, module, args, output) -> None:
        normed = output[0] if isinstance(output, tuple) else output
        self.sampling_rows = []
        batch = self.runner.input_batch
        count = batch.num_reqs
        bounds = self.runner.query_start_loc.np[: count + 1]
        computed = batch.num_computed_tokens_cpu[:count]
        fingerprints = torch.stack(self.pending, dim=1)  # [T, L, dims]
        self.pending = [None] * len(self.pending)
        for row, req_id in enumerate(batch.req_ids[:count]):
            request = self.runner.requests[req_id]
            args = get_capture_args(request.sampling_params)
            if args is not None:
                self._on_request_rows(row, request, args, int(bounds[row]), int(bounds[row + 1]), int(computed[row]), fingerprints, normed)

    # --- per request --------------------------------------------------------------------

    def _on_request_rows(self, row, request, args, begin, end, first_position, fingerprints, normed) -> None:
        key = args["key"]
        job = self.jobs.get(key)
        if job is None:
            prompt_len = len(request.prompt_token_ids)
            job = self.jobs[key] = _JobCapture(
                sampling=compute_spec_sampling(args["sampling"]),
                prompt_len=prompt_len,
                length=prompt_len + request.sampling_params.max_tokens,
                forced={int(index): rule for index, rule in args.get("force", [])},
            )
        self._check_positions(key, begin, end, first_position)
        job.fingerprints.append((first_position, fingerprints[begin:end]))
        last_position = first_position + (end - begin) - 1
        samples = last_position >= len(request.prompt_token_ids) - 1
        if samples:
            self.sampling_rows.append((row, key, last_position))
        known = (end - begin) - 1 if samples else end - begin
        if known > 0:
            next_ids = self.input_ids[begin + 1 : end]  # within this request's rows only
            if not samples:  # a prefill chunk: its last row's next token is in the next chunk
                extra = torch.tensor([get_sequence_token(request, last_position + 1)], device=next_ids.device)
                next_ids = torch.cat([next_ids, extra.to(next_ids.dtype)])
            job.flags.append((first_position, self._compute_flags(job, normed[begin : begin + known], next_ids, first_position)))

    def _check_positions(self, key: str, begin: int, end: int, first_position: int) -> None:
        """Cross-check the runner's layout against the positions the model was called with (CPU: free)."""
        positions = self.positions
        if positions.device.type != "cpu":
            return
        if int(positions[begin]) != first_position or int(positions[end - 1]) != first_position + end - begin - 1:
            raise EngineError(f"job {key}: rows {begin}:{end} are at positions {int(positions[begin])}…, runner says {first_position}…")

    def _compute_flags(self, job: _JobCapture, hidden: torch.Tensor, next_ids: torch.Tensor, first_position: int) -> torch.Tensor:
        if len(next_ids) != len(hidden):
            raise EngineError(f"{len(hidden)} rows at position {first_position}… but {len(next_ids)} next tokens")
        start = time.perf_counter()
        try:
            return self._compute_flags_chunked(job, hidden, next_ids, first_position)
        finally:
            self.prompt_flags_s += time.perf_counter() - start

    def _compute_flags_chunked(self, job: _JobCapture, hidden: torch.Tensor, next_ids: torch.Tensor, first_position: int) -> torch.Tensor:
        pieces = []
        for start in range(0, hidden.shape[0], LOGIT_CHUNK_ROWS):
            logits = self.runner.model.compute_logits(hidden[start : start + LOGIT_CHUNK_ROWS]).float()
            nexts = next_ids[start : start + LOGIT_CHUNK_ROWS].long()
            if is_greedy(job.sampling):
                pieces.append(compute_greedy_flags(logits, nexts, self.stop_ids, self.config.margin_logits))
                continue
            flags = [self.compute_spec_flag(logits[i], job.sampling, first_position + start + i, int(nexts[i])) for i in range(len(nexts))]
            pieces.append(torch.tensor(flags, dtype=torch.uint8, device=logits.device))
        return torch.cat(pieces)

    def compute_spec_flag(self, logits: torch.Tensor, sampling: SamplingParams, position: int, next_token: int) -> int:
        """Flags at one position from the spec (any sampling params; the tie rule at margin 0)."""
        return compute_position_flags(logits.cpu().numpy(), sampling, position, next_token, list(self.config.stop_tokens), self.config.margin_logits)

    # --- sampling (called by SpecSampler) -----------------------------------------------

    def on_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Replace each sampled row by a one-hot choice of the spec sampler's token."""
        return self._timed(self._on_logits)(logits)

    def _on_logits(self, logits: torch.Tensor) -> torch.Tensor:
        for row, key, position in self.sampling_rows:
            job = self.jobs[key]
            values = logits[row].float()
            choose = self._choose_greedy if is_greedy(job.sampling) else self._choose_sampled
            token, flag = choose(job, values, position)
            job.sampled[position] = (token, flag)
            logits[row].fill_(float("-inf"))
            logits[row, token] = 0.0
        self.sampling_rows = []
        return logits

    def _choose_greedy(self, job: _JobCapture, values: torch.Tensor, position: int) -> tuple[int, int]:
        """Greedy token and its flags; one pass over the vocabulary (= `compute_greedy_flags`)."""
        best, index = values.max(dim=0)  # the first maximum, as np.argmax
        chosen = int(index)
        token = self._apply_forced(job, chosen, values, position)
        candidates = [token, *self.config.stop_tokens]
        gaps = (best.double() - values[torch.tensor(candidates, device=values.device)].double()).tolist()
        margin = self.config.margin_logits
        within = [is_token_accepted(t, chosen, gap, margin) for t, gap in zip(candidates, gaps)]
        return token, (FLAG_NEXT_WITHIN_MARGIN if within[0] else 0) | (FLAG_STOP_WITHIN_MARGIN if any(within[1:]) else 0)

    def _choose_sampled(self, job: _JobCapture, values: torch.Tensor, position: int) -> tuple[int, int]:
        token = compute_sampled_token(values.cpu().numpy(), job.sampling, position)
        token = self._apply_forced(job, token, values, position)
        return token, self.compute_spec_flag(values, job.sampling, position, token)

    def _apply_forced(self, job: _JobCapture, token: int, values: torch.Tensor, position: int) -> int:
        rule = job.forced.get(position - (job.prompt_len - 1))
        return token if rule is None else self.compute_forced_token(rule, token, values)

    def compute_forced_token(self, rule: int | str, token: int, logits: torch.Tensor) -> int:
        """Apply a substitution rule to the sampler's ``token`` (mirrors attacks.TokenSubstituteEngine)."""
        if rule == "next_id":
            return (token + 1) % self.config.vocab_size
        if rule == "runner_up":
            top_two = logits.topk(2).indices.tolist()
            return top_two[1] if top_two[0] == token else top_two[0]
        if isinstance(rule, int):
            return rule
        raise EngineError(f"unknown token substitution rule {rule!r}")

    # --- read back ----------------------------------------------------------------------

    def pop_trace(self, key: str) -> dict:
        """Return the job's captured arrays (positions it never saw are marked missing) and forget it."""
        job = self.jobs.pop(key, None)
        if job is None:
            raise EngineError(f"no capture for job {key}: the request never reached the model")
        layers, dims = len(self.projections), self.projections[0].shape[1]
        fingerprints = np.zeros((job.length, layers, dims), np.float32)
        have = np.zeros(job.length, bool)
        for first, piece in job.fingerprints:
            fingerprints[first : first + len(piece)] = piece.cpu().numpy()
            have[first : first + len(piece)] = True
        flags = np.zeros(job.length, np.uint8)
        have_flags = np.zeros(job.length, bool)
        for first, piece in job.flags:
            flags[first : first + len(piece)] = piece.cpu().numpy()
            have_flags[first : first + len(piece)] = True
        tokens = {}
        for position, (token, flag) in job.sampled.items():
            flags[position], have_flags[position], tokens[position] = flag, True, token
        return {"fingerprints": fingerprints, "have": have, "flags": flags, "have_flags": have_flags, "tokens": tokens}


class SpecSampler(_VllmLogitsProcessor):
    """vLLM logits processor that makes vLLM emit the spec sampler's token (see module doc).

    Not argmax-invariant, so vLLM applies it before its own (greedy) sampling. It does nothing
    until `install_capture` links it to a `CaptureState`, and nothing to foreign requests.
    """

    def __init__(self, vllm_config, device, is_pin_memory):
        self.state: CaptureState | None = None

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update) -> None:
        # Which rows to sample is read from the capture hooks of the same forward pass.
        return None

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.state is None or not self.state.sampling_rows:
            return logits
        return self.state.on_logits(logits)


# --- entry points sent through LLM.collective_rpc (run with the vLLM worker as `worker`) --


def install_capture(worker, sent: dict) -> bool:
    """Register the hooks on this worker's model and link the sampler; idempotent."""
    config = CaptureConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in dict(sent).items()})
    runner = worker.model_runner
    state = getattr(runner, "_verillm_capture", None)
    if state is not None:
        state.remove()
    state = CaptureState(runner, config)
    samplers = [p for p in runner.input_batch.logitsprocs.non_argmax_invariant if isinstance(p, SpecSampler)]
    if len(samplers) != 1:
        raise EngineError("the vLLM engine was not started with verillm's SpecSampler logits processor")
    samplers[0].state = state
    state.install()
    runner._verillm_capture = state
    return True


def remove_capture(worker) -> bool:
    """Remove the hooks (vLLM runs untouched afterwards, the baseline of the overhead benchmark)."""
    state = getattr(worker.model_runner, "_verillm_capture", None)
    if state is not None:
        state.remove()
    return True


def collect_traces(worker, keys: list[str]) -> list[dict]:
    """Return and forget the captured arrays of ``keys``."""
    state = getattr(worker.model_runner, "_verillm_capture", None)
    if state is None:
        raise EngineError("capture is not installed on this vLLM worker")
    return [state.pop_trace(key) for key in keys]


def load_weights(worker, weights: dict) -> bool:
    """Reload the model in place from Hugging Face-named ``weights`` ({name: [dtype, shape, raw bytes]})."""
    tensors = {
        name: torch.frombuffer(bytearray(raw), dtype=getattr(torch, dtype)).reshape(shape)
        for name, (dtype, shape, raw) in dict(weights).items()
    }
    worker.reload_weights(weights_iterator=iter(tensors.items()))
    return True


def load_weights_from(worker, path: str) -> bool:
    """Reload the model in place from the safetensors in folder ``path`` (vLLM's own loader)."""
    worker.reload_weights(weights_path=path)
    return True


def get_worker_info(worker) -> dict:
    """Describe the worker (threads, model class, seconds spent capturing so far) for logs and benchmarks."""
    state = getattr(worker.model_runner, "_verillm_capture", None)
    return {
        "torch_threads": torch.get_num_threads(),
        "model": type(worker.model_runner.model).__name__,
        "capture_busy_s": state.busy_s if state is not None else 0.0,
        "capture_prompt_flags_s": state.prompt_flags_s if state is not None else 0.0,
        "process_cpu_s": time.process_time(),  # every thread of the worker process
    }
