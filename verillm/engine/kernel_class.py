"""The kernel class: what an engine computes, measured by a known-answer battery, not named.

An exact manifest names a kernel class; workers and committees of one model id compare bit for
bit, so two machines may share a class only if their exact kernels give the same bits. The
class id is therefore the digest of a known-answer battery: fixed inputs (derived from a
label by Philox, identical on every machine) through the exact kernels at the model's own
shapes:

- every Linear shape of the model, at several row counts and row offsets;
- attention at the model's head shape over several lengths (short and past the 512-key
  switch) and left paddings, as a batched prefill and as one-query decode steps;
- the exact fingerprint at the model's hidden size and fingerprint dims, and the model's
  final norm.

While it runs, the battery also checks the invariants exactness rests on (each row's bits
do not depend on M, on its offset in the batch, on 1 vs 2 threads; decode equals prefill;
exp of a value does not depend on its place in a tensor). A machine where one fails cannot
be exact: ConfigError. The class id is ``<device>-kat<version>-<digest>``: the device type
keeps a CUDA-resident model from ever claiming a CPU class. Machines measured are listed in
`docs/protocol.md` §9.
"""

import copy
from collections.abc import Callable

import numpy as np
import torch

from verillm.engine import canonical
from verillm.engine.canonical_math import compute_canonical_exp
from verillm.engine.exact import (
    CANONICAL_CLASS_PREFIX,
    CANONICAL_FORM,
    MACHINE_FORM,
    compute_exact_fingerprints,
    compute_row_invariant_linear,
    get_exact_norm,
    get_kernel_form,
    is_exact_norm_module,
    is_stock_norm_row_invariant,
)
from verillm.engine.exact_attention import SHORT_KEYS, compute_canonical_kv, compute_exact_sum_attention
from verillm.errors import ConfigError
from verillm.spec.hashing import blake3_digest
from verillm.spec.types import ModelManifest

BATTERY_VERSION = 1
LINEAR_ROWS = 130
LINEAR_SLICES = ((0, 1), (0, 2), (5, 3), (1, 8), (64, 37))  # (offset, rows) re-run alone
ATTENTION_LENGTHS = (1, 2, 5, 64, SHORT_KEYS + 90)
ATTENTION_PADDING = 11
DECODE_CHECKS = 6  # query positions per (row, length) re-run as decode steps
NORM_ROWS = 37
ROPE_POSITIONS = 4099  # canonical form: the RoPE table over these positions


def compute_battery_tensor(label: str, shape: tuple[int, ...], low: int, high: int, dtype=torch.bfloat16) -> torch.Tensor:
    """Return bf16 values with exponents in [low, high] and random signs and mantissas, from ``label`` alone."""
    key = np.frombuffer(blake3_digest(b"verillm-kat:" + label.encode())[:16], dtype="<u8")
    rng = np.random.Generator(np.random.Philox(key=key))
    count = int(np.prod(shape))
    bits = (rng.integers(0, 2, count) << 15) | ((127 + rng.integers(low, high + 1, count)) << 7) | rng.integers(0, 128, count)
    values = torch.from_numpy(bits.astype(np.int16)).view(torch.bfloat16).reshape(shape)
    return values.to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)  # bit patterns: torch.equal calls −0 and +0 equal


def _verify_equal(what: str, a: torch.Tensor, b: torch.Tensor) -> None:
    if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(_bits(a), _bits(b)):
        raise ConfigError(f"this machine cannot run exact mode: {what} changes bits (known-answer battery)")


def _with_threads(count: int, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        return fn()
    finally:
        torch.set_num_threads(previous)


def _run_linears(shapes: tuple[tuple[int, int, bool], ...], device: torch.device, linear=compute_row_invariant_linear) -> list[torch.Tensor]:
    compute_row_invariant_linear = linear  # noqa: N806 (the form's linear)
    outputs = []
    for k, n, has_bias in shapes:
        weight = compute_battery_tensor(f"linear-w-{k}-{n}", (n, k), -9, -4).to(device)
        bias = compute_battery_tensor(f"linear-b-{n}", (n,), -6, -2).to(device) if has_bias else None
        x = compute_battery_tensor(f"linear-x-{k}", (LINEAR_ROWS, k), -4, 1).to(device)
        full = compute_row_invariant_linear(x, weight, bias)
        _verify_equal(f"a {k}→{n} linear on 1 vs 2 threads", _with_threads(1, lambda: compute_row_invariant_linear(x, weight, bias)), _with_threads(2, lambda: compute_row_invariant_linear(x, weight, bias)))
        for offset, rows in LINEAR_SLICES:
            part = compute_row_invariant_linear(x[offset : offset + rows], weight, bias)
            _verify_equal(f"a {k}→{n} linear's rows at M={rows}", part, full[offset : offset + rows])
        outputs.append(full)
    return outputs


def _attention_mask(lengths: tuple[int, ...], width: int, device: torch.device) -> torch.Tensor:
    allowed = torch.zeros((len(lengths), 1, width, width), dtype=torch.bool, device=device)
    for row, length in enumerate(lengths):
        pad = width - length
        allowed[row, 0, pad:, pad:] = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    return allowed


def _torch_exp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x)


