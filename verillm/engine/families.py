"""Architecture families: which decoder-only models the engines serve, and where their hidden states live.

A committed layer index means the same thing for every family (HF `output_hidden_states`
order, `verillm.engine.base`): 0 = the embedding output (Gemma's scaled one: its scaled
embedding module multiplies by sqrt(hidden) inside the module, so a hook on it sees the
scaled vector), i = the output of decoder layer i, num_layers = the final norm's output.

What a family needs beyond that, and where it is handled:
- Gemma 2 (and Gemma 3 when configured) soft-caps the final logits, cap·tanh(z/cap), in the
  CausalLM forward. The engines compute logits from `get_output_embeddings()`, so
  `prepare_model` makes that return a `SoftCappedHead` view sharing the head's weight (the
  state dict, the weights digest, tied embeddings and the saved config are unchanged).
- Phi-3 fuses q/k/v and gate/up into single nn.Linear matrices: a weight attack quantizes
  them per output row, which is the same as quantizing each part.
- MoE families (Qwen2-MoE, Qwen3-MoE, Mixtral, OLMoE) keep their experts as 3-D parameters
  [experts, out, in], not nn.Linear: `get_expert_weights` lists them for the weight attacks.
"""

import torch
from torch import nn

from verillm.errors import UnsupportedModel

# model_type (config.json) -> family. Only families whose layout the tests cover are served:
# an unknown layout could put the committed hidden state somewhere else.
FAMILIES = {
    "llama": "Llama",
    "mistral": "Mistral",
    "qwen2": "Qwen2",
    "qwen3": "Qwen3",
    "gemma": "Gemma",
    "gemma2": "Gemma 2",
    "gemma3_text": "Gemma 3 (text)",
    "phi3": "Phi-3",
    "qwen2_moe": "Qwen2-MoE",
    "qwen3_moe": "Qwen3-MoE",
    "mixtral": "Mixtral",
}


def get_family(config) -> str:
    """Return the family name for a transformers config; raise UnsupportedModel for any other layout."""
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        raise UnsupportedModel(f"model_type {model_type!r} is not a supported decoder-only family; supported: {sorted(FAMILIES)}")
    return FAMILIES[model_type]


def get_layer_module(model: nn.Module, hidden_index: int) -> nn.Module:
    """Return the module whose output is hidden state ``hidden_index`` (HF output_hidden_states order)."""
    decoder = model.get_decoder()
    num_layers = len(decoder.layers)
    if not 0 <= hidden_index <= num_layers:
        raise UnsupportedModel(f"hidden state {hidden_index} outside 0..{num_layers}")
    if hidden_index == 0:
        return decoder.embed_tokens
    if hidden_index == num_layers:
        return decoder.norm
    return decoder.layers[hidden_index - 1]


class SoftCappedHead(nn.Linear):
    """A view of the output head with Gemma's final soft-capping folded in: cap · tanh(W h / cap).

    It shares the head's weight Parameter (no copy), so a weight attack on the head shows here.
    """

    def __init__(self, head: nn.Linear, cap: float):
        nn.Module.__init__(self)
        self.in_features, self.out_features = head.in_features, head.out_features
        self.weight = head.weight
        self.bias = head.bias
        self.cap = float(cap)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = super().forward(hidden)
        return torch.tanh(logits / self.cap) * self.cap


def _get_soft_capped_output_embeddings(self) -> nn.Module:
    return SoftCappedHead(self.lm_head, self.config.final_logit_softcapping)


def prepare_model(model: nn.Module) -> nn.Module:
    """Return ``model`` ready for the engines: family checked, logit soft-capping in `get_output_embeddings`.

    The engines' logits are get_output_embeddings()(final hidden state). For a soft-capping
    family that must be the capped head, while HF's own forward keeps capping once from the
    config and save_pretrained (the vLLM weights folder) writes the model unchanged: so the
    model's class is swapped for a same-named subclass whose get_output_embeddings returns a
    capped view of the current lm_head (a deep copy — an attacked model — sees its own head).
    """
    get_family(model.config)
    if getattr(model.config, "final_logit_softcapping", None) and not getattr(type(model), "_verillm_soft_capped", False):
        base = type(model)
        model.__class__ = type(base.__name__, (base,), {"get_output_embeddings": _get_soft_capped_output_embeddings, "_verillm_soft_capped": True, "__module__": base.__module__})
    return model


def get_expert_weights(model: nn.Module) -> list[nn.Parameter]:
    """Return every MoE expert stack: 3-D parameters [experts, out_features, in_features]."""
    return [p for module in model.modules() for p in module.parameters(recurse=False) if p.dim() == 3]
