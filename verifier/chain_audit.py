"""Re-checking every audit recorded on a chain, from its events and calldata alone.

For each batch draw: the seed from the batch root and the later blockhash, the dispatcher's
BLS-VRF proof against its registered key, β = keccak(proof). For each audit: the receipt's
EIP-712 hash and signature, its Merkle proof into the batch root, whether the draw selected it
(or a client paid), every committee draw and redraw (`verifier/chain_committee.py`: the
contract's exclusions — the worker, the dispatcher, every member drawn so far — over the
Registry's weights of the round's epoch), every abandonment for an exhausted pool or missing
members, the challenge seed, every opening's hash and cell set, every vote against the posted
leaves (`is_onchain_agreement`), every round's tally and verdict, and at settlement who was
penalised and why (a missed opening or a minority vote), the worker's slash and each slashed
amount (`verifier/chain_settlement.py`, `verillm.spec.settlement`), and every adjudication.
Nothing here trusts a node. Each rule is the contract's own, so on correct contracts every
check is "ok"; the parties the contracts slashed are listed by name with the rule that
caught them (`caught`).

    findings = ChainAuditor(RpcChain(url), Deployment.load(path)).run()
"""

from dataclasses import dataclass

from verillm.chain.chain import Chain
from verillm.chain.deploy import Deployment
from verillm.chain.events import ChainEvent, get_events
from verillm.chain.protocol import PHASE_NAMES, Protocol
from verillm.spec.audit import OnchainModel
from verillm.spec.audit import compute_vote_seal, decode_opening_leaves
from verillm.spec import audit as spec_audit
from verillm.spec import settlement as spec_settlement
from verillm.spec import vrf
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.encoding import decode
from verillm.spec.hashing import keccak256
from verillm.spec.honest import is_cell_contradicted
from verillm.spec.merkle import MerkleProof, compute_leaf_hash, is_valid_merkle_proof
from verillm.spec.receipt import SigningDomain, compute_receipt_hash, recover_receipt_signer
from verillm.spec.outcome import LATE_REVEAL_RULE, AuditOutcome
from verillm.spec.types import Leaf, Receipt, SamplingParams

from verillm.verifier.chain_outcome import compute_outcome, format_caught, format_state
from verillm.verifier.chain_committee import CommitteeReplay, HistoryUnavailable, get_round_entry
from verillm.verifier.chain_settlement import check_decisions, check_settlement, compute_faults, is_slash_amount



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
                   input_tokens=data["inputTokens"], output_tokens=data["outputTokens"], auditable_until_block=data["auditableUntilBlock"])


def get_struct_field(value, name: str, index: int):
    """Return a decoded struct's field: web3 gives a struct in calldata as a dict, older versions as a tuple."""
    return value[name] if isinstance(value, dict) else value[index]


def _before(a: ChainEvent, b: ChainEvent) -> bool:
    return (a.block_number, a.log_index) < (b.block_number, b.log_index)


