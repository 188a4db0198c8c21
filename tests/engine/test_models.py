"""The tiny model and manifests: deterministic from a seed, in this process and in another."""

import subprocess
import sys

import pytest
import torch

from verillm.engine.models import build_manifest, build_tiny_llama, compute_tokenizer_digest, compute_weights_digest, load_model
from verillm.errors import ConfigError, UnknownModel

DIGESTS_SCRIPT = """
from verillm.engine.models import load_model
from verillm.spec.job import compute_model_id
model, tokenizer, manifest = load_model("tiny")
print(compute_model_id(manifest).hex())
"""


def test_same_seed_gives_bit_identical_weights_and_tokenizer():
    (a, tok_a), (b, tok_b) = build_tiny_llama(seed=0), build_tiny_llama(seed=0)
    state_a, state_b = a.state_dict(), b.state_dict()
    assert all(torch.equal(state_a[name], state_b[name]) for name in state_a)
    assert compute_tokenizer_digest(tok_a) == compute_tokenizer_digest(tok_b)
    assert compute_weights_digest(a) == compute_weights_digest(b)


def test_other_seed_gives_other_weights_same_tokenizer():
    (a, tok_a), (b, tok_b) = build_tiny_llama(seed=0), build_tiny_llama(seed=1)
    assert compute_weights_digest(a) != compute_weights_digest(b)
    assert compute_tokenizer_digest(tok_a) == compute_tokenizer_digest(tok_b)


def test_model_id_is_the_same_in_a_fresh_process(tiny_model):
    from verillm.spec.job import compute_model_id

    result = subprocess.run([sys.executable, "-c", DIGESTS_SCRIPT], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == compute_model_id(tiny_model[2]).hex()


def test_tiny_manifest_fields(tiny_model):
    model, tokenizer, manifest = tiny_model
    assert len(tokenizer) == manifest.vocab_size == 1024
    assert manifest.committed_layers == (1, 2, 4) and manifest.num_layers == 4
    assert manifest.hidden_size == 128 and manifest.fingerprint_dims == 1
    assert manifest.stop_tokens == (tokenizer.eos_token_id,)
    assert manifest.token_margin_micrologits == 1_000 and manifest.dtype == "float32"
    assert manifest.max_context_tokens == 2048
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_dtype_is_bound_in_the_manifest():
    model, tokenizer, manifest = load_model("tiny", "bfloat16", mode="tolerance")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert manifest.dtype == "bfloat16" and manifest.token_margin_micrologits == 500_000 and manifest.kernel_class == ""
    fp32 = build_manifest("tiny-llama-seed0", *build_tiny_llama(0), "float32", (1, 2, 4))
    assert fp32.weights_digest != manifest.weights_digest


def test_unknown_names_are_rejected():
    with pytest.raises(UnknownModel):
        load_model("gpt-17")
    with pytest.raises(ConfigError):
        load_model("tiny", "float16")
    with pytest.raises(ConfigError):
        build_manifest("x", *build_tiny_llama(0), "float32", (0, 5))
