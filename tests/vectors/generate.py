"""Write the shared vectors tests/vectors/{merkle,fingerprint,receipt,audit,vrf}.json from the spec.

    .venv/bin/python tests/vectors/generate.py

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
from verillm.spec import vrf
from verillm.spec.hashing import keccak256
from verillm.spec.merkle import MerkleProof, compute_leaf_hash, compute_merkle_levels, compute_merkle_proof, is_valid_merkle_proof
from verillm.spec.receipt import (SigningDomain, compute_domain_separator, compute_receipt_hash, compute_signing_digest,
                                  sign_receipt)
from verillm.spec.types import Receipt, SamplingParams

OUT = Path(__file__).resolve().parent


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
                          input_tokens=5 + i, output_tokens=13, auditable_until_block=[0, 1_000_600, 2**64 - 1][i])
        signed = sign_receipt(receipt, key, domain)
        s = receipt.sampling
        cases.append({
            "fields": [_h(receipt.job_hash), _h(receipt.model_id), _h(receipt.input_hash), _h(receipt.output_hash),
                       s.temperature_milli, s.top_k, s.top_p_ppm, str(s.seed), receipt.max_new_tokens,
                       _h(receipt.commitment_root), receipt.num_positions, receipt.input_tokens, receipt.output_tokens,
                       str(receipt.auditable_until_block), worker.address],
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


# --- the VRF (tests/vectors/vrf.json) ----------------------------------------------------------
def compute_fq2_sqrt(a):
    """Return a square root of ``a`` in Fp2 (p ≡ 3 mod 4; Adj and Rodríguez-Henríquez, alg. 9), None if none."""
    a1 = a ** ((vrf.P - 3) // 4)
    alpha, x0 = a1 * a1 * a, a1 * a
    root = vrf.bn.FQ2([0, 1]) * x0 if alpha == -vrf.bn.FQ2.one() else (vrf.bn.FQ2.one() + alpha) ** ((vrf.P - 1) // 2) * x0
    return root if root * root == a else None


def compute_twist_point_outside_subgroup() -> bytes:
    """Return a point on the G2 twist that is not in the order-r subgroup (a rogue-key shape)."""
    for t in range(1, 1000):
        x = vrf.bn.FQ2([t, 1])
        y = compute_fq2_sqrt(x ** 3 + vrf.bn.b2)
        if y is not None and not vrf.bn.is_inf(vrf.bn.multiply((x, y, vrf.bn.FQ2.one()), vrf.R)):
            return vrf.encode_g2((x, y, vrf.bn.FQ2.one()))
    raise AssertionError("no twist point outside the subgroup found")  # never: the cofactor is huge


def _hex(data: bytes) -> str:
    return "0x" + data.hex()


def _with_word(data: bytes, index: int, value: int) -> bytes:
    return data[:32 * index] + vrf._word(value) + data[32 * index + 32:]


def compute_test_vectors() -> dict:
    """Return the vectors in tests/vectors/vrf.json: valid proofs, then cases that must fail."""
    sks = [vrf.derive_secret_key(bytes([i]) * 32) for i in (1, 2)] + [vrf.R - 1]
    owner = bytes.fromhex("f39fd6e51aad88f6f4ce6ab8827279cfffb92266")
    keys = [{"sk": hex(sk), "pk": _hex(vrf.compute_public_key(sk)), "owner": _hex(owner),
             "pop": _hex(vrf.compute_possession_proof(sk, owner))} for sk in sks]
    messages = [b"", b"abc", keccak256(b"audit seed"), bytes(range(100)), b"\x00msg-5"]
    valid = []
    for i, message in enumerate(messages):
        sk = sks[i % len(sks)]
        x, y, counter = vrf.compute_hash_to_g1(message)
        proof = vrf.compute_vrf_proof(sk, message)
        valid.append({"key": i % len(sks), "message": _hex(message), "hash_to_g1": [hex(x), hex(y)],
                      "counter": counter, "proof": _hex(proof), "output": _hex(vrf.compute_vrf_output(proof))})
    return {"scheme": vrf.__doc__.split("\n")[0], "domain_vrf": _hex(vrf.DOMAIN_VRF), "domain_pop": _hex(vrf.DOMAIN_POP),
            "keys": keys, "valid": valid, "invalid": _compute_invalid_vectors(keys, valid)}


def _compute_invalid_vectors(keys: list, valid: list) -> list:
    pk0, pk1 = (bytes.fromhex(k["pk"][2:]) for k in keys[:2])
    v = valid[1]
    message, proof = bytes.fromhex(v["message"][2:]), bytes.fromhex(v["proof"][2:])
    pk = bytes.fromhex(keys[v["key"]]["pk"][2:])
    x, y = vrf.compute_words(proof)
    owner, pop0 = bytes.fromhex(keys[0]["owner"][2:]), bytes.fromhex(keys[0]["pop"][2:])
    vrf_as_pop = vrf.encode_g1(vrf.bn.multiply(vrf._hash_point(vrf.compute_possession_message(pk0, owner), vrf.DOMAIN_VRF), int(keys[0]["sk"], 16)))
    cases = [  # (name, kind, pk, message or owner, proof, what the contract does)
        ("wrong_message", "vrf", pk, b"abd", proof, "false"),
        ("wrong_key", "vrf", pk1 if pk != pk1 else pk0, message, proof, "false"),
        ("negated_proof", "vrf", pk, message, vrf._word(x) + vrf._word(vrf.P - y), "false"),
        ("off_curve_proof", "vrf", pk, message, vrf._word(x) + vrf._word((y + 1) % vrf.P), "false"),
        ("non_canonical_proof", "vrf", pk, message, vrf._word(x + vrf.P) + vrf._word(y), "false"),
        ("infinity_proof", "vrf", pk, message, b"\x00" * 64, "false"),
        ("infinity_key", "vrf", b"\x00" * 128, message, proof, "false"),
        ("off_curve_key", "vrf", _with_word(pk, 0, (vrf.compute_words(pk)[0] + 1) % vrf.P), message, proof, "revert"),
        ("key_outside_subgroup", "vrf", compute_twist_point_outside_subgroup(), message, proof, "revert"),
        ("pop_for_another_owner", "pop", pk0, b"\x11" * 20, pop0, "false"),
        ("pop_of_another_key", "pop", pk1, owner, pop0, "false"),
        ("vrf_proof_as_pop", "pop", pk0, owner, vrf_as_pop, "false"),
    ]
    return [{"name": n, "kind": k, "pk": _hex(p), ("message" if k == "vrf" else "owner"): _hex(m), "proof": _hex(pr),
             "contract": c} for n, k, p, m, pr, c in cases]


def main() -> None:
    for name, build in (("merkle", merkle_vectors), ("fingerprint", fingerprint_vectors), ("receipt", receipt_vectors), ("audit", audit_vectors),
                        ("vrf", compute_test_vectors)):
        (OUT / f"{name}.json").write_text(json.dumps(build(), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {OUT / name}.json")


if __name__ == "__main__":
    main()
