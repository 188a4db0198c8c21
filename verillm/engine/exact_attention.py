"""Exact-sum attention: every sum over keys (and over head dims) is exact, so its value does not
depend on the order it is computed in, on the sequence length, the padding or the batch.

The argument (`docs/protocol.md` §9). A sum of float64 values that are all integer multiples
of one power of two 2^g, whose partial sums all stay below 2^53 · 2^g in magnitude, is
computed without any rounding, in every order, tree shape, vector width, thread split or
blocking a BLAS picks: every intermediate is representable. Attention is brought to that form:

1. **Canonical rows.** In each q, k and v row (one token, one head, D values) the elements
   smaller than ROW_FLUSH of the row's largest |x| are set to +0. A kept bf16 element then
   lies on the grid 2^(e−21) of its row (e = the exponent of the row's largest |x|) and is
   below 2^(e+1): an integer below 2^22 times the grid. The rule reads one row only.
2. **Scores** q·k over D ≤ 512 dims: products are integers below 2^44 times 2^(e_q+e_k−42),
   their sum stays below 2^53 of them: exact (float64 GEMM, any order). Then × scaling (one
   rounding), masked keys −inf, the row maximum (exact), w = exp(s − max) elementwise.
3. **Denominator** Σ_j w_j: each w ∈ [0, 1] rounded to the grid 2^−36, summed over at most
   MAX_KEYS = 2^17 keys: integers ≤ 2^53, exact.
4. **Numerator** Σ_j w_j v_j: key j's canonical v row is σ_j (the power of two of its largest
   |v|) times values on the grid 2^−21 below 2. The weight u_j = w_j σ_j is rounded to 27
   bits of the query's largest u (γ, a power of two): U_j ≤ 2^28, split into two 14-bit
   slices; each slice times the scaled v is an integer below 2^36 · 2^−21 and the sum over
   ≤ 2^17 keys stays below 2^53: two exact GEMMs, recombined with one rounding.
5. out = numerator / denominator (one rounding), −0 made +0, rounded once to bf16.

Every step is an elementwise IEEE operation on values that depend only on the query row and
the set of keys it may attend, or an exact sum. A masked or padded key has w = 0: it adds an
exact zero and never raises a maximum. Hence decode (one query over the cache) and prefill
(every query, padded, batched, in chunks) give the same bits for every input: no
probabilistic limit. The only non-basic elementwise function is exp (torch's float64 exp,
a function of its argument alone; the known-answer battery checks it at every offset).
"""

import math

import torch

from verillm.errors import ConfigError

ROW_FLUSH = 2.0**-14
MAX_HEAD_DIM = 512
MAX_KEYS = 1 << 17
DENOMINATOR_BITS = 36
SHORT_KEYS = 1 << 9
SHORT_WEIGHT_BITS = 21
WEIGHT_BITS = 27
SLICE_BITS = 14
ROUNDING_MAGIC = 1.5 * 2.0**52
# Query rows per block in a prefill: bounds the [rows, keys] float64 temporaries, and each block
# only reads the keys any of its queries may attend (exact sums: dropped keys were zeros).
QUERY_BLOCK_ROWS = 256


def compute_power_of_two(values: torch.Tensor) -> torch.Tensor:
    """Return 2^floor(log2 x) for each x ≥ 0 (1 where x is 0), exactly.

    x = m · 2^e with m in [0.5, 1) (frexp); x / 2m = 2^(e−1) is representable, so the
    correctly rounded division returns it exactly (torch.ldexp goes through a float32 pow).
    """
    mantissa, _ = torch.frexp(values)
    return torch.where(mantissa == 0, 1.0, values / torch.where(mantissa == 0, 1.0, 2.0 * mantissa))


