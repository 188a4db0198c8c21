"""The family matrix: a tiny random checkpoint of every supported family, saved as a local HF
directory and loaded by path, must capture the hidden states HF means by each layer index,
pass an honest audit and fail the int8 attack (~1.5 s per family on one core)."""

import dataclasses
import json

import pytest
import torch

from verillm.engine.attacks import compute_int8_weights, get_attack
from verillm.engine.families import SoftCappedHead, get_expert_weights, get_layer_module
from verillm.engine.models import load_model
from verillm.engine.tiny_checkpoints import TINY_FAMILIES, save_tiny_checkpoint
from verillm.engine.torch_engine import TorchEngine
from verillm.spec.job import compute_model_id
from verillm.spec.params import MAINNET
from verillm.spec.policy import REASON_FINGERPRINT
from verillm.engine.profiles import load_profile
from verillm.spec.types import Job, SamplingParams
from verillm.verifier.local import run_local_audits

QUESTIONS = ("What is the capital of France?", "Hi", "Please write a short poem about the sea.")
SAMPLED = SamplingParams(temperature_milli=800, top_k=50, seed=5)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """family -> its directory (written once per module)."""
    root = tmp_path_factory.mktemp("families")
    return {family: save_tiny_checkpoint(family, root / family) for family in TINY_FAMILIES}


@pytest.fixture(scope="module")
def loaded(checkpoints):
    """family -> (model, tokenizer, manifest) loaded by path."""
    return {family: load_model(str(path)) for family, path in checkpoints.items()}


def _prompt_ids(tokenizer, question: str) -> list[int]:
    return list(tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True)["input_ids"])


def test_the_matrix_covers_the_required_families():
    assert {"llama", "qwen2", "mistral", "gemma2", "gemma3_text", "phi3"} <= set(TINY_FAMILIES)
    assert {"qwen2_moe", "mixtral"} & set(TINY_FAMILIES)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_layer_index_is_the_hf_hidden_state(family, loaded):
    model, tokenizer, manifest = loaded[family]
    ids = torch.tensor([_prompt_ids(tokenizer, QUESTIONS[0])])
    captured = {}
    handles = [get_layer_module(model, i).register_forward_hook(lambda m, a, out, i=i: captured.__setitem__(i, out[0] if isinstance(out, tuple) else out))
               for i in range(manifest.num_layers + 1)]
    try:
        with torch.no_grad():
            reference = model(ids, output_hidden_states=True)
    finally:
        for handle in handles:
            handle.remove()
    assert len(reference.hidden_states) == manifest.num_layers + 1
    for index, hidden in enumerate(reference.hidden_states):
        assert torch.equal(captured[index], hidden), (family, index)
    # The engines' logits (head over the final hidden state) are the model's logits, soft-capping included.
    assert torch.equal(model.get_output_embeddings()(reference.hidden_states[-1]), reference.logits)


@pytest.mark.parametrize("family", ["gemma2", "gemma3_text"])
def test_gemma_logit_soft_capping_is_applied_once(family, loaded, checkpoints, tmp_path):
    from transformers import AutoModelForCausalLM

    model, tokenizer, manifest = loaded[family]
    assert isinstance(model.get_output_embeddings(), SoftCappedHead) and model.config.final_logit_softcapping == 30.0
    plain = AutoModelForCausalLM.from_pretrained(checkpoints[family], dtype=torch.float32, local_files_only=True).eval()
    ids = torch.tensor([_prompt_ids(tokenizer, QUESTIONS[2])])
    with torch.no_grad():
        hidden = model.get_decoder()(ids).last_hidden_state
        ours, theirs, raw = model.get_output_embeddings()(hidden), plain(ids).logits, plain.get_output_embeddings()(hidden)
    assert torch.equal(ours, theirs)
    assert raw.abs().max() > ours.abs().max()  # the cap does something: it is not applied zero times
    assert ours.abs().max() < 30.0
    # An attacked copy caps its own head; a saved copy (the vLLM weights folder) is the original model.
    attacked = get_attack("int8").build(model, tokenizer, manifest).model
    assert not torch.equal(attacked.get_output_embeddings()(hidden), ours)
    model.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert saved["final_logit_softcapping"] == 30.0 and saved["architectures"] == [type(plain).__name__]


def test_moe_expert_stacks_are_quantized_by_the_int8_attack(loaded):
    for family in ("qwen2_moe", "mixtral"):
        model, tokenizer, manifest = loaded[family]
        attacked = get_attack("int8").build(model, tokenizer, manifest).model
        honest_stacks, attacked_stacks = get_expert_weights(model), get_expert_weights(attacked)
        assert len(honest_stacks) == 2 * manifest.num_layers  # gate_up and down per layer
        for honest, quantized in zip(honest_stacks, attacked_stacks):
            assert not torch.equal(honest, quantized)
            assert torch.equal(quantized[1], compute_int8_weights(honest[1]))


def test_phi3_fused_projections_quantize_as_their_parts(loaded):
    model, *_ = loaded["phi3"]
    fused = model.model.layers[0].self_attn.qkv_proj.weight.detach()
    parts = fused.split([64, 32, 32])  # q (4 heads x 16), k and v (2 heads x 16)
    assert torch.equal(compute_int8_weights(fused), torch.cat([compute_int8_weights(p) for p in parts]))


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_honest_audit_accepted_and_int8_rejected(family, loaded):
    model, tokenizer, manifest = loaded[family]
    assert manifest.committed_layers == (1, 2, 4)
    # The tiny Llama's calibrated fp32 thresholds (4x its honest maxima, ~1e-5): as strict as a real profile.
    profile = dataclasses.replace(load_profile("tiny", "float32"), model=manifest.name)
    model_id = compute_model_id(manifest)
    jobs = [Job(model_id, tuple(_prompt_ids(tokenizer, q)), s, 12, bytes([n]) * 32) for n, q in enumerate(QUESTIONS) for s in (SamplingParams(), SAMPLED)]
    verifier = TorchEngine(model, tokenizer, manifest, max_batch_size=1)
    honest = run_local_audits(TorchEngine(model, tokenizer, manifest, max_batch_size=4), verifier, jobs, profile, MAINNET.CHALLENGE_POSITIONS)
    assert all(r.accepted for r in honest), [r.reasons for r in honest if not r.accepted]
    cheater = get_attack("int8").build(model, tokenizer, manifest)
    attacked = run_local_audits(cheater, verifier, jobs, profile, MAINNET.CHALLENGE_POSITIONS)
    assert not any(r.accepted for r in attacked)
    assert all(REASON_FINGERPRINT in r.reason_kinds for r in attacked)
