"""Elementwise functions built only from IEEE-754 basic operations, so every machine computes the same bits.

Library `exp`, `cos`, `sin` and `silu` differ by machine: ATen picks a SLEEF, glibc or CUDA
implementation by ISA and device (here `F.silu` on bf16 already changes bits between
`ATEN_CPU_CAPABILITY=default` and `avx2`). The canonical kernels (`engine/canonical.py`) use
these instead: range reduction and polynomials written as separate torch multiplies and adds
(float64, round to nearest even, no fused multiply-add: each op is its own kernel), whose
result is fixed by IEEE-754 on every CPU and GPU. Accuracy: a few float64 ulps, far below the
bf16 and grid roundings that follow.
"""

import math
from decimal import Decimal, localcontext

import torch

ROUNDING_MAGIC = 1.5 * 2.0**52
# fdlibm's split constants: the high parts have trailing zero bits, so n · HI is exact for |n| < 2^20.
LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10
INV_LN2 = 1.44269504088896338700e00
PIO2_HI = 1.57079632673412561417e00
PIO2_LO = 6.07710050650619224932e-11
TWO_OVER_PI = 6.36619772367581382433e-01
EXP_LIMIT = 700.0  # |x| beyond: 0 or inf (every use rounds e^-700 to 0 long before)
EXP_TERMS = 13  # Taylor terms on |r| ≤ ln2/2: truncation below 2^-52
SIN_TERMS = 9  # odd terms on |r| ≤ π/4
COS_TERMS = 9
MAX_ANGLE = 2.0**19  # n · PIO2_HI stays exact
CANONICAL_NAN_BF16 = 0x7FC0


def compute_rounded_integers(x: torch.Tensor) -> torch.Tensor:
    """Round float64 ``x`` (|x| < 2^51) to the nearest integer, ties to even: two correctly rounded adds."""
    return (x + ROUNDING_MAGIC) - ROUNDING_MAGIC


def _horner(r: torch.Tensor, coefficients: list[float]) -> torch.Tensor:
    """Σ c_k r^k by Horner's rule, one multiply and one add per step (separate ops: no FMA)."""
    p = torch.full_like(r, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        p.mul_(r).add_(c)
    return p


def compute_power_of_two_int(n: torch.Tensor) -> torch.Tensor:
    """2^n as float64 for integer-valued float64 n in [−1022, 1023], built from the exponent bits."""
    return ((n.to(torch.int64) + 1023) << 52).view(torch.float64)


def compute_canonical_exp(x: torch.Tensor) -> torch.Tensor:
    """e^x in float64 from basic IEEE ops: x = n·ln2 + r, |r| ≤ ln2/2, Taylor polynomial, × 2^n.

    Below −700 the result is +0, above 700 +inf, NaN stays NaN. The same bits on every machine.
    """
    x = x.double()
    xc = x.clamp(-EXP_LIMIT, EXP_LIMIT)
    n = compute_rounded_integers(xc * INV_LN2)
    r = (xc - n * LN2_HI) - n * LN2_LO
    out = _horner(r, [1.0 / math.factorial(k) for k in range(EXP_TERMS)]).mul_(compute_power_of_two_int(n))
    out = out.masked_fill_(x < -EXP_LIMIT, 0.0)
    return out.masked_fill_(x > EXP_LIMIT, math.inf)


def compute_canonical_sin_cos(angle: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sin, cos) of float64 angles in [0, 2^19) from basic IEEE ops (Cody–Waite reduction by π/2, Taylor polynomials)."""
    if bool((angle < 0).any()) or bool((angle >= MAX_ANGLE).any()):
        raise ValueError(f"canonical sin/cos covers angles in [0, {MAX_ANGLE}); positions beyond need a longer π/2 split")
    n = compute_rounded_integers(angle * TWO_OVER_PI)
    r = (angle - n * PIO2_HI) - n * PIO2_LO
    r2 = r * r
    sin_r = _horner(r2, [(-1.0) ** k / math.factorial(2 * k + 1) for k in range(SIN_TERMS)]).mul_(r)
    cos_r = _horner(r2, [(-1.0) ** k / math.factorial(2 * k) for k in range(COS_TERMS)])
    quadrant = n.to(torch.int64) & 3
    sin = torch.where(quadrant == 0, sin_r, torch.where(quadrant == 1, cos_r, torch.where(quadrant == 2, -sin_r, -cos_r)))
    cos = torch.where(quadrant == 0, cos_r, torch.where(quadrant == 1, -sin_r, torch.where(quadrant == 2, -cos_r, sin_r)))
    return sin, cos


def compute_canonical_silu_table() -> torch.Tensor:
    """SiLU of every bf16 value, indexed by its bits as int16 + 32768: x / (1 + e^−x) in float64, → fp32 → bf16."""
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).double()
    out = x / (1.0 + compute_canonical_exp(-x))
    out = out.masked_fill_(x == -math.inf, -0.0)  # −inf / inf: the limit, not NaN
    table = out.float().to(torch.bfloat16)
    # A NaN's bits after fp32 → bf16 differ by ISA (0x7fc0 without SIMD, 0xffff with AVX2): one NaN.
    return table.view(torch.int16).masked_fill_(x.isnan(), CANONICAL_NAN_BF16).view(torch.bfloat16)


def compute_inverse_frequencies(base: float, dim: int) -> list[float]:
    """base^(−2j/dim) for j < dim/2, correctly rounded to float64 from 50-digit decimal arithmetic (software: the same everywhere)."""
    with localcontext() as context:
        context.prec = 50
        return [float(Decimal(repr(float(base))) ** (Decimal(-2 * j) / Decimal(dim))) for j in range(dim // 2)]
