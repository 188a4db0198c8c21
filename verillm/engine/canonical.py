"""The canonical kernels: every reduction an exact sum, every elementwise function IEEE basic ops,
so a row's bits depend on nothing but the row and the model — not the batch, the thread count,
the ISA (`ATEN_CPU_CAPABILITY`, `ONEDNN_MAX_CPU_ISA`), the BLAS or the device.

The argument is the one the exact attention makes (`exact_attention.py`): float64 values that are
integer multiples of one power of two, whose partial sums stay at most 2^53 of that unit, sum
without rounding in any order, blocking, vector width or thread split. Here it is applied to:

- **Linears** (`compute_canonical_linear`): each input row x is put on its own grid
  2^(e+1−X_BITS) (e: the exponent of the row's largest |x|), each weight row (one output
  feature) on its grid 2^(e_w+1−W_BITS), by one round-to-nearest-even each: integers
  |X| ≤ 2^X_BITS, |W| ≤ 2^W_BITS with X_BITS + W_BITS + ⌈log2 K⌉ ≤ 53. Then one float64 GEMM
  of the integers: every partial sum is an integer ≤ 2^53, i.e. exact whatever the BLAS does.
  × both grids (powers of two: exact), + bias (one rounding), → fp32 → bf16 (one rounding each).
  A bf16 value at most 2^12 below its row's largest (2^(W_BITS−8) for weights) is on the grid
  already; smaller ones are rounded to it (the canonical model).
- **RMSNorm** (`compute_canonical_rms_norm`): x² rounded to the row's grid 2^(2e+2−NB) with
  NB = 53 − ⌈log2 H⌉, an exact sum, then mean, + eps, √ and x / √ as single IEEE roundings.
- **Fingerprints** (`compute_canonical_fingerprints`): h on its row grid and each projection
  column on its own, an exact float64 GEMM and an exact Σh², then one √, one division.
- **SiLU**: a table of all 65,536 bf16 inputs built from `canonical_math` (one lookup).
- **RoPE**: cos/sin of position × inverse frequency from `canonical_math`, the frequencies
  correctly rounded from decimal arithmetic; a cached bf16 table indexed by position.
- **Attention**: the exact-sum attention with `canonical_math.compute_canonical_exp`.
RoPE products, residual adds and the gate × up product are single bf16 roundings of exact
float products or sums: elementwise IEEE operations, the same everywhere.
"""

import contextlib
import threading
import weakref

import torch

from verillm.engine.canonical_math import compute_canonical_silu_table, compute_canonical_sin_cos, compute_inverse_frequencies, compute_rounded_integers
from verillm.engine.exact_attention import compute_power_of_two
from verillm.errors import ConfigError

FORM_VERSION = 1
X_BITS = 20  # an input row's grid: values ≥ 2^−12 of its largest keep every bf16 bit
MAX_W_BITS = 24  # a weight row's grid: more bits than any bf16 row needs within 2^−16 of its largest
MIN_W_BITS = 12
SILU_NAMES = frozenset({"SiLU", "SiLUActivation"})
MIN_ROPE_POSITIONS = 256


def ceil_log2(count: int) -> int:
    return max(0, (count - 1).bit_length())


def compute_weight_bits(k: int) -> int:
    """Bits of a weight row's grid for inner dimension ``k``: X_BITS + W_BITS + ⌈log2 k⌉ ≤ 53."""
    bits = min(MAX_W_BITS, 53 - X_BITS - ceil_log2(k))
    if bits < MIN_W_BITS:
        raise ConfigError(f"canonical linears support inner dimensions up to 2^{53 - X_BITS - MIN_W_BITS}; got {k}")
    return bits