def compute_canonical_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (x in float64 with elements below ROW_FLUSH of their row's max |x| set to +0, that max [..., 1])."""
    x = x.double()
    magnitude = x.abs()
    peak = magnitude.amax(dim=-1, keepdim=True)
    return torch.where(magnitude >= peak * ROW_FLUSH, x, 0.0), peak


def compute_rounded(x: torch.Tensor) -> torch.Tensor:
    """Round ``x`` (|x| < 2^51) to the nearest integer, ties to even, in place: (x + 1.5·2^52) − 1.5·2^52.

    Two correctly rounded adds, the same on every element and vector lane (torch.round is
    no faster and allocates)."""
    return x.add_(ROUNDING_MAGIC).sub_(ROUNDING_MAGIC)


def _attend(q: torch.Tensor, k: torch.Tensor, vs: torch.Tensor, sigma: torch.Tensor, allowed: torch.Tensor, scaling: float) -> torch.Tensor:
    """One block: q [B, KV, G, Tq, D], k [B, KV, Tk, D], vs (v / σ) [B, KV, Tk, D], σ [B, KV, 1, 1, Tk], allowed [B, 1, 1, Tq, Tk].

    In-place ops on two [B, KV, G, Tq, Tk] buffers: a fresh large tensor per op costs more in
    page faults than the op itself.
    """
    b, kv, g, tq, d = q.shape
    weights = torch.matmul(q.reshape(b, kv, g * tq, d), k.transpose(-1, -2)).view(b, kv, g, tq, -1)
    weights.mul_(scaling).masked_fill_(~allowed, -math.inf)
    best = weights.amax(dim=-1, keepdim=True)
    weights.sub_(best.masked_fill_(best == -math.inf, 0.0)).exp_()  # masked keys → exactly 0
    count = allowed.sum(dim=-1, keepdim=True)  # keys each query attends: the same in decode and prefill
    scratch = torch.mul(weights, 2.0**DENOMINATOR_BITS)
    denominator = compute_rounded(scratch).sum(dim=-1, keepdim=True)
    u = weights.mul_(sigma)
    gamma = compute_power_of_two(u.amax(dim=-1, keepdim=True))
    short = count <= SHORT_KEYS
    scale = torch.where(short, 2.0**SHORT_WEIGHT_BITS, 2.0**WEIGHT_BITS).to(torch.float64)
    units = compute_rounded(u.mul_(scale / gamma))  # exact power-of-two scaling, then integers
    rows = units.reshape(b, kv, g * tq, -1)
    if bool(short.all()):
        numerator = torch.matmul(rows, vs)  # units < 2^22: one exact sum
    else:
        high = compute_rounded(torch.mul(units, 2.0**-SLICE_BITS, out=scratch))
        low = units.add_(high, alpha=-(2.0**SLICE_BITS))  # exact: integers, |low| ≤ 2^13
        numerator = torch.matmul(high.reshape(rows.shape), vs).mul_(2.0**SLICE_BITS)  # exact sum, exact scaling
        numerator.add_(torch.matmul(low.reshape(rows.shape), vs))  # the one rounding
    numerator = numerator.view(b, kv, g, tq, d).mul_(gamma * (2.0**DENOMINATOR_BITS / scale))
    positive = denominator > 0
    out = numerator.div_(torch.where(positive, denominator, 1.0)).masked_fill_(~positive, 0.0)
    return out.add_(0.0)  # −0 → +0: a zero sum's sign must not depend on which zeros were added


def compute_exact_sum_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor, scaling: float) -> torch.Tensor:
    """Attention over bf16 q [B, H, Tq, D], k/v [B, KV, Tk, D] with boolean ``allowed`` [B, 1, Tq, Tk]; returns [B, Tq, H, D] in q's dtype."""
    b, h, tq, d = query.shape
    kv, tk = key.shape[1], key.shape[2]
    if d > MAX_HEAD_DIM or tk > MAX_KEYS or h % kv:
        raise ConfigError(f"exact attention supports head dim ≤ {MAX_HEAD_DIM}, ≤ {MAX_KEYS} keys and whole query groups; got D={d}, {tk} keys, {h}/{kv} heads")
    q, _ = compute_canonical_rows(query)
    k, _ = compute_canonical_rows(key)
    v, peak = compute_canonical_rows(value)
    sigma = compute_power_of_two(peak)  # [B, KV, Tk, 1]
    vs = v / sigma
    sigma = sigma.transpose(-1, -2).unsqueeze(2)  # [B, KV, 1, 1, Tk]
    q = q.view(b, kv, h // kv, tq, d)
    allowed = allowed[..., :tk].unsqueeze(1)  # [B, 1, 1, Tq, Tk]
    blocks = []
    for start in range(0, tq, QUERY_BLOCK_ROWS):
        stop = min(start + QUERY_BLOCK_ROWS, tq)
        block = allowed[..., start:stop, :]
        extent = tk if tq <= QUERY_BLOCK_ROWS else _get_key_extent(block)
        blocks.append(_attend(q[:, :, :, start:stop], k[:, :, :extent], vs[:, :, :extent], sigma[..., :extent], block[..., :extent], scaling))
    out = blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=3)
    return out.reshape(b, h, tq, d).to(query.dtype).transpose(1, 2).contiguous()


def _get_key_extent(allowed: torch.Tensor) -> int:
    """Return 1 + the last key index any query of the block may attend (at least 1)."""
    columns = allowed.reshape(-1, allowed.shape[-1]).any(dim=0).nonzero()
    return int(columns[-1]) + 1 if len(columns) else 1
