"""A final job's outcome checked on the contracts, not taken from its dispatcher's word.

The phases (verillm/client/phases.py) are what the dispatcher's status route says; a dispatcher
that lies could call a job `final` that was never batched, or hide a slash. With the chain, a
client checks the end itself:

- the receipt is in the batch the status names, at the leaf it names (the inclusion proof the
  dispatcher serves, verified against `Batches.getBatch`: verillm/client/promise.py);
- with an audit: `Jobs.getAudit` of that id is of that batch and leaf and that worker, settled or
  abandoned, with the verdict the status claims;
- without one: the batch was drawn on-chain, its VRF output does not select the leaf at the
  deployment's audit rate, and the start window after the draw has closed at the chain's head.

A contradiction raises `InvalidProof` naming it (the CLI's exit 2).
"""

from eth_utils import to_checksum_address

from verillm.errors import InvalidProof
from verillm.spec.audit import Phase, is_audited
from verillm.spec.deadlines import compute_batch_start_by
from verillm.spec.settlement import FAIL, PASS, VERDICT_NAMES, WORKER_DEFAULT

from verillm.client.phases import PASSED, SLASHED, UNDECIDED, compute_outcome
from verillm.client.promise import INCLUDED, check_inclusion


def verify_final_on_chain(status: dict, completion, protocol, node_url: str) -> str:
    """Check a final status body of ``completion``'s job on ``protocol``'s contracts; return the
    outcome (`PASSED`, `SLASHED`, `UNDECIDED`) and what was checked, or raise InvalidProof."""
    batch = status.get("batch")
    if not isinstance(batch, dict) or completion.promise is None:
        raise InvalidProof("the dispatcher calls the job final, but names no batch (or sent no batching promise) to check it by")
    inclusion = check_inclusion(completion.promise, protocol, node_url)
    if inclusion.status != INCLUDED:
        raise InvalidProof(f"the dispatcher calls the job final, but its receipt is not proven in a batch: {inclusion.detail}")
    if (inclusion.batch_id, inclusion.leaf_index) != (batch.get("batch_id"), batch.get("index")):
        raise InvalidProof(f"the status names batch {batch.get('batch_id')} leaf {batch.get('index')}, "
                           f"the inclusion proof batch {inclusion.batch_id} leaf {inclusion.leaf_index}")
    audit = status.get("audit")
    if audit:
        outcome, detail = _verify_audit(audit, batch, completion.worker, protocol)
    else:
        outcome, detail = _verify_never_selected(batch, protocol)
    claimed = compute_outcome(status)
    if outcome != claimed:
        raise InvalidProof(f"the dispatcher says the job {claimed}, the chain says {outcome}: {detail}")
    return f"{outcome}: {inclusion.detail}; {detail}"


def _verify_audit(audit: dict, batch: dict, worker: str, protocol) -> tuple[str, str]:
    from verillm.chain.errors import TransactionReverted  # here: `verillm complete --help` stays free of web3 (tests/test_cli_start.py)

    try:
        state = protocol.get_audit(int(audit["audit_id"]))
    except TransactionReverted as exc:
        if exc.error != "UnknownAudit":
            raise
        raise InvalidProof(f"the status names audit {audit['audit_id']}, which the chain does not know: not this job's") from None
    if (state.batch_id, state.index) != (batch["batch_id"], batch["index"]) or to_checksum_address(state.worker) != to_checksum_address(worker):
        raise InvalidProof(f"audit {state.audit_id} on-chain is of batch {state.batch_id} leaf {state.index} by {state.worker}, not this job")
    if state.phase == Phase.ABANDONED:
        return UNDECIDED, f"audit {state.audit_id} abandoned on-chain"
    if state.phase != Phase.SETTLED:
        raise InvalidProof(f"audit {state.audit_id} is not settled on-chain (phase {Phase(state.phase).name})")
    verdict = VERDICT_NAMES.get(state.verdict, str(state.verdict))
    outcome = PASSED if state.verdict == PASS else SLASHED if state.verdict in (FAIL, WORKER_DEFAULT) else UNDECIDED
    return outcome, f"audit {state.audit_id} settled on-chain with verdict {verdict}"


def _verify_never_selected(batch: dict, protocol) -> tuple[str, str]:
    on_chain, preset = protocol.get_batch(int(batch["batch_id"])), protocol.preset
    if not on_chain["drawn_block"]:
        raise InvalidProof(f"batch {batch['batch_id']} was never drawn on-chain: nothing shows the job was not selected for audit")
    if is_audited(on_chain["beta"], int(batch["index"]), preset.AUDIT_RATE_BPS):
        raise InvalidProof(f"the draw of batch {batch['batch_id']} selected leaf {batch['index']} for audit, and the status shows none")
    head, closes = protocol.chain.get_block_number(), compute_batch_start_by(on_chain["drawn_block"], preset)
    if head <= closes:
        raise InvalidProof(f"the start window of batch {batch['batch_id']} is open until block {closes} (head {head}): not final yet")
    return PASSED, f"batch {batch['batch_id']} drawn at block {on_chain['drawn_block']} without selecting it; its start window closed at block {closes}"
