"""`verillm devnet --keep`: leave the network up, say once how to reach it, stop on Ctrl-C/SIGTERM.

Printed once, and written to ``WORKDIR/network.json`` for scripts and tests: the chain's
JSON-RPC URL and chain id, the contracts' addresses (and the address-book file `verillm
audit chain --addresses` reads), every node's URL, address and key file, the funded dev
account that deployed the contracts (its private key: a local chain's well-known test key,
never a real one), the model and its on-chain id, the explorer's URL, and every job of the run
with its read token and the `verillm audit replay` command that works as printed.
"""

import json
import time
from pathlib import Path

import click

from verillm.devnet.network import LocalNetwork, get_json
from verillm.devnet.run import compute_read_token

NETWORK_FILE = "network.json"


def compute_network_info(net: LocalNetwork, jobs: list[dict] = ()) -> dict:
    """Return what a client needs to use the running network (``jobs``: the run's, `JobTracker.jobs`)."""
    deployment = net.protocol.deployment
    return {
        "rpc_url": net.rpc_url,
        "chain": net.chain_kind,
        "chain_id": net.protocol.chain.chain_id,
        "addresses": dict(deployment.addresses),
        "addresses_file": str(net.deployment_file),
        "model": net.model,
        "served_model": _served_model_name(net),
        "model_id": "0x" + net.model_id.hex(),
        "gateway_url": net.gateway_url,
        "explorer_url": f"{net.gateway_url}/explorer",
        "owner": {"address": net.owner.address, "private_key": "0x" + bytes(net.owner.key).hex()},
        "nodes": [{"index": n.index, "url": n.url, "address": n.address, "key_file": str(n.key_file),
                   "log_file": str(n.log_file), "store": str(n.key_file.parent / "node.sqlite"), "role": n.spec.label}
                  for n in net.nodes],
        "jobs": [compute_job_info(net, job) for job in jobs],
    }


def _served_model_name(net: LocalNetwork) -> str:
    """The model's name as every client sees it (the gateway's /v1/models id; ``--model`` names what
    the nodes load, e.g. ``tiny`` serves ``tiny-llama-seed0``)."""
    return get_json(f"{net.gateway_url}/v1/models")["data"][0]["id"]


def compute_job_info(net: LocalNetwork, job: dict) -> dict:
    """Return one job of the run: its hash, status, read token and the replay command that works as printed."""
    completion, body = job["completion"], job["body"]
    job_hash, token = "0x" + completion.job_hash.hex(), compute_read_token(completion)
    return {"n": job["n"], "job_hash": job_hash, "status": body.get("status"), "worker": body.get("worker"),
            "status_url": completion.status_url, "read_token": token,
            "replay": f"verillm audit replay {job_hash} --node {net.gateway_url} --token {token} --addresses {net.deployment_file} --rpc-url {net.rpc_url}"}


def write_network_file(net: LocalNetwork, info: dict) -> Path:
    """Write ``info`` (`compute_network_info`) as ``network.json`` into the workdir (atomically: a reader never sees half a file)."""
    path = net.workdir / NETWORK_FILE
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(info, indent=2))
    scratch.replace(path)
    return path


def print_network(info: dict, path: Path) -> None:
    """Print endpoints, addresses, keys and ready-to-paste commands, once."""
    lines = [
        "", "the network stays up (Ctrl-C or SIGTERM stops it); everything below is also in " + str(path),
        f"  chain      {info['chain']} {info['rpc_url']} (chain id {info['chain_id']})",
        *(f"  {name:<10} {address}" for name, address in info["addresses"].items()),
        f"  deployer   {info['owner']['address']}  key {info['owner']['private_key']}  (a local test key)",
        f"  model      {info['served_model']} (--model {info['model']}) {info['model_id']}",
        *(f"  node {n['index']}     {n['url']}  {n['address']}  key file {n['key_file']}  ({n['role']})" for n in info["nodes"]),
        f"  explorer   {info['explorer_url']}",
        "", "try:",
        f"  verillm complete --url {info['gateway_url']} --rpc-url {info['rpc_url']} --addresses {info['addresses_file']} 'Hello'",
        f"  openai client: base_url={info['gateway_url']}/v1, api_key=anything, model={info['served_model']}",
        f"  verillm audit chain --rpc-url {info['rpc_url']} --addresses {info['addresses_file']}",
        *_replay_lines(info),
        f"  verillm node status --rpc-url {info['rpc_url']} --addresses {info['addresses_file']} --key-file {info['nodes'][0]['key_file']}",
    ]
    click.echo("\n".join(lines))


def _replay_lines(info: dict) -> list[str]:
    """The replay command of the run's most telling job (a slashed one if any), ready to paste."""
    if not info["jobs"]:
        return [f"  verillm audit replay JOB_HASH --node {info['gateway_url']} --token TOKEN --addresses {info['addresses_file']} --rpc-url {info['rpc_url']}"
                "   (TOKEN: the token= of the job's status_url)"]
    job = next((j for j in info["jobs"] if j["status"] == "slashed"), info["jobs"][0])
    return [f"  {job['replay']}   (job {job['n']}, {job['status']}; every job's command is in network.json)"]


def wait_until_interrupted(net: LocalNetwork, say) -> None:
    """Sleep until Ctrl-C/SIGTERM (KeyboardInterrupt); report a node that dies meanwhile."""
    reported: set[int] = set()
    while True:
        for node in net.nodes:
            if node.process is not None and node.process.poll() is not None and node.index not in reported:
                reported.add(node.index)
                say(f"node {node.index} exited with code {node.process.returncode}; see {node.log_file}")
        time.sleep(1.0)
