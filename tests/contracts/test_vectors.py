"""The shared vectors (tests/vectors/*.json, written from the spec) checked by the contracts.
Python recomputes the same files in tests/spec/test_audit.py."""

import json
from pathlib import Path

import pytest

from verillm.spec.receipt import SigningDomain, compute_domain_separator

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


def _load(name: str) -> dict:
    return json.loads((VECTORS / f"{name}.json").read_text())


def _b(value: str) -> bytes:
    return bytes.fromhex(value[2:])


@pytest.mark.parametrize("case", _load("merkle")["cases"], ids=lambda c: f"{c['leaf_count']}-{c['index']}-{c.get('why', 'ok')}")
def test_merkle_vectors(world_base, case):
    got = world_base.protocol.disputes.call("isValidMerkleProof", _b(case["leaf"]), case["index"], case["leaf_count"],
                                            [_b(s) for s in case["siblings"]], _b(case["root"]))
    assert got is case["valid"]


def test_fingerprint_vectors(world_base):
    for case in _load("fingerprint")["cases"]:
        value, finite = world_base.protocol.disputes.call("decodeFingerprintPpb", int(case["bits"], 16))
        assert finite is (case["ppb"] is not None), case
        if finite:
            assert value == int(case["ppb"]), case


def test_receipt_vectors(world_base):
    vectors = _load("receipt")
    jobs = world_base.protocol.jobs
    for case in vectors["cases"]:
        fields = list(case["fields"])
        for i in (0, 1, 2, 3, 9):
            fields[i] = _b(fields[i])
        fields[7], fields[13] = int(fields[7]), int(fields[13])
        assert "0x" + world_base.protocol.batches.call("hashReceipt", tuple(fields)).hex() == case["struct_hash"]
    # the deployed domain is (VeriLLM, 1, chain id, this Jobs): the spec computes the same separator
    domain = SigningDomain(chain_id=world_base.chain.chain_id, verifying_contract=_b(jobs.address.lower()))
    assert jobs.call("domainSeparator") == compute_domain_separator(domain)


def test_sortition_vectors(world_base):
    for case in _load("audit")["sortition"]:
        got = world_base.protocol.registry.call("computeCommittee", _b(case["seed"]), case["attempt"], case["size"],
                                                case["candidates"], [int(w) for w in case["weights"]])
        assert list(got) == case["chosen"]


def test_challenge_position_vectors(world_base):
    for case in _load("audit")["challenge_positions"]:
        got = world_base.protocol.disputes.call("computeChallengePositions", _b(case["seed"]), case["prompt_len"],
                                                case["output_len"], case["count"])
        assert list(got) == case["positions"]
