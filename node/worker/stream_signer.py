"""The worker's side of a signed stream: each batch of tokens it streams goes out with its signature
over the prefix so far (verillm/spec/stream.py), signed with its receipt key as the tokens leave.

Used by the native stream route (node/api/streaming.py, `write_job_stream`) and by a node's own
dispatcher when the job runs on its own worker (node/dispatcher/local.py): a client sees no token
that no worker signed, whichever worker ran its job.
"""

from collections.abc import Callable, Sequence

from verillm.spec.receipt import SigningDomain
from verillm.spec.stream import EMPTY_PREFIX_HASH, SignedPrefix, StreamPrefix, compute_prefix_hash, sign_prefix

from verillm.node.keys import NodeKey

OnChunk = Callable[[tuple[int, ...], SignedPrefix], None]
"""Called with each streamed batch of tokens and the signed prefix that ends with them."""


class PrefixSigner:
    """Signs the running prefix of one job's output as it grows."""

    def __init__(self, job_hash: bytes, key: NodeKey, domain: SigningDomain):
        self.key, self.domain = key, domain
        self.prefix = StreamPrefix(job_hash, 0, EMPTY_PREFIX_HASH, key.address)

    def sign(self, tokens: Sequence[int]) -> SignedPrefix:
        """Extend the prefix by ``tokens``; return it signed."""
        p = self.prefix
        self.prefix = StreamPrefix(p.job_hash, p.token_count + len(tokens), compute_prefix_hash(p.prefix_hash, tokens), p.worker)
        return sign_prefix(self.prefix, self.key.private_key, self.domain)


def sign_each_token(signer: PrefixSigner, on_chunk: OnChunk) -> Callable[[int], None]:
    """A per-token callback (the engine queue's) that hands ``on_chunk`` each token signed on its own."""
    return lambda token: on_chunk((token,), signer.sign((token,)))
