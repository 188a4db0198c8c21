"""What `Client.stream` checks before it shows a delta: the worker signed it as it streamed it.

Each text chunk a node streams carries ``verillm_stream``: the output tokens the chunk adds and the
worker's signature over the prefix so far (verillm/spec/stream.py; the first chunk also the signed
job). A delta is shown only once

- the first chunk's job is the request (`checks.verify_job_is_request`) and, with a chain, its
  signer is registered, active and staked for the model (`checks.verify_signer_on_chain`);
- the chunk's prefix is signed, for the pinned deployment (or the node's, said so at the end), by the
  worker the first chunk named, and its running hash extends the previous prefix by exactly the
  chunk's tokens (`process_stream_chunk`);
- with a tokenizer, the text shown so far is the start of the text of the signed tokens.

Anything else raises (`InvalidSignature`, `InvalidProof`, `BadResponse`) before the delta is shown.
Text with no signed prefix (what follows the last signed chunk, sent once the receipt exists) is
held until the final chunk's receipt is verified and extends the last signed prefix
(`verify_receipt_extends_prefix`): a worker whose receipt contradicts what it streamed has
equivocated (the last signed prefix, the receipt and the transcript are the evidence
`Coverage.slashStreamEquivocation` takes: `verillm.spec.stream.Equivocation`).
"""

import asyncio

from verillm.errors import BadResponse, InvalidProof, VerillmError
from verillm.spec.encoding import decode
from verillm.spec.job import compute_job_hash
from verillm.spec.receipt import SigningDomain
from verillm.spec.stream import StreamState, process_stream_chunk, verify_receipt_extends_prefix
from verillm.spec.types import Job
from verillm.wire import from_hex, stream_chunk_from_json

from verillm.client.checks import Findings, Requested, compute_text, verify_job_is_request, verify_signer_on_chain


class SignedStreamCheck:
    """One stream's checks, chunk by chunk (`admit`), then against the receipt (`verify_final`)."""

    def __init__(self, requested: Requested, pins, domain: SigningDomain):
        self.requested, self.pins, self.domain = requested, pins, domain
        self.state: StreamState | None = None
        self.job: Job | None = None
        self.tokens: list[int] = []
        self.shown = ""
        self.held: list[str] = []

    async def admit(self, event: dict, delta: str) -> str:
        """Return the part of ``delta`` that may be shown now ("" while it is held); raise if the chunk fails a check."""
        extra = event.get("verillm_stream")
        if extra is None:
            self.held.append(delta)  # text no prefix signs: shown once the receipt verifies
            return ""
        if self.held:
            raise BadResponse("the node streamed signed text after text no worker signed")
        tokens, signed = _parsed("verillm_stream", lambda: stream_chunk_from_json(extra, "verillm_stream"))
        if self.state is None:
            await self._start(extra, signed.prefix.worker)
        self.state = process_stream_chunk(self.state, tokens, signed, self.domain)
        self.tokens.extend(tokens)
        self._verify_text(delta)
        self.shown += delta
        return delta

    async def _start(self, extra: dict, worker: bytes) -> None:
        """The first signed chunk: its job must be the request, its worker (with a chain) staked for the model."""
        if not isinstance(extra.get("job"), dict):
            raise BadResponse("the stream's first signed chunk does not carry its job (verillm_stream.job)")
        self.job = _parsed("verillm_stream.job", lambda: decode(Job, from_hex(extra["job"].get("encoded"), "verillm_stream.job.encoded")))
        verify_job_is_request(self.job, self.requested, self.pins.tokenizer, Findings())
        if self.pins.protocol is not None:
            await asyncio.to_thread(verify_signer_on_chain, self.pins.protocol, worker, self.job.model_id)
        self.state = StreamState(compute_job_hash(self.job), worker=worker)

    def _verify_text(self, delta: str) -> None:
        if self.pins.tokenizer is None:
            return  # the node's text is compared with the signed tokens' at the end (`verify_completion`)
        if not compute_text(self.pins.tokenizer, self.tokens).startswith(self.shown + delta):
            raise InvalidProof("the node's streamed text is not the text of the tokens the worker signed")

    def verify_final(self, completion) -> str:
        """Check the verified completion's receipt extends the last signed prefix; return the held text."""
        if self.state is not None:
            verify_receipt_extends_prefix(completion.receipt, completion.tokens, self.state)
        held, self.held = "".join(self.held), []
        return held


def _parsed(what: str, parse):
    try:
        return parse()
    except (VerillmError, TypeError, ValueError, AttributeError) as exc:  # one named field of the node's answer
        raise BadResponse(f"the node's stream has a malformed {what}: {exc}") from None
