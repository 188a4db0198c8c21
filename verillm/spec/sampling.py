"""The seeded deterministic sampler, replayable by any verifier from its own logits.

Gumbel-max: the emitted token at absolute position i is

    argmax_v  logits[v] / T + g(seed, i, v)     over the tokens that pass top-k and top-p,

where g is Gumbel noise drawn from Philox4x64 keyed by blake3(seed ‖ i). Temperature 0 is
greedy (no noise). Because the noise depends only on (seed, position), a verifier who
recomputes the logits by prefill gets the same scores up to numerical noise, and can say how
far a claimed token is from its own choice: the *gap*, in logit units (score gap × T), which
the token check compares with the model's token margin.

**Tie rule.** Among equal best scores the sampler emits the lowest token id (numpy's and
torch's argmax). With margin 0 (exact mode: both sides compute the same logits bit for bit)
a token is accepted only if it *is* the sampler's choice, never merely tied with it: bf16
logits tie often, and accepting a tied token would let a worker choose among them (steer the
output, or carry a covert channel). `is_token_accepted` is that rule for every flag.
"""

import numpy as np

from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN
from verillm.spec.hashing import DOMAIN_SAMPLER, blake3_digest
from verillm.spec.types import SamplingParams


def is_greedy(params: SamplingParams) -> bool:
    """Check if ``params`` select the argmax token (temperature 0)."""
    return params.temperature_milli == 0


def compute_gumbel_noise(seed: int, position: int, vocab_size: int) -> np.ndarray:
    """Return the Gumbel noise vector for ``position`` under ``seed`` (float64, length V)."""
    key = blake3_digest(DOMAIN_SAMPLER + seed.to_bytes(8, "big") + position.to_bytes(4, "big"))
    generator = np.random.Generator(np.random.Philox(key=np.frombuffer(key[:16], dtype="<u8")))
    uniform = generator.random(vocab_size)
    with np.errstate(divide="ignore"):
        return -np.log(-np.log(uniform))


def compute_filter_floor(logits: np.ndarray, params: SamplingParams) -> float:
    """Return the smallest logit that survives top-k and then top-p; -inf when none filter.

    Greedy decoding ignores both filters: the argmax always survives them.
    """
    if is_greedy(params) or (params.top_k == 0 and params.top_p_ppm >= 1_000_000):
        return -np.inf
    kept = logits
    if params.top_k and params.top_k < len(logits):
        kept = np.partition(logits, len(logits) - params.top_k)[len(logits) - params.top_k :]
    if params.top_p_ppm >= 1_000_000:
        return float(kept.min())
    descending = np.sort(kept)[::-1]
    probs = np.exp((descending - descending[0]) * (1000.0 / params.temperature_milli))
    cumulative = np.cumsum(probs) / probs.sum()
    keep = min(int(np.searchsorted(cumulative, params.top_p_ppm / 1e6)) + 1, len(kept))
    return float(descending[keep - 1])


def compute_scores(logits: np.ndarray, params: SamplingParams, position: int) -> np.ndarray:
    """Return the perturbed score of every token in logit units; -inf outside the filters."""
    logits = np.asarray(logits, dtype=np.float64)
    floor = compute_filter_floor(logits, params)
    scores = logits.copy()
    if not is_greedy(params):
        temperature = params.temperature_milli / 1000.0
        scores = scores + temperature * compute_gumbel_noise(params.seed, position, len(logits))
    scores[logits < floor] = -np.inf
    return scores


def compute_sampled_token(logits: np.ndarray, params: SamplingParams, position: int) -> int:
    """Return the token the sampler emits at ``position`` from ``logits``."""
    return int(np.argmax(compute_scores(logits, params, position)))


def compute_token_gaps(logits: np.ndarray, params: SamplingParams, position: int, tokens: list[int]) -> list[float]:
    """Return, per token, how far its score is below the emitted token's, in logit units.

    A token just outside the filters is scored as if kept, with its distance to the filter
    floor added, so an honest near-boundary disagreement reads as a small gap, not infinity.
    """
    return compute_sample_and_gaps(logits, params, position, tokens)[1]


def compute_sample_and_gaps(logits: np.ndarray, params: SamplingParams, position: int, tokens: list[int]) -> tuple[int, list[float]]:
    """Return (`compute_sampled_token`, `compute_token_gaps`) with the noise and filter drawn once.

    Engines call this at every sampled position; drawing the noise once makes the flags
    nearly free next to the sampling itself (the noise is most of the cost at vocab 49k).
    """
    logits = np.asarray(logits, dtype=np.float64)
    floor = compute_filter_floor(logits, params)
    noise = None if is_greedy(params) else compute_gumbel_noise(params.seed, position, len(logits))
    scores = logits.copy() if noise is None else logits + params.temperature_milli / 1000.0 * noise
    scores[logits < floor] = -np.inf
    best = scores.max()
    gaps = []
    for token in tokens:
        if np.isfinite(scores[token]):
            gaps.append(float(best - scores[token]))
            continue
        unfiltered = logits[token] + (0.0 if noise is None else params.temperature_milli / 1000.0 * noise[token])
        gaps.append(float(best - unfiltered + (floor - logits[token])))
    return int(np.argmax(scores)), gaps


def is_token_accepted(token: int, chosen: int, gap: float, margin_logits: float) -> bool:
    """Check if ``token`` passes the token check against the sampler's ``chosen`` token.

    Margin 0 (exact mode): only the sampler's own choice, by the tie rule; a token whose gap
    is 0 because it ties the best score is rejected. Margin > 0: gap ≤ margin.
    """
    if margin_logits == 0:
        return token == chosen
    return gap <= margin_logits


def compute_position_flags(logits: np.ndarray, params: SamplingParams, position: int, next_token: int, stop_tokens: list[int], margin_logits: float) -> int:
    """Return the leaf flags at ``position`` (`docs/protocol.md` §4) from the party's own ``logits``.

    FLAG_NEXT_WITHIN_MARGIN: ``next_token`` passes `is_token_accepted`; FLAG_STOP_WITHIN_MARGIN:
    some stop token does.
    """
    chosen, gaps = compute_sample_and_gaps(logits, params, position, [next_token, *stop_tokens])
    flags = FLAG_NEXT_WITHIN_MARGIN if is_token_accepted(next_token, chosen, gaps[0], margin_logits) else 0
    if any(is_token_accepted(stop, chosen, gap, margin_logits) for stop, gap in zip(stop_tokens, gaps[1:])):
        flags |= FLAG_STOP_WITHIN_MARGIN
    return flags
