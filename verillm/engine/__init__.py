"""Inference engines: the Engine protocol, the torch reference engine, models and attacks.

Imports are lazy so that `import verillm.engine` (or `verillm.engine.base`) does not load
torch and transformers: only touching `TorchEngine`, `load_model`, ... does.
"""

import importlib

_EXPORTS = {
    "Engine": "verillm.engine.base",
    "TorchEngine": "verillm.engine.torch_engine",
    "load_model": "verillm.engine.models",
    "build_manifest": "verillm.engine.models",
    "build_tiny_llama": "verillm.engine.models",
    "load_smollm2": "verillm.engine.models",
    "MODEL_NAMES": "verillm.engine.models",
    "ATTACKS": "verillm.engine.attacks",
    "AttackSpec": "verillm.engine.attacks",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'verillm.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