def compute_on_grid(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (integers |X| ≤ 2^bits as float64, the grid [..., 1]) with x ≈ X · grid, per last-dim row.

    The grid is 2^(e+1−bits), e the exponent of the row's largest |x|: x / grid is exact (a
    power of two) and below 2^bits, then one round to nearest even. Reads the row only.
    """
    xd = x.double()
    grid = compute_power_of_two(xd.abs().amax(dim=-1, keepdim=True)) * 2.0 ** (1 - bits)
    return compute_rounded_integers(xd * (1.0 / grid)), grid


def _get_version(t: torch.Tensor) -> int | None:
    """The in-place version counter (inference tensors have none: they are never the model's weights)."""
    return None if t.is_inference() else t._version


class _WeightCache:
    """Each linear weight on its row grids (float64 integers), rebuilt when the weight changes in
    place and dropped when the weight is freed (the cache never keeps a weight alive)."""

    def __init__(self):
        self.by_module: dict[int, tuple] = {}
        self.lock = threading.Lock()

    def _drop(self, key: int) -> None:
        with self.lock:
            self.by_module.pop(key, None)

    def get(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key = id(weight)
        stamp = (weight.data_ptr(), _get_version(weight), tuple(weight.shape), weight.device)
        with self.lock:
            entry = self.by_module.get(key)
        if entry is not None and entry[0]() is weight and entry[1] == stamp:
            return entry[2], entry[3]
        integers, grid = compute_on_grid(weight, compute_weight_bits(weight.shape[-1]))
        with self.lock:
            if key not in self.by_module:
                weakref.finalize(weight, self._drop, key)
            self.by_module[key] = (weakref.ref(weight), stamp, integers, grid.reshape(1, -1))
        return integers, grid.reshape(1, -1)


_WEIGHTS = _WeightCache()
# q, k, v (and gate, up) read one input tensor: it is put on its grid once. The entry holds the
# tensor, so its id cannot be reused; the model never writes a linear's input in place.
_LAST_INPUT = threading.local()


def _get_input_on_grid(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    last = getattr(_LAST_INPUT, "entry", None)
    if last is not None and last[0] is x and last[1] == _get_version(x):
        return last[2], last[3]
    integers, grid = compute_on_grid(x, X_BITS)
    _LAST_INPUT.entry = (x, _get_version(x), integers, grid)
    return integers, grid


def compute_canonical_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x Wᵀ + b for x [..., K] in x's dtype: an exact float64 sum of grid integers, one rounding to the output dtype."""
    w_int, w_grid = _WEIGHTS.get(weight)
    x_int, x_grid = _get_input_on_grid(x)
    out = torch.matmul(x_int, w_int.T).mul_(x_grid).mul_(w_grid)  # exact integers, exact power-of-two scalings
    if bias is not None:
        out.add_(bias.double())
    return out.float().to(x.dtype)


def forget_cached_weights() -> None:
    """Drop every cached weight grid (they hold float64 copies of the weights: 4× the bf16 bytes)."""
    with _WEIGHTS.lock:
        _WEIGHTS.by_module.clear()
    _LAST_INPUT.entry = None


def compute_canonical_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight · (x / √(mean(x²) + eps)) with Σx² an exact sum of x² on the row's grid; bf16 out as the stock norm."""
    xd = x.double()
    bits = 53 - ceil_log2(x.shape[-1])
    peak = compute_power_of_two(xd.abs().amax(dim=-1, keepdim=True))
    grid = peak * peak * 2.0 ** (2 - bits)
    squares = compute_rounded_integers(xd * xd * (1.0 / grid))  # x² exact (16 bits), /grid exact, one rounding
    mean_square = squares.sum(dim=-1, keepdim=True).mul_(grid).div_(x.shape[-1])  # exact sum, exact scaling, one rounding
    normed = xd / torch.sqrt(mean_square + eps)
    return weight * normed.float().to(x.dtype)


def compute_canonical_fingerprints(hidden: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """Rᵀh / ‖h‖ as fp32 for hidden [..., H], projection [H, dims]: h and each column of R on grids, exact sums."""
    h = hidden.shape[-1]
    bits = (53 - ceil_log2(h)) // 2
    rows, _ = compute_on_grid(hidden.reshape(-1, h), bits)  # the row's grid cancels in the ratio
    columns, column_grid = compute_on_grid(projection.T, bits)  # [dims, H], [dims, 1]
    dots = torch.matmul(rows, columns.T).mul_(column_grid.T)  # exact sums, exact scaling
    norms = torch.sqrt((rows * rows).sum(dim=-1, keepdim=True)).clamp_min_(1e-300)  # exact sum, one rounding
    return dots.div_(norms).float().reshape(*hidden.shape[:-1], projection.shape[1])


class CanonicalSiLU(torch.nn.Module):
    """SiLU by table lookup on the bf16 input's bits: the same value on every machine."""

    _tables: dict[torch.device, torch.Tensor] = {}  # built once on the CPU, copied once per device

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.bfloat16:
            raise ConfigError(f"the canonical SiLU takes bf16 input, got {x.dtype}")
        tables = CanonicalSiLU._tables
        if x.device not in tables:
            cpu = tables.get(torch.device("cpu"))
            if cpu is None:
                cpu = tables[torch.device("cpu")] = compute_canonical_silu_table()
            tables[x.device] = cpu.to(x.device)
        return tables[x.device][x.view(torch.int16).to(torch.int32) + 32768]


class CanonicalRotary:
    """RoPE cos/sin [B, T, D] in x's dtype from a table of canonical values per position (default RoPE only)."""

    def __init__(self, module: torch.nn.Module):
        config = module.config
        parameters = getattr(config, "rope_parameters", None) or {}
        base = parameters.get("rope_theta", getattr(config, "rope_theta", None))
        dim = 2 * module.inv_freq.shape[0]
        if getattr(module, "rope_type", "default") != "default" or base is None or module.attention_scaling != 1.0:
            raise ConfigError(f"canonical kernels support the default RoPE only; this model has {getattr(module, 'rope_type', '?')}")
        self.frequencies = torch.tensor(compute_inverse_frequencies(float(base), dim), dtype=torch.float64)
        self.tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def _table(self, count: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (dtype, device)
        table = self.tables.get(key)
        if table is None or table[0].shape[0] < count:
            capacity = max(MIN_ROPE_POSITIONS, 1 << ceil_log2(count))
            angles = torch.arange(capacity, dtype=torch.float64)[:, None] * self.frequencies[None, :]  # one rounding
            sin, cos = compute_canonical_sin_cos(angles)
            to = lambda t: torch.cat([t, t], dim=-1).float().to(dtype).to(device)  # noqa: E731
            table = self.tables[key] = (to(cos), to(sin))
        return table

    def __call__(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self._table(int(position_ids.max()) + 1, x.dtype, x.device)
        return cos[position_ids], sin[position_ids]


def _make_linear_forward(module: torch.nn.Linear):
    def forward(x):
        return compute_canonical_linear(x, module.weight, module.bias)

    return forward


@contextlib.contextmanager
def canonical_modules(model: torch.nn.Module, linears: bool = True):
    """Route ``model``'s linears, norms, activations and rotary embedding through the canonical kernels for the block.

    Raises ConfigError for a module exact mode has no canonical form of (a norm not of the
    weighted RMS form, an activation other than SiLU, a RoPE other than the default).
    """
    from verillm.engine.exact import WEIGHTED_RMS_NORMS, is_exact_norm_module

    forwards, activations = [], []
    try:
        for module in model.modules() if linears else ():
            if isinstance(module, torch.nn.Linear) and "forward" not in module.__dict__:
                module.forward = _make_linear_forward(module)
                forwards.append(module)
            elif is_exact_norm_module(module) and "forward" not in module.__dict__:
                if type(module).__name__ not in WEIGHTED_RMS_NORMS:
                    raise ConfigError(f"canonical kernels need an RMSNorm of the weighted form; {type(module).__name__} is not")
                module.forward = lambda x, m=module: compute_canonical_rms_norm(x, m.weight, m.variance_epsilon)
                forwards.append(module)
            elif type(module).__name__.endswith("RotaryEmbedding") and "forward" not in module.__dict__:
                rotary = module.__dict__.get("_verillm_canonical") or CanonicalRotary(module)
                module.__dict__["_verillm_canonical"] = rotary
                module.forward = rotary
                forwards.append(module)
            activation = getattr(module, "act_fn", None)
            if isinstance(activation, torch.nn.Module):
                if type(activation).__name__ not in SILU_NAMES:
                    raise ConfigError(f"canonical kernels support the SiLU activation only; this model has {type(activation).__name__}")
                activations.append((module, activation))
                module.act_fn = CanonicalSiLU()
        yield
    finally:
        for module in forwards:
            del module.forward
        for module, activation in activations:
            module.act_fn = activation
        _LAST_INPUT.entry = None
