"""The attack suite with the dishonest worker on vLLM: every attack vLLM can express is
rejected, for its own reason, by a reference verifier and by an honest vLLM verifier."""

import pytest

from verillm.engine.attacks import ATTACKS
from verillm.engine.vllm_attacks import (
    NOT_EXPRESSIBLE,
    WEIGHT_ATTACKS,
    build_job_attack,
    build_kv_fp8_attack,
    build_speculative_attack,
    build_weight_attack,
    compute_attacked_model,
    compute_draft_model,
    get_kv_fp8_refusal,
    get_vllm_attack_names,
)
from verillm.engine.vllm_engine import prepare_model_dir
from verillm.spec.types import SamplingParams
from verillm.verifier.local import run_local_audits

pytestmark = pytest.mark.vllm

SAMPLED = SamplingParams(temperature_milli=800, top_k=50, top_p_ppm=900_000, seed=7)
NEW_TOKENS = 32  # the goal: every attack detected within 32 output tokens
CHALLENGE_POSITIONS = 32


@pytest.fixture(scope="module")
def vllm_dishonest(tiny_model, start_vllm_engine):
    """A second vLLM engine whose weights each weight-attack test replaces (the honest one stays clean)."""
    engine = start_vllm_engine(tiny_model, "tiny", max_batch_size=8, max_model_len=1024)
    yield engine
    engine.close()


def _jobs(engine, prompts, make_job, name):
    # wrong_seed changes nothing on a greedy job (by design): audit it on sampled jobs only.
    samplings = (SAMPLED,) if name == "wrong_seed" else (SamplingParams(), SAMPLED)
    return [make_job(engine, p, max_new_tokens=NEW_TOKENS, sampling=s) for p in prompts[:3] for s in samplings]


def _assert_all_rejected_for(name, results):
    category = ATTACKS[name].category
    for result in results:
        assert not result.accepted, name
        assert category in result.reason_kinds, (name, result.reasons)


def test_every_attack_is_run_or_documented_as_not_expressible():
    runnable = set(get_vllm_attack_names())
    assert runnable | set(NOT_EXPRESSIBLE) == set(ATTACKS) and not runnable & set(NOT_EXPRESSIBLE)
    assert runnable == set(WEIGHT_ATTACKS) | {"prompt_edit", "token_substitute", "truncate", "wrong_temperature", "wrong_seed", "kv_fp8", "speculative"}


def test_swapping_in_the_honest_weights_stays_honest(vllm_dishonest, tiny_model, tiny_engine, tiny_prompts, make_job, tiny_profile):
    """The weight-swap path itself adds nothing: honest weights reloaded in place pass the audit."""
    vllm_dishonest.load_weights(tiny_model[0])
    jobs = _jobs(vllm_dishonest, tiny_prompts, make_job, "honest")
    results = run_local_audits(vllm_dishonest, tiny_engine, jobs, tiny_profile, CHALLENGE_POSITIONS)
    assert all(r.accepted for r in results), [r.reasons for r in results if not r.accepted]


@pytest.mark.parametrize("name", [n for n in ATTACKS if n in WEIGHT_ATTACKS])
def test_weight_attack_on_vllm_is_rejected(name, vllm_dishonest, vllm_tiny, tiny_model, tiny_engine, tiny_prompts, make_job, tiny_profile, vllm_model_root):
    """The attacked weights are saved as a folder and vLLM reloads them in place from it."""
    _, tokenizer, manifest = tiny_model
    folder = prepare_model_dir(compute_attacked_model(name, *tiny_model), tokenizer, vllm_model_root / f"attack-{name}")
    vllm_dishonest.load_weights_from(folder)
    jobs = _jobs(vllm_dishonest, tiny_prompts, make_job, name)
    for verifier in (tiny_engine, vllm_tiny):
        _assert_all_rejected_for(name, run_local_audits(vllm_dishonest, verifier, jobs, tiny_profile, CHALLENGE_POSITIONS))


