"""Check a batching promise before claiming it (docs/protocol.md §12 "Batching promises").

    from verillm.client.promise import check_inclusion
    head = verify_promise_on_receipt(completion.promise, completion.receipt, protocol)  # on arrival
    result = check_inclusion(completion.promise, protocol)   # protocol: verillm.chain.protocol.Protocol
    result.status      # "included" | "not_due" | "missing" | "invalid"
    result.claimable   # past the promised block and no valid proof: a claim is the honest move

The dispatcher serves the receipt's inclusion proof (`GET /v1/verillm/receipts/{hash}/inclusion`,
at the node URL given or else the one it registered); the proof is checked against the chain,
never trusted: `Batches.getBatch(batchId)` must name the promise's dispatcher, a posted block ≤
batchByBlock, the proof's leaf count and a root the Merkle proof reaches from the receipt hash
(`verillm.spec.promise.verify_inclusion_proof`, the rule `Coverage.proveIncluded` applies). An
included receipt's claim would be answered with that proof and cost the claimant its bond, so
the client's rule is: claim only when `claimable`.
"""

import urllib.error
import urllib.request
from dataclasses import dataclass

from eth_utils import to_checksum_address

from verillm.errors import ChainError, InvalidInput, InvalidProof
from verillm.jsonsafe import load_json
from verillm.spec import promise as spec
from verillm.spec.merkle import MerkleProof
from verillm.spec.receipt import compute_receipt_hash, verify_receipt_horizon
from verillm.spec.types import Receipt

from verillm.wire import from_hex

INCLUDED, NOT_DUE, MISSING, INVALID = "included", "not_due", "missing", "invalid"
MAX_BODY_BYTES = 64 * 1024
"""A proof has at most 64 siblings of 32 bytes: a longer body is cut (and then fails to parse)."""


@dataclass(frozen=True)
class InclusionCheck:
    """What a client learned about one promise: its status, why, and the chain head it read."""

    status: str
    detail: str
    head_block: int
    batch_by_block: int
    batch_id: int | None = None
    leaf_index: int | None = None
    """The receipt's leaf in that batch (with ``batch_id``: which audit can be of it)."""

    @property
    def claimable(self) -> bool:
        """Past the promised block and no valid proof shown: `Coverage.claimOmitted` is in order."""
        return self.status in (MISSING, INVALID) and self.head_block > self.batch_by_block

    def to_json(self) -> dict:
        return {"status": self.status, "detail": self.detail, "batch_id": self.batch_id, "head_block": self.head_block,
                "batch_by_block": self.batch_by_block, "claimable": self.claimable}


def get_inclusion_path(receipt_hash: bytes) -> str:
    return f"/v1/verillm/receipts/0x{receipt_hash.hex()}/inclusion"


def fetch_inclusion(node_url: str, receipt_hash: bytes, timeout_s: float) -> tuple[dict | None, str]:
    """Return (the node's proof body, "") or (None, why it showed none)."""
    if not node_url.startswith(("http://", "https://")):  # a registered endpoint is the dispatcher's word: no file:// reads
        return None, f"the dispatcher's URL {node_url!r} is not http(s)"
    url = node_url.rstrip("/") + get_inclusion_path(receipt_hash)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            # The dispatcher chose these bytes: load_json bounds the nesting (py_ecc raises the
            # recursion limit, so a 64 KiB run of '[' would crash json.loads instead of raising).
            return load_json(response.read(MAX_BODY_BYTES), "inclusion body"), ""
    except urllib.error.HTTPError as exc:
        body = exc.read(MAX_BODY_BYTES).decode(errors="replace")
        try:
            body = load_json(body, "error body")["error"]["message"]
        except (InvalidInput, KeyError, TypeError):
            pass
        return None, f"the dispatcher shows no proof (HTTP {exc.code}: {body})"
    except (urllib.error.URLError, TimeoutError, OSError, ValueError, InvalidInput) as exc:
        return None, f"the dispatcher at {node_url} does not answer: {exc}"


