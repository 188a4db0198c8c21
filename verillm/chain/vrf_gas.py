"""Gas of the on-chain VRF, measured on a real anvil: `python -m verillm.chain.vrf_gas`.

Prints a table and JSON: per shared test vector, the gas of a `verifyAndRecord` transaction
(what Jobs pays per audit draw, 21,000 intrinsic included) and eth_estimateGas of the view
calls `verify`, `hashToG1` and `verifyPossession`.
"""

import json
import sys
from pathlib import Path

from verillm.chain.anvil import AnvilProcess
from verillm.chain.backends import RpcChain
from verillm.spec.vrf import compute_words

VECTORS_PATH = Path(__file__).resolve().parents[2] / "tests" / "vectors" / "vrf.json"


def _b(hex_string: str) -> bytes:
    return bytes.fromhex(hex_string[2:])


def _estimate(harness, function: str, *args) -> int:
    tx = {"to": harness.address, "data": harness.web3.encode_abi(function, args=list(args))}
    return harness.chain.rpc(f"estimate {function}", lambda: harness.chain.w3.eth.estimate_gas(tx))


def measure(chain: RpcChain, vectors: dict) -> list[dict]:
    """Return one row of gas figures per valid vector."""
    sender = chain.dev_accounts[0]
    harness = chain.deploy("VrfHarness", sender=sender)
    rows = []
    for case in vectors["valid"]:
        key = vectors["keys"][case["key"]]
        pk, message, proof = compute_words(_b(key["pk"])), _b(case["message"]), compute_words(_b(case["proof"]))
        receipt = harness.transact("verifyAndRecord", pk, message, proof, sender=sender)
        rows.append({
            "message_bytes": len(message), "hash_tries": case["counter"] + 1,
            "verifyAndRecord_tx_gas": receipt["gasUsed"],
            "verify_estimate_gas": _estimate(harness, "verify", pk, message, proof),
            "hashToG1_estimate_gas": _estimate(harness, "hashToG1", message),
            "verifyPossession_estimate_gas": _estimate(harness, "verifyPossession", pk, chain.w3.to_checksum_address(key["owner"]), compute_words(_b(key["pop"]))),
        })
    return rows


def main() -> None:
    vectors = json.loads(VECTORS_PATH.read_text())
    with AnvilProcess() as node:
        rows = measure(RpcChain(node.url), vectors)
    columns = list(rows[0])
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(str(row[c]) for c in columns))
    json.dump({"device": "anvil 1.7.1 (local)", "rows": rows}, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
