"""What the VRF costs: `python -m verillm.bench.vrf [--skip-py-ecc]`.

Prints two tables and JSON. Gas, on a real anvil under Prague and Osaka rules, per shared test
vector: a `verifyAndRecord`
transaction (what Jobs pays per audit draw, 21,000 intrinsic included) and eth_estimateGas of
`verify`, `hashToG1` and `verifyPossession`. Python timings (medians) of the spec functions on
each available BN254 backend.
"""

import json
import statistics
import sys
import time
from pathlib import Path

from verillm.chain.anvil import AnvilConfig, AnvilProcess
from verillm.chain.backends import RpcChain
from verillm.chain.bn254 import BACKEND_NAMES, get_bn254_backend, has_pyrevm
from verillm.spec import vrf
from verillm.spec.vrf import compute_words

HARDFORKS = ("prague", "osaka")
VECTORS_PATH = Path(__file__).resolve().parents[2] / "tests" / "vectors" / "vrf.json"


def _b(hex_string: str) -> bytes:
    return bytes.fromhex(hex_string[2:])


def _estimate(harness, function: str, *args) -> int:
    tx = {"to": harness.address, "data": harness.web3.encode_abi(function, args=list(args))}
    return harness.chain.rpc(f"estimate {function}", lambda: harness.chain.w3.eth.estimate_gas(tx))


def measure(chain: RpcChain, vectors: dict, hardfork: str = "default") -> list[dict]:
    """Return one row of gas figures per valid vector."""
    sender = chain.dev_accounts[0]
    harness = chain.deploy("VrfHarness", sender=sender)
    rows = []
    for case in vectors["valid"]:
        key = vectors["keys"][case["key"]]
        pk, message, proof = compute_words(_b(key["pk"])), _b(case["message"]), compute_words(_b(case["proof"]))
        receipt = harness.transact("verifyAndRecord", pk, message, proof, sender=sender)
        rows.append({
            "hardfork": hardfork, "message_bytes": len(message), "hash_tries": case["counter"] + 1,
            "verifyAndRecord_tx_gas": receipt["gasUsed"],
            "verify_estimate_gas": _estimate(harness, "verify", pk, message, proof),
            "hashToG1_estimate_gas": _estimate(harness, "hashToG1", message),
            "verifyPossession_estimate_gas": _estimate(harness, "verifyPossession", pk, chain.w3.to_checksum_address(key["owner"]), compute_words(_b(key["pop"]))),
        })
    return rows


def _median_ms(action, repeats: int) -> float:
    samples = []
    for i in range(repeats):
        start = time.perf_counter()
        action(i)
        samples.append(time.perf_counter() - start)
    return round(statistics.median(samples) * 1000, 3)


def time_python(backends: list[str]) -> list[dict]:
    """Return median milliseconds of the spec's VRF functions per backend."""
    sk = vrf.derive_secret_key(b"\x05" * 32)
    pk = vrf.compute_public_key(sk)
    proofs = [vrf.compute_vrf_proof(sk, i.to_bytes(4, "big")) for i in range(20)]
    rows = [{"operation": "hash_to_g1", "backend": "-", "ms": _median_ms(lambda i: vrf.compute_hash_to_g1(i.to_bytes(4, "big")), 200)},
            {"operation": "public_key (sk*G2)", "backend": "py_ecc", "ms": _median_ms(lambda i: vrf.compute_public_key(sk), 5)},
            {"operation": "public_key_check (uncached)", "backend": "py_ecc", "ms": _median_ms(lambda i: vrf._is_valid_public_key.__wrapped__(pk), 5)}]
    for name in backends:
        backend = get_bn254_backend(name)
        repeats = 5 if name == "py_ecc" else 20
        rows.append({"operation": "prove", "backend": name, "ms": _median_ms(lambda i: vrf.compute_vrf_proof(sk, i.to_bytes(4, "big"), backend), repeats)})
        rows.append({"operation": "verify (pk cached)", "backend": name,
                     "ms": _median_ms(lambda i: vrf.is_valid_vrf_proof(pk, i.to_bytes(4, "big"), proofs[i], backend), repeats)})
    return rows


def _print_table(rows: list[dict]) -> None:
    columns = list(rows[0])
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(str(row[c]) for c in columns))
    print()


def main() -> None:
    vectors = json.loads(VECTORS_PATH.read_text())
    gas = []
    for hardfork in HARDFORKS:  # Osaka (EIP-7883) reprices modexp, which hashToG1 calls per try
        with AnvilProcess(AnvilConfig(hardfork=hardfork)) as node:
            gas += measure(RpcChain(node.url), vectors, hardfork)
    backends = [b for b in BACKEND_NAMES if b != "pyrevm" or has_pyrevm()]
    timings = time_python([b for b in backends if b != "py_ecc" or "--skip-py-ecc" not in sys.argv])
    _print_table(gas)
    _print_table(timings)
    json.dump({"gas_device": "anvil 1.7.1 (local)", "gas": gas, "python_ms": timings}, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
