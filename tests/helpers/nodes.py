"""Helpers to run real nodes in tests, benchmarks and local networks (no fakes: real engine,
real aiohttp on loopback, real SQLite file).

    config = make_local_config(tmp_path, queue={"batch_wait_ms": 1})
    runner, port = await start_node(config, served)      # on the caller's loop
    node = ThreadedNode(config, served)                   # on its own loop, for sync callers
"""

import asyncio
import threading
from pathlib import Path

from verillm.node.app import start_node
from verillm.node.config import NodeConfig, load_config
from verillm.node.worker.engines import ServedModel
from verillm.node.keys import new_node_key, write_key_file


def make_local_config(directory: Path, **sections: dict) -> NodeConfig:
    """Return a loopback node config (port 0) with its key and store in ``directory``.

    ``sections`` override fields per section, e.g. ``limits={"max_prompt_tokens": 8}``.
    The environment is ignored so tests do not depend on the caller's VERILLM_* variables.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key_file = directory / "node-key.json"
    if not key_file.exists():
        write_key_file(new_node_key(), key_file)
    overrides = [f"identity.key_file={key_file}", f"store.path={directory / 'node.sqlite'}", "server.port=0"]
    overrides += [f"{section}.{name}={_flag_value(value)}" for section, fields in sections.items() for name, value in fields.items()]
    return load_config(None, environ={}, overrides=overrides)


def _flag_value(value) -> str:
    return ",".join(value) if isinstance(value, list | tuple) else str(value)


class ThreadedNode:
    """A node serving from its own event loop in a daemon thread (for synchronous clients)."""

    def __init__(self, config: NodeConfig, served: ServedModel | None = None):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="verillm-node", daemon=True)
        self.thread.start()
        self.runner, port = asyncio.run_coroutine_threadsafe(start_node(config, served), self.loop).result(120)
        self.app = self.runner.app
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        """Stop serving, tear the app down, stop the loop."""
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
