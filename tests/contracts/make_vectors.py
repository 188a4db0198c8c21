"""Write the shared vectors tests/vectors/{merkle,fingerprint,receipt,audit}.json from the spec.

    .venv/bin/python tests/contracts/make_vectors.py

Python recomputes them in tests/spec/test_audit.py; the contracts check them in
tests/contracts/test_vectors.py. Regenerate only when the spec changes on purpose.
"""

import json
import struct
from pathlib import Path

from eth_account import Account

from verillm.spec.audit import (compute_challenge_seed, compute_committee, compute_committee_seed, compute_draw_seed,
                                compute_escalation_seed, compute_fixed_ppb, is_audited)
from verillm.spec.challenge import compute_challenge_positions
from verillm.spec.hashing import keccak256
from verillm.spec.merkle import MerkleProof, compute_leaf_hash, compute_merkle_levels, compute_merkle_proof, is_valid_merkle_proof
from verillm.spec.receipt import (SigningDomain, compute_domain_separator, compute_receipt_hash, compute_signing_digest,
                                  sign_receipt)
from verillm.spec.types import Receipt, SamplingParams

OUT = Path(__file__).resolve().parents[1] / "vectors"


def _h(data: bytes) -> str:
    return "0x" + data.hex()


def merkle_vectors() -> dict:
    cases = []
    for count in (1, 2, 3, 5, 8, 13):
        leaves = [compute_leaf_hash(f"leaf {count}/{i}".encode()) for i in range(count)]
        levels = compute_merkle_levels(leaves)
        for index in sorted({0, count // 2, count - 1}):
            proof = compute_merkle_proof(levels, index)
            cases.append({"leaf_count": count, "index": index, "leaf": _h(leaves[index]), "siblings": [_h(s) for s in proof.siblings],
                          "root": _h(levels[-1][0]), "valid": True})
    bad, last = cases[-2], cases[-1]  # 13 leaves: the middle and the last (promoted) leaf
    cases += [
        {**bad, "index": bad["index"] + 1, "valid": False, "why": "wrong index"},
        {**last, "leaf_count": last["leaf_count"] + 1, "valid": False, "why": "wrong leaf count"},
        {**bad, "siblings": bad["siblings"] + [bad["leaf"]], "valid": False, "why": "extra sibling"},
        {**bad, "siblings": bad["siblings"][:-1], "valid": False, "why": "missing sibling"},
        {**bad, "leaf": _h(compute_leaf_hash(b"forged")), "valid": False, "why": "forged leaf"},
        {**bad, "index": bad["leaf_count"], "valid": False, "why": "index outside the tree"},
    ]
    for case in cases:  # validity is the spec's, not ours to assert
        proof = MerkleProof(case["index"], case["leaf_count"], tuple(bytes.fromhex(x[2:]) for x in case["siblings"]))
        assert is_valid_merkle_proof(bytes.fromhex(case["leaf"][2:]), proof, bytes.fromhex(case["root"][2:])) is case["valid"], case
    return {"tree": "sha256(0x00 ‖ leaf), sha256(0x01 ‖ left ‖ right), odd last node promoted", "cases": cases}


def fingerprint_vectors() -> dict:
    values = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-6, -3.25, 123.456, 1e-30, 3.4e38, 2.0**-149, 2.0**-126, 0.1, -0.7071067]
    bits = [struct.unpack(">I", struct.pack(">f", v))[0] for v in values]
    bits += [0x7F800000, 0xFF800000, 0x7FC00000, 0x7F7FFFFF, 0x00000001, 0x80000001, 0x4B000001]
    cases = []
    for b in bits:
        ppb = compute_fixed_ppb(b)
        cases.append({"bits": f"0x{b:08x}", "ppb": None if ppb is None else str(ppb)})
    return {"rule": "f32 bits -> value × 1e9 truncated toward zero, clamped to ±2^96; NaN/inf -> null", "cases": cases}


def receipt_vectors() -> dict:
    key = keccak256(b"verillm receipt vector key")
    worker = Account.from_key(key)
    domain = SigningDomain(chain_id=31337, verifying_contract=bytes.fromhex("5FbDB2315678afecb367f032d93F642f64180aa3"))
    cases = []
    for i, (temperature, max_new) in enumerate([(0, 16), (700, 1), (1000, 256)]):
        receipt = Receipt(job_hash=keccak256(b"job%d" % i), model_id=keccak256(b"model"), input_hash=keccak256(b"in%d" % i),
                          output_hash=keccak256(b"out%d" % i), sampling=SamplingParams(temperature, 40 * i, 950_000, 2**63 + i),
                          max_new_tokens=max_new, commitment_root=keccak256(b"root%d" % i), num_positions=17 + i,
                          worker=bytes.fromhex(worker.address[2:]), signature=b"\x00" * 65,
                          input_tokens=5 + i, output_tokens=13)
        signed = sign_receipt(receipt, key, domain)
        s = receipt.sampling
        cases.append({
            "fields": [_h(receipt.job_hash), _h(receipt.model_id), _h(receipt.input_hash), _h(receipt.output_hash),
                       s.temperature_milli, s.top_k, s.top_p_ppm, str(s.seed), receipt.max_new_tokens,
                       _h(receipt.commitment_root), receipt.num_positions, receipt.input_tokens, receipt.output_tokens, worker.address],
            "struct_hash": _h(compute_receipt_hash(receipt)), "signing_digest": _h(compute_signing_digest(receipt, domain)),
            "signature": _h(signed.signature),
        })
    return {"domain": {"name": "VeriLLM", "version": "1", "chain_id": domain.chain_id, "verifying_contract": _h(domain.verifying_contract),
                       "separator": _h(compute_domain_separator(domain))}, "signer": worker.address, "cases": cases}


def audit_vectors() -> dict:
    root, blockhash = keccak256(b"batch root"), keccak256(b"block")
    beta = keccak256(b"beta")
    picks = [{"beta": _h(beta), "index": i, "rate_bps": rate, "audited": is_audited(beta, i, rate)}
             for i in range(6) for rate in (0, 500, 5_000, 10_000)]
    candidates = [Account.from_key(keccak256(b"node%d" % i)).address for i in range(7)]
    sortition = []
    for j, weights in enumerate([[1] * 7, [5, 1, 1, 1, 1, 1, 1], [0, 3, 2, 0, 9, 1, 4], [10**18, 2 * 10**18, 1, 7, 10**16, 3, 0]]):
        seed = keccak256(b"committee%d" % j)
        size = min(3 if j % 2 == 0 else 5, sum(1 for w in weights if w))
        sortition.append({"seed": _h(seed), "attempt": j % 2, "size": size, "candidates": candidates, "weights": [str(w) for w in weights],
                          "chosen": list(compute_committee(seed, j % 2, size, candidates, weights))})
    challenges = [{"seed": _h(keccak256(b"challenge%d" % j)), "prompt_len": p, "output_len": n, "count": c,
                   "positions": list(compute_challenge_positions(keccak256(b"challenge%d" % j), p, n, c))}
                  for j, (p, n, c) in enumerate([(6, 10, 8), (1, 3, 8), (40, 64, 32), (100, 500, 32)])]
    return {
        "draw_seed": {"batch_root": _h(root), "blockhash": _h(blockhash), "seed": _h(compute_draw_seed(root, blockhash))},
        "committee_seed": {"beta": _h(beta), "index": 7, "seed": _h(compute_committee_seed(beta, 7))},
        "escalation_seed": {"audit_id": 42, "blockhash": _h(blockhash), "seed": _h(compute_escalation_seed(42, blockhash))},
        "challenge_seed": {"committee_seed": _h(beta), "blockhash": _h(blockhash), "seed": _h(compute_challenge_seed(beta, blockhash))},
        "picks": picks, "sortition": sortition, "challenge_positions": challenges,
    }


def main() -> None:
    for name, build in (("merkle", merkle_vectors), ("fingerprint", fingerprint_vectors), ("receipt", receipt_vectors), ("audit", audit_vectors)):
        (OUT / f"{name}.json").write_text(json.dumps(build(), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {OUT / name}.json")


if __name__ == "__main__":
    main()
