"""Exact mode: among tied logits only the sampler's own choice passes the token check.

The attacker's move: at a position where two tokens have bit-identical logits, emit the one
the sampler did not choose (steering the output, or a covert channel), and claim gap 0. The
tie is forged by giving two vocabulary rows of the LM head the same weights, so both tokens
get the same logit at every position; worker and committee run that same model.
"""

import copy

import numpy as np
import pytest
import torch

from verillm.engine.kernel_class import compute_kernel_class
from verillm.engine.models import TINY_COMMITTED_LAYERS, build_manifest, load_model
from verillm.engine.profiles import select_profile
from verillm.engine.torch_engine import TorchEngine, compute_greedy_flags
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN
from verillm.spec.policy import REASON_TOKEN
from verillm.spec.sampling import compute_position_flags, is_token_accepted
from verillm.spec.types import SamplingParams
from verillm.verifier.local import Party, check_pair, commit_runs, compute_member_jobs


class TieSwapEngine(TorchEngine):
    """Emits the other token of the forged tie whenever the sampler chose one of the pair."""

    def __init__(self, *args, pair: tuple[int, int], **kw):
        super().__init__(*args, **kw)
        self.pair = pair

    def force_token(self, job, output_index, token, logits):
        low, high = self.pair
        return {low: high, high: low}.get(token, token)


@pytest.fixture(scope="module")
def tied_model(tiny_prompts, make_job):
    model, tokenizer, manifest = load_model("tiny", "bfloat16")
    probe = TorchEngine(model, tokenizer, manifest)
    emitted = probe.run([make_job(probe, tiny_prompts[0], max_new_tokens=1)])[0].output_tokens[0]
    pair = (emitted - 1, emitted) if emitted > 0 else (emitted, emitted + 1)
    tied = copy.deepcopy(model)
    with torch.no_grad():
        tied.lm_head.weight[pair[0]] = tied.lm_head.weight[pair[1]]
    tied_manifest = build_manifest("tiny-llama-tied", tied, tokenizer, "bfloat16", TINY_COMMITTED_LAYERS, stop_tokens=manifest.stop_tokens, kernel_class=compute_kernel_class(tied, manifest.fingerprint_dims))
    return tied, tokenizer, tied_manifest, pair


def test_the_spec_rule_accepts_only_the_choice_at_margin_zero():
    assert is_token_accepted(7, 7, 0.0, 0.0) and not is_token_accepted(8, 7, 0.0, 0.0)
    assert is_token_accepted(8, 7, 0.0, 0.5) and not is_token_accepted(8, 7, 0.6, 0.5)
    logits = np.array([1.0, 3.0, 3.0, 0.5], dtype=np.float32)
    greedy = SamplingParams()
    assert compute_position_flags(logits, greedy, 0, 1, [2], 0.0) == FLAG_NEXT_WITHIN_MARGIN  # 1 is the argmax (first max)
    assert compute_position_flags(logits, greedy, 0, 2, [1], 0.0) == FLAG_STOP_WITHIN_MARGIN  # 2 only ties it
    assert compute_position_flags(logits, greedy, 0, 2, [3], 0.5) == FLAG_NEXT_WITHIN_MARGIN  # tolerance: the gap rules
    batch = torch.tensor(np.stack([logits, logits]))
    flags = compute_greedy_flags(batch, torch.tensor([1, 2]), torch.tensor([2]), 0.0)
    assert flags.tolist() == [FLAG_NEXT_WITHIN_MARGIN, 0]


def test_a_worker_emitting_the_other_tied_token_is_rejected(tied_model, tiny_prompts, make_job):
    model, tokenizer, manifest, pair = tied_model
    profile = select_profile(manifest, "tiny")
    honest = TorchEngine(model, tokenizer, manifest, max_batch_size=4)
    cheater = TieSwapEngine(model, tokenizer, manifest, max_batch_size=4, pair=pair)
    jobs = [make_job(honest, p, max_new_tokens=12, nonce=bytes([i]) * 32) for i, p in enumerate(tiny_prompts)]
    with torch.inference_mode():
        logits = model(torch.tensor([tiny_prompts[0]])).logits[0, -1].float()
    assert logits[pair[0]] == logits[pair[1]] == logits.max()  # the forged tie is real, at the first output

    def audit(engine):
        runs = commit_runs(jobs, engine.run(jobs), manifest, Party(b"\x57" * 32))
        members = commit_runs(compute_member_jobs(runs), honest.run(compute_member_jobs(runs)), manifest, Party(b"\x4d" * 32))
        return runs, [check_pair(w, m, manifest, profile, 8) for w, m in zip(runs, members)]

    honest_runs, honest_results = audit(honest)
    assert all(r.accepted for r in honest_results)
    assert honest_runs[0].trace.output_tokens[0] == pair[0]  # the tie rule: the lower id
    cheat_runs, cheat_results = audit(cheater)
    swapped = [i for i, run in enumerate(cheat_runs) if set(run.trace.output_tokens) & set(pair)]
    assert 0 in swapped and cheat_runs[0].trace.output_tokens[0] == pair[1]
    for i in swapped:
        assert REASON_TOKEN in cheat_results[i].reason_kinds, cheat_results[i].reasons
