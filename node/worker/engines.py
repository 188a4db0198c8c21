"""The model a node serves: an Engine plus the tokenizer and manifest the HTTP edge needs.

Engines are built by kind (`ENGINE_BUILDERS`); another engine (vLLM) plugs in with one entry
that returns a `ServedModel`. The worker only ever calls `engine.run` (the Engine protocol);
the tokenizer is used by the OpenAI edge to turn text into tokens and back.
"""

from dataclasses import dataclass
from typing import Any

from verillm.engine.base import Engine
from verillm.errors import ConfigError, UnknownModel
from verillm.spec.params import get_preset
from verillm.spec.types import ModelManifest

from verillm.node.config import EngineConfig


@dataclass(frozen=True)
class ServedModel:
    """One model this node serves."""

    alias: str
    """The model as the node config names it ("tiny", "smollm2", a directory or GGUF path)."""
    engine: Engine
    tokenizer: Any
    """A Hugging Face tokenizer: encode/decode and apply_chat_template."""
    retention: str = "tokens"
    """What the worker keeps of a job for openings (`EngineConfig.retention`)."""

    @property
    def rebuilds_traces(self) -> bool:
        """Exact mode with token retention: openings re-run the job's prefill instead of reading a stored trace."""
        return self.retention == "tokens" and bool(self.manifest.kernel_class)

    @property
    def manifest(self) -> ModelManifest:
        return self.engine.manifest

    @property
    def model_id(self) -> bytes:
        return self.engine.model_id

    @property
    def name(self) -> str:
        """The OpenAI model id clients pass: the manifest name."""
        return self.manifest.name

    def is_named(self, name: str) -> bool:
        """Check if ``name`` refers to this model: manifest name, config alias or 0x model id."""
        return name in (self.manifest.name, self.alias, "0x" + self.model_id.hex())


def verify_model_name(served: ServedModel, name: object) -> None:
    """Check a request's model name; raise UnknownModel (404) naming what is served."""
    if not isinstance(name, str) or not served.is_named(name):
        raise UnknownModel(f"model {name!r} is not served here; this node serves {served.name!r}")


def build_torch_model(config: EngineConfig) -> ServedModel:
    """Load ``config.model`` with the reference TorchEngine."""
    from verillm.engine.models import load_model
    from verillm.engine.torch_engine import TorchEngine

    model, tokenizer, manifest = load_model(config.model, config.dtype, get_preset(config.preset), kernel_class=config.kernel_class or None)
    engine = TorchEngine(model, tokenizer, manifest, num_threads=config.threads or None)
    return ServedModel(alias=config.model, engine=engine, tokenizer=tokenizer, retention=config.retention)


def build_vllm_model(config: EngineConfig) -> ServedModel:
    """Load ``config.model`` on vLLM (needs the `gpu` extra, or `.venv-vllm` on CPU)."""
    from verillm.engine.vllm_engine import build_vllm_engine

    engine = build_vllm_engine(config.model, config.dtype, preset=get_preset(config.preset))
    return ServedModel(alias=config.model, engine=engine, tokenizer=engine.tokenizer)


ENGINE_BUILDERS = {"torch": build_torch_model, "vllm": build_vllm_model}
RETENTIONS = ("tokens", "full")


def build_served_model(config: EngineConfig) -> ServedModel:
    """Build the engine named by ``config.kind`` for ``config.model``; refuse a model with no tolerance profile."""
    from verillm.engine.profiles import check_servable

    if config.kind not in ENGINE_BUILDERS:
        raise ConfigError(f"engine.kind {config.kind!r} is not available; known: {sorted(ENGINE_BUILDERS)}")
    if config.retention not in RETENTIONS:
        raise ConfigError(f"engine.retention {config.retention!r} is not one of {list(RETENTIONS)}")
    served = ENGINE_BUILDERS[config.kind](config)
    check_servable(config.model, served.manifest, served.model_id, config.profile_dir)
    return served
