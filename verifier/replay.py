"""Replaying an audit from public data: recompute the prefill here and compare with the worker.

Evidence (the job, its output, the worker's signed receipt, the challenge seed of its audit
and the worker's opening of the challenged cells with Merkle proofs) comes from the node that
dispatched the job (``GET /v1/verillm/audits/{job}/evidence``) or from that node's SQLite
store. The auditor then does what a committee member does, on its own machine: runs the
verification job (prompt ‖ output, one new token) through the reference engine, commits,
opens the same challenge, and checks the pair with the protocol's own check
(`verillm.spec.check.compute_pair_check`) under the model's tolerance profile.

    case = load_case(fetch_evidence(url, job_hash))
    replay = run_replay(case, load_replay_engine(case.job.model_id, "auto"), profile)
    replay.result.accepted
"""

import json
import os
import sqlite3
import time
import urllib.request
from dataclasses import dataclass

from sqlite_utils import Database

from verillm.errors import ConfigError, InvalidProof, InvalidSignature, NotFound
from verillm.spec.challenge import compute_challenge
from verillm.spec.check import PartyResult, compute_pair_check
from verillm.spec.commitment import verify_opening
from verillm.spec.encoding import decode
from verillm.spec.hashing import keccak256
from verillm.spec.job import compute_job_hash, compute_verification_job
from verillm.spec.policy import CheckResult, ToleranceProfile
from verillm.spec.receipt import SigningDomain, verify_receipt_signature
from verillm.spec.types import Challenge, Job, Leaf, ModelManifest, Opening, Receipt

from verillm.wire import from_hex, opening_from_json, receipt_from_json
from verillm.verifier.local import Party, commit_runs

KNOWN_MODELS = ("tiny", "smollm2")


@dataclass(frozen=True)
class ReplayCase:
    """What a replay needs, read from evidence."""

    job: Job
    output_tokens: tuple[int, ...]
    receipt: Receipt
    audit_id: int | None
    round: int
    challenge_seed: bytes
    worker_opening: Opening
    signing_domain: SigningDomain | None

    @property
    def prompt_len(self) -> int:
        return len(self.job.input_tokens)


@dataclass(frozen=True)
class Replay:
    """A finished replay: the challenge, both sides' proven cells, the check and its timing."""

    case: ReplayCase
    manifest: ModelManifest
    model_name: str
    profile: ToleranceProfile
    challenge: Challenge
    worker_cells: dict[tuple[int, int], Leaf]
    replay_cells: dict[tuple[int, int], Leaf]
    result: CheckResult
    signature: str
    prefill_s: float


# --- evidence -------------------------------------------------------------------------------------

def fetch_evidence(node_url: str, job_hash: bytes, timeout_s: float = 30.0, token: str | None = None, headers: dict | None = None) -> dict:
    """GET the evidence of ``job_hash`` from the node that dispatched it (``token``: the requester's read token;
    ``headers``: a party's signed read; node/api/access.py)."""
    url = f"{node_url.rstrip('/')}/v1/verillm/audits/0x{job_hash.hex()}/evidence" + (f"?token={token}" if token else "")
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout_s) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        hint = " (pass --token, the token= of the job's status_url, or --key-file of a party of its audit)" if exc.code == 401 else ""
        raise NotFound(f"{url}: HTTP {exc.code} {exc.read().decode(errors='replace')[:200]}{hint}") from None


def read_evidence(db_path: str, job_hash: bytes) -> dict:
    """Read the evidence of ``job_hash`` from a dispatcher's store, read-only (the node may be running)."""
    from verillm.node.store.evidence import compute_evidence
    from verillm.node.store.dispatcher_tables import DispatcherTables

    if not os.path.exists(db_path):
        raise ConfigError(f"no store at {db_path}")
    connection = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return compute_evidence(DispatcherTables(Database(connection)), job_hash)
    finally:
        connection.close()


