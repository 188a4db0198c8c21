#!/usr/bin/env bash
# Issue 37 on a lent GPU: the canonical kernels' class of tiny, measured on CUDA, must be the digest
# the CPUs give (docs/protocol.md §9), and honest audits must pass bit for bit on CUDA and across
# CUDA (worker) and CPU (member). Same setup as scripts/gpu-check.sh (wheels from .whl/, the
# package as source). Usage on the device machine: bash scripts/gpu-canonical-class.sh OUTDIR
# Writes OUTDIR/canonical-class.json and .txt; about 1–2 minutes.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"
site=/tmp/verillm-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl || exit 1
rm -rf "$site/verillm" && cp -r verillm "$site/" && cp -r node "$site/verillm/node" && cp -r verifier "$site/verillm/verifier"
export PYTHONPATH=$site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
timeout 170 python3 -P - "$out" <<'PY' 2>&1 | tee "$out/canonical-class.txt"
import dataclasses, json, sys, time
import torch
from verillm.engine.kernel_class import compute_kernel_class
from verillm.engine.models import load_model
from verillm.engine.torch_engine import TorchEngine
from verillm.engine.profiles import select_profile
from verillm.spec.types import Job, SamplingParams
from verillm.verifier.local import Party, check_pair, commit_runs, compute_member_jobs

CPU_DIGEST_HERE = "canon1-kat1-b4ec3833ba03749e07deb78c"  # tiny on the AVX2 EPYC, ATEN default and avx2 (docs/protocol.md §9)
out = sys.argv[1]
report = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "cpu_capability": torch.backends.cpu.get_cpu_capability()}
started = time.time()
model, tokenizer, manifest = load_model("tiny", "bfloat16", mode="canonical")  # the battery on this machine's CPU
report["cpu_class"] = manifest.kernel_class
gpu_model = model.to("cuda")  # weights: this machine's seeded init (the class does not read them)
report["cuda_class"] = compute_kernel_class(gpu_model, manifest.fingerprint_dims, "canonical")
report["same_as_documented_cpu_class"] = report["cuda_class"] == CPU_DIGEST_HERE
report["cpu_equals_cuda"] = report["cuda_class"] == report["cpu_class"]
print(json.dumps(report), flush=True)
worker = TorchEngine(gpu_model, tokenizer, manifest, max_batch_size=4)
member = TorchEngine(gpu_model, tokenizer, manifest, max_batch_size=3)
prompts = [tokenizer.encode(q) for q in ("What is the capital of France?", "Write a poem about the sea.", "How many legs does a spider have?", "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16")]
jobs = [Job(worker.model_id, tuple(p), SamplingParams() if i % 2 == 0 else SamplingParams(temperature_milli=900, top_k=40, seed=i), 48, bytes([i]) * 32) for i, p in enumerate(prompts * 3)]
profile = select_profile(manifest, "tiny")

def audit(worker_engine, member_engine, label):
    worker_runs = commit_runs(jobs, worker_engine.run(jobs), manifest, Party(b"\x57" * 32))
    member_jobs = compute_member_jobs(worker_runs)
    member_runs = commit_runs(member_jobs, member_engine.run(member_jobs), manifest, Party(b"\x4d" * 32))
    results = [check_pair(w, m, manifest, profile, 8) for w, m in zip(worker_runs, member_runs)]
    report[label] = {"audits": len(results), "accepted": sum(r.accepted for r in results), "max_cell_error": max(l.max_error for r in results for l in r.measurement.layers)}
    print(label, report[label], flush=True)
    return worker_runs

audit(worker, member, "cuda_worker_cuda_member")
cpu_model = load_model("tiny", "bfloat16", mode="canonical")[0]
cpu_model.load_state_dict({k: v.cpu() for k, v in gpu_model.state_dict().items()})
cpu_member = TorchEngine(cpu_model, tokenizer, manifest, max_batch_size=3, num_threads=4)
audit(worker, cpu_member, "cuda_worker_cpu_member")
cuda_traces = worker.run(jobs[:4])
cpu_traces = TorchEngine(cpu_model, tokenizer, manifest, max_batch_size=4, num_threads=4).run(jobs[:4])
report["whole_traces_cuda_equal_cpu"] = all(a.output_tokens == b.output_tokens and a.fingerprints.tobytes() == b.fingerprints.tobytes() and a.flags.tobytes() == b.flags.tobytes() for a, b in zip(cuda_traces, cpu_traces))
report["seconds"] = round(time.time() - started, 1)
print(json.dumps(report), flush=True)
json.dump(report, open(f"{out}/canonical-class.json", "w"), indent=1)
PY
