"""Tiny random checkpoints of each supported family, written as a local Hugging Face directory.

`save_tiny_checkpoint("qwen2", path)` writes what an operator's directory holds (config.json,
generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
chat_template.jinja) for a 4-layer, 64-wide model of that family with seeded weights and the
tiny byte-level BPE (vocab 1024, ChatML template). Nothing is downloaded; the same seed
writes the same files. The family tests, the path e2e tests and `verillm model
tiny-checkpoint` use it.
"""

from pathlib import Path

import torch

from verillm.errors import ConfigError

# Shared tiny shape: 4 decoder layers, so the committed-layer rule gives (1, 2, 4) as for tiny.
_COMMON = dict(
    vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
)
_MOE = dict(num_experts_per_tok=2, moe_intermediate_size=32)


def _configs() -> dict:
    """family -> (config class, family-specific fields); imported lazily (transformers is heavy)."""
    import transformers as tf

    return {
        "llama": (tf.LlamaConfig, {}),
        "mistral": (tf.MistralConfig, {"sliding_window": 4096}),
        "qwen2": (tf.Qwen2Config, {}),
        "qwen3": (tf.Qwen3Config, {"head_dim": 16}),
        # Gemma 2: tied embeddings, scaled embeddings, attention and final-logit soft-capping.
        "gemma2": (tf.Gemma2Config, {"head_dim": 16, "query_pre_attn_scalar": 16, "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0, "sliding_window": 4096}),
        "gemma3_text": (tf.Gemma3TextConfig, {"head_dim": 16, "query_pre_attn_scalar": 16, "final_logit_softcapping": 30.0, "sliding_window": 4096}),
        "phi3": (tf.Phi3Config, {}),
        "qwen2_moe": (tf.Qwen2MoeConfig, {**_MOE, "num_experts": 4, "shared_expert_intermediate_size": 64}),
        "mixtral": (tf.MixtralConfig, {"num_experts_per_tok": 2, "num_local_experts": 4}),
    }


TINY_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", "qwen2_moe", "mixtral")


def build_tiny_family_model(family: str, seed: int = 0):
    """Return (model, tokenizer) of a tiny ``family`` model with weights drawn from ``seed``, fp32."""
    from transformers import AutoModelForCausalLM

    from verillm.engine.models import build_tiny_tokenizer

    configs = _configs()
    if family not in configs:
        raise ConfigError(f"no tiny checkpoint for family {family!r}; known: {sorted(configs)}")
    tokenizer = build_tiny_tokenizer()
    config_class, fields = configs[family]
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = config_class(**_COMMON, **fields, bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, end_of_turn]
    head = model.get_output_embeddings()
    if head.weight is not model.get_input_embeddings().weight:
        # As for the tiny Llama: default init gives nearly flat logits; a 10x head gives a real
        # LM's logit spread, so top-1 gaps and sampling mean something.
        with torch.no_grad():
            head.weight.mul_(10.0)
    return model.eval(), tokenizer


def save_tiny_checkpoint(family: str, directory: str | Path, seed: int = 0) -> Path:
    """Write a tiny ``family`` checkpoint (weights from ``seed``) as an HF directory; return its path."""
    directory = Path(directory)
    model, tokenizer = build_tiny_family_model(family, seed)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