def load_case(evidence: dict, audit_index: int = -1) -> ReplayCase:
    """Return the replay case of one audit round in ``evidence`` (default: the last one)."""
    if not evidence.get("audits"):
        raise NotFound(f"job {evidence.get('job_hash')} has no audit with openings to replay (not audited, or not yet opened)")
    audit = evidence["audits"][audit_index]
    if "0" not in audit["openings"]:
        raise NotFound(f"audit {audit['audit_id']} round {audit['round']}: the worker's opening is not in the evidence")
    domain = evidence.get("signing_domain")
    return ReplayCase(
        job=decode(Job, from_hex(evidence["job"]["encoded"], "job.encoded")),
        output_tokens=tuple(evidence["output_tokens"]),
        receipt=receipt_from_json(evidence["receipt"]),
        audit_id=audit["audit_id"], round=audit["round"],
        challenge_seed=from_hex(audit["challenge_seed"], "challenge_seed", 32),
        worker_opening=opening_from_json(audit["openings"]["0"]),
        signing_domain=SigningDomain(domain["chain_id"], from_hex(domain["verifying_contract"], "verifying_contract", 20)) if domain else None,
    )


# --- the replay ---------------------------------------------------------------------------------

def load_replay_engine(model_id: bytes, model: str = "auto", dtype: str = "float32"):
    """Return (name, TorchEngine) of the model whose id is ``model_id`` ("auto": try the known ones)."""
    from verillm.engine.models import load_model
    from verillm.engine.torch_engine import TorchEngine

    modes = (None, "canonical") if dtype == "bfloat16" else (None,)  # bf16: either exact kernel form
    for name in (KNOWN_MODELS if model == "auto" else (model,)):
        for mode in modes:
            loaded, tokenizer, manifest = load_model(name, dtype, mode=mode)
            engine = TorchEngine(loaded, tokenizer, manifest)
            if engine.model_id == model_id:
                return name, engine
    raise ConfigError(f"model id 0x{model_id.hex()} is none of {KNOWN_MODELS if model == 'auto' else (model,)} in {dtype}")


def compute_challenge_count(opening: Opening, first_layer: int) -> int:
    """Return how many positions the challenge drew: the worker opens each at every layer."""
    return len({item.leaf.position for item in opening.leaves if item.leaf.layer == first_layer})


def run_replay(case: ReplayCase, model_name: str, engine, profile: ToleranceProfile) -> Replay:
    """Recompute the prefill, commit, open the case's challenge and check it against the worker's opening."""
    manifest = engine.manifest
    layers = tuple(manifest.committed_layers)
    count = compute_challenge_count(case.worker_opening, layers[0])
    challenge = compute_challenge(case.challenge_seed, case.prompt_len, len(case.output_tokens), layers, count)
    job = compute_verification_job(case.job, case.output_tokens, nonce=keccak256(b"verillm/replay" + compute_job_hash(case.job)))
    started = time.perf_counter()
    trace = engine.run([job])[0]
    prefill_s = time.perf_counter() - started
    auditor = commit_runs([job], [trace], manifest, Party(os.urandom(32)))[0]
    worker = PartyResult(job=case.job, output_tokens=case.output_tokens, receipt=case.receipt, opening=case.worker_opening)
    mine = auditor.result(challenge)
    result = compute_pair_check(worker, mine, challenge, manifest, profile)
    worker_cells = _cells_or_empty(case.worker_opening, case.receipt, layers)
    replay_cells = verify_opening(mine.opening, auditor.receipt.commitment_root, layers, auditor.receipt.num_positions)
    return Replay(case, manifest, model_name, profile, challenge, worker_cells, replay_cells, result, _signature_status(case), prefill_s)


def _cells_or_empty(opening: Opening, receipt: Receipt, layers: tuple[int, ...]) -> dict:
    try:
        return verify_opening(opening, receipt.commitment_root, layers, receipt.num_positions)
    except InvalidProof:  # the check reports it as its "proof" reason; no cell of the worker is trusted
        return {}


def _signature_status(case: ReplayCase) -> str:
    if case.signing_domain is None:
        return "not checked (the evidence names no signing domain: pass --addresses, the deployment's address book)"
    try:
        verify_receipt_signature(case.receipt, case.signing_domain)
    except InvalidSignature as exc:
        return f"INVALID: {exc}"
    return f"valid (chain {case.signing_domain.chain_id}, Jobs 0x{case.signing_domain.verifying_contract.hex()})"
