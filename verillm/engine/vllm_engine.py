"""The vLLM engine: the same Engine protocol as the reference engine, served by vLLM.

vLLM runs the jobs (its scheduler batches them, continuous batching, paged KV cache); the
capture half (`verillm.engine.vllm_capture`, installed into vLLM's worker process through
`LLM.collective_rpc`) fingerprints the committed layers at every position a forward pass
runs, computes the token-check flags, and makes vLLM's greedy step emit exactly the token of
the seeded spec sampler. The result is a `JobTrace` with the reference engine's semantics
(`verillm.engine.base`), so the same audit accepts either engine's traces against the other.

Requirements (checked at start): `enforce_eager=True` (hooks do not fire inside captured CUDA
graphs), no prefix caching (cached positions would never be computed, so never committed), no
speculative decoding (vLLM rejects custom logits processors with it), synchronous scheduling.

vLLM is optional: it lives in a separate environment (`scripts/vllm-env.sh`, `make test-vllm`)
and is imported only when an engine is built here. See docs/vllm.md.
"""

import dataclasses
import gc
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from verillm.errors import ConfigError, EngineError
from verillm.spec.commitment import JobTrace
from verillm.spec.job import compute_model_id, verify_job_admission
from verillm.spec.types import Job, ModelManifest

# vLLM reads these when its engine process starts.
VLLM_ENV_DEFAULTS = {
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # collective_rpc with our functions (pickled by reference)
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache on CPU; vLLM's default takes a share of all RAM
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
_run_ids = itertools.count()


def import_vllm():
    """Return the vllm module, or raise ConfigError saying how to get it."""
    try:
        import vllm
    except ImportError as error:
        raise ConfigError(
            "the vLLM engine needs vllm (GPU: pip install 'verillm[gpu]'; CPU: scripts/vllm-env.sh builds .venv-vllm)"
        ) from error
    return vllm


class VllmEngine:
    """Engine over a vLLM `LLM` loaded from a Hugging Face folder holding the manifest's weights.

    ``model_dir`` must hold exactly the weights the manifest names (`prepare_model_dir` writes
    them from the reference model); a dishonest test worker points it at altered weights.
    ``capture=False`` runs plain vLLM greedy/sampled generation with no hooks: the baseline of
    the overhead benchmark (traces are then empty).
    """

    def __init__(
        self,
        model_dir: str | Path,
        manifest: ModelManifest,
        max_batch_size: int = 8,
        max_model_len: int | None = None,
        capture: bool = True,
        cpu_threads: str | None = None,
        **llm_args,
    ):
        for name, value in VLLM_ENV_DEFAULTS.items():
            os.environ.setdefault(name, value)
        if cpu_threads is not None:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_threads  # e.g. "0-1"; vLLM's default "auto" leaves one core free
        vllm = import_vllm()
        from verillm.engine import vllm_capture

        self._capture_module = vllm_capture
        self.manifest = manifest
        self.model_id = compute_model_id(manifest)
        self.max_batch_size = max_batch_size
        self.model_dir = Path(model_dir)
        self.tokenizer = None  # set by build_vllm_engine; jobs are token ids, vLLM never tokenizes
        self._check_llm_args(llm_args)
        if manifest.kernel_class:
            llm_args = self._apply_exact_mode(vllm, manifest, llm_args)
        self.llm = vllm.LLM(
            model=str(model_dir),
            dtype=manifest.dtype,
            max_model_len=min(max_model_len or manifest.max_context_tokens, manifest.max_context_tokens),
            max_num_seqs=max_batch_size,
            enforce_eager=True,
            enable_prefix_caching=False,
            async_scheduling=False,
            generation_config="vllm",  # no sampling defaults from the model folder
            skip_tokenizer_init=True,  # jobs are token ids; the manifest binds the tokenizer
            logits_processors=[vllm_capture.SpecSampler],
            seed=0,
            **llm_args,
        )
        self.capture = False
        self.set_capture(capture)

    @staticmethod
    def _check_llm_args(llm_args: dict) -> None:
        fixed = {"model", "dtype", "enforce_eager", "enable_prefix_caching", "async_scheduling", "logits_processors", "speculative_config"}
        clash = fixed & set(llm_args)
        if clash:
            raise ConfigError(f"vLLM arguments {sorted(clash)} are fixed by the VeriLLM engine (capture needs them)")

    @staticmethod
    def _apply_exact_mode(vllm, manifest: ModelManifest, llm_args: dict) -> dict:
        """Exact mode (NOT MEASURED, needs a GPU): batch-invariant kernels of the manifest's class."""
        from verillm.engine.vllm_exact import verify_vllm_class_matches, get_exact_vllm_settings

        device = "cuda" if torch.cuda.is_available() else "cpu"
        environment, exact_args = get_exact_vllm_settings(manifest, device, llm_args)
        major, minor = torch.cuda.get_device_capability()
        verify_vllm_class_matches(manifest, f"sm{major}{minor}", vllm.__version__)
        os.environ.update(environment)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        return {**llm_args, **exact_args}

    def set_capture(self, enabled: bool) -> None:
        """Install or remove the capture hooks in vLLM's worker."""
        if enabled:
            self.llm.collective_rpc(self._capture_module.install_capture, args=(self._capture_config(),))
        else:
            self.llm.collective_rpc(self._capture_module.remove_capture)
        self.capture = enabled

    def _capture_config(self):
        manifest = self.manifest
        config = self._capture_module.CaptureConfig(
            model_id_hex=self.model_id.hex(),
            hidden_size=manifest.hidden_size,
            vocab_size=manifest.vocab_size,
            fingerprint_dims=manifest.fingerprint_dims,
            committed_layers=tuple(manifest.committed_layers),
            stop_tokens=tuple(manifest.stop_tokens),
            margin_logits=manifest.token_margin_micrologits / 1_000_000,
            exact_fingerprints=bool(manifest.kernel_class),
        )
        return dataclasses.asdict(config)

    @classmethod
    def sharing(cls, other: "VllmEngine", **attributes) -> "VllmEngine":
        """Return a ``cls`` engine that runs on ``other``'s vLLM instance (no second start).

        For override-point subclasses (the attack suite): ``attributes`` set their knobs.
        """
        engine = cls.__new__(cls)
        engine.__dict__.update(other.__dict__)
        engine.__dict__.update(attributes)
        return engine

    def load_weights(self, model) -> None:
        """Replace the weights in vLLM's worker by ``model``'s (HF names, vLLM's own loader).

        The manifest does not change: used to put attacked weights into a running engine.
        """
        # Raw bytes: vLLM's RPC encoder does not carry tensors through collective_rpc arguments.
        weights = {
            name: [str(tensor.dtype).removeprefix("torch."), list(tensor.shape), tensor.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes()]
            for name, tensor in model.state_dict().items()
        }
        self.llm.collective_rpc(self._capture_module.load_weights, args=(weights,))

    def load_weights_from(self, model_dir: str | Path) -> None:
        """Replace the weights in vLLM's worker by the safetensors in ``model_dir`` (manifest unchanged)."""
        self.llm.collective_rpc(self._capture_module.load_weights_from, args=(str(model_dir),))

    def worker_info(self) -> dict:
        return self.llm.collective_rpc(self._capture_module.get_worker_info)[0]

    def close(self) -> None:
        """Stop vLLM's engine process (it also stops when this object is collected)."""
        engine_core = getattr(self.llm.llm_engine, "engine_core", None)
        if engine_core is not None and hasattr(engine_core, "shutdown"):
            engine_core.shutdown()

    # --- override points (as TorchEngine's, for the attack suite) ----------------------

    def transform_job(self, job: Job) -> Job:
        """Return the job actually executed for ``job`` (honest: the job itself)."""
        return job

    def forced_tokens(self, job: Job) -> dict[int, int | str]:
        """Return {output index: substitution rule} (see `vllm_capture.CAPTURE_ARG`; honest: none).

        The rule runs inside vLLM's worker, where the logits are, because it may depend on them.
        """
        return {}

    # --- Engine protocol ----------------------------------------------------------------

    def run(self, jobs: Sequence[Job], on_token: Callable[[int, int], None] | None = None) -> list[JobTrace]:
        """Run ``jobs`` through vLLM's scheduler together; one trace per job, in order.

        ``on_token(i, token)``, when given, is called in this thread with each output token of
        ``jobs[i]`` as vLLM's engine steps produce it (`_generate_streaming`), in order, and the
        tokens of each job are its trace's output tokens."""
        for job in jobs:
            verify_job_admission(job, self.manifest, self.model_id)
        executed = [self.transform_job(job) for job in jobs]
        run_id = next(_run_ids)
        keys = [f"{os.getpid()}-{run_id}-{index}" for index in range(len(executed))]
        prompts = [{"prompt_token_ids": list(job.input_tokens)} for job in executed]
        params = [self._sampling_params(run, key, self.forced_tokens(run)) for run, key in zip(executed, keys)]
        if on_token is None:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        else:
            outputs = self._generate_streaming(prompts, params, keys, on_token)
        tokens = [tuple(output.outputs[0].token_ids) for output in outputs]
        if not self.capture:
            layers, dims = len(self.manifest.committed_layers), self.manifest.fingerprint_dims
            return [JobTrace(t, np.zeros((0, layers, dims), np.float32), np.zeros(0, np.uint8)) for t in tokens]
        captured = self.llm.collective_rpc(self._capture_module.collect_traces, args=(keys,))[0]
        return [compute_trace(job, out, cap, key) for job, out, cap, key in zip(executed, tokens, captured, keys)]

    def _generate_streaming(self, prompts: list[dict], params: list, keys: list[str], on_token: Callable[[int, int], None]) -> list:
        """`LLM.generate`, stepping vLLM's engine here and handing over each new token as a step yields it.

        `LLM.generate` asks vLLM for final outputs only (`RequestOutputKind.FINAL_ONLY`); here each
        request asks for its cumulative output at every step, and the tokens past those already
        handed over go to ``on_token``. Same scheduler, same sampler hooks, same batch: only how
        often the outputs come back differs, so the traces are those `generate` gives."""
        from vllm.sampling_params import RequestOutputKind

        engine, ids = self.llm.llm_engine, [f"verillm-stream-{key}" for key in keys]
        slot = {request_id: index for index, request_id in enumerate(ids)}
        sent, finished = [0] * len(ids), {}
        try:
            for request_id, prompt, param in zip(ids, prompts, params):
                param.output_kind = RequestOutputKind.CUMULATIVE
                engine.add_request(request_id, prompt, param)
            while len(finished) < len(ids):
                for output in engine.step():
                    index = slot.get(output.request_id)
                    if index is None:
                        continue
                    new_tokens = output.outputs[0].token_ids[sent[index]:]
                    sent[index] += len(new_tokens)
                    for token in new_tokens:
                        on_token(index, int(token))
                    if output.finished:
                        finished[index] = output
        except BaseException:
            engine.abort_request([request_id for index, request_id in enumerate(ids) if index not in finished])
            raise
        return [finished[index] for index in range(len(ids))]

    def _sampling_params(self, job: Job, key: str, forced: dict[int, int | str] | None = None):
        vllm = import_vllm()
        sampling = job.sampling
        capture_args = {"key": key, "sampling": [sampling.temperature_milli, sampling.top_k, sampling.top_p_ppm, sampling.seed]}
        if forced:
            capture_args["force"] = [[index, rule] for index, rule in sorted(forced.items())]
        return vllm.SamplingParams(
            max_tokens=job.max_new_tokens,
            temperature=0.0,  # the capture's SpecSampler has already reduced each row to one token
            stop_token_ids=list(self.manifest.stop_tokens),
            ignore_eos=True,  # stop tokens come from the manifest only
            detokenize=False,
            extra_args={self._capture_module.CAPTURE_ARG: capture_args} if self.capture else None,
        )


def compute_trace(job: Job, output_tokens: tuple[int, ...], captured: dict, key: str) -> JobTrace:
    """Check what the worker captured covers every position of the job; build its trace."""
    count = len(job.input_tokens) + len(output_tokens) - 1
    if count > len(captured["have"]):
        raise EngineError(f"job {key}: vLLM returned {len(output_tokens)} tokens, more than max_new_tokens={job.max_new_tokens}")
    missing = np.flatnonzero(~captured["have"][:count] | ~captured["have_flags"][:count])
    if len(missing):
        raise EngineError(f"job {key}: no capture at positions {missing[:8].tolist()} (prefix caching or an unhooked path?)")
    first = len(job.input_tokens) - 1
    sampled = [captured["tokens"].get(first + index) for index in range(len(output_tokens))]
    if list(output_tokens) != sampled:
        raise EngineError(f"job {key}: vLLM emitted {list(output_tokens)[:8]}…, the spec sampler chose {sampled[:8]}…")
    return JobTrace(output_tokens=output_tokens, fingerprints=captured["fingerprints"][:count], flags=captured["flags"][:count])


# --- model folders and the factory the node calls ----------------------------------------


def get_model_dir(name: str, manifest: ModelManifest, root: Path | None = None) -> Path:
    """Return the folder for ``manifest``'s weights (named by the weights digest)."""
    from verillm.engine.models import get_cache_dir

    root = root or get_cache_dir() / "vllm"
    return root / f"{name}-{manifest.dtype}-{manifest.weights_digest.hex()[:16]}"


def prepare_model_dir(model, tokenizer, target: Path) -> Path:
    """Save ``model`` (its own dtype) and ``tokenizer`` as a Hugging Face folder vLLM loads; atomic."""
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        os.rename(scratch, target)
    except OSError:
        if not (target / "config.json").exists():
            raise  # not the benign case of another process finishing the same folder first
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def build_vllm_engine(model_name: str, dtype: str = "float32", preset=None, **kw) -> VllmEngine:
    """Return a VllmEngine serving ``model_name`` (an alias, HF directory or GGUF) with the reference manifest.

    The reference model is loaded once to derive the manifest (under ``preset``, a
    `verillm.spec.params.Preset`, default MAINNET, as `load_model`) and to write the weights
    folder vLLM loads (cached, named by the weights digest). The engine's `tokenizer` attribute
    is the reference tokenizer (for the node's OpenAI edge). Keyword arguments go to `VllmEngine`.
    """
    from verillm.engine.models import load_model
    from verillm.spec.params import MAINNET

    model, tokenizer, manifest = load_model(model_name, dtype, preset or MAINNET)
    model_dir = prepare_model_dir(model, tokenizer, get_model_dir(Path(model_name).name, manifest))  # a path names its folder by its last part
    del model
    gc.collect()
    engine = VllmEngine(model_dir, manifest, **kw)
    engine.tokenizer = tokenizer
    return engine
