"""Re-checking every audit recorded on a chain, from its events and calldata alone.

For each batch draw: the seed from the batch root and the later blockhash, the dispatcher's
BLS-VRF proof against its registered key, β = keccak(proof). For each audit: the receipt's
EIP-712 hash and signature, its Merkle proof into the batch root, whether the draw selected it
(or a client paid), the committee sortition (replayed on the Registry's state of the block
before), the challenge seed, every opening's hash and cell set, every vote against the posted
leaves (`is_onchain_agreement`), the round tallies and verdicts, the parties slashed at
settlement (`verillm.spec.settlement`), and every adjudication. Nothing here trusts a node.

    findings = ChainAuditor(RpcChain(url), Deployment.load(path)).run()
"""

from dataclasses import dataclass

from verillm.chain.chain import Chain
from verillm.chain.deploy import Deployment
from verillm.chain.events import ChainEvent, get_events
from verillm.chain.protocol import PHASE_NAMES, Protocol
from verillm.spec.audit import OnchainModel
from verillm.spec.audit import decode_opening_leaves
from verillm.spec import audit as spec_audit
from verillm.spec import settlement as spec_settlement
from verillm.spec import vrf
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.encoding import decode
from verillm.spec.hashing import keccak256
from verillm.spec.merkle import MerkleProof, compute_leaf_hash, is_valid_merkle_proof
from verillm.spec.receipt import SigningDomain, compute_receipt_hash, recover_receipt_signer
from verillm.spec.types import Leaf, Receipt, SamplingParams


ABANDONED_PHASE = next(code for code, name in PHASE_NAMES.items() if name == "abandoned")


@dataclass(frozen=True)
class Finding:
    """One result: "ok" (checked and consistent), "inconsistent", or "note" (could not be checked)."""

    severity: str
    subject: str
    detail: str


def compute_receipt_from_struct(data: dict, signature: bytes) -> Receipt:
    """Return the `Receipt` of a decoded `ReceiptData` struct."""
    sampling = SamplingParams(data["temperatureMilli"], data["topK"], data["topPPpm"], data["seed"])
    return Receipt(bytes(data["jobHash"]), bytes(data["modelId"]), bytes(data["inputHash"]), bytes(data["outputHash"]), sampling,
                   data["maxNewTokens"], bytes(data["commitmentRoot"]), data["numPositions"], bytes.fromhex(data["worker"][2:]), bytes(signature),
                   input_tokens=data["inputTokens"], output_tokens=data["outputTokens"])


