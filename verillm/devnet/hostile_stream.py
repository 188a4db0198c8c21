"""A registered worker that streams text it did not compute (issue 35, finding 2), for devnets.

The attack of the red-team: a staked worker answers `?stream=1` with tokens of its choice (a
phishing line), then ends with the honest receipt of the job's real output. Before signed streams
the gateway relayed the injected deltas as they came and every client showed them. A devnode started
with `--hostile-stream MODE` (`verillm devnet --cheater inject` / `--cheater equivocate`) does this
in the real daemon, so a kept devnet has the hostile worker in its gateway's rotation:

    forged       the injected tokens, under the worker's own signature over other tokens: the
                 gateway's check fails, nothing is relayed, the job fails over, the worker is benched
    unsigned     the injected tokens with no signature at all: the same
    equivocates  the injected tokens signed for real, then a receipt for the real output: two signed
                 outputs for one job; the gateway fails over and slashes it on-chain
                 (`Coverage.slashStreamEquivocation`)

Only the native stream handler is replaced (`native_views.write_job_stream`); plain answers, openings
and committee work stay honest, so the node is not a cheat in any audit.
"""

from aiohttp import web

import verillm.node.api.native_views as native_views
from verillm.node.api.streaming import NDJSON, compute_line
from verillm.node.worker.stream_signer import PrefixSigner
from verillm.spec.stream import SignedPrefix
from verillm.wire import stream_chunk_to_json

INJECTED = " Send your seed phrase to evil@example.com"
MODES = ("forged", "unsigned", "equivocates")


def compute_hostile_line(mode: str, tokens: list[int], signer: PrefixSigner) -> dict:
    """Return the first line the hostile worker streams: ``tokens`` (the injected text), signed per ``mode``."""
    if mode == "unsigned":
        return {"tokens": tokens}
    if mode == "forged":  # the worker's signature, over other tokens than the ones sent
        signed: SignedPrefix = signer.sign(tokens[:-1] + [tokens[-1] + 1])
        return stream_chunk_to_json(tokens, signed)
    if mode == "equivocates":  # signed for real: the worker's liability
        return stream_chunk_to_json(tokens, signer.sign(tokens))
    raise ValueError(f"unknown hostile stream mode {mode!r}; known: {list(MODES)}")


def install_hostile_stream(mode: str, tokenizer) -> None:
    """Replace this process's native stream handler with the hostile one (a devnode's, never a node's)."""
    if mode not in MODES:
        raise ValueError(f"unknown hostile stream mode {mode!r}; known: {list(MODES)}")
    tokens = tokenizer.encode(INJECTED, add_special_tokens=False)

    async def write_job_stream(request, arrived, wait, compute_body, signer):
        response = web.StreamResponse(headers={"Content-Type": NDJSON})
        try:
            await response.prepare(request)
            await response.write(compute_line(compute_hostile_line(mode, tokens, signer)))
            await response.write(compute_line({"done": compute_body(await wait)}))  # the real output's receipt
            await response.write_eof()
        except ConnectionResetError:
            pass  # the gateway hung up on it at the first bad chunk, as it should
        finally:
            wait.close()
        return response

    native_views.write_job_stream = write_job_stream
