"""The docs' commands that need a network, run as written (tests/helpers/docs_plan.py places each;
tests/test_docs_walk.py is the quick part in the default suite):

- the devnet walk: `verillm devnet --model tiny --cheater int8 --keep --workdir …` as docs/devnet.md
  writes it, then docs/devnet.md's commands, docs/auditors.md's, docs/sdk.md's python session
  and commands against it, every placeholder filled from the network.json the devnet writes;
- the operator walk (docs/operators.md): the one-node quick start on SmolLM2, then from an empty
  machine to a staked node and back out on `verillm chain anvil`;
- the own-model section, and the quick benchmark run docs/benchmarks.md gives.
"""

import json
import re
import time

import pytest

from helpers import docs_plan as plan
from helpers.docs_walk import Shell, all_commands, free_port, run_python, substitute

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("anvil_installed")]


def _command(doc: str, key: str):
    return next(c for c in all_commands() if (c.doc, c.key) == (doc, key))


def _run(shell: Shell, doc: str, key: str, values: dict[str, str]) -> str:
    return shell.run(substitute(_command(doc, key).text, values), expect=plan.EXIT_CODES.get((doc, key), 0))


def _devnet_values(net: dict, workdir: str, job: dict) -> dict[str, dict[str, str]]:
    """Each doc's placeholders, read from network.json as docs/devnet.md says ("addresses and ports
    from the printout or /tmp/devnet/network.json"); per doc, since `URL` or `0x…` differ."""
    node0 = net["nodes"][0]
    return {
        "docs/devnet.md": {"/tmp/devnet": workdir, "http://127.0.0.1:PORT0": net["gateway_url"], "http://127.0.0.1:RPC_PORT": net["rpc_url"],
                           "0xJOB_HASH": job["job_hash"], "READ_TOKEN": job["read_token"]},
        "docs/auditors.md": {"0xJOB_HASH": job["job_hash"], "http://DISPATCHER:PORT": net["gateway_url"], "TOKEN": job["read_token"],
                             "party-key.json": node0["key_file"],  # the dispatcher's own operator reads with its key
                             "path/to/node.sqlite": node0["store"], "deployment.json": net["addresses_file"],
                             "http://127.0.0.1:8545": net["rpc_url"], "[--verbose]": "--verbose"},
        "docs/sdk.md": {"NODE_URL": net["gateway_url"], "RPC_URL": net["rpc_url"], "http://127.0.0.1:8000": net["gateway_url"],
                        "http://127.0.0.1:8545": net["rpc_url"], "addresses.json": net["addresses_file"], "/tmp/devnet": workdir,
                        "[--node-url NODE_URL]": f"--node-url {net['gateway_url']}", "--key 0x…": f"--key {net['owner']['private_key']}",
                        "--model-id 0x…": f"--model-id {net['model_id']}", "--jobs-address 0x…": f"--jobs-address {net['addresses']['Jobs']}"},
    }


# The names sdk.md's first snippets leave to the reader, defined the way the doc describes them.
SDK_PRELUDE = '''
import json
from verillm.chain import connect
from verillm.chain.deploy import Deployment
from verillm.chain.protocol import Protocol
from verillm.engine.models import build_tiny_tokenizer
net = json.load(open("{network}"))
MODEL_ID, JOBS_ADDRESS = net["model_id"], net["addresses"]["Jobs"]      # "model id", "Jobs address" the devnet prints
tokenizer = build_tiny_tokenizer()                                       # "the tiny test model's is build_tiny_tokenizer()"
protocol = Protocol(connect(net["rpc_url"]), Deployment.load(net["addresses_file"]))  # "Protocol over the deployment's address book"
chain_id, coverage_address = net["chain_id"], bytes.fromhex(net["addresses"]["Coverage"][2:])  # "the address book's Coverage"
'''


def _wait_for_block(rpc_url: str, number: int, timeout_s: float = 600) -> None:
    from verillm.chain import connect

    chain, deadline = connect(rpc_url), time.monotonic() + timeout_s
    while chain.get_block_number() < number:
        assert time.monotonic() < deadline, f"block {number} not reached in {timeout_s} s"
        time.sleep(1.0)