@pytest.mark.parametrize("name", ["prompt_edit", "token_substitute", "truncate", "wrong_temperature", "wrong_seed"])
def test_job_attack_on_vllm_is_rejected(name, vllm_tiny, tiny_engine, tiny_prompts, make_job, tiny_profile):
    attacked = build_job_attack(name, vllm_tiny)
    jobs = _jobs(vllm_tiny, tiny_prompts, make_job, name)
    for verifier in (tiny_engine, vllm_tiny):
        _assert_all_rejected_for(name, run_local_audits(attacked, verifier, jobs, tiny_profile, CHALLENGE_POSITIONS))


def test_token_substitution_matches_the_reference_attack(vllm_tiny, tiny_model, tiny_prompts, make_job):
    """The vLLM attack emits exactly what the reference suite's attack emits (same rule, same place)."""
    reference = ATTACKS["token_substitute"].build(*tiny_model)
    jobs = _jobs(vllm_tiny, tiny_prompts, make_job, "token_substitute")
    ours = build_job_attack("token_substitute", vllm_tiny).run(jobs)
    theirs = reference.run(jobs)
    assert [t.output_tokens for t in ours] == [t.output_tokens for t in theirs]


def test_weight_attack_from_a_saved_folder(tiny_model, tiny_engine, tiny_prompts, make_job, tiny_profile, vllm_model_root):
    """The plain path: int8 weights written to disk, a fresh vLLM engine loads them."""
    engine = build_weight_attack("int8", *tiny_model, root=vllm_model_root, max_batch_size=8, max_model_len=1024)
    try:
        jobs = _jobs(engine, tiny_prompts, make_job, "int8")
        _assert_all_rejected_for("int8", run_local_audits(engine, tiny_engine, jobs, tiny_profile, CHALLENGE_POSITIONS))
    finally:
        engine.close()


def test_kv_fp8_on_vllm_is_rejected(vllm_tiny, tiny_model, tiny_engine, tiny_prompts, make_job, tiny_profile):
    """vLLM's own fp8 KV cache (`kv_cache_dtype="fp8"`) over the honest weights: a fresh engine."""
    refusal = get_kv_fp8_refusal()
    if refusal:  # x86 without AVX-512 or AMX: vLLM refuses the engine start
        pytest.skip(f"vLLM refuses an fp8 KV cache on this CPU: {refusal}")
    engine = build_kv_fp8_attack(vllm_tiny.model_dir, tiny_model[2], max_batch_size=8, max_model_len=1024)
    try:
        assert engine.llm.llm_engine.vllm_config.cache_config.cache_dtype == "fp8"
        jobs = _jobs(engine, tiny_prompts, make_job, "kv_fp8")
        for verifier in (tiny_engine, vllm_tiny):
            _assert_all_rejected_for("kv_fp8", run_local_audits(engine, verifier, jobs, tiny_profile, CHALLENGE_POSITIONS))
    finally:
        engine.close()


def test_speculative_on_vllm_is_rejected(vllm_dishonest, vllm_tiny, tiny_model, tiny_engine, tiny_prompts, make_job, tiny_profile, vllm_model_root):
    """The draft (the first half of the layers) generates in the second vLLM engine; the honest
    engine emits its tokens unverified over its own hidden states. The tokens are the reference
    attack's, and only the token check catches them."""
    model, tokenizer, _ = tiny_model
    vllm_dishonest.load_weights_from(prepare_model_dir(compute_draft_model(model), tokenizer, vllm_model_root / "draft"))
    attacked = build_speculative_attack(vllm_tiny, vllm_dishonest)
    jobs = _jobs(vllm_tiny, tiny_prompts, make_job, "speculative")
    traces = attacked.run(jobs)
    assert [t.output_tokens for t in traces] == [t.output_tokens for t in ATTACKS["speculative"].build(*tiny_model).run(jobs)]
    assert [t.output_tokens for t in traces] != [t.output_tokens for t in vllm_tiny.run(jobs)]
    for verifier in (tiny_engine, vllm_tiny):
        _assert_all_rejected_for("speculative", run_local_audits(attacked, verifier, jobs, tiny_profile, CHALLENGE_POSITIONS))
