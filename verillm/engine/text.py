"""Text ↔ tokens for the OpenAI edge, with the served model's own tokenizer and chat template.

Jobs carry tokens, never text (the manifest binds the tokenizer and chat template): text is
tokenized here, once, and the output tokens are decoded for the response.
"""

from collections.abc import Sequence

from verillm.errors import InvalidInput, VerillmError
from verillm.spec.types import ModelManifest


def compute_prompt_tokens(tokenizer, prompt: str | Sequence[int]) -> tuple[int, ...]:
    """Return the input tokens of a completion prompt (token ids pass through unchanged)."""
    if isinstance(prompt, str):
        return tuple(tokenizer.encode(prompt))
    return tuple(prompt)


def compute_chat_tokens(tokenizer, messages: Sequence[dict]) -> tuple[int, ...]:
    """Return the input tokens of a chat: the model's chat template with the assistant prompt."""
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidInput("messages: this model has no chat template; use /v1/completions")
    encoded = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
    ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    return tuple(int(t) for t in ids)


def compute_text(tokenizer, tokens: Sequence[int]) -> str:
    """Return the text of output tokens, special tokens (the stop token) left out."""
    return tokenizer.decode(list(tokens), skip_special_tokens=True)


def compute_text_pieces(tokenizer, tokens: Sequence[int]) -> list[str]:
    """Return one text piece per token whose concatenation is `compute_text` of all of them.

    A token that ends inside a multi-byte character yields "" and the character comes with
    the token that completes it.
    """
    pieces, emitted = [], ""
    for end in range(1, len(tokens) + 1):
        text = compute_text(tokenizer, tokens[:end])
        if text.endswith("\ufffd") and end < len(tokens):
            pieces.append("")
            continue
        if not text.startswith(emitted):
            raise VerillmError("tokenizer decoding is not prefix-stable; cannot stream this output")
        pieces.append(text[len(emitted):])
        emitted = text
    return pieces


def compute_finish_reason(tokens: Sequence[int], manifest: ModelManifest) -> str:
    """Return "stop" if the output ends with a stop token, else "length"."""
    return "stop" if tokens and tokens[-1] in manifest.stop_tokens else "length"


def compute_max_new_tokens(requested: int | None, num_input_tokens: int, manifest: ModelManifest, node_limit: int) -> int:
    """Return max_new_tokens for a job: the request's, else what the node limit and the context allow."""
    if requested is not None:
        return requested
    return max(1, min(node_limit, manifest.max_context_tokens - num_input_tokens))