def test_the_devnet_walk(tmp_path):
    shell = Shell(tmp_path / "walk")
    workdir = str(tmp_path / "devnet")
    start = substitute(_command(*plan.DEVNET_START).text, {"/tmp/devnet": workdir})
    try:
        printed = shell.start(start, ready=r"the network stays up", timeout_s=900)
        net = json.loads((tmp_path / "devnet/network.json").read_text())
        cheater = next(n["address"] for n in net["nodes"] if n["role"] != "honest")
        honest = next(j for j in net["jobs"] if j["status"] in ("final", "verified") and j["worker"] != cheater)
        assert net["gateway_url"] in printed and net["rpc_url"] in printed and honest["job_hash"] in printed
        values = _devnet_values(net, workdir, honest)
        for doc, key in plan.DEVNET:
            out = _run(shell, doc, key, values[doc])
            if "audit chain" in key:
                assert "inconsistencies: 0" in out and f"{cheater}: failed audit" in out, out
            if "audit replay" in key:
                assert "verdict: ACCEPT" in out, out
            if "audit replay" in key and "--db" not in key:
                assert "receipt signature valid" in out, out
            if key.startswith("verillm promise claim"):  # refused: not due yet; once due (within its claim window), because it is batched
                assert "claims open at" in out or "refusing to claim" in out, out
                _wait_for_block(net["rpc_url"], json.loads((shell.cwd / "job.json").read_text())["batch_promise"]["batch_by_block"] + 1)
                out = _run(shell, doc, key, values[doc])
                assert "refusing to claim: the receipt is batched" in out, out
        sdk = [c for c in all_commands() if c.doc == "docs/sdk.md" and c.lang == "python" and (c.doc, c.key) not in plan.SKIPS]
        out = run_python(shell, sdk, values["docs/sdk.md"], prelude=SDK_PRELUDE.format(network=tmp_path / "devnet/network.json"))
        for expected in ("verified", "final"):  # `client.wait_verified(completion)["status"]   # verified`, then `# final`
            assert re.search(rf"^\[docs/sdk.md:\d+\] '{expected}'$", out, re.M), out
    finally:
        codes = shell.stop_all()
        (tmp_path / "transcript.txt").write_text("\n".join(shell.transcript))
    assert codes == [(start, 0)], codes


def set_toml(path, section: str, field: str, value) -> None:
    """Set ``field`` of ``[section]`` in a copy of ops/node.toml (every field is listed there), as a reader edits it."""
    text = path.read_text()
    head = re.search(rf"^\[{section}\]$", text, re.M)
    line = re.compile(rf"^{field} = .*$", re.M).search(text, head.end())
    path.write_text(text[:line.start()] + f"{field} = {json.dumps(value)}" + text[line.end():])


def test_the_operator_quick_start_then_an_own_model(tmp_path):
    """docs/operators.md "Quick start" (a SmolLM2 node, no chain), then "Serving your own model" in the
    same directory: a tiny Qwen2 checkpoint inspected, calibrated and served."""
    shell = Shell(tmp_path / "walk")
    port = free_port()
    shell.env["VERILLM_SERVER_PORT"] = str(port)  # ops/node.toml's 8000 may be taken here ("Configuration": env overrides the file)
    values = {"localhost:8000": f"localhost:{port}", "/srv/verillm/profiles": str(tmp_path / "srv/verillm/profiles")}
    try:
        for doc, key in plan.QUICK_START + plan.OWN_MODEL:
            text = substitute(_command(doc, key).text, values)
            if key.startswith("verillm node run"):
                if "--model" in key:  # "with [engine] profile_dir = …", as its comment says
                    set_toml(shell.cwd / "node.toml", "engine", "profile_dir", values["/srv/verillm/profiles"])
                shell.start(text, ready=rf"verillm node listening on http://127.0.0.1:{port}")
                continue
            out = shell.run(text)
            if key.startswith("curl"):
                assert json.loads(out)["choices"][0]["text"] and json.loads(out)["verillm"]["receipt"], out
                shell.stop_all()  # the quick start's node; the own-model section starts it again on the new model
            if key.startswith("verillm calibrate"):
                assert "wrote " + values["/srv/verillm/profiles"] in out, out
        served = shell.run(f"curl -s localhost:{port}/v1/models")
        assert "qwen2" in served, served
    finally:
        codes = shell.stop_all()
        (tmp_path / "transcript.txt").write_text("\n".join(shell.transcript))
    assert [code for _, code in codes] == [0], codes