def _run_attention(heads: int, kv_heads: int, head_dim: int, scaling: float, device: torch.device, exp=None) -> list[torch.Tensor]:
    kwargs = {} if exp is None else {"exp": exp}
    canonical_inputs = exp is not None
    exp = exp or _torch_exp
    outputs = []
    for length in ATTENTION_LENGTHS:
        width = length + ATTENTION_PADDING
        lengths = (length, width)  # one row left-padded, one not
        q = compute_battery_tensor(f"attn-q-{length}", (2, heads, width, head_dim), -5, 2).to(device)
        k = compute_battery_tensor(f"attn-k-{length}", (2, kv_heads, width, head_dim), -5, 2).to(device)
        v = compute_battery_tensor(f"attn-v-{length}", (2, kv_heads, width, head_dim), -12, 1).to(device)  # wide rows: the flush
        prefill = compute_exact_sum_attention(q, k, v, _attention_mask(lengths, width, device), scaling, **kwargs)
        for row, real in enumerate(lengths):
            pad = width - real
            for position in sorted({pad, width - 1, *range(pad, width, max(1, real // DECODE_CHECKS))}):
                keys = slice(pad, position + 1)
                allowed = torch.ones((1, 1, 1, position + 1 - pad), dtype=torch.bool, device=device)
                cached_k, cached_v = compute_canonical_kv(k[row : row + 1, :, keys], v[row : row + 1, :, keys])  # the decode path: the cache form
                step = compute_exact_sum_attention(q[row : row + 1, :, position : position + 1], cached_k, cached_v, allowed, scaling, **kwargs)
                _verify_equal(f"attention decode vs prefill at {position - pad + 1} keys", step[0, 0], prefill[row, position])
        outputs.append(prefill)
    if canonical_inputs:  # linspace's own arithmetic differs by ISA: the canonical battery's inputs may not
        values = torch.arange(4099, dtype=torch.float64, device=device).mul_(700.0 / 4098).sub_(700.0)
    else:
        values = torch.linspace(-700.0, 0.0, 4099, dtype=torch.float64, device=device)
    whole = exp(values)
    for start, stop in ((0, 1), (3, 20), (7, 4099), (1000, 1017)):
        _verify_equal("float64 exp at another offset", exp(values[start:stop].clone()), whole[start:stop])
    outputs.append(whole)
    return outputs


def _run_rows(label: str, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    together = fn(x)
    for row in (0, 1, len(x) - 1):
        _verify_equal(f"{label} of one row alone", fn(x[row : row + 1]), together[row : row + 1])
    return together


def compute_battery_outputs(model: torch.nn.Module, fingerprint_dims: int, form: str = MACHINE_FORM) -> list[torch.Tensor]:
    """Run the known-answer battery at ``model``'s shapes on its device; raise ConfigError if an invariant fails."""
    if form == CANONICAL_FORM:
        return compute_canonical_battery_outputs(model, fingerprint_dims)
    device = next(model.parameters()).device
    config = model.config
    shapes = sorted({(m.in_features, m.out_features, m.bias is not None) for m in model.modules() if isinstance(m, torch.nn.Linear)})
    heads, kv_heads = config.num_attention_heads, getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    with torch.inference_mode():
        outputs = _run_linears(tuple(shapes), device)
        outputs += _run_attention(heads, kv_heads, head_dim, head_dim**-0.5, device)
        hidden = compute_battery_tensor("hidden", (NORM_ROWS, config.hidden_size), -6, 4).to(device)
        projection = compute_battery_tensor("projection", (config.hidden_size, fingerprint_dims), -3, 0, torch.float32).to(device)
        outputs.append(_run_rows("the exact fingerprint", lambda h: compute_exact_fingerprints(h, projection), hidden))
        for module in model.modules():  # off the CPU a norm without an exact form refuses here
            if is_exact_norm_module(module):
                get_exact_norm(module)
        norm = copy.deepcopy(get_final_norm(model))
        norm.weight.copy_(compute_battery_tensor("norm", tuple(norm.weight.shape), -2, 1).to(norm.weight.dtype))
        outputs.append(_run_rows("the final norm", get_exact_norm(norm), hidden.to(norm.weight.dtype)))
    return outputs


def compute_canonical_battery_outputs(model: torch.nn.Module, fingerprint_dims: int) -> list[torch.Tensor]:
    """The battery through the canonical kernels (`engine/canonical.py`): the same shapes and
    invariants, plus the SiLU table and the RoPE table, the parts that are library functions in
    the per-machine form. Also refuses (ConfigError) a model with a module of no canonical form."""
    device = next(model.parameters()).device
    config = model.config
    shapes = sorted({(m.in_features, m.out_features, m.bias is not None) for m in model.modules() if isinstance(m, torch.nn.Linear)})
    heads, kv_heads = config.num_attention_heads, getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    with torch.inference_mode():
        with canonical.canonical_modules(model):  # raises for a norm, activation or RoPE of no canonical form
            rotary = [m.forward for m in model.modules() if isinstance(m.__dict__.get("forward"), canonical.CanonicalRotary)]
            outputs = _run_linears(tuple(shapes), device, canonical.compute_canonical_linear)
            outputs += _run_attention(heads, kv_heads, head_dim, head_dim**-0.5, device, compute_canonical_exp)
            hidden = compute_battery_tensor("hidden", (NORM_ROWS, config.hidden_size), -6, 4).to(device)
            projection = compute_battery_tensor("projection", (config.hidden_size, fingerprint_dims), -3, 0, torch.float32).to(device)
            outputs.append(_run_rows("the canonical fingerprint", lambda h: canonical.compute_canonical_fingerprints(h, projection), hidden))
            weight = compute_battery_tensor("norm", (config.hidden_size,), -2, 1).to(device)
            eps = getattr(get_final_norm(model), "variance_epsilon", 1e-6)
            outputs.append(_run_rows("the canonical norm", lambda h: canonical.compute_canonical_rms_norm(h, weight, eps), hidden))
            outputs.append(canonical.CanonicalSiLU()(torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).to(device)))
            positions = torch.arange(ROPE_POSITIONS, device=device)[None]
            for rope in rotary:
                cos, sin = rope(hidden[:1, None].to(torch.bfloat16), positions)
                outputs += [cos, sin]
    return outputs


_CLASSES: dict[tuple, str] = {}


def get_final_norm(model: torch.nn.Module) -> torch.nn.Module:
    """Return the decoder's final norm (``norm`` in the Llama family, else the last *Norm module)."""
    decoder = model.get_decoder()
    norm = getattr(decoder, "norm", None)
    if norm is None:
        norm = [m for m in decoder.modules() if "norm" in type(m).__name__.lower()][-1]
    return norm


def compute_kernel_class(model: torch.nn.Module, fingerprint_dims: int, form: str = MACHINE_FORM) -> str:
    """Return the kernel class ``model``'s exact kernels of ``form`` compute on this machine (the battery runs once per shape set and process).

    The canonical form's id is ``canon<form version>-kat<battery version>-<digest>``: no device,
    because its kernels compute the same bits on every machine (the digest shows it)."""
    parameter = next(model.parameters())
    config, norm = model.config, get_final_norm(model)
    shapes = tuple(sorted({(m.in_features, m.out_features, m.bias is not None) for m in model.modules() if isinstance(m, torch.nn.Linear)}))
    attention = (config.num_attention_heads, getattr(config, "num_key_value_heads", None), getattr(config, "head_dim", None), config.hidden_size)
    rope = getattr(getattr(model.get_decoder(), "rotary_emb", None), "inv_freq", None)
    signature = (form, parameter.device.type, str(parameter.dtype), shapes, attention, type(norm).__name__, getattr(norm, "variance_epsilon", None), fingerprint_dims, None if rope is None else tuple(rope.shape), str(getattr(config, "rope_parameters", "")))
    if form == CANONICAL_FORM and signature not in _CLASSES:
        outputs = compute_battery_outputs(model, fingerprint_dims, form)
        digest = blake3_digest(f"form:canonical{canonical.FORM_VERSION};".encode() + b"".join(_bits(out).cpu().numpy().tobytes() for out in outputs))
        _CLASSES[signature] = f"{CANONICAL_CLASS_PREFIX}{canonical.FORM_VERSION}-kat{BATTERY_VERSION}-{digest[:12].hex()}"
    if signature not in _CLASSES:
        outputs = compute_battery_outputs(model, fingerprint_dims)
        # Off the CPU the norm is exact mode's own (`exact.get_exact_norm`): named in the digest,
        # because on the battery's data it can round as the stock norm does, and a class must
        # never be shared by a worker running the other norm.
        norm_form = b"" if is_stock_norm_row_invariant(parameter.device) else b"norm:f64-tree;"
        digest = blake3_digest(norm_form + b"".join(_bits(out).cpu().numpy().tobytes() for out in outputs))
        _CLASSES[signature] = f"{parameter.device.type}-kat{BATTERY_VERSION}-{digest[:12].hex()}"
    return _CLASSES[signature]


def verify_kernel_class(manifest: ModelManifest, model: torch.nn.Module) -> None:
    """Raise ConfigError unless ``model``, on its own device, computes ``manifest``'s kernel class bit for bit.

    Runs before an engine serves: a node that cannot reproduce the class refuses the manifest
    instead of being slashed for honest work.
    """
    if not manifest.kernel_class:
        return
    device = next(model.parameters()).device.type
    form = get_kernel_form(manifest.kernel_class)
    if form == MACHINE_FORM and not manifest.kernel_class.startswith(f"{device}-kat"):
        raise ConfigError(f"manifest {manifest.name} needs kernel class {manifest.kernel_class!r}; this {device} model cannot compute a {manifest.kernel_class.split('-')[0]} class")
    have = compute_kernel_class(model, manifest.fingerprint_dims, form)
    if have != manifest.kernel_class:
        raise ConfigError(f"manifest {manifest.name} needs kernel class {manifest.kernel_class}; this machine computes {have} (known-answer battery)")
