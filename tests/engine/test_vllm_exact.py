"""The vLLM exact path's settings (pure; the GPU run itself is not measured: no GPU here)."""

import dataclasses

import pytest

from verillm.engine.vllm_exact import verify_vllm_class_matches, get_exact_vllm_settings, make_vllm_kernel_class, parse_vllm_kernel_class
from verillm.errors import ConfigError


@pytest.fixture(scope="module")
def gpu_manifest(tiny_model):
    return dataclasses.replace(tiny_model[2], dtype="bfloat16", kernel_class=make_vllm_kernel_class("sm90", "0.32.1", 1, "FLASH_ATTN"), token_margin_micrologits=0)


def test_kernel_class_names_family_version_tp_and_backend(gpu_manifest):
    assert gpu_manifest.kernel_class == "cuda-sm90-vllm0.32-tp1-FLASH_ATTN-batchinv"
    assert parse_vllm_kernel_class(gpu_manifest.kernel_class) == {"gpu_family": "sm90", "vllm_minor": "0.32", "tensor_parallel": 1, "backend": "FLASH_ATTN"}
    for bad in ("cpu-torch2.13-rowinv-f64attn-v1", "cuda-sm90-vllm0.32-tp1-FLASHINFER-batchinv"):
        with pytest.raises(ConfigError):
            parse_vllm_kernel_class(bad)
    with pytest.raises(ConfigError, match="batch-invariant"):
        make_vllm_kernel_class("sm90", "0.32", backend="FLASHINFER")


def test_exact_settings_on_cuda_and_refusals(gpu_manifest):
    environment, args = get_exact_vllm_settings(gpu_manifest, "cuda", {})
    assert environment["VLLM_BATCH_INVARIANT"] == "1" and environment["VLLM_ATTENTION_BACKEND"] == "FLASH_ATTN"
    assert args == {"kv_cache_dtype": "auto", "tensor_parallel_size": 1}
    with pytest.raises(ConfigError, match="CUDA"):
        get_exact_vllm_settings(gpu_manifest, "cpu", {})
    with pytest.raises(ConfigError, match="fp8"):
        get_exact_vllm_settings(gpu_manifest, "cuda", {"kv_cache_dtype": "fp8"})
    with pytest.raises(ConfigError, match="tensor parallel"):
        get_exact_vllm_settings(gpu_manifest, "cuda", {"tensor_parallel_size": 2})
    verify_vllm_class_matches(gpu_manifest, "sm90", "0.32.1+cu128")
    with pytest.raises(ConfigError, match="GPU family"):
        verify_vllm_class_matches(gpu_manifest, "sm80", "0.32.1")
