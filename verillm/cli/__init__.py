"""The `verillm` command. Subcommands live beside the code they drive and load lazily,
so `verillm --help` does not import torch or web3.

Errors: a `VerillmError` prints its message and exits with code 2 (1 is reserved for a
verdict of "reject" in `verillm audit replay` and `verillm demo verify`).
"""

import importlib
import logging
import os
import sys

import click

from verillm import envs
from verillm.errors import VerillmError

envs.set_offline_defaults()

# name -> "module:attribute" of a click command or group
SUBCOMMANDS = {
    "bench": "verillm.cli.bench:bench",
    "calibrate": "verillm.cli.calibrate:calibrate",
    "demo": "verillm.cli.demo:demo",
    "chain": "verillm.cli.chain:chain",
    "node": "verillm.cli.node:node",
    "keys": "verillm.cli.keys:keys",
    "complete": "verillm.cli.complete:complete",
    "promise": "verillm.cli.promise:promise",
    "audit": "verillm.cli.audit:audit",
    "devnet": "verillm.cli.devnet:devnet",
    "sim": "verillm.cli.sim:sim",
    "model": "verillm.cli.model:model",
}


# name -> its one-line help, so that `verillm --help` lists the commands without importing them
# (importing every subcommand cost 3.6 s of CPU here: web3, eth_account); tests/test_cli_start.py
# checks each line against the command's own docstring.
SHORT_HELP = {
    "bench": "Benchmarks: detection, cost, gas, node throughput.",
    "calibrate": "Measure honest noise over the engine matrix and write thresholds with a stated margin "
                 "(or, with --check, tell whether the existing profile still fits this engine).",
    "demo": "Demonstrations on a real model.",
    "chain": "Deploy and inspect the protocol contracts.",
    "node": "Run and inspect the worker node daemon.",
    "keys": "Create node keys.",
    "complete": "Complete PROMPT on a node and show what the client verified of it (see docs/sdk.md).",
    "promise": "Claim a batching promise that was not kept.",
    "audit": "Audit tools: replay a job's audit from a node's records, re-check a chain's audits.",
    "devnet": "Run a local VeriLLM network end to end: serve, batch, audit, vote, settle, slash.",
    "sim": "Simulate the network at scale over the spec's draws, sortition and settlement.",
    "model": "Inspect local model files: manifest, model id, profile.",
}
# Commands that never compute a VRF: they skip the fast curve arithmetic's import (web3 and revm).
WITHOUT_FAST_PATHS = {"complete", "keys", "model"}


def import_command(target: str) -> click.Command | None:
    """Import "module:attribute"; None only when that module itself does not exist."""
    module_name, attribute = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            return None  # that part of the product is not installed or not built
        raise
    return getattr(module, attribute)


class LazyGroup(click.Group):
    """A group whose subcommands (name -> "module:attribute") are imported when used."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | {n for n in self.lazy if self.get_command(ctx, n)})

    def get_command(self, ctx, name):
        if name in self.lazy:
            return import_command(self.lazy[name])
        return super().get_command(ctx, name)

    def format_commands(self, ctx, formatter):
        """List the lazy commands from SHORT_HELP, importing none of them."""
        rows = [(name, SHORT_HELP[name]) for name in sorted(self.lazy) if name in SHORT_HELP]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, lazy=SUBCOMMANDS)
@click.version_option(package_name="verillm")
@click.pass_context
def cli(ctx):
    """VeriLLM: verifiable LLM inference — workers, audits, contracts, tools."""
    if ctx.invoked_subcommand not in WITHOUT_FAST_PATHS:
        _install_fast_paths()  # runs only when a subcommand does, not for --help


def _install_fast_paths() -> None:
    """The VRF's curve arithmetic in revm when it is installed (loaded only when a command needs it)."""
    from verillm.chain.bn254 import install_fast_bn254

    install_fast_bn254()


def main():
    """Entry point: run the CLI, turning VeriLLM errors into a message and exit code 2."""
    try:
        cli.main(standalone_mode=False)
        code = 0
    except SystemExit as exc:
        code = exc.code
    except VerillmError as exc:
        click.echo(f"error: {exc}", err=True)
        code = 2
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        code = 130
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    exit_now(code)


def exit_now(code) -> None:
    """Exit once the command's output is out. With torch loaded, skip the interpreter's teardown:
    collecting a model and joining torch's threads took 8 s here, and `audit replay` went on 32-80 s
    after its report on a loaded machine (issue 36). Every `finally` and cleanup of the command has
    run by now; the log is flushed before."""
    if "torch" not in sys.modules or "_pytest" in sys.modules:  # in-process callers (a test runner) get SystemExit
        sys.exit(code)
    if code is not None and not isinstance(code, int):
        click.echo(code, err=True)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    logging.shutdown()
    os._exit(code or 0)