class ChainAuditor:
    """Walks one deployment's events and re-derives what each of them claims."""

    def __init__(self, chain: Chain, deployment: Deployment):
        self.chain, self.protocol = chain, Protocol(chain, deployment)
        self.preset = self.protocol.preset
        self.domain = SigningDomain(chain.chain_id, bytes.fromhex(self.protocol.jobs.address[2:]))
        self.events = get_events(chain, [self.protocol.jobs, self.protocol.batches, self.protocol.disputes, self.protocol.delivery, self.protocol.registry],
                                 deployment.start_block)
        self.findings: list[Finding] = []
        self.states: dict[int, str] = {}
        """Every audit's state, settled, abandoned or open (the report lists them all)."""
        self.caught: list[str] = []
        """Every party the contracts slashed in an audit: node, rule and amount (`verifier/chain_outcome.py`)."""
        self.outcomes: dict[int, AuditOutcome] = {}
        """Every audit's outcome, `verillm.spec.outcome`'s one derivation over its events."""
        self._models: dict[bytes, OnchainModel] = {}
        self.committees = CommitteeReplay(self)

    # --- helpers ----------------------------------------------------------------------------------

    def _add(self, ok: bool, subject: str, good: str, bad: str) -> bool:
        self.findings.append(Finding("ok" if ok else "inconsistent", subject, good if ok else bad))
        return ok

    def _note(self, subject: str, detail: str) -> None:
        self.findings.append(Finding("note", subject, detail))

    def named(self, name: str, **match) -> list[ChainEvent]:
        """Return the deployment's events called ``name`` whose arguments match, in chain order."""
        return [e for e in self.events if e.name == name and all(e.args.get(k) == v for k, v in match.items())]

    def _calldata(self, event: ChainEvent) -> dict:
        tx = self.chain.rpc("eth_getTransaction", lambda: self.chain.w3.eth.get_transaction(event.tx_hash))
        handles = (self.protocol.jobs, self.protocol.batches, self.protocol.disputes, self.protocol.delivery)  # the contract the transaction called
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
        for event in self.named("AuditDrawn"):
            self.check_draw(event)
        for event in self.named("AuditStarted"):
            self.check_audit(event)
        for event in self.named("Adjudicated"):
            self.check_adjudication(event)
        return self.findings

    def summary(self) -> dict:
        return {"draws": len(self.named("AuditDrawn")), "audits": len(self.named("AuditStarted")),
                "adjudications": len(self.named("Adjudicated")), "contests": len(self.named("Contested")),
                "escalations": len(self.named("EscalationStarted"))}

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
        self._record_outcome(audit_id)
        call = self._calldata(event)
        receipt = self._started_receipt(audit_id, call)
        root, dispatcher, count, posted_block, beta, *_ = self.protocol.batches.call("getBatch", batch_id)
        proof = MerkleProof(index=index, leaf_count=count, siblings=tuple(bytes(s) for s in call["siblings"]))
        receipt_hash = compute_receipt_hash(receipt) if receipt else bytes(call["receiptHash"])
        self._add(receipt_hash == bytes(event.args["receiptHash"]) and is_valid_merkle_proof(compute_leaf_hash(receipt_hash), proof, bytes(root)),
                  subject, f"receipt {receipt_hash.hex()[:12]}… is leaf {index} of batch {batch_id}", "receipt hash or its Merkle proof into the batch root is wrong")
        if receipt is None:  # a private start whose reveal was missed and whose receipt nobody showed
            self._check_private_draw(audit_id, bytes(call["drawCommitment"]))
            return self._note(subject, "its worker's receipt was never shown (a missed private draw nobody followed): nothing to re-check")
        self._add(recover_receipt_signer(receipt, self.domain) == receipt.worker, subject, "receipt signed by its worker (EIP-712)", "receipt signature does not recover to its worker")
        drawn = spec_audit.is_audited(bytes(beta), index, self.preset.AUDIT_RATE_BPS)
        self._add(drawn != event.args["requested"], subject, "selected by the draw" if drawn else "requested and paid by a client",
                  "'requested' flag disagrees with the draw")
        base = {"worker": "0x" + receipt.worker.hex(), "dispatcher": dispatcher.lower(), "beta": bytes(beta), "index": index,
                "posted_block": posted_block, "model_id": receipt.model_id}
        self._check_private_draw(audit_id, bytes(call.get("drawCommitment", bytes(32))))
        self._check_draws(audit_id, base)
        for round_index in range(2):
            if self.named("ChallengeDrawn", auditId=audit_id, round=round_index):
                self._check_round(audit_id, round_index, receipt, bytes(beta), index, receipt.output_tokens)
        check_decisions(self, audit_id, base["worker"])
        check_settlement(self, audit_id, base["worker"])

    def _record_outcome(self, audit_id: int) -> None:
        """The audit's outcome, its report line and its `caught` lines: one derivation (`verillm.spec.outcome`)."""
        outcome = self.outcomes[audit_id] = compute_outcome(self.events, audit_id)
        phase = None
        if outcome.state == "open":
            state = self.protocol.get_audit(audit_id)
            phase = f"{PHASE_NAMES.get(state.phase, state.phase)} in round {state.round}"
        self.states[audit_id] = format_state(outcome, phase)
        self.caught += format_caught(outcome)

    def _started_receipt(self, audit_id: int, start: dict) -> Receipt | None:
        """The worker's receipt: in a public start's calldata; a private start (`startPrivateAudit`)
        sends its hash and claim only, and the receipt comes with the reveal (`revealRound`) or, after
        a missed one, `supplyReceipt`; None when it never came."""
        if "receipt" in start:
            return compute_receipt_from_struct(start["receipt"], start["signature"])
        shown = self.named("WorkerReceiptShown", auditId=audit_id)
        if not shown:
            return None
        call = self._calldata(shown[0])
        receipt = compute_receipt_from_struct(call.get("workerReceipt") or call["receipt"], start["signature"])
        claim = start["claim"]
        claimed = (get_struct_field(claim, "worker", 0).lower(), bytes(get_struct_field(claim, "modelId", 1)), get_struct_field(claim, "auditableUntilBlock", 2))
        self._add(claimed == ("0x" + receipt.worker.hex(), receipt.model_id, receipt.auditable_until_block), f"audit {audit_id}",
                  "the receipt shown with the private draw is what its start claimed (worker, model, horizon)",
                  "the receipt shown with the private draw differs from its start's claim")
        return receipt

    # --- committees -------------------------------------------------------------------------------

    def _check_draws(self, audit_id: int, base: dict) -> None:
        """Every CommitteeDrawn, and every round abandoned for an exhausted pool or missing members."""
        for event in self.named("CommitteeDrawn", auditId=audit_id):
            plan = self.committees.compute_plan(audit_id, event.args["round"], event.args["attempt"], event, base)
            try:
                seats = self.committees.compute_draw(plan, base["model_id"], event)
            except HistoryUnavailable as exc:
                self._note(f"audit {audit_id}", f"committee not re-derived: {exc} (run against an archive node)")
                continue
            what = f"round {plan.round_index} {'committee' if plan.attempt == 0 else f'redraw {plan.attempt}'}"
            self._add(seats == [m.lower() for m in event.args["members"]], f"audit {audit_id}",
                      f"{what} = stake-weighted sortition of epoch {plan.epoch}, the worker, the dispatcher and {len(plan.excluded) - 2} earlier members excluded",
                      f"{what} differs from the sortition (expected {seats or 'an exhausted pool'}, drawn {list(event.args['members'])})")
        for event in self.named("AuditAbandoned", auditId=audit_id):
            self._check_abandonment(audit_id, event, base)

    def _check_abandonment(self, audit_id: int, event: ChainEvent, base: dict) -> None:
        round_index, reason = event.args["round"], event.args["reason"]
        draws = [e for e in self.named("CommitteeDrawn", auditId=audit_id) if e.args["round"] == round_index and _before(e, event)]
        if reason == "members missing":
            posted = {e.args["slot"] for e in self.named("CommitteeReceiptPosted", auditId=audit_id) if e.args["round"] == round_index and _before(e, event)}
            missing = bool(draws) and len(posted) < len(draws[-1].args["members"])
            self._add(missing and len(draws) == self.preset.MAX_COMMITTEE_REDRAWS + 1, f"audit {audit_id}",
                      f"round {round_index} abandoned: receipts still missing after {self.preset.MAX_COMMITTEE_REDRAWS} redraws",
                      f"round {round_index} abandoned for missing members after {len(draws) - 1} redraws (the limit is {self.preset.MAX_COMMITTEE_REDRAWS})")
            return
        if reason == "committee never drawn":  # Jobs.lapse: the round's draw window passed undrawn
            return self._add(not draws, f"audit {audit_id}", f"round {round_index} abandoned: its committee was never drawn",
                             f"round {round_index} abandoned as never drawn although {len(draws)} draws were made")
        plan = self.committees.compute_plan(audit_id, round_index, len(draws), event, base)
        try:
            seats = self.committees.compute_draw(plan, base["model_id"], event)
        except HistoryUnavailable as exc:
            return self._note(f"audit {audit_id}", f"abandonment not re-derived: {exc} (run against an archive node)")
        self._add(seats is None, f"audit {audit_id}", f"round {round_index} abandoned: {plan.count} seats to fill, too few candidates (pool exhausted)",
                  f"round {round_index} abandoned as '{reason}' although the sortition fills it: {seats}")

    # --- challenge, openings, votes ---------------------------------------------------------------

    def _committee_seed(self, audit_id: int, round_index: int, beta: bytes, index: int) -> bytes:
        # every round's seed: a blockhash after the round was entered (its start, its escalation, or
        # a missed private draw's lapse), with the dispatcher's secret for a private draw
        entry = get_round_entry(self, audit_id, round_index)
        return spec_audit.compute_round_seed(audit_id, round_index, self._blockhash(entry.entered_block + self.preset.AUDIT_DRAW_DELAY_BLOCKS),
                                             entry.secret)

    def _check_private_draw(self, audit_id: int, commitment: bytes) -> None:
        """A private draw's revealed secret is the one committed at the start (`Jobs.revealRound`)."""
        revealed = self.named("PrivateDrawRevealed", auditId=audit_id)
        if revealed:
            secret = bytes(revealed[0].args["secret"])
            self._add(spec_audit.compute_draw_commitment(secret) == commitment, f"audit {audit_id}",
                      "first round drawn privately: the revealed secret is the one its dispatcher committed to at the start",
                      "the revealed secret does not hash to the start's draw commitment")
        for missed in self.named("PrivateDrawMissed", auditId=audit_id):
            self._note(f"audit {audit_id}", f"its dispatcher {missed.args['dispatcher']} never revealed its private draw: slashed, drawn publicly from block {missed.block_number}")
        for late in [e for e in self.named("PartySlashed", auditId=audit_id) if e.args["reason"] == LATE_REVEAL_RULE]:
            # Issue 34: a late reveal is the same draw: its dispatcher pays the penalty, in the reveal's transaction, nothing more.
            bps = min(self.preset.MEMBER_PENALTY_BPS, self.preset.SLASH_FRACTION_BPS)
            taken = [t for t in self.named("Slashed") if t.tx_hash == late.tx_hash and t.args["node"].lower() == late.args["node"].lower()]
            self._add(bool(revealed) and late.tx_hash == revealed[0].tx_hash and bool(taken) and is_slash_amount(taken[0], bps), f"audit {audit_id}",
                      f"its private draw was revealed late, in its grace: the dispatcher lost {bps / 100:g}% of its stake",
                      f"a late-reveal penalty of {late.args['amountWei']} wei outside its reveal, or not {bps / 100:g}% of the stake")

    def _check_round(self, audit_id: int, round_index: int, receipt: Receipt, beta: bytes, index: int, output_tokens: int) -> None:
        subject = f"audit {audit_id} round {round_index}"
        posted = [e for e in self.named("CommitteeReceiptPosted", auditId=audit_id) if e.args["round"] == round_index]
        drawn_seed = self.named("ChallengeDrawn", auditId=audit_id, round=round_index)[0].args["challengeSeed"]
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
        for event in [e for e in self.named("Opened", auditId=audit_id) if e.args["round"] == round_index]:
            slot, data = event.args["slot"], bytes(self._calldata(event)["leaves"])
            cells = compute_opened_cells(challenge, num_positions + (1 if slot else 0))
            decoded = decode_opening_leaves(data, model.fingerprint_dims)
            ok = keccak256(data) == bytes(event.args["openingHash"]) and [(l.position, l.layer) for l in decoded] == cells
            self._add(ok, subject, f"party {slot}'s opening hashes to what was recorded and covers exactly the challenged cells",
                      f"party {slot}'s opening does not match its hash or the challenged cells")
            leaves[slot] = ({(l.position, l.layer): l for l in decoded}, event.args["vote"], event.args["party"])
            if slot:
                self._check_seal(subject, audit_id, round_index, event, data)
        return leaves

    def _check_seal(self, subject: str, audit_id: int, round_index: int, opened: ChainEvent, data: bytes) -> None:
        """A member's opening is what it sealed, and was shown only once every member of the round
        had sealed or the seal window had closed (no member could copy another's vote)."""
        slot = opened.args["slot"]
        seals = [e for e in self.named("VoteSealed", auditId=audit_id) if e.args["round"] == round_index]
        mine = [e for e in seals if e.args["slot"] == slot]
        if not mine:
            self._add(False, subject, "", f"party {slot} opened a vote it never sealed")
            return
        call = self._calldata(opened)
        expected = compute_vote_seal(audit_id, round_index, slot - 1, call["agree"], keccak256(data), bytes(call["salt"]))
        self._add(expected == bytes(self._calldata(mine[0])["seal"]), subject, f"party {slot}'s opening and vote are what it sealed at block {mine[0].block_number}",
                  f"party {slot}'s opening and vote do not hash to its seal")
        seal_by = self.protocol.get_round_state(audit_id, round_index).deadlines.members_seal_by
        members = len(self.protocol.get_committee(audit_id, round_index))
        shown_after_every_seal = len(seals) == members and all(_before(e, opened) for e in seals)
        self._add(shown_after_every_seal or opened.block_number > seal_by, subject,
                  f"party {slot}'s vote was shown only after every seal of its round (or the seal window's end, block {seal_by})",
                  f"party {slot}'s vote was shown at block {opened.block_number}, before every member sealed and before the seal window closed ({seal_by})")

    def _check_votes(self, subject: str, audit_id: int, round_index: int, leaves: dict, model, prompt_len: int, output_tokens: int) -> None:
        if 0 not in leaves:
            return
        punished = {f.node for f in compute_faults(self, audit_id) if f.round_index == round_index and f.slot > 0}
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

    def check_adjudication(self, event: ChainEvent) -> None:
        audit_id, round_index, slot = event.args["auditId"], event.args["round"], event.args["slot"]
        state = self.protocol.get_audit(audit_id)
        model = self._model(state.model_id)
        calldata = self._calldata(event)
        cells = calldata["cells"]
        worker = {(l.position, l.layer): l for l in (decode(Leaf, bytes(get_struct_field(c, "workerLeaf", 0))) for c in cells)}
        member = {(l.position, l.layer): l for l in (decode(Leaf, bytes(get_struct_field(c, "memberLeaf", 2))) for c in cells)}
        prompt_len = state.num_positions + 1 - state.output_tokens
        if "appealSlot" in calldata:  # adjudicateAcrossRounds: the "worker" leaves are the appeal seat's (the quorum's last)
            agrees = not any(is_cell_contradicted(worker[c], member[c], model) for c in worker)
        else:
            agrees = spec_audit.is_onchain_agreement(worker, member, model, prompt_len, state.output_tokens)
        self._add(agrees == event.args["dataAgrees"], f"audit {audit_id} adjudication of member slot {slot} (round {round_index})",
                  f"data {'agree' if agrees else 'disagree'} as the contract found; vote {event.args['vote']} → slashed",
                  "the contract's comparison differs from the spec's")