class ChainAuditor:
    """Walks one deployment's events and re-derives what each of them claims."""

    def __init__(self, chain: Chain, deployment: Deployment):
        self.chain, self.protocol = chain, Protocol(chain, deployment)
        self.preset = self.protocol.preset
        self.domain = SigningDomain(chain.chain_id, bytes.fromhex(self.protocol.jobs.address[2:]))
        self.events = get_events(chain, [self.protocol.jobs, self.protocol.batches, self.protocol.disputes, self.protocol.registry],
                                 deployment.start_block)
        self.findings: list[Finding] = []
        self.states: dict[int, str] = {}
        """Every audit's state, settled, abandoned or open (the report lists them all)."""
        self._models: dict[bytes, OnchainModel] = {}

    # --- helpers ----------------------------------------------------------------------------------

    def _add(self, ok: bool, subject: str, good: str, bad: str) -> bool:
        self.findings.append(Finding("ok" if ok else "inconsistent", subject, good if ok else bad))
        return ok

    def _note(self, subject: str, detail: str) -> None:
        self.findings.append(Finding("note", subject, detail))

    def _named(self, name: str, **match) -> list[ChainEvent]:
        return [e for e in self.events if e.name == name and all(e.args.get(k) == v for k, v in match.items())]

    def _calldata(self, event: ChainEvent) -> dict:
        tx = self.chain.rpc("eth_getTransaction", lambda: self.chain.w3.eth.get_transaction(event.tx_hash))
        handles = (self.protocol.jobs, self.protocol.batches, self.protocol.disputes)  # the contract the transaction called
        handle = next((h for h in handles if h.address == tx["to"]), self.protocol.jobs)
        return dict(handle.web3.decode_function_input(tx["input"])[1])

    def _blockhash(self, number: int) -> bytes:
        return self.protocol.get_blockhash(number)

    def _model(self, model_id: bytes) -> OnchainModel:
        if model_id not in self._models:
            _, dims, min_cells, layers, max_cell, rms = self.protocol.registry.call("getModelConfig", model_id)
            self._models[model_id] = OnchainModel(model_id, tuple(layers), dims, tuple(max_cell), tuple(rms), min_cells)
        return self._models[model_id]

    # --- the walk ---------------------------------------------------------------------------------

    def run(self) -> list[Finding]:
        """Check every draw, audit and adjudication; return the findings."""
        for event in self._named("AuditDrawn"):
            self.check_draw(event)
        for event in self._named("AuditStarted"):
            self.check_audit(event)
        for event in self._named("Adjudicated"):
            self.check_adjudication(event)
        return self.findings

    def summary(self) -> dict:
        return {"draws": len(self._named("AuditDrawn")), "audits": len(self._named("AuditStarted")),
                "adjudications": len(self._named("Adjudicated")), "contests": len(self._named("Contested")),
                "escalations": len(self._named("EscalationStarted"))}

    def check_draw(self, event: ChainEvent) -> None:
        batch_id = event.args["batchId"]
        root, dispatcher, _, posted, *_ = self.protocol.batches.call("getBatch", batch_id)
        subject = f"batch {batch_id} draw"
        seed = spec_audit.compute_draw_seed(bytes(root), self._blockhash(posted + self.preset.AUDIT_DRAW_DELAY_BLOCKS))
        if not self._add(seed == bytes(event.args["seed"]), subject, "seed = keccak(0x13 ‖ root ‖ later blockhash)", "seed does not derive from the batch root and blockhash"):
            return
        proof = b"".join(w.to_bytes(32, "big") for w in self._calldata(event)["proof"])
        key = b"".join(w.to_bytes(32, "big") for w in self.protocol.registry.call("getVrfPublicKey", dispatcher))
        valid = vrf.is_valid_vrf_proof(key, seed, proof)
        self._add(valid and vrf.compute_vrf_output(proof) == bytes(event.args["beta"]), subject,
                  f"dispatcher {dispatcher}'s BLS-VRF proof verifies; β = keccak(proof)", "VRF proof or output does not verify against the dispatcher's key")

    def check_audit(self, event: ChainEvent) -> None:
        audit_id, batch_id, index = event.args["auditId"], event.args["batchId"], event.args["index"]
        subject = f"audit {audit_id}"
        call = self._calldata(event)
        receipt = compute_receipt_from_struct(call["receipt"], call["signature"])
        receipt_hash = compute_receipt_hash(receipt)
        root = bytes(self.protocol.batches.call("getBatch", batch_id)[0])
        count = self.protocol.batches.call("getBatch", batch_id)[2]
        proof = MerkleProof(index=index, leaf_count=count, siblings=tuple(bytes(s) for s in call["siblings"]))
        self._add(receipt_hash == bytes(event.args["receiptHash"]) and is_valid_merkle_proof(compute_leaf_hash(receipt_hash), proof, root),
                  subject, f"receipt {receipt_hash.hex()[:12]}… is leaf {index} of batch {batch_id}", "receipt hash or its Merkle proof into the batch root is wrong")
        self._add(recover_receipt_signer(receipt, self.domain) == receipt.worker, subject, "receipt signed by its worker (EIP-712)", "receipt signature does not recover to its worker")
        beta = bytes(self.protocol.batches.call("getBatch", batch_id)[4])
        drawn = spec_audit.is_audited(beta, index, self.preset.AUDIT_RATE_BPS)
        self._add(drawn != event.args["requested"], subject, "selected by the draw" if drawn else "requested and paid by a client",
                  "'requested' flag disagrees with the draw")
        self._check_committee(audit_id, receipt, beta, index, event)
        for round_index in range(2):
            if self._named("ChallengeDrawn", auditId=audit_id, round=round_index):
                self._check_round(audit_id, round_index, receipt, beta, index, event.args["outputTokens"])
        self._check_settlement(audit_id, receipt)

    def _committee_seed(self, audit_id: int, round_index: int, beta: bytes, index: int) -> bytes:
        # every round's seed: a blockhash after the round was entered (its start, or its escalation)
        entered = self._named("AuditStarted" if round_index == 0 else "EscalationStarted", auditId=audit_id)[0].block_number
        return spec_audit.compute_round_seed(audit_id, round_index, self._blockhash(entered + self.preset.AUDIT_DRAW_DELAY_BLOCKS))

    def _check_committee(self, audit_id: int, receipt: Receipt, beta: bytes, index: int, started: ChainEvent) -> None:
        drawn = [e for e in self._named("CommitteeDrawn", auditId=audit_id) if e.args["round"] == 0 and e.args["attempt"] == 0]
        if not drawn:
            return self._note(f"audit {audit_id}", "no committee draw event")
        candidates, stakes = self._model_nodes(receipt.model_id, drawn[0].block_number - 1)
        weights = spec_audit.compute_excluded_weights([c.lower() for c in candidates], stakes, ["0x" + receipt.worker.hex()])
        seed = self._committee_seed(audit_id, 0, beta, index)
        expected = spec_audit.compute_committee(seed, 0, self.preset.COMMITTEE_SIZE, [c.lower() for c in candidates], weights)
        if [m.lower() for m in drawn[0].args["members"]] == list(expected):
            self._add(True, f"audit {audit_id}", "committee = stake-weighted sortition from a blockhash after the start, worker excluded", "")
        else:
            self._note(f"audit {audit_id}", "committee differs from the sortition over the Registry's state one block earlier "
                       "(stakes may have changed earlier in the same block); not an inconsistency by itself")

    def _model_nodes(self, model_id: bytes, block: int):
        nodes, stakes = self.chain.call(self.protocol.registry, "getModelNodes", model_id, block=block)
        return list(nodes), list(stakes)

    def _check_round(self, audit_id: int, round_index: int, receipt: Receipt, beta: bytes, index: int, output_tokens: int) -> None:
        subject = f"audit {audit_id} round {round_index}"
        posted = [e for e in self._named("CommitteeReceiptPosted", auditId=audit_id) if e.args["round"] == round_index]
        drawn_seed = self._named("ChallengeDrawn", auditId=audit_id, round=round_index)[0].args["challengeSeed"]
        ready = max(e.block_number for e in posted)
        seed = spec_audit.compute_challenge_seed(self._committee_seed(audit_id, round_index, beta, index),
                                                 self._blockhash(ready + self.preset.AUDIT_DRAW_DELAY_BLOCKS))
        self._add(seed == bytes(drawn_seed), subject, "challenge seed from the committee seed and a later blockhash", "challenge seed does not derive")
        model = self._model(receipt.model_id)
        prompt_len = receipt.num_positions + 1 - output_tokens
        challenge = compute_challenge(seed, prompt_len, output_tokens, model.committed_layers, self.preset.CHALLENGE_POSITIONS)
        leaves = self._check_openings(subject, audit_id, round_index, challenge, receipt.num_positions, model)
        self._check_votes(subject, audit_id, round_index, leaves, model, prompt_len, output_tokens)

    def _check_openings(self, subject: str, audit_id: int, round_index: int, challenge, num_positions: int, model) -> dict:
        leaves = {}
        for event in [e for e in self._named("Opened", auditId=audit_id) if e.args["round"] == round_index]:
            slot, data = event.args["slot"], bytes(self._calldata(event)["leaves"])
            cells = compute_opened_cells(challenge, num_positions + (1 if slot else 0))
            decoded = decode_opening_leaves(data, model.fingerprint_dims)
            ok = keccak256(data) == bytes(event.args["openingHash"]) and [(l.position, l.layer) for l in decoded] == cells
            self._add(ok, subject, f"party {slot}'s opening hashes to what was recorded and covers exactly the challenged cells",
                      f"party {slot}'s opening does not match its hash or the challenged cells")
            leaves[slot] = ({(l.position, l.layer): l for l in decoded}, event.args["vote"], event.args["party"])
        return leaves

    def _check_votes(self, subject: str, audit_id: int, round_index: int, leaves: dict, model, prompt_len: int, output_tokens: int) -> None:
        if 0 not in leaves:
            return
        punished = {e.args["member"].lower() for e in self._named("Adjudicated", auditId=audit_id)}
        punished |= {e.args["node"].lower() for e in self._named("PartySlashed", auditId=audit_id)}
        for slot, (cells, vote, party) in sorted(leaves.items()):
            if slot == 0:
                continue
            agrees = spec_audit.is_onchain_agreement(leaves[0][0], cells, model, prompt_len, output_tokens)
            if vote == spec_settlement.AGREE and not agrees:
                self._add(party.lower() in punished, subject, f"member {party} voted agree against its own posted leaves and was slashed for it",
                          f"member {party} voted agree against its own posted leaves and was never slashed")
            elif vote == spec_settlement.DISAGREE and agrees:
                self._note(subject, f"member {party} voted disagree although every opened cell passes on-chain (a truncation vote, or a lie nobody adjudicated)")
            else:
                self._add(True, subject, f"member {party}'s vote matches its posted leaves", "")

    def _check_settlement(self, audit_id: int, receipt: Receipt) -> None:
        settled = self._named("AuditSettled", auditId=audit_id)
        if not settled:
            return self._check_unsettled(audit_id)
        verdict = settled[0].args["verdict"]
        at_settle = [e for e in self._named("PartySlashed", auditId=audit_id) if e.tx_hash == settled[0].tx_hash]
        self.states[audit_id] = f"settled: {spec_settlement.VERDICT_NAMES[verdict]}; slashed " + (
            "; ".join(f"{e.args['node']} ({e.args['reason']})" for e in at_settle) or "nobody")
        decided = self._named("RoundDecided", auditId=audit_id)
        self._add(bool(decided) and decided[-1].args["verdict"] == verdict, f"audit {audit_id}", f"settled with the round's verdict ({spec_settlement.VERDICT_NAMES[verdict]})",
                  "settled verdict differs from the decided round's")
        slashed = {e.args["node"].lower() for e in self._named("PartySlashed", auditId=audit_id) if e.tx_hash == settled[0].tx_hash}
        worker = "0x" + receipt.worker.hex()
        expected_worker = verdict in (spec_settlement.FAIL, spec_settlement.WORKER_DEFAULT)
        contests = {e.args["contestId"] for e in self._named("Contested", auditId=audit_id)}
        already = {e.args["party"].lower() for e in self._named("ContestLost") if e.args["contestId"] in contests}
        self._add((worker in slashed) == (expected_worker and worker not in already), f"audit {audit_id}",
                  "the worker is slashed exactly when the verdict fails it", "worker slashing disagrees with the verdict")

    def _check_unsettled(self, audit_id: int) -> None:
        """An audit with no AuditSettled: abandoned (who was slashed for it), or still open (its phase)."""
        subject = f"audit {audit_id}"
        state = self.protocol.get_audit(audit_id)
        abandoned = self._named("AuditAbandoned", auditId=audit_id)
        if not abandoned:
            self.states[audit_id] = f"open: {PHASE_NAMES.get(state.phase, state.phase)} in round {state.round}"
            return self._note(subject, f"not settled yet: {self.states[audit_id]}")
        round_index = abandoned[-1].args["round"]
        slashes = [e for e in self._named("PartySlashed", auditId=audit_id) if e.tx_hash == abandoned[-1].tx_hash]
        named = "; ".join(f"{e.args['node']} ({e.args['reason']}, {e.args['amountWei'] / 1e18:g} ETH)" for e in slashes) or "nobody"
        self.states[audit_id] = f"abandoned in round {round_index}; slashed {named}"
        if round_index > 0:  # an escalation that could not be staffed lapses: round 0's verdict stands
            return self._note(subject, f"abandoned: escalation round {round_index} could not be staffed and lapsed; slashed {named}")
        # docs/protocol.md §12: a round that cannot be staffed ends with nobody slashed (issue 9); a
        # selected audit whose committee nobody drew slashes its dispatcher (issue 20: the draw was its duty).
        if abandoned[-1].args["reason"] == "committee never drawn":
            dispatcher = self.protocol.get_audit(audit_id).dispatcher.lower()
            return self._add(state.phase == ABANDONED_PHASE and all(e.args["node"].lower() == dispatcher for e in slashes), subject,
                             f"abandoned: its committee was never drawn; slashed {named}", f"abandoned undrawn but others were slashed: {named}")
        self._add(state.phase == ABANDONED_PHASE and not slashes, subject,
                  "abandoned: no full committee could be drawn in round 0; nobody slashed for it",
                  f"abandoned in round 0 but parties were slashed for it: {named}")

    def check_adjudication(self, event: ChainEvent) -> None:
        audit_id, round_index, slot = event.args["auditId"], event.args["round"], event.args["slot"]
        state = self.protocol.get_audit(audit_id)
        model = self._model(state.model_id)
        call = self._calldata(event)
        worker = {(l.position, l.layer): l for l in (decode(Leaf, bytes(c[0])) for c in call["cells"])}
        member = {(l.position, l.layer): l for l in (decode(Leaf, bytes(c[2])) for c in call["cells"])}
        prompt_len = state.num_positions + 1 - state.output_tokens
        agrees = spec_audit.is_onchain_agreement(worker, member, model, prompt_len, state.output_tokens)
        self._add(agrees == event.args["dataAgrees"], f"audit {audit_id} adjudication of member slot {slot} (round {round_index})",
                  f"data {'agree' if agrees else 'disagree'} as the contract found; vote {event.args['vote']} → slashed",
                  "the contract's comparison differs from the spec's")
