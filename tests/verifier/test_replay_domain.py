"""The receipt's signing domain comes from the deployment's address book (`audit replay
--addresses`), not from the node: `--db` evidence names none, so without it the signature went
unchecked (issue 23), and a node could name any domain its own forged receipts verify under."""

import dataclasses

import pytest

from verillm.chain.deploy import Deployment
from verillm.cli.audit import compute_signing_domain
from verillm.engine.profiles import load_profile
from verillm.errors import ConfigError
from verillm.verifier.replay import load_case, run_replay

from verifier_evidence import DOMAIN, build_evidence


def _book(tmp_path, jobs: bytes, chain_id: int = DOMAIN.chain_id):
    path = tmp_path / f"book-{jobs.hex()[:4]}.json"
    Deployment(chain_id=chain_id, preset="minimal", deployer="0x" + "11" * 20, addresses={"Jobs": "0x" + jobs.hex()},
               contracts={"Jobs": "Jobs"}).save(path)
    return str(path)


def test_the_address_book_decides_the_signing_domain(tiny_engine, tiny_job, tmp_path):
    evidence = build_evidence(tiny_engine, tiny_job)
    del evidence["signing_domain"]  # what --db reads: a store names no domain
    profile = load_profile("tiny", "float32")
    case = load_case(evidence)
    assert run_replay(case, "tiny", tiny_engine, profile).signature.startswith("not checked")
    right = dataclasses.replace(case, signing_domain=compute_signing_domain(_book(tmp_path, DOMAIN.verifying_contract)))
    assert run_replay(right, "tiny", tiny_engine, profile).signature.startswith(f"valid (chain {DOMAIN.chain_id}")
    other = dataclasses.replace(case, signing_domain=compute_signing_domain(_book(tmp_path, b"\x43" * 20)))
    assert run_replay(other, "tiny", tiny_engine, profile).signature.startswith("INVALID")


def test_an_address_book_without_jobs_is_refused(tmp_path):
    path = tmp_path / "book.json"
    Deployment(chain_id=1, preset="minimal", deployer="0x" + "11" * 20, addresses={"Registry": "0x" + "22" * 20}, contracts={}).save(path)
    with pytest.raises(ConfigError, match="no Jobs"):
        compute_signing_domain(str(path))
