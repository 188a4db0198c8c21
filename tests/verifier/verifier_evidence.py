"""Evidence built from real local runs of the tiny model, in the shape the dispatcher serves it
(`GET /v1/verillm/audits/{job}/evidence`)."""

import dataclasses
import os

from verillm.wire import job_to_json, opening_to_json, receipt_to_json
from verillm.spec.challenge import compute_challenge
from verillm.spec.hashing import keccak256
from verillm.spec.job import compute_job_hash
from verillm.spec.receipt import SigningDomain
from verillm.spec.types import Job
from verillm.verifier.local import Party, commit_runs

CHALLENGE_POSITIONS = 8
DOMAIN = SigningDomain(chain_id=31337, verifying_contract=b"\x42" * 20)


def build_evidence(engine, job: Job, domain: SigningDomain = DOMAIN, edit_opening=None) -> dict:
    """Run ``job`` on ``engine`` as a worker would, draw a challenge, open it; return the evidence."""
    run = commit_runs([job], engine.run([job]), engine.manifest, Party(os.urandom(32)), domain)[0]
    seed = keccak256(b"verifier-test-challenge" + compute_job_hash(job))
    challenge = compute_challenge(seed, len(job.input_tokens), len(run.trace.output_tokens), tuple(engine.manifest.committed_layers), CHALLENGE_POSITIONS)
    opening = run.result(challenge).opening
    if edit_opening is not None:
        opening = edit_opening(opening)
    return {
        "job_hash": "0x" + compute_job_hash(job).hex(), "job": job_to_json(job), "output_tokens": list(run.trace.output_tokens),
        "receipt": receipt_to_json(run.receipt),
        "signing_domain": {"chain_id": domain.chain_id, "verifying_contract": "0x" + domain.verifying_contract.hex()},
        "audits": [{"audit_id": 7, "round": 0, "challenge_seed": "0x" + seed.hex(), "openings": {"0": opening_to_json(opening)}, "members": {}}],
    }


def move_first_leaf(opening, delta: float = 1e-3):
    """Return ``opening`` with its first leaf's fingerprint moved (its proof left as it was)."""
    items = list(opening.leaves)
    leaf = items[0].leaf
    items[0] = dataclasses.replace(items[0], leaf=dataclasses.replace(leaf, fingerprint=tuple(v + delta for v in leaf.fingerprint)))
    return dataclasses.replace(opening, leaves=tuple(items))
