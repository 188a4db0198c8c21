"""One node process of a local network, honest or not: `python -m verillm.devnet.devnode`.

`verillm devnet` and the end-to-end tests start their nodes with this instead of `verillm node
run` because some of them must cheat, and a production daemon has no switch for that:

    --attack NAME   the worker runs a dishonest engine from `verillm.engine.attacks` (int8,
                    other_model, truncate, ...) under the honest manifest: it claims the honest
                    model and commits to what it really computed
    --lazy          a lazy committee member: scoring-shaped jobs (one new token) get a made-up
                    trace — zero fingerprints, every token "within margin" — committed without
                    running the model, and its votes always agree with the worker
    --tamper-opening  as a worker, posts opened leaves nudged by two ulps: inside every band,
                    but not what it committed to (only a contest catches it)
    --withhold-jobs   as a dispatcher, never sends the committees their verification jobs (the
                    members claim them and the workers publish, docs/protocol.md §12)
    --hostile-stream MODE  as a worker, streams injected text (forged, unsigned or equivocates:
                    `verillm.devnet.hostile_stream`) and then the real output's receipt
    --token-delay-ms  the engine samples at most one token per this many ms (honest, only slower):
                    the tiny model samples in well under a millisecond, so streaming is observable
                    on a devnet only at a real model's pace

Everything else is the real daemon (`create_app`), configured from the TOML file like any node.
"""

import asyncio
import contextlib
import inspect
import logging
import signal
import time

import click
import numpy as np
from aiohttp import web

from verillm.engine.base import Engine
from verillm.spec.commitment import JobTrace
from verillm.spec.params import get_preset
from verillm.spec.types import Job
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN

from verillm.node.app import create_app, get_runner_options
from verillm.node.config import EngineConfig, NodeConfig, load_config
from verillm.node.dispatcher.audit.duties import PartyFaults
from verillm.node.appkeys import APP_FAULTS
from verillm.node.worker.engines import ServedModel, build_served_model

log = logging.getLogger(__name__)


class LazyEngine:
    """Commits to a made-up trace for every one-new-token job; runs the rest honestly."""

    def __init__(self, inner: Engine):
        self.inner = inner
        self.manifest = inner.manifest
        self.model_id = inner.model_id
        self.max_batch_size = inner.max_batch_size

    def run(self, jobs: list[Job]) -> list[JobTrace]:
        return [self._made_up(job) if job.max_new_tokens == 1 else self.inner.run([job])[0] for job in jobs]

    def _made_up(self, job: Job) -> JobTrace:
        positions, layers = len(job.input_tokens), len(self.manifest.committed_layers)
        return JobTrace(
            output_tokens=(job.input_tokens[-1],),
            fingerprints=np.zeros((positions, layers, self.manifest.fingerprint_dims), dtype=np.float32),
            flags=np.full(positions, FLAG_NEXT_WITHIN_MARGIN, dtype=np.uint8),
        )


class PacedEngine:
    """``inner`` sampling one token per ``delay_s`` at most: the same traces, at a real model's pace."""

    def __init__(self, inner: Engine, delay_s: float):
        if "on_token" not in inspect.signature(inner.run).parameters:
            raise click.UsageError("--token-delay-ms: this engine does not hand over its tokens one by one")
        self.inner, self.delay_s = inner, delay_s
        self.manifest, self.model_id, self.max_batch_size = inner.manifest, inner.model_id, inner.max_batch_size

    def run(self, jobs: list[Job], on_token=None) -> list[JobTrace]:
        def paced(index: int, token: int) -> None:
            time.sleep(self.delay_s)  # the engine thread: a real model's step takes this long
            if on_token is not None:
                on_token(index, token)

        return self.inner.run(jobs, on_token=paced)


def build_dishonest_model(config: EngineConfig, attack: str | None, lazy: bool) -> ServedModel:
    """Return the served model of a dishonest node (the honest manifest, another computation)."""
    if attack is None:
        served = build_served_model(config)
        return ServedModel(served.alias, LazyEngine(served.engine), served.tokenizer) if lazy else served
    from verillm.engine.attacks import get_attack
    from verillm.engine.models import load_model

    model, tokenizer, manifest = load_model(config.model, config.dtype, get_preset(config.preset))
    engine = get_attack(attack).build(model, tokenizer, manifest)
    return ServedModel(config.model, LazyEngine(engine) if lazy else engine, tokenizer)


async def serve(config: NodeConfig, attack: str | None, lazy: bool, tamper_opening: bool = False, withhold_jobs: bool = False,
                token_delay_ms: float = 0.0, hostile_stream: str | None = None) -> None:
    """Run one node until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    served = await asyncio.to_thread(build_dishonest_model, config.engine, attack, lazy)
    if token_delay_ms > 0:
        served = ServedModel(served.alias, PacedEngine(served.engine, token_delay_ms / 1000), served.tokenizer)
    if hostile_stream:
        from verillm.devnet.hostile_stream import install_hostile_stream

        install_hostile_stream(hostile_stream, served.tokenizer)
    app = create_app(config, served)
    if attack or lazy or tamper_opening or withhold_jobs:
        # A node serving an attack is the adversary's: it does not appeal the FAIL its cheat
        # earns (an honest node's appeal of its own FAIL: docs/protocol.md §12 "Accountable votes").
        app[APP_FAULTS] = PartyFaults(member_vote="always_agree" if lazy else "honest", worker_opening="tampered" if tamper_opening else "honest",
                                      committee_jobs="withhold" if withhold_jobs else "deliver", appeal="never" if attack else "fail")
    runner = web.AppRunner(app, **get_runner_options(config))
    await runner.setup()
    await web.TCPSite(runner, config.server.host, config.server.port).start()
    print(f"verillm devnode listening on http://{config.server.host}:{config.server.port}", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


@click.command()
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--attack", default=None, help="Run this dishonest engine (verillm.engine.attacks).")
@click.option("--lazy", is_flag=True, help="Be a lazy committee member (made-up commitments, always agree).")
@click.option("--tamper-opening", is_flag=True, help="As a worker, post leaves that do not match the committed root.")
@click.option("--withhold-jobs", is_flag=True, help="As a dispatcher, never send committee members their verification jobs.")
@click.option("--token-delay-ms", default=0.0, type=click.FloatRange(min=0), help="Sample at most one token per this many ms.")
@click.option("--hostile-stream", type=click.Choice(["forged", "unsigned", "equivocates"]), default=None,
              help="As a worker, stream injected text before the real output's receipt (verillm.devnet.hostile_stream).")
@click.option("--log-level", default="INFO")
def main(config_path: str, attack: str | None, lazy: bool, tamper_opening: bool, withhold_jobs: bool, token_delay_ms: float,
         hostile_stream: str | None, log_level: str) -> None:
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = load_config(config_path)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config, attack, lazy, tamper_opening, withhold_jobs, token_delay_ms, hostile_stream))


if __name__ == "__main__":
    main()
