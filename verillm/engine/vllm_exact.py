"""Exact mode on GPUs with vLLM's batch-invariant kernels (NOT MEASURED: no GPU in this project yet).

A GPU kernel class is (GPU family, vLLM version, tensor-parallel size, attention backend):
vLLM's `VLLM_BATCH_INVARIANT=1` swaps its matmuls for a Triton persistent kernel whose K
tiling is fixed per weight shape and GPU family, and its attention for a backend run with
one KV split, so a row's result does not depend on the batch it was scheduled in, and
decode equals prefill bit for bit (vLLM's own test checks decode log-probs against prefill
on FLASH_ATTN). Tile tables differ per GPU family, so bits match only within one class:
that is why the class is in the manifest, and so in the model id.

What the class needs (checked here, before vLLM starts): a CUDA device; attention backend
FLASH_ATTN (one split) or TRITON_ATTN (2-D); TF32 off; the KV cache in the model dtype (no
fp8); no FlashInfer, no FA4; not vLLM's CPU backend, which has no batch-invariant kernels.
Fingerprints use `compute_exact_fingerprints` (float64, fixed-order sums) on either device.
"""

from verillm.errors import ConfigError
from verillm.spec.types import ModelManifest

EXACT_ATTENTION_BACKENDS = ("FLASH_ATTN", "TRITON_ATTN")
VLLM_KERNEL_CLASS_PREFIX = "cuda-"


def make_vllm_kernel_class(gpu_family: str, vllm_version: str, tensor_parallel: int = 1, backend: str = "FLASH_ATTN") -> str:
    """Return the kernel class name of a vLLM exact deployment, e.g. ``cuda-sm90-vllm0.32-tp1-FLASH_ATTN-batchinv``."""
    if backend not in EXACT_ATTENTION_BACKENDS:
        raise ConfigError(f"attention backend {backend!r} has no batch-invariant mode; use one of {list(EXACT_ATTENTION_BACKENDS)}")
    if tensor_parallel < 1:
        raise ConfigError(f"tensor parallel size must be at least 1, got {tensor_parallel}")
    minor = ".".join(vllm_version.split("+")[0].split(".")[:2])
    return f"{VLLM_KERNEL_CLASS_PREFIX}{gpu_family}-vllm{minor}-tp{tensor_parallel}-{backend}-batchinv"


def parse_vllm_kernel_class(kernel_class: str) -> dict:
    """Return the parts of a vLLM kernel class (gpu_family, vllm_minor, tensor_parallel, backend)."""
    parts = kernel_class.split("-")
    if not kernel_class.startswith(VLLM_KERNEL_CLASS_PREFIX) or len(parts) != 6 or parts[-1] != "batchinv" or not parts[3].startswith("tp"):
        raise ConfigError(f"{kernel_class!r} is not a vLLM batch-invariant kernel class")
    backend = parts[4]
    if backend not in EXACT_ATTENTION_BACKENDS:
        raise ConfigError(f"kernel class {kernel_class!r} names attention backend {backend!r}, not one of {list(EXACT_ATTENTION_BACKENDS)}")
    return {"gpu_family": parts[1], "vllm_minor": parts[2].removeprefix("vllm"), "tensor_parallel": int(parts[3][2:]), "backend": backend}


def get_exact_vllm_settings(manifest: ModelManifest, device: str, llm_args: dict) -> tuple[dict, dict]:
    """Return (environment, extra LLM arguments) that run ``manifest``'s vLLM kernel class, or raise ConfigError.

    ``device``: "cuda" or "cpu" (vLLM's platform). ``llm_args``: what the caller passes to
    `vllm.LLM`; a setting that breaks batch invariance there is refused, not overridden.
    """
    parts = parse_vllm_kernel_class(manifest.kernel_class)
    if device != "cuda":
        raise ConfigError(f"kernel class {manifest.kernel_class} needs a CUDA GPU: vLLM's {device} backend has no batch-invariant kernels")
    if str(llm_args.get("kv_cache_dtype", "auto")) != "auto":
        raise ConfigError("exact mode keeps the KV cache in the model dtype: kv_cache_dtype must be 'auto' (fp8 KV is not batch-invariant)")
    if llm_args.get("tensor_parallel_size", 1) != parts["tensor_parallel"]:
        raise ConfigError(f"kernel class {manifest.kernel_class} is tensor parallel {parts['tensor_parallel']}, not {llm_args.get('tensor_parallel_size', 1)}")
    environment = {
        "VLLM_BATCH_INVARIANT": "1",
        "VLLM_ATTENTION_BACKEND": parts["backend"],
        "NVIDIA_TF32_OVERRIDE": "0",  # cuBLAS paths outside the Triton kernels stay in full fp32
    }
    return environment, {"kv_cache_dtype": "auto", "tensor_parallel_size": parts["tensor_parallel"]}


def verify_vllm_class_matches(manifest: ModelManifest, gpu_family: str, vllm_version: str) -> None:
    """Raise ConfigError when this GPU or vLLM version is not the manifest's class (bits would differ)."""
    parts = parse_vllm_kernel_class(manifest.kernel_class)
    minor = ".".join(vllm_version.split("+")[0].split(".")[:2])
    if parts["gpu_family"] != gpu_family or parts["vllm_minor"] != minor:
        raise ConfigError(f"kernel class {manifest.kernel_class} needs GPU family {parts['gpu_family']} and vLLM {parts['vllm_minor']}; this node has {gpu_family}, vLLM {minor}")
