"""The real SmolLM2-135M-Instruct through TorchEngine: few, short tests (the model is 135 M params)."""

import numpy as np
import pytest

from verillm.spec.job import compute_num_positions, compute_verification_job
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN

pytestmark = pytest.mark.smollm2


def test_manifest_binds_the_chat_model(smollm2_model):
    model, tokenizer, manifest = smollm2_model
    assert (manifest.num_layers, manifest.hidden_size, manifest.vocab_size) == (30, 576, 49152)
    assert manifest.committed_layers == (1, 15, 30)
    # Derived from the files: generation_config, config and tokenizer EOS and the template's turn end are all <|im_end|>.
    assert manifest.stop_tokens == (tokenizer.convert_tokens_to_ids("<|im_end|>"),)
    assert manifest.name == f"llama-30x576-{manifest.weights_digest[:4].hex()}"
    assert manifest.token_margin_micrologits == 1_000


def test_answers_stops_and_replays_within_band(smollm2_engine, smollm2_model, smollm2_prompts, make_job):
    tokenizer = smollm2_model[1]
    jobs = [make_job(smollm2_engine, p, max_new_tokens=12) for p in smollm2_prompts]
    traces = smollm2_engine.run(jobs)
    answer = traces[0]
    assert "Paris" in tokenizer.decode(answer.output_tokens)
    assert answer.output_tokens[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert answer.num_positions == compute_num_positions(jobs[0], len(answer.output_tokens))
    verification = compute_verification_job(jobs[0], answer.output_tokens, b"\x02" * 32)
    replay = smollm2_engine.run([verification])[0]
    shared = answer.num_positions
    deltas = np.abs(replay.fingerprints[:shared] - answer.fingerprints).max(axis=(0, 2))
    assert (deltas < 1e-4).all(), deltas
    prompt_len = len(jobs[0].input_tokens)
    assert (replay.flags[prompt_len - 1 : shared] & FLAG_NEXT_WITHIN_MARGIN).all()
    assert replay.flags[shared - 1] & FLAG_STOP_WITHIN_MARGIN  # the verifier agrees that it stopped there
