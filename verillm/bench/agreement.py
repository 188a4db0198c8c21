"""`verillm bench agreement`: are the exact kernels still the model? Greedy tokens and perplexity against stock bf16.

The canonical kernels (and, for comparison, the per-machine exact kernels) define the
model's exact outputs: inputs and weights on power-of-two grids, exact sums, one rounding.
Measured against stock bf16 (HF forward, sdpa attention, stock GEMMs) on one machine:

- ``greedy_match``: the share of greedy output tokens equal to stock's at the same position,
  counted up to each job's first divergence (after it the contexts differ); ``first_divergence``
  the mean index of the first differing output token (``max_new_tokens`` when none);
- ``teacher_forced_agreement``: over the stock outputs fed as context, the share of
  positions where the kernels' argmax equals stock's argmax (no divergence compounding);
- ``perplexity`` on a fixed English text (the tiny corpus's prose lines, in the repository)
  and its relative difference to stock's.
"""

import dataclasses
import math

import torch

from verillm.engine.exact import CANONICAL_FORM, MACHINE_FORM, exact_kernels
from verillm.engine.kernel_class import compute_kernel_class
from verillm.engine.models import TINY_CORPUS
from verillm.engine.torch_engine import TorchEngine
from verillm.spec.job import compute_model_id
from verillm.spec.types import Job, SamplingParams

QUESTIONS = (
    "What is the capital of France?",
    "Please write a short poem about the sea and the gulls at dawn.",
    "How many legs does a spider have, and how many eyes?",
    "Explain in two sentences why the sky is blue.",
    "List three uses of a paperclip.",
    "What does a verifier check in a verifiable computation?",
    "Translate 'good morning' into French and Spanish.",
    "Give me a recipe for a simple tomato soup.",
)
TEXT = "\n".join(line for line in TINY_CORPUS.splitlines() if line and not line[0].isdigit())


def make_prompts(tokenizer, count: int) -> list[tuple[int, ...]]:
    """Chat-formatted prompts (the model's template) for the first ``count`` fixed questions."""
    prompts = []
    for question in QUESTIONS[:count]:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True)
        prompts.append(tuple(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids))
    return prompts


def compute_logits(model, input_ids: torch.Tensor, form: str | None) -> torch.Tensor:
    """Logits [T, V] (fp32) of one sequence: stock (``form`` None) or through the exact kernels of ``form``."""
    with torch.inference_mode():
        if form is None:
            return model(input_ids=input_ids[None], use_cache=False).logits[0].float()
        with exact_kernels(model, form=form):
            return model(input_ids=input_ids[None], use_cache=False).logits[0].float()


def compute_perplexity(logits: torch.Tensor, ids: torch.Tensor) -> float:
    nll = torch.nn.functional.cross_entropy(logits[:-1].double(), ids[1:], reduction="mean")
    return math.exp(float(nll))


def _greedy(model, tokenizer, manifest, prompts, max_new_tokens: int) -> list[tuple[int, ...]]:
    engine = TorchEngine(model, tokenizer, manifest, max_batch_size=len(prompts), capture=False)
    model_id = compute_model_id(manifest)
    jobs = [Job(model_id, p, SamplingParams(), max_new_tokens, bytes([i]) * 32) for i, p in enumerate(prompts)]
    return [trace.output_tokens for trace in engine.run(jobs)]


def measure_agreement(model, tokenizer, manifest, prompt_count: int = 8, max_new_tokens: int = 64) -> dict:
    """Agreement of the per-machine and canonical exact kernels with stock bf16 (see the module doc)."""
    stock = dataclasses.replace(manifest, kernel_class="", token_margin_micrologits=500_000)
    forms = {
        MACHINE_FORM: dataclasses.replace(manifest, kernel_class=compute_kernel_class(model, manifest.fingerprint_dims, MACHINE_FORM)),
        CANONICAL_FORM: dataclasses.replace(manifest, kernel_class=compute_kernel_class(model, manifest.fingerprint_dims, CANONICAL_FORM)),
    }
    prompts = make_prompts(tokenizer, prompt_count)
    stock_outputs = _greedy(model, tokenizer, stock, prompts, max_new_tokens)
    text_ids = torch.tensor(tokenizer.encode(TEXT), dtype=torch.long)
    stock_ppl = compute_perplexity(compute_logits(model, text_ids, None), text_ids)
    report = {"prompts": len(prompts), "max_new_tokens": max_new_tokens, "text_tokens": len(text_ids), "stock_perplexity": stock_ppl}
    for form, form_manifest in forms.items():
        outputs = _greedy(model, tokenizer, form_manifest, prompts, max_new_tokens)
        matched, compared, divergences = 0, 0, []
        for mine, theirs in zip(outputs, stock_outputs):
            first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            divergences.append(first)
            matched += first
            compared += min(len(theirs), first + 1) if first < min(len(mine), len(theirs)) else first
        agree, positions = 0, 0
        for prompt, output in zip(prompts, stock_outputs):
            ids = torch.tensor(prompt + output, dtype=torch.long)
            start = len(prompt) - 1
            ours = compute_logits(model, ids, form)[start:-1].argmax(-1)
            reference = compute_logits(model, ids, None)[start:-1].argmax(-1)
            agree += int((ours == reference).sum())
            positions += len(ours)
        ppl = compute_perplexity(compute_logits(model, text_ids, form), text_ids)
        report[form] = {
            "kernel_class": form_manifest.kernel_class,
            "greedy_match": matched / max(1, compared),
            "first_divergence_mean": sum(divergences) / len(divergences),
            "identical_outputs": sum(a == b for a, b in zip(outputs, stock_outputs)),
            "teacher_forced_agreement": agree / max(1, positions),
            "perplexity": ppl,
            "perplexity_rel_diff": ppl / stock_ppl - 1,
        }
    return report