def parse_inclusion(body: object) -> tuple[int, MerkleProof]:
    """Return (batch id, proof) from the inclusion route's body; raise InvalidInput if malformed."""
    if not isinstance(body, dict):
        raise InvalidInput("inclusion: expected an object")
    fields = {name: body.get(name) for name in ("batch_id", "leaf_index", "leaf_count")}
    for name, value in fields.items():
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 64:
            raise InvalidInput(f"inclusion.{name}: expected a non-negative integer")
    siblings = body.get("siblings")
    if not isinstance(siblings, list) or len(siblings) > 64:
        raise InvalidInput("inclusion.siblings: expected a list of at most 64 hashes")
    proof = MerkleProof(fields["leaf_index"], fields["leaf_count"], tuple(from_hex(s, "inclusion.siblings[]", 32) for s in siblings))
    return fields["batch_id"], proof


def read_batch(protocol, batch_id: int) -> spec.BatchRecord:
    """Return `Batches.getBatch(batch_id)`; raise InvalidProof for a batch that does not exist."""
    try:
        root, dispatcher, count, posted_block, *_ = protocol.batches.call("getBatch", batch_id)
    except ChainError as exc:
        if getattr(exc, "error", None) == "UnknownBatch":
            raise InvalidProof(f"batch {batch_id} does not exist on-chain") from None
        raise
    return spec.BatchRecord(bytes(root), bytes.fromhex(dispatcher[2:]), count, posted_block)


def verify_promise_on_receipt(signed: spec.SignedPromise, receipt: Receipt, protocol) -> int:
    """Check a promise the moment it arrives, against the chain: signed by its dispatcher for this
    deployment's Coverage, about ``receipt``, and due between the head and head +
    BATCH_BY_BLOCKS (`spec.verify_promise_terms`), from a dispatcher active in the Registry (a
    signer with no stake, or one already leaving, could not be claimed against: `claimOmitted`
    locks the dispatcher and reverts NotRegistered). Only now can a backdated promise be told
    apart: later, the head has moved past it anyway. And the receipt is auditable until the
    promise's deadline + the start span (`verify_receipt_horizon`): a worker that signed a short
    horizon could never be audited for this job. Return the head read; raise InvalidSignature or
    InvalidProof saying what is wrong."""
    spec.verify_promise_signature(signed, protocol.get_promise_domain())
    dispatcher = to_checksum_address(signed.promise.dispatcher)
    if not protocol.get_node(dispatcher)["active"]:
        raise InvalidProof(f"the promise's dispatcher {dispatcher} is not an active registered node: a broken promise could slash nothing")
    head = protocol.chain.get_block_number()
    spec.verify_promise_terms(signed.promise, compute_receipt_hash(receipt), head, protocol.preset.BATCH_BY_BLOCKS)
    verify_receipt_horizon(receipt, signed.promise.batch_by_block, protocol.preset)
    return head


def check_inclusion(signed: spec.SignedPromise, protocol, node_url: str | None = None, timeout_s: float = 10.0) -> InclusionCheck:
    """Fetch the promised receipt's inclusion proof from its dispatcher (``node_url``, else the
    endpoint it registered) and verify it on-chain; see the module docstring for the statuses.
    Chain errors propagate: without the chain nothing can be decided."""
    promise = signed.promise
    head = protocol.chain.get_block_number()
    due = promise.batch_by_block
    if node_url is None:
        node_url = protocol.get_node(to_checksum_address(promise.dispatcher))["endpoint"]
    body, why = fetch_inclusion(node_url, promise.receipt_hash, timeout_s)
    if body is None:
        if head <= due:
            return InclusionCheck(NOT_DUE, f"not batched yet, due by block {due} (head {head}): {why}", head, due)
        return InclusionCheck(MISSING, f"past block {due} (head {head}): {why}", head, due)
    try:
        batch_id, proof = parse_inclusion(body)
        spec.verify_inclusion_proof(promise, read_batch(protocol, batch_id), proof)
    except (InvalidInput, InvalidProof) as exc:
        return InclusionCheck(INVALID, f"the dispatcher's proof does not hold on-chain: {exc}", head, due)
    return InclusionCheck(INCLUDED, f"leaf {proof.index} of {proof.leaf_count} in batch {batch_id}, posted by block {due}", head, due, batch_id,
                          proof.index)
