"""Exact mode: kernels whose result for a row never depends on the other rows, the sequence
length, the padding or the batch.

A manifest's kernel class (`verillm.engine.kernel_class`) is the digest of what these kernels
compute on a known-answer battery; within a class a worker's KV-cache decode, a batched padded
prefill and a verifier's prefill over prompt ‖ output give the same bf16 hidden states bit for
bit, so commitments are compared with zero tolerance (`docs/protocol.md` §9).

- attention (`exact_attention.py`): every sum over keys and over head dims is an exact sum,
  so decode ≡ prefill by construction, for every input;
- bf16 `F.linear` gives each row the same bits for every M ≥ 2 (measured, and re-checked at
  the model's own shapes by the battery), but M = 1 takes a GEMV path that sums in another
  order: a one-row input runs as two copies of the row and the copy is dropped;
- fingerprints (`compute_exact_fingerprints`): float64 products summed by a fixed pairwise
  tree of elementwise adds, so each row's value is the same IEEE computation whatever the
  batch shape, thread count or vector width;
- RoPE, SiLU and the residual adds are elementwise, so per row already;
- RMSNorm: on the CPU aten's norm reduces each row in one fixed loop (row-invariant; the battery
  checks it, 10,000 audits measured it). On any other device the stock reduction's order follows
  the kernel's launch shape (on an H200 a stock Llama norm broke decode ≡ prefill at SmolLM2's
  shapes: docs/vllm.md), so there the norm runs as `compute_exact_rms_norm`, a fixed pairwise
  tree of float64 adds, and a norm of another form refuses exact mode.
"""

import contextlib

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from verillm.engine.canonical_math import compute_canonical_exp
from verillm.engine.exact_attention import compute_exact_sum_attention
from verillm.errors import ConfigError
from verillm.spec.types import ModelManifest

ATTENTION_NAME = "verillm_exact"
CANONICAL_ATTENTION_NAME = "verillm_canonical"
# Kernel forms (`docs/protocol.md` §9): "machine", the per-machine class (stock GEMMs and
# library exp/SiLU, measured per machine kind), and "canonical", every reduction an exact sum and
# every function IEEE basic ops (`engine/canonical.py`): one class per model on every machine.
MACHINE_FORM = "machine"
CANONICAL_FORM = "canonical"
CANONICAL_CLASS_PREFIX = "canon"
# Rows of products materialised at once by compute_exact_fingerprints (memory: rows × H × dims × 8 B).
FINGERPRINT_CHUNK_ROWS = 128


def is_exact(manifest: ModelManifest) -> bool:
    """Check if ``manifest`` names a kernel class (exact mode) rather than the tolerance mode."""
    return bool(manifest.kernel_class)


def get_kernel_form(kernel_class: str) -> str:
    """The kernel form a class id names: ``canon<v>-…`` the canonical kernels, any other exact class the per-machine ones."""
    return CANONICAL_FORM if kernel_class.startswith(CANONICAL_CLASS_PREFIX) else MACHINE_FORM


# --- attention ------------------------------------------------------------------------------


def compute_exact_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """The attention interface transformers calls: bf16 q/k/v [B, heads, T, D] → ([B, Tq, heads, D], None).

    ``attention_mask``: boolean [B, 1, Tq, Tk], True where a query may attend (sdpa form).
    Rows with no allowed key (left-padding queries) get zeros, never NaN.
    """
    if attention_mask is None or attention_mask.dtype != torch.bool:
        # compute_exact_mask always builds one; without it attention would silently be non-causal.
        raise ConfigError("exact attention needs the boolean mask of compute_exact_mask")
    return compute_exact_sum_attention(query, key, value, attention_mask, scaling), None


def _canonical_exp(x: torch.Tensor) -> torch.Tensor:
    return compute_canonical_exp(x)


def compute_canonical_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """The exact-sum attention with the canonical exp (`canonical_math`): the same bits on every machine."""
    if attention_mask is None or attention_mask.dtype != torch.bool:
        raise ConfigError("exact attention needs the boolean mask of compute_exact_mask")
    return compute_exact_sum_attention(query, key, value, attention_mask, scaling, _canonical_exp), None


def compute_exact_mask(*args, **kwargs):
    """sdpa's boolean mask, never skipped: the exact attention always needs the explicit mask."""
    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


AttentionInterface.register(ATTENTION_NAME, compute_exact_attention)
AttentionMaskInterface.register(ATTENTION_NAME, compute_exact_mask)
AttentionInterface.register(CANONICAL_ATTENTION_NAME, compute_canonical_attention)
AttentionMaskInterface.register(CANONICAL_ATTENTION_NAME, compute_exact_mask)


# --- linears --------------------------------------------------------------------------------


