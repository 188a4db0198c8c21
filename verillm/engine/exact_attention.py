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
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

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
EXPONENT_MASK = 0x7FF0000000000000
# Query rows per block in a prefill: bounds the [rows, keys] float64 temporaries, and each block
# only reads the keys any of its queries may attend (exact sums: dropped keys were zeros).
QUERY_BLOCK_ROWS = 256


def compute_power_of_two(values: torch.Tensor) -> torch.Tensor:
    """Return 2^floor(log2 x) for each normal float64 x ≥ 0 (1 where x is 0), exactly.

    Keeps the exponent bits and clears the mantissa. The inputs here are never subnormal: a
    row peak of bf16 values is at least 2^−133, and a query's largest weighted scale is at
    least the scale of the key with weight 1.
    """
    power = (values.view(torch.int64) & EXPONENT_MASK).view(torch.float64)
    return power.masked_fill_(power == 0, 1.0)


def compute_canonical_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (x in float64 with elements below ROW_FLUSH of their row's max |x| set to +0, that max [..., 1])."""
    x = x.double()
    magnitude = x.abs()
    peak = magnitude.amax(dim=-1, keepdim=True)
    return x.masked_fill_(magnitude < peak * ROW_FLUSH, 0.0), peak  # a −0 kept here only ever adds to exact sums


def compute_canonical_kv(key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the cache form of bf16 k, v [B, KV, T, D]: canonical k (float64) and [v / σ ‖ σ] [B, KV, T, D + 1].

    σ is the power of two of the row's largest |v|; v / σ is exact. Rows are independent, so a
    KV cache can hold this form and canonicalize only the rows each pass adds (`ExactCache`).
    """
    k, _ = compute_canonical_rows(key)
    v, peak = compute_canonical_rows(value)
    sigma = compute_power_of_two(peak)
    return k, torch.cat([v.div_(sigma), sigma], dim=-1)


def compute_rounded(x: torch.Tensor) -> torch.Tensor:
    """Round ``x`` (|x| < 2^51) to the nearest integer, ties to even, in place: (x + 1.5·2^52) − 1.5·2^52.

    Two correctly rounded adds, the same on every element and vector lane (torch.round is
    no faster and allocates)."""
    return x.add_(ROUNDING_MAGIC).sub_(ROUNDING_MAGIC)


def _exp_in_place(x: torch.Tensor) -> torch.Tensor:
    return x.exp_()


def _attend(q: torch.Tensor, k: torch.Tensor, vsig: torch.Tensor, allowed: torch.Tensor | None, scaling: float, exp=_exp_in_place) -> torch.Tensor:
    """One block: q [B, KV, G, Tq, D] (canonical), k [B, KV, Tk, D], vsig [B, KV, Tk, D + 1], allowed [B, 1, 1, Tq, Tk]
    (None: every query may attend every key, as in a one-row decode step; fewer ops, the same values).

    In-place ops on two [B, KV, G, Tq, Tk] buffers: a fresh large tensor per op costs more in
    page faults than the op itself.
    """
    b, kv, g, tq, d = q.shape
    sigma = vsig[..., d].unsqueeze(2).unsqueeze(3)  # [B, KV, 1, 1, Tk]
    weights = torch.matmul(q.reshape(b, kv, g * tq, d), k.transpose(-1, -2)).view(b, kv, g, tq, -1).mul_(scaling)
    if allowed is not None:
        weights.masked_fill_(allowed.logical_not(), -math.inf)
    best = weights.amax(dim=-1, keepdim=True)
    if allowed is not None:
        best.masked_fill_(best == -math.inf, 0.0)
    weights = exp(weights.sub_(best))  # masked keys → exactly 0
    scratch = torch.add(ROUNDING_MAGIC, weights, alpha=2.0**DENOMINATOR_BITS)  # the weight on 2^−36, + magic: one rounding
    denominator = scratch.sub_(ROUNDING_MAGIC).sum(dim=-1, keepdim=True).clamp_min_(1.0)  # exact; 0 only with no key
    # Bits of a query's weights: from how many keys it attends (the same in decode and prefill).
    if allowed is None:
        scale = 2.0**WEIGHT_BITS if k.shape[-2] > SHORT_KEYS else 2.0**SHORT_WEIGHT_BITS
        long_rows = k.shape[-2] > SHORT_KEYS
    else:
        long_mask = allowed.sum(dim=-1, keepdim=True) > SHORT_KEYS
        scale = long_mask * (2.0**WEIGHT_BITS - 2.0**SHORT_WEIGHT_BITS) + 2.0**SHORT_WEIGHT_BITS  # exact: a power of two
        long_rows = bool(long_mask.any())
    u = weights.mul_(sigma)
    gamma = compute_power_of_two(u.amax(dim=-1, keepdim=True))
    units = compute_rounded(u.mul_(scale / gamma)).reshape(b, kv, g * tq, -1)  # exact scaling, then integers
    if not long_rows:
        numerator = torch.matmul(units, vsig)  # units < 2^22: one exact sum (column D: unused)
    else:
        high = compute_rounded(torch.mul(units, 2.0**-SLICE_BITS, out=scratch.view(units.shape)))
        low = units.sub_(high * 2.0**SLICE_BITS)  # exact: integers, |low| ≤ 2^13
        numerator = torch.matmul(high, vsig).mul_(2.0**SLICE_BITS)  # exact sum, exact scaling
        numerator.add_(torch.matmul(low, vsig))  # the one rounding
    numerator = numerator[..., :d].view(b, kv, g, tq, d).mul_(gamma * (2.0**DENOMINATOR_BITS / scale))
    return numerator.div_(denominator).add_(0.0)  # −0 → +0: a zero sum's sign must not depend on which zeros were added


def compute_exact_sum_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor, scaling: float, exp=_exp_in_place) -> torch.Tensor:
    """Attention over bf16 q [B, H, Tq, D] and k/v [B, KV, Tk, D] (or their cache form, `compute_canonical_kv`)
    with boolean ``allowed`` [B, 1, Tq, Tk]; returns [B, Tq, H, D] in q's dtype.

    ``exp``: float64 tensor → its exponential (may work in place): torch's (the per-machine
    class) or `canonical_math.compute_canonical_exp` (the canonical kernels)."""
    b, h, tq, d = query.shape
    kv, tk = key.shape[1], key.shape[2]
    if d > MAX_HEAD_DIM or tk > MAX_KEYS or h % kv:
        raise ConfigError(f"exact attention supports head dim ≤ {MAX_HEAD_DIM}, ≤ {MAX_KEYS} keys and whole query groups; got D={d}, {tk} keys, {h}/{kv} heads")
    if key.dtype != torch.float64:
        key, value = compute_canonical_kv(key, value)
    q = compute_canonical_rows(query)[0].view(b, kv, h // kv, tq, d)
    allowed = allowed[..., :tk].unsqueeze(1)  # [B, 1, 1, Tq, Tk]
    if tq == 1 and bool(allowed.all()):
        return _attend(q, key, value, None, scaling, exp).reshape(b, h, 1, d).to(query.dtype).transpose(1, 2)
    if tq == 1:
        out = _attend(q, key, value, allowed, scaling, exp)
    else:  # a prefill: row by row, each over its own queries and keys only (left padding costs nothing)
        out = torch.zeros_like(q)
        for row in range(b):
            _prefill_row(q[row : row + 1], key[row : row + 1], value[row : row + 1], allowed[row : row + 1], scaling, out[row : row + 1], exp)
    return out.reshape(b, h, tq, d).to(query.dtype).transpose(1, 2).contiguous()


def _prefill_row(q: torch.Tensor, k: torch.Tensor, vsig: torch.Tensor, allowed: torch.Tensor, scaling: float, out: torch.Tensor, exp=_exp_in_place) -> None:
    """Write one batch row's attention into ``out`` [1, KV, G, Tq, D] (left as zeros for queries that attend no key).

    Only the queries that attend a key and the keys some query attends are computed, in
    blocks of QUERY_BLOCK_ROWS queries that each read only the keys up to the last one they
    may attend. Every dropped key or query contributed exact zeros: the same bits.
    """
    attended = allowed[0, 0, 0]  # [Tq, Tk]
    queries, keys = attended.any(dim=1).nonzero(), attended.any(dim=0).nonzero()
    if not len(queries):
        return
    q_first, k_first = int(queries[0]), int(keys[0])
    for start in range(q_first, q.shape[3], QUERY_BLOCK_ROWS):
        stop = min(start + QUERY_BLOCK_ROWS, q.shape[3])
        block = allowed[..., start:stop, k_first:]
        extent = k_first + _get_key_extent(block)
        out[:, :, :, start:stop] = _attend(q[:, :, :, start:stop], k[:, :, k_first:extent], vsig[:, :, k_first:extent], allowed[..., start:stop, k_first:extent], scaling, exp)


def _get_key_extent(allowed: torch.Tensor) -> int:
    """Return 1 + the last key index any query of the block may attend (at least 1)."""
    columns = allowed.reshape(-1, allowed.shape[-1]).any(dim=0).nonzero()
    return int(columns[-1]) + 1 if len(columns) else 1


# --- the KV cache in canonical form ---------------------------------------------------------

MIN_CACHE_CAPACITY = 64


class ExactLayer(DynamicLayer):
    """A cache layer holding `compute_canonical_kv`'s form: each pass canonicalizes only the rows it adds.

    Rows live in buffers that double when full, so a decode step writes its row in place
    instead of copying the whole cache (float64 rows are 4× the bytes of bf16 ones).
    ``keys`` / ``values`` are views of the filled part; attacks that rewrite cache entries in
    place (`engine/attacks.py`) write through them.
    """

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = torch.float64, key_states.device
        self._key_buffer = self._value_buffer = None
        self.length = 0
        self.keys = self.values = torch.tensor([], dtype=torch.float64, device=self.device)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys, values = compute_canonical_kv(key_states, value_states)
        count = keys.shape[-2]
        if self._key_buffer is None or self.length + count > self._key_buffer.shape[-2]:
            self._grow(keys, values, max(MIN_CACHE_CAPACITY, 2 * (self.length + count)))
        self._key_buffer[..., self.length : self.length + count, :] = keys
        self._value_buffer[..., self.length : self.length + count, :] = values
        self.length += count
        self._expose()
        return self.keys, self.values

    def _grow(self, keys: torch.Tensor, values: torch.Tensor, capacity: int) -> None:
        key_buffer = keys.new_zeros((*keys.shape[:-2], capacity, keys.shape[-1]))
        value_buffer = values.new_zeros((*values.shape[:-2], capacity, values.shape[-1]))
        if self.length:
            key_buffer[..., : self.length, :] = self.keys
            value_buffer[..., : self.length, :] = self.values
        self._key_buffer, self._value_buffer = key_buffer, value_buffer

    def _expose(self) -> None:
        self.keys = self._key_buffer[..., : self.length, :]
        self.values = self._value_buffer[..., : self.length, :]

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.length:
            self._key_buffer, self._value_buffer = self._key_buffer[indices], self._value_buffer[indices]
            self._expose()

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.length:
            self._key_buffer = self._key_buffer.repeat_interleave(repeats, dim=0)
            self._value_buffer = self._value_buffer.repeat_interleave(repeats, dim=0)
            self._expose()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0:
            self.length = max(0, self.length + tokens_to_remove)
            self._expose()

    def reset(self) -> None:
        self._key_buffer = self._value_buffer = None
        self.length = 0
        super().reset()


def make_exact_cache(config) -> DynamicCache:
    """Return a DynamicCache for ``config`` whose full-attention layers hold the canonical form.

    Sliding-window layers keep transformers' own layer (bf16 rows, canonicalized by the
    attention at every pass: the same bits, more work).
    """
    cache = DynamicCache(config=config)
    cache.layers = [ExactLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
