#!/usr/bin/env bash
# What a lent GPU machine runs first (docs/vllm.md, "Issue 21 on GPUs"): `verillm bench device`
# on the reference engine, with the machine's own python3/torch (no registry there). The
# packages its image lacks travel as wheels in .whl/ (scripts/gpu-wheels.sh fetches them here).
# Usage on the device machine: bash scripts/gpu-check.sh OUTDIR [AUDITS_TINY] [AUDITS_SMOLLM2_SHAPE]
set -uo pipefail
out=${1:?output folder}; audits_tiny=${2:-300}; audits_shape=${3:-100}
site=/tmp/verillm-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl || exit 1
# node/ and verifier/ ship as verillm.node and verillm.verifier (pyproject's package-dir).
rm -rf "$site/verillm" && cp -r verillm "$site/" && cp -r node "$site/verillm/node" && cp -r verifier "$site/verillm/verifier"
export PYTHONPATH=$site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$out/gpu.txt"
run() {  # name, timeout, models, audits, cross jobs
  timeout "$2" python3 -P -c "
import sys
from verillm.bench.device import run_device_check, summarize_device_check
from verillm.bench.tables import write_json
report = run_device_check('cuda', tuple('$3'.split(',')), audits=$4, cross_jobs=$5, seed='gpu-$1', on_partial=lambda partial: write_json('$out/device-$1.json', partial), progress=lambda line: print(line, file=sys.stderr, flush=True))
write_json('$out/device-$1.json', report)
print(summarize_device_check(report))
" 2>&1 | tee "$out/device-$1.txt"
}
run tiny 200 tiny "$audits_tiny" 64
run smollm2-shape 260 smollm2-shape "$audits_shape" 0