def compute_row_invariant_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` whose rows never take the one-row GEMV path: a single row runs as two copies."""
    if x.numel() != x.shape[-1]:
        return F.linear(x, weight, bias)
    return F.linear(torch.cat([x, x], dim=0), weight, bias)[:1]


def _make_linear_forward(module: torch.nn.Linear):
    # An instance attribute, not a hook: hooks put every call on nn.Module's slow path.
    def forward(x):
        return compute_row_invariant_linear(x, module.weight, module.bias)

    return forward


# Norms of the form weight · x / sqrt(mean(x²) + eps), weight applied in the input dtype.
# Gemma's (1 + weight) form is not among them: off the CPU its models refuse exact mode.
WEIGHTED_RMS_NORMS = frozenset({"LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "Qwen2MoeRMSNorm", "Qwen3MoeRMSNorm", "MixtralRMSNorm", "Phi3RMSNorm"})


def compute_exact_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm whose row never depends on the rows beside it, on any device.

    x² and the mean's adds run in float64 as a fixed pairwise tree of elementwise ops, then one
    IEEE division and square root: every operation is elementwise, so a row is the same IEEE
    computation whatever the batch shape, sequence length or launch configuration.
    """
    rows = x.double()
    mean_square = compute_tree_sum(rows * rows) / x.shape[-1]
    normed = rows / torch.sqrt(mean_square + eps).unsqueeze(-1)
    return weight * normed.to(x.dtype)


def is_stock_norm_row_invariant(device: torch.device) -> bool:
    """Whether the stock norm is kept on ``device`` (the CPU's per-row loop) rather than replaced."""
    return device.type == "cpu"


def get_exact_norm(module: torch.nn.Module):
    """The norm exact mode runs for ``module`` on its device: itself on the CPU, else the exact form.

    Raises ConfigError off the CPU for a norm that is not of the weighted RMS form.
    """
    if is_stock_norm_row_invariant(module.weight.device):
        return module
    if type(module).__name__ not in WEIGHTED_RMS_NORMS:
        raise ConfigError(f"exact mode off the CPU needs an RMSNorm of the weighted form; {type(module).__name__} is not (docs/vllm.md)")
    return lambda x: compute_exact_rms_norm(x, module.weight, module.variance_epsilon)


def is_exact_norm_module(module: torch.nn.Module) -> bool:
    """Whether exact mode routes ``module`` through `get_exact_norm` (a norm with a weight)."""
    return "norm" in type(module).__name__.lower() and isinstance(getattr(module, "weight", None), torch.Tensor)


@contextlib.contextmanager
def exact_kernels(model: torch.nn.Module, linears: bool = True, attention: bool = True, form: str = MACHINE_FORM):
    """Run ``model`` with the exact kernels for the duration of the block, then restore it.

    The model object may be shared with tolerance-mode engines: the attention choice and the
    linears' forwards are set here and undone on exit, never left on the model. ``linears`` /
    ``attention`` False leave that part stock (only `verillm bench cost` measures them apart);
    ``linears`` covers the per-row kernels: the linears and, off the CPU, the norms (canonical
    form: the linears, norms, SiLU and RoPE on every device). ``form``: MACHINE_FORM or CANONICAL_FORM.
    """
    if form == CANONICAL_FORM:
        with _canonical_kernels(model, linears, attention):
            yield
        return
    config = model.config
    previous = config._attn_implementation
    patched = []
    try:
        if attention:
            config._attn_implementation = ATTENTION_NAME
        for module in model.modules() if linears else ():
            if isinstance(module, torch.nn.Linear) and "forward" not in module.__dict__:
                module.forward = _make_linear_forward(module)
                patched.append(module)
            elif is_exact_norm_module(module) and "forward" not in module.__dict__ and not is_stock_norm_row_invariant(module.weight.device):
                module.forward = get_exact_norm(module)
                patched.append(module)
        yield
    finally:
        for module in patched:
            del module.forward
        config._attn_implementation = previous


@contextlib.contextmanager
def _canonical_kernels(model: torch.nn.Module, linears: bool, attention: bool):
    from verillm.engine.canonical import canonical_modules

    config = model.config
    previous = config._attn_implementation
    try:
        if attention:
            config._attn_implementation = CANONICAL_ATTENTION_NAME
        with canonical_modules(model, linears):
            yield
    finally:
        config._attn_implementation = previous


def get_fingerprint_function(form: str):
    """The exact fingerprint of a kernel form: the fixed-tree float64 one (per machine) or the exact-sum one (canonical)."""
    if form == CANONICAL_FORM:
        from verillm.engine.canonical import compute_canonical_fingerprints

        return compute_canonical_fingerprints
    return compute_exact_fingerprints


# --- fingerprints ---------------------------------------------------------------------------


def compute_tree_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum the last dim by a fixed pairwise tree of elementwise adds (same IEEE ops for any batch shape)."""
    while values.shape[-1] > 1:
        count = values.shape[-1]
        half = count // 2
        paired = values[..., :half] + values[..., half : 2 * half]
        values = torch.cat([paired, values[..., 2 * half :]], dim=-1) if count % 2 else paired
    return values[..., 0]


def compute_exact_fingerprints(hidden: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """Return Rᵀh / ‖h‖ as fp32 for hidden [..., H], projection [H, dims]: float64, fixed-order sums."""
    shape = hidden.shape[:-1]
    rows = hidden.reshape(-1, hidden.shape[-1]).double()
    weights = projection.double().T.contiguous()  # [dims, H]
    out = []
    for start in range(0, rows.shape[0], FINGERPRINT_CHUNK_ROWS):
        chunk = rows[start : start + FINGERPRINT_CHUNK_ROWS]
        dots = compute_tree_sum(chunk[:, None, :] * weights[None])  # [n, dims]
        norms = torch.sqrt(compute_tree_sum(chunk * chunk)).clamp_min(1e-30)
        out.append((dots / norms[:, None]).float())
    result = torch.cat(out) if out else torch.zeros((0, projection.shape[1]), dtype=torch.float32, device=hidden.device)
    return result.reshape(*shape, projection.shape[1])
