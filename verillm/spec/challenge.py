"""The challenge draw: which leaves an audit opens, from a seed nobody controls.

Hidden-state positions are drawn from the positions that predict output tokens,
[P − 1, P + N − 1), where P is the prompt length and N the output length: that is where the
worker's decode-time computation lives. Draw j is

    P − 1 + uint256(keccak256(0x10 ‖ seed ‖ u32 j)) mod N

skipping repeats, until CHALLENGE_POSITIONS distinct positions are drawn (all N when
N ≤ CHALLENGE_POSITIONS). Each drawn position is opened at every committed layer. The token
check opens the last committed layer at every position in [P − 1, P + N]: the member's flags
there judge each output token, and position P + N − 1 (the member's last) judges the stop.
"""

from verillm.spec.hashing import DOMAIN_CHALLENGE, keccak256
from verillm.spec.types import Challenge


def compute_challenge_positions(seed: bytes, prompt_len: int, output_len: int, count: int) -> tuple[int, ...]:
    """Return the sampled hidden-state positions, in draw order."""
    first = prompt_len - 1
    if output_len <= count:
        return tuple(range(first, first + output_len))
    drawn: list[int] = []
    seen: set[int] = set()
    j = 0
    while len(drawn) < count:
        digest = keccak256(DOMAIN_CHALLENGE + seed + j.to_bytes(4, "big"))
        position = first + int.from_bytes(digest, "big") % output_len
        j += 1
        if position not in seen:
            seen.add(position)
            drawn.append(position)
    return tuple(drawn)


def compute_challenge(seed: bytes, prompt_len: int, output_len: int, committed_layers: tuple[int, ...], count: int) -> Challenge:
    """Return the full challenge for a job with ``prompt_len`` inputs and ``output_len`` outputs."""
    return Challenge(
        seed=seed,
        positions=compute_challenge_positions(seed, prompt_len, output_len, count),
        layers=tuple(committed_layers),
        token_positions=tuple(range(prompt_len - 1, prompt_len + output_len)),
    )


def compute_opened_cells(challenge: Challenge, num_positions: int) -> list[tuple[int, int]]:
    """Return the (position, layer) cells a party opens for ``challenge``.

    The same rule for the worker and every member; a party opens only the cells its
    commitment has (the worker has no leaf at position P + N − 1).
    """
    last_layer = challenge.layers[-1]
    cells = {(p, layer) for p in challenge.positions for layer in challenge.layers}
    cells |= {(p, last_layer) for p in challenge.token_positions if p < num_positions}
    return sorted(cells)
