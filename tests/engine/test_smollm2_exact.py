"""SmolLM2-135M in bf16 exact mode: decode commitments equal the verifier's prefill bit for bit."""

import numpy as np
import pytest

from verillm.engine.attacks import ATTACKS
from verillm.engine.models import load_model
from verillm.engine.torch_engine import TorchEngine
from verillm.spec.policy import REASON_FINGERPRINT
from verillm.engine.profiles import select_profile
from verillm.spec.types import SamplingParams
from verillm.verifier.local import Party, check_pair, commit_runs, compute_member_jobs

pytestmark = pytest.mark.smollm2


@pytest.fixture(scope="module")
def exact_smollm2():
    return load_model("smollm2", "bfloat16")


def test_honest_bf16_audits_are_exact_and_kv_fp8_is_caught(exact_smollm2, smollm2_prompts, make_job):
    model, tokenizer, manifest = exact_smollm2
    assert manifest.kernel_class and manifest.token_margin_micrologits == 0
    profile = select_profile(manifest, "smollm2")
    worker = TorchEngine(model, tokenizer, manifest, max_batch_size=1, num_threads=1)
    verifier = TorchEngine(model, tokenizer, manifest, max_batch_size=8, num_threads=2)
    samplings = (SamplingParams(), SamplingParams(temperature_milli=800, top_p_ppm=900_000, seed=3))
    jobs = [make_job(worker, p, max_new_tokens=12, sampling=s, nonce=bytes([i]) * 32) for i, (p, s) in enumerate((p, s) for p in smollm2_prompts for s in samplings)]
    worker_runs = commit_runs(jobs, worker.run(jobs), manifest, Party(b"\x57" * 32))
    member_jobs = compute_member_jobs(worker_runs)
    member_traces = verifier.run(member_jobs)
    member_runs = commit_runs(member_jobs, member_traces, manifest, Party(b"\x4d" * 32))
    for run, member_run, member in zip(worker_runs, member_runs, member_traces):
        assert check_pair(run, member_run, manifest, profile, 8).accepted
        count = run.trace.num_positions
        assert np.array_equal(run.trace.fingerprints.view(np.uint32), member.fingerprints[:count].view(np.uint32))
    cheater = ATTACKS["kv_fp8"].build(model, tokenizer, manifest, max_batch_size=4)
    cheat_runs = commit_runs(jobs, cheater.run(jobs), manifest, Party(b"\x57" * 32))
    cheat_members = commit_runs(compute_member_jobs(cheat_runs), verifier.run(compute_member_jobs(cheat_runs)), manifest, Party(b"\x4d" * 32))
    assert all(REASON_FINGERPRINT in check_pair(w, m, manifest, profile, 8).reason_kinds for w, m in zip(cheat_runs, cheat_members))
