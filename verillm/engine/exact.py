"""Exact mode on CPU: kernels whose result for a row never depends on the other rows.

Within the kernel class `CPU_KERNEL_CLASS` (this torch version, x86 CPU, bf16 weights) a
worker's KV-cache decode, a batched padded prefill and a verifier's prefill over
prompt ‖ output give the same bf16 hidden states bit for bit, so commitments are compared
with zero tolerance (`docs/protocol.md` §9). What breaks row independence in stock kernels,
and what replaces it (measured on this machine, `docs/benchmarks.md`):

- bf16 `F.linear` is row-invariant (a row's result does not depend on M, on its offset in
  the batch or on the thread count) for M ≥ 2, but M = 1 takes a GEMV path that sums in
  another order (1 row in 10 differs by one ulp at K = 1536). Every Linear whose input has
  one row is run on that row twice and the copy dropped.
- sdpa and eager attention reduce over as many keys as the pass holds (decode: the cache;
  prefill: the padded sequence), in fp32/bf16 orders that depend on that count. Attention
  here is computed in float64: products of two bf16 values are exact, so scores are exact
  sums in practice, and the softmax and the weighted sum of values carry ~2⁻⁵³ relative
  order noise, which the final rounding to bf16 erases except when a value lies within that
  distance of a rounding boundary (≈ 10⁻¹¹ per element; measured by `verillm bench detect`).
- fingerprints (`compute_exact_fingerprints`): float64 products summed by a fixed pairwise
  tree of elementwise adds, so each row's value is the same IEEE computation whatever the
  batch shape, thread count or vector width.
RMSNorm, RoPE, SiLU and the residual adds are per-row already.
"""

import contextlib
import math

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from verillm.errors import ConfigError
from verillm.spec.types import ModelManifest

ATTENTION_NAME = "verillm_exact"
# The kernel class a manifest names: the CPU's vector ISA as torch dispatches it (AVX2,
# AVX512, ...: the bf16 GEMM kernels differ) and torch's minor version (kernels change between
# releases), so a node of another class refuses the manifest instead of being slashed.
CPU_KERNEL_CLASS = (
    f"cpu-{torch.backends.cpu.get_cpu_capability().lower()}-torch{'.'.join(torch.__version__.split('+')[0].split('.')[:2])}-rowinv-f64attn-v1"
)
KERNEL_CLASSES = (CPU_KERNEL_CLASS,)
# Rows of products materialised at once by compute_exact_fingerprints (memory: rows × H × dims × 8 B).
FINGERPRINT_CHUNK_ROWS = 128


def is_exact(manifest: ModelManifest) -> bool:
    """Check if ``manifest`` names a kernel class (exact mode) rather than the tolerance mode."""
    return bool(manifest.kernel_class)


def verify_kernel_class(manifest: ModelManifest, supported: tuple[str, ...] = KERNEL_CLASSES) -> None:
    """Raise ConfigError when this engine cannot reproduce ``manifest``'s kernel class bit for bit."""
    if manifest.kernel_class and manifest.kernel_class not in supported:
        raise ConfigError(f"manifest {manifest.name} needs kernel class {manifest.kernel_class!r}; this engine has {list(supported)}")


# --- attention ------------------------------------------------------------------------------


def compute_exact_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Attention in float64 for bf16 q/k/v [B, heads, T, D]; returns ([B, Tq, heads, D] in q's dtype, None).

    ``attention_mask``: boolean [B, 1, Tq, Tk], True where a query may attend (sdpa form).
    Rows with no allowed key (left-padding queries) get zeros, never NaN: a NaN in a pad
    row's values would poison every real row through 0 × NaN.
    """
    if attention_mask is None or attention_mask.dtype != torch.bool:
        # compute_exact_mask always builds one; without it attention would silently be non-causal.
        raise ConfigError("exact attention needs the boolean mask of compute_exact_mask")
    groups = query.shape[1] // key.shape[1]
    q = query.double()
    k = key.double().repeat_interleave(groups, dim=1)
    v = value.double().repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-1, -2)) * scaling
    scores = scores.masked_fill(~attention_mask[..., : k.shape[-2]], -math.inf)
    best = scores.amax(dim=-1, keepdim=True)
    best = torch.where(torch.isfinite(best), best, torch.zeros_like(best))
    weights = torch.exp(scores - best)
    total = weights.sum(dim=-1, keepdim=True)
    weights = weights / torch.where(total > 0, total, torch.ones_like(total))
    output = (weights @ v).to(query.dtype)
    return output.transpose(1, 2).contiguous(), None


def compute_exact_mask(*args, **kwargs):
    """sdpa's boolean mask, never skipped: the exact attention always needs the explicit mask."""
    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


AttentionInterface.register(ATTENTION_NAME, compute_exact_attention)
AttentionMaskInterface.register(ATTENTION_NAME, compute_exact_mask)


# --- linears --------------------------------------------------------------------------------


class _RowGuard:
    """Per-Linear hooks: remember which calls were doubled, so the output is cut back only for those."""

    def __init__(self):
        self.doubled: list[bool] = []

    def pre(self, module, args):
        x = args[0]
        doubled = x.numel() == x.shape[-1]
        self.doubled.append(doubled)
        return (torch.cat([x, x], dim=0),) + tuple(args[1:]) if doubled else None

    def post(self, module, args, output):
        return output[:1] if self.doubled.pop() else None


@contextlib.contextmanager
def exact_kernels(model: torch.nn.Module):
    """Run ``model`` with the exact kernels for the duration of the block, then restore it.

    The model object may be shared with tolerance-mode engines: the attention choice and the
    hooks are set here and undone on exit, never left on the model.
    """
    config = model.config
    previous = config._attn_implementation
    handles = []
    try:
        config._attn_implementation = ATTENTION_NAME
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                guard = _RowGuard()
                handles.append(module.register_forward_pre_hook(guard.pre))
                handles.append(module.register_forward_hook(guard.post))
        yield
    finally:
        for handle in handles:
            handle.remove()
        config._attn_implementation = previous


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