def test_the_operator_joins_and_leaves_a_network(tmp_path):
    """docs/operators.md "Joining a network" on `verillm chain anvil` (its "or: a local stand-in"):
    deploy, a funded key, the node, add-model, register → status → stake → models → unbond →
    withdraw, mining where "On a local chain" says to."""
    shell = Shell(tmp_path / "walk")
    anvil_port, node_port = free_port(), free_port()
    node_url = f"http://127.0.0.1:{node_port}"
    values = {"8545": str(anvil_port), "localhost:8000": f"localhost:{node_port}", "http://a-node-serving-it:8000": node_url,
              "https://node.example:8000": node_url}
    unbonded = False
    try:
        for doc, key in plan.OPERATOR:
            text = substitute(_command(doc, key).text, values)
            if key.startswith("verillm chain anvil"):
                out = shell.start(text, ready=r"account \(0\) is the usual deployer")
                values["https://rpc.your-testnet.example"] = f"http://127.0.0.1:{anvil_port}"
                values["OWNER_KEY=0x…"] = "OWNER_KEY=" + re.search(r"\(0\) 0x[0-9a-fA-F]{40}\s+key (0x[0-9a-f]{64})", out).group(1)
                continue
            if key.startswith("verillm node run"):
                _configure_node(shell, node_port, node_url)
                shell.start(text, ready=rf"verillm node listening on http://0.0.0.0:{node_port}")
                model_id = json.loads(shell.run(f"curl -s {node_url}/v1/models"))["data"][0]["verillm"]["model_id"]
                values["--model-id 0x…"] = f"--model-id {model_id}"
                continue
            out = _run(shell, doc, key, values)
            if key.startswith("verillm keys new"):
                values["0xYOUR_ADDRESS"] = values["0xNODE"] = out.split()[0]
            if key.startswith("curl"):
                assert "not registered" in out, out
            if key.startswith("verillm node register"):
                assert "registered" in out, out
            if key == "verillm node status --config node.toml" and unbonded:
                assert "leaving" in out, out
            unbonded = unbonded or key.startswith("verillm node unbond")
            if key.startswith("verillm node withdraw"):
                assert "withdr" in out, out
    finally:
        codes = shell.stop_all()
        (tmp_path / "transcript.txt").write_text("\n".join(shell.transcript))
    assert [code for _, code in codes] == [0, 0], codes


def _configure_node(shell: Shell, port: int, url: str) -> None:
    """Step 3's comment, done: "[chain] rpc_url, chain_id, jobs_address, registry_address (from
    addresses.json); [server] host = "0.0.0.0", public_url; [dispatcher] enabled = true,
    deployment_file = "addresses.json"" (and the port, since 8000 may be taken here)."""
    book, config = json.loads((shell.cwd / "addresses.json").read_text()), shell.cwd / "node.toml"
    for section, field, value in [("chain", "rpc_url", shell.env["VERILLM_RPC_URL"]), ("chain", "chain_id", book["chain_id"]),
                                  ("chain", "jobs_address", book["addresses"]["Jobs"]), ("chain", "registry_address", book["addresses"]["Registry"]),
                                  ("server", "host", "0.0.0.0"), ("server", "port", port), ("server", "public_url", url),
                                  ("dispatcher", "enabled", True), ("dispatcher", "deployment_file", "addresses.json")]:
        set_toml(config, section, field, value)


def test_the_quick_benchmark_run(tmp_path):
    """docs/benchmarks.md's quick exact-mode run (the others are hours: skipped with their reasons)."""
    shell = Shell(tmp_path / "walk")
    (shell.cwd / "docs/results").mkdir(parents=True)  # where the doc writes its results, in the scratch checkout
    for doc, key in plan.BENCH:
        out = _run(shell, doc, key, {})
        assert "8/8 detected" in out, out
        assert json.loads(next((shell.cwd / "docs/results").glob("*.json")).read_text())
