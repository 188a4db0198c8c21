"""Exact mode's norm off the CPU (`engine/exact.py`): a row's bits never depend on the rows beside it.

A lent H200 measured a stock Llama RMSNorm breaking decode ≡ prefill at SmolLM2's shapes (7 of
100 honest exact audits rejected, docs/vllm.md); off the CPU exact mode runs the norm as a fixed
tree of float64 elementwise ops. These tests force that path on the CPU (the only device here).
"""

import pytest
import torch
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

import verillm.engine.exact as exact
from verillm.bench.audits import run_honest_audits
from verillm.engine.kernel_class import compute_battery_tensor, compute_kernel_class
from verillm.engine.models import load_model
from verillm.errors import ConfigError


def _norm(hidden: int) -> LlamaRMSNorm:
    norm = LlamaRMSNorm(hidden, eps=1e-5).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(compute_battery_tensor("test-norm", (hidden,), -2, 1))
    return norm


@pytest.mark.parametrize("hidden", [128, 576, 960])
def test_a_row_of_the_exact_norm_is_the_same_alone_in_a_batch_and_in_a_sequence(hidden):
    x = compute_battery_tensor(f"test-x-{hidden}", (3, 50, hidden), -6, 6)
    norm = _norm(hidden)
    together = exact.compute_exact_rms_norm(x, norm.weight, norm.variance_epsilon)
    for row, position in ((0, 0), (1, 17), (2, 49)):
        alone = exact.compute_exact_rms_norm(x[row : row + 1, position : position + 1].clone(), norm.weight, norm.variance_epsilon)
        assert torch.equal(alone.view(torch.int16), together[row : row + 1, position : position + 1].view(torch.int16))
    flat = exact.compute_exact_rms_norm(x.reshape(-1, hidden), norm.weight, norm.variance_epsilon)
    assert torch.equal(flat.view(torch.int16), together.reshape(-1, hidden).view(torch.int16))


def test_the_exact_norm_agrees_with_the_stock_norm_to_a_bf16_rounding():
    x = compute_battery_tensor("test-x-close", (64, 576), -6, 6)
    norm = _norm(576)
    with torch.no_grad():
        stock, exact_out = norm(x).float(), exact.compute_exact_rms_norm(x, norm.weight, norm.variance_epsilon).float()
    ulp = torch.finfo(torch.bfloat16).eps * stock.abs().clamp_min(1e-30)
    assert ((exact_out - stock).abs() <= 2 * ulp).all()  # a rounding apart (double rounding through the weight product)
    assert not torch.equal(exact_out, torch.zeros_like(exact_out))


def test_off_the_cpu_a_norm_of_another_form_refuses_exact_mode(monkeypatch):
    monkeypatch.setattr(exact, "is_stock_norm_row_invariant", lambda device: False)
    with pytest.raises(ConfigError, match="GemmaRMSNorm"):
        exact.get_exact_norm(GemmaRMSNorm(64))
    assert exact.get_exact_norm(_norm(64)) is not None


def test_with_the_exact_norm_forced_honest_exact_audits_still_match_bit_for_bit(monkeypatch):
    """The whole engine with the off-CPU norm: decode ≡ prefill holds bit for bit through it."""
    model, tokenizer, manifest = load_model("tiny", "bfloat16", mode="exact")
    monkeypatch.setattr(exact, "is_stock_norm_row_invariant", lambda device: False)
    monkeypatch.setattr("verillm.engine.kernel_class.is_stock_norm_row_invariant", lambda device: False)
    monkeypatch.setattr("verillm.engine.kernel_class._CLASSES", {})
    import dataclasses

    # The battery runs the exact norm and the class names it: never shared with a stock-norm worker.
    forced = dataclasses.replace(manifest, kernel_class=compute_kernel_class(model, manifest.fingerprint_dims))
    assert forced.kernel_class != manifest.kernel_class
    patched = []
    monkeypatch.setattr(exact, "compute_exact_rms_norm", _counting(exact.compute_exact_rms_norm, patched))
    report = run_honest_audits(model, tokenizer, forced, "tiny", 24, max_new_tokens=12, seed="exact-norm", long_prompt_tokens=600, chunk=24, threads=(1,))
    assert patched, "the exact norm never ran"
    assert report["audits"] == 24 and report["false_rejections"] == 0 and report["differing_positions"] == 0


def _counting(fn, calls):
    def wrapped(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)

    return wrapped
