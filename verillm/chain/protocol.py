"""The protocol contracts' deploy plan, with constructor params taken from a preset.

The contracts take a `ProtocolParams` struct whose fields mirror the preset's names in camel
case (`minStakeWei` ↔ `MIN_STAKE_WEI`). The struct's shape is read from the compiled ABI, so a
field added on both sides needs no change here; a field missing from the preset is an error
naming it.

Below the plan, `Protocol`: typed bindings, one method per protocol message (register,
post_batch, draw_audit, start_audit, draw_round, post_committee_receipt, open, open_and_vote,
finalize, settle, escalate, contest, adjudicate, withdraw, ...), whichever contract runs it
(Batches: batches, draws and starts; Jobs: the audit state machine and credits; Disputes:
contests, adjudication and escalation; Delivery: undelivered committee jobs; Coverage: batching
promises). Every write
returns a `Tx` (gas used, the value decoded from its event, the receipt). The arithmetic and
the state machine's codes and deadlines live in `verillm.spec.audit` and
`verillm.spec.settlement`; the rules in docs/protocol.md §12.

    protocol = Protocol.deploy(chain, MINIMAL, sender=chain.dev_accounts[0])
    protocol.add_model(owner, OnchainModel.from_profile(model_id, manifest, profile))
    protocol.register(node, vrf_secret_key, "http://...", [model_id], stake_wei)
    batch = protocol.post_batch(dispatcher, receipt_hashes).value
    protocol.draw_audit(dispatcher, batch.batch_id, vrf_secret_key)
    audit_id = protocol.start_audit(dispatcher, batch.batch_id, index, receipt, batch.levels).value
    protocol.draw_round(anyone, audit_id)   # after the round's seed block (entered + delay)
"""

from dataclasses import dataclass
from typing import Any

from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.logs import DISCARD

from verillm.chain.artifacts import ArtifactStore
from verillm.chain.chain import Chain, ContractHandle
from verillm.chain.deploy import CallStep, DeployContext, Deployment, DeployStep, deploy_plan
from verillm.errors import ChainError, ConfigError, InvalidInput
from verillm.spec import audit as spec_audit
from verillm.spec import delivery as spec_delivery
from verillm.spec import vrf
from verillm.spec.encoding import encode
from verillm.spec.params import Preset, compute_preset_name
from verillm.spec.receipt import SigningDomain, compute_receipt_hash
from verillm.spec.audit import PHASE_NAMES, TERMINAL_PHASES, OnchainModel, Phase, RoundState, compute_round_deadlines  # noqa: F401 (re-exported)
from verillm.spec.merkle import MerkleProof
from verillm.spec.types import LeafOpening, Opening, Receipt, SamplingParams

ZERO32 = b"\x00" * 32  # no draw commitment: a public draw


def get_params_components(artifacts: ArtifactStore, contract: str = "Registry", struct: str = "ProtocolParams") -> list[dict]:
    """Return the ABI components of the ``struct`` argument of ``contract``'s constructor."""
    constructor = next((e for e in artifacts.get(contract).abi if e.get("type") == "constructor"), None)
    params = [i for i in (constructor or {}).get("inputs", []) if i.get("internalType") == f"struct {struct}"]
    if not params:
        raise ConfigError(f"{contract}'s constructor takes no {struct} struct")
    return params[0]["components"]


def compute_protocol_params(preset, artifacts: ArtifactStore, contract: str = "Registry", struct: str = "ProtocolParams") -> tuple:
    """Return the ``struct`` tuple (ProtocolParams, or Coverage's CoverageParams) for ``preset``,
    in the struct's field order."""
    components = get_params_components(artifacts, contract, struct)
    missing = [compute_preset_name(c["name"]) for c in components if not hasattr(preset, compute_preset_name(c["name"]))]
    if missing:
        raise ConfigError(f"preset {preset.name!r} lacks {missing}, which the contracts' ProtocolParams needs")
    return tuple(getattr(preset, compute_preset_name(c["name"])) for c in components)


def _params(ctx: DeployContext) -> tuple:
    return compute_protocol_params(ctx.preset, ctx.artifacts)


def _coverage_args(ctx: DeployContext) -> tuple:
    coverage = compute_protocol_params(ctx.preset, ctx.artifacts, "Coverage", "CoverageParams")
    return ctx.addresses["Batches"], ctx.addresses["Registry"], ctx.addresses["Disputes"], _params(ctx), coverage


PROTOCOL_STEPS = (
    DeployStep("Registry", lambda ctx: (_params(ctx),)),  # validates the parameters, once (Params.validate)
    DeployStep("Jobs", lambda ctx: (ctx.addresses["Registry"], _params(ctx))),
    DeployStep("Batches", lambda ctx: (ctx.addresses["Registry"], ctx.addresses["Jobs"], _params(ctx))),
    DeployStep("Disputes", lambda ctx: (ctx.addresses["Jobs"], ctx.addresses["Registry"], _params(ctx))),
    DeployStep("Delivery", lambda ctx: (ctx.addresses["Jobs"], ctx.addresses["Registry"], _params(ctx),
                                        compute_protocol_params(ctx.preset, ctx.artifacts, "Delivery", "DeliveryParams"))),
    DeployStep("Coverage", _coverage_args),
    CallStep("Registry", "bindProtocol", lambda ctx: (ctx.addresses["Jobs"], ctx.addresses["Batches"], ctx.addresses["Disputes"],
                                                      ctx.addresses["Delivery"])),
    CallStep("Registry", "bindCoverage", lambda ctx: (ctx.addresses["Coverage"],)),
    CallStep("Jobs", "bindProtocol", lambda ctx: (ctx.addresses["Disputes"], ctx.addresses["Batches"], ctx.addresses["Delivery"])),
)


@dataclass(frozen=True)
class Tx:
    """A mined protocol transaction: gas used, the value it returned (decoded from events)."""

    gas_used: int
    value: Any
    receipt: dict


@dataclass(frozen=True)
class PostedBatch:
    batch_id: int
    root: bytes
    levels: list
    """The batch tree, to prove receipts into it later."""


# The phase of an audit's current round (`AuditState.phase`): verillm.spec.audit.Phase, the codes once.
COMMITTING, OPENING, DECIDED, DRAWING, SETTLED, ABANDONED, LAPSED = (
    Phase.COMMITTING, Phase.OPENING, Phase.DECIDED, Phase.DRAWING, Phase.SETTLED, Phase.ABANDONED, Phase.LAPSED)


@dataclass(frozen=True)
class AuditState:
    """`Jobs.getAudit` and `getAuditExtra`, together."""

    audit_id: int
    worker: str
    model_id: bytes
    num_positions: int
    output_tokens: int
    round: int
    phase: int
    verdict_block: int
    challenge_seed: bytes
    committee_size: int
    batch_id: int
    index: int
    dispatcher: str
    escalator: str
    verdict: int
    worker_slashed: bool
    pending_contests: int
    requested: bool




def compute_receipt_tuple(receipt: Receipt) -> tuple:
    """Return ``receipt`` as the `ReceiptData` tuple (contracts/src/AuditTypes.sol)."""
    s = receipt.sampling
    return (receipt.job_hash, receipt.model_id, receipt.input_hash, receipt.output_hash, s.temperature_milli, s.top_k,
            s.top_p_ppm, s.seed, receipt.max_new_tokens, receipt.commitment_root, receipt.num_positions,
            receipt.input_tokens, receipt.output_tokens, receipt.auditable_until_block, Web3.to_checksum_address(receipt.worker))


def _prefix_tuple(prefix) -> tuple:
    """A `verillm.spec.stream.StreamPrefix` as Coverage's StreamPrefix tuple."""
    return (prefix.job_hash, prefix.token_count, prefix.prefix_hash, Web3.to_checksum_address(prefix.worker))


_EMPTY_PREFIX = (b"\x00" * 32, 0, b"\x00" * 32, "0x" + "00" * 20)
_EMPTY_RECEIPT = (b"\x00" * 32, b"\x00" * 32, b"\x00" * 32, b"\x00" * 32, 0, 0, 0, 0, 0, b"\x00" * 32, 0, 0, 0, 0, "0x" + "00" * 20)


class Protocol:
    """The three contracts of one deployment, with one method per protocol message."""

    def __init__(self, chain: Chain, deployment: Deployment):
        self.chain = chain
        self.deployment = deployment
        self.registry: ContractHandle = deployment.get(chain, "Registry")
        self.jobs: ContractHandle = deployment.get(chain, "Jobs")
        self.batches: ContractHandle = deployment.get(chain, "Batches")
        self.disputes: ContractHandle = deployment.get(chain, "Disputes")
        self.delivery: ContractHandle = deployment.get(chain, "Delivery")
        self.coverage: ContractHandle = deployment.get(chain, "Coverage")
        names = [c["name"] for c in get_params_components(chain.artifacts, "Jobs")]
        onchain = dict(zip(names, self.jobs.call("params"), strict=True))
        onchain.update(batchByBlocks=self.coverage.call("batchByBlocks"), omissionClaimWindowBlocks=self.coverage.call("claimWindowBlocks"),
                       omissionClaimBondWei=self.coverage.call("claimBondWei"), omissionAnswerGas=self.coverage.call("answerGas"),
                       deliveryClaimBondWei=self.delivery.call("claimBondWei"), deliveryGasPriceWei=self.delivery.call("gasPriceWei"))
        self.preset: Preset = Preset.from_contract_params(onchain)
        """The deployment's protocol parameters, read once from its contracts."""

    @classmethod
    def deploy(cls, chain: Chain, preset: Preset, sender: LocalAccount) -> "Protocol":
        """Deploy Registry, Jobs, Batches, Disputes, Delivery and Coverage with ``preset``'s parameters and wire them."""
        return cls(chain, deploy_plan(chain, preset, sender, PROTOCOL_STEPS))

    # --- helpers ---------------------------------------------------------------------------
    def _send(self, handle: ContractHandle, function: str, *args, sender: LocalAccount, value: int = 0,
              event: str | None = None, field: str | None = None, emitter: ContractHandle | None = None,
              optional: bool = False) -> Tx:
        """Send ``function``; the value is ``event`` (emitted by ``emitter``, default ``handle``)
        decoded (its ``field``), or None when ``optional`` and the event did not come."""
        receipt = self.chain.transact(handle, function, *args, sender=sender, value=value)
        decoded = None
        if event is not None:
            source = emitter or handle
            own = [log for log in receipt["logs"] if log["address"] == source.address]
            logs = source.web3.events[event]().process_receipt({**receipt, "logs": own}, errors=DISCARD)
            if not logs and not optional:
                raise ChainError(f"{handle.name}.{function}: no {source.name}.{event} event in the receipt")
            if logs:
                decoded = logs[0]["args"][field] if field else dict(logs[0]["args"])
        return Tx(gas_used=receipt["gasUsed"], value=decoded, receipt=receipt)

    def get_blockhash(self, number: int) -> bytes:
        """Return the hash of block ``number``."""
        return bytes(self.chain.get_block(number)["hash"])

    # --- Registry --------------------------------------------------------------------------
    def add_model(self, owner: LocalAccount, model: OnchainModel) -> Tx:
        return self._send(self.registry, "addModel", model.model_id, model.fingerprint_dims, model.min_cells_for_rms,
                          list(model.committed_layers), list(model.max_cell_error_ppb), list(model.rms_error_ppb), sender=owner)

    def register(self, node: LocalAccount, vrf_secret_key: int, endpoint: str, models: list[bytes], stake_wei: int) -> Tx:
        """Register ``node`` with its VRF key (and proof of possession), endpoint and models."""
        pk = vrf.compute_words(vrf.compute_public_key(vrf_secret_key))
        pop = vrf.compute_words(vrf.compute_possession_proof(vrf_secret_key, bytes.fromhex(node.address[2:])))
        return self._send(self.registry, "register", pk, pop, endpoint, list(models), sender=node, value=stake_wei)

    def update_endpoint(self, node: LocalAccount, endpoint: str) -> Tx:
        return self._send(self.registry, "updateEndpoint", endpoint, sender=node)

    def update_models(self, node: LocalAccount, models: list[bytes]) -> Tx:
        return self._send(self.registry, "updateModels", list(models), sender=node)

    def top_up(self, node: LocalAccount, amount_wei: int) -> Tx:
        return self._send(self.registry, "topUp", sender=node, value=amount_wei)

    def deregister(self, node: LocalAccount) -> Tx:
        return self._send(self.registry, "deregister", sender=node)

    def withdraw(self, node: LocalAccount) -> Tx:
        return self._send(self.registry, "withdraw", sender=node, event="Withdrawn", field="amountWei")

    def get_node(self, address: str) -> dict:
        stake, unbonding_end, locks, registered, active, endpoint, models = self.registry.call("getNode", address)
        return {"stake_wei": stake, "unbonding_end_block": unbonding_end, "locks": locks, "registered": registered,
                "active": active, "endpoint": endpoint, "models": [bytes(m) for m in models]}

    def get_model_nodes(self, model_id: bytes) -> tuple[list[str], list[int]]:
        nodes, stakes = self.registry.call("getModelNodes", model_id)
        return list(nodes), list(stakes)

    # --- Jobs: batches and draws -------------------------------------------------------------
    def post_batch(self, dispatcher: LocalAccount, receipt_hashes: list[bytes]) -> Tx:
        """Post the Merkle root over ``receipt_hashes``, paying the per-job fee."""
        levels = spec_audit.compute_batch_levels(receipt_hashes)
        fee = len(receipt_hashes) * self.preset.JOB_FEE_WEI
        tx = self._send(self.batches, "postBatch", levels[-1][0], len(receipt_hashes), sender=dispatcher, value=fee,
                        event="BatchPosted", field="batchId")
        return Tx(tx.gas_used, PostedBatch(tx.value, levels[-1][0], levels), tx.receipt)

    def get_batch(self, batch_id: int) -> dict:
        """`Batches.getBatch`: root, dispatcher, count, posted block, β, drawn block, draw missed."""
        root, dispatcher, count, posted, beta, drawn, missed = self.batches.call("getBatch", batch_id)
        return {"root": bytes(root), "dispatcher": dispatcher, "count": count, "posted_block": posted, "beta": bytes(beta),
                "drawn_block": drawn, "draw_missed": missed}

    def get_draw_seed(self, batch_id: int) -> bytes:
        """Return the VRF input of a batch (its seed block must be mined)."""
        batch = self.batches.call("getBatch", batch_id)
        seed_block = batch[3] + self.preset.AUDIT_DRAW_DELAY_BLOCKS
        if self.chain.get_block_number() <= seed_block:  # eth_estimateGas may run at the latest block
            raise InvalidInput(f"batch {batch_id}'s seed block {seed_block} is not mined yet")
        return spec_audit.compute_draw_seed(bytes(batch[0]), self.get_blockhash(seed_block))

    def draw_audit(self, sender: LocalAccount, batch_id: int, vrf_secret_key: int) -> Tx:
        """Prove the dispatcher's VRF over the batch seed and post it; value = β."""
        proof = vrf.compute_vrf_proof(vrf_secret_key, self.get_draw_seed(batch_id))
        return self._send(self.batches, "drawAudit", batch_id, vrf.compute_words(proof), sender=sender,
                          event="AuditDrawn", field="beta")

    def is_audited(self, batch_id: int, index: int) -> bool:
        return self.batches.call("isAudited", batch_id, index)

    def slash_missed_draw(self, sender: LocalAccount, batch_id: int) -> Tx:
        return self._send(self.batches, "slashMissedDraw", batch_id, sender=sender)

    def slash_missed_start(self, sender: LocalAccount, batch_id: int, index: int) -> Tx:
        return self._send(self.batches, "slashMissedStart", batch_id, index, sender=sender)

    # --- Jobs: audits --------------------------------------------------------------------------
    def start_audit(self, sender: LocalAccount, batch_id: int, index: int, receipt: Receipt, levels: list,
                    value_wei: int | None = None, draw_commitment: bytes = ZERO32) -> Tx:
        """Start the audit of a batched receipt (its signed token counts give N); value = the audit
        id, 0 when the start was skipped (the receipt has its audit already, or its worker's horizon
        passed: `AuditSkipped`). Its committee is drawn later: `draw_round`, or, when the batch's
        dispatcher starts a selected job with ``draw_commitment`` (`spec.audit.compute_draw_commitment`),
        privately by that dispatcher: `reveal_round`. A private start (`Batches.startPrivateAudit`)
        sends the receipt's hash, its worker, model and horizon, not the receipt: the reveal shows it.
        ``value_wei`` by default: 0 for a public start (a request passes its fee), the private-draw
        bond for a private one (`spec.audit.compute_private_draw_bond`, returned at the reveal)."""
        siblings = list(spec_audit.compute_batch_proof(levels, index).siblings)
        if draw_commitment == ZERO32:
            tx = self._send(self.batches, "startAudit", batch_id, index, compute_receipt_tuple(receipt), receipt.signature, siblings,
                            sender=sender, value=value_wei or 0, event="AuditStarted", field="auditId", emitter=self.jobs, optional=True)
        else:
            claim = (Web3.to_checksum_address(receipt.worker), receipt.model_id, receipt.auditable_until_block)
            tx = self._send(self.batches, "startPrivateAudit", batch_id, index, compute_receipt_hash(receipt), claim, receipt.signature,
                            siblings, draw_commitment, sender=sender,
                            value=spec_audit.compute_private_draw_bond(self.preset) if value_wei is None else value_wei, event="AuditStarted", field="auditId",
                            emitter=self.jobs, optional=True)
        return Tx(tx.gas_used, tx.value or 0, tx.receipt)

    def preview_committee(self, audit_id: int, secret: bytes) -> list[str]:
        """Who the private draw with ``secret`` seats (`Delivery.previewCommittee`; empty before the seed
        block). An eth_call: send it only to a node you trust, the secret is the draw's privacy."""
        return list(self.delivery.call("previewCommittee", audit_id, secret))

    def reveal_round(self, sender: LocalAccount, audit_id: int, secret: bytes, worker_receipt: Receipt,
                     seats: list[tuple[int, Receipt]]) -> Tx:
        """The dispatcher's private draw (`Jobs.revealRound`): its secret, the worker's receipt the
        start kept back, and the receipts of the seats (slot, the member's signed receipt) that
        answered; value = the members drawn."""
        slots = [slot for slot, _ in seats]
        receipts = [compute_receipt_tuple(r) for _, r in seats]
        signatures = [r.signature for _, r in seats]
        tx = self._send(self.jobs, "revealRound", audit_id, secret, compute_receipt_tuple(worker_receipt), slots, receipts, signatures,
                        sender=sender, event="CommitteeDrawn", field="members", optional=True)
        return Tx(tx.gas_used, list(tx.value or []), tx.receipt)

    def supply_receipt(self, sender: LocalAccount, audit_id: int, worker_receipt: Receipt) -> Tx:
        """After a missed private draw, show the worker's receipt (`Jobs.supplyReceipt`), so the
        round can be drawn publicly (`draw_round`)."""
        return self._send(self.jobs, "supplyReceipt", audit_id, compute_receipt_tuple(worker_receipt), sender=sender)

    def draw_round(self, sender: LocalAccount, audit_id: int) -> Tx:
        """Draw the current round's committee (`Jobs.drawRound`, after the round's seed block);
        value = the members drawn (empty when the pool was too small: the audit is abandoned)."""
        tx = self._send(self.jobs, "drawRound", audit_id, sender=sender, event="CommitteeDrawn", field="members", optional=True)
        return Tx(tx.gas_used, list(tx.value or []), tx.receipt)

    def lapse(self, sender: LocalAccount, audit_id: int) -> Tx:
        """End a round nobody drew in its window (`Jobs.lapse`)."""
        return self._send(self.jobs, "lapse", audit_id, sender=sender)

    def post_committee_receipt(self, sender: LocalAccount, audit_id: int, slot: int, receipt: Receipt) -> Tx:
        return self._send(self.jobs, "postCommitteeReceipt", audit_id, slot, compute_receipt_tuple(receipt), receipt.signature, sender=sender)

    def replace_missing(self, sender: LocalAccount, audit_id: int) -> Tx:
        return self._send(self.jobs, "replaceMissing", audit_id, sender=sender)

    def draw_challenge(self, sender: LocalAccount, audit_id: int) -> Tx:
        return self._send(self.jobs, "drawChallenge", audit_id, sender=sender, event="ChallengeDrawn", field="challengeSeed")

    def open_worker(self, worker: LocalAccount, audit_id: int, opening: Opening) -> Tx:
        """The worker posts its opening (leaves only; proofs stay off-chain unless contested)."""
        return self._send(self.jobs, "openWorker", audit_id, spec_audit.encode_opening_leaves(opening), sender=worker)

    def seal_vote(self, member: LocalAccount, audit_id: int, round_index: int, slot: int, opening: Opening, agree: bool, salt: bytes) -> Tx:
        """A member seals its vote and opening (`Jobs.sealVote`; ``slot`` counts members from 0)."""
        seal = spec_audit.compute_vote_seal(audit_id, round_index, slot, agree, spec_audit.compute_opening_hash(opening), salt)
        return self._send(self.jobs, "sealVote", audit_id, slot, seal, sender=member)

    def open_and_vote(self, member: LocalAccount, audit_id: int, slot: int, opening: Opening, agree: bool, salt: bytes) -> Tx:
        """A member opens what it sealed: its leaves, its vote and the seal's salt (`Jobs.openAndVote`)."""
        return self._send(self.jobs, "openAndVote", audit_id, slot, spec_audit.encode_opening_leaves(opening), agree, salt, sender=member)

    def finalize(self, sender: LocalAccount, audit_id: int) -> Tx:
        """Close the round (`Jobs.finalize`); value = the round's verdict code."""
        return self._send(self.jobs, "finalize", audit_id, sender=sender, event="RoundDecided", field="verdict")

    def settle(self, sender: LocalAccount, audit_id: int) -> Tx:
        """`Jobs.settle`; the value is the settled verdict, or None when the call settled nothing
        but entered the decider round (an appeal that contradicted round 0, docs/protocol.md §12 "Escalate")."""
        return self._send(self.jobs, "settle", audit_id, sender=sender, event="AuditSettled", field="verdict", optional=True)

    def claim(self, account: LocalAccount) -> Tx:
        return self._send(self.jobs, "claim", sender=account, event="Claimed", field="amountWei")

    def get_credit(self, address: str) -> int:
        return self.jobs.call("credits", address)

    def get_audit(self, audit_id: int) -> AuditState:
        core = self.jobs.call("getAudit", audit_id)
        extra = self.jobs.call("getAuditExtra", audit_id)
        return AuditState(audit_id, core[0], bytes(core[1]), core[2], core[3], core[4], core[5], core[6], bytes(core[7]),
                          core[8], *extra)

    def get_committee(self, audit_id: int, round_index: int) -> list[str]:
        return list(self.jobs.call("getRound", audit_id, round_index)[6])

    def get_round_state(self, audit_id: int, round_index: int | None = None) -> RoundState:
        """`Jobs.getRoundState` of ``round_index`` (default: the audit's current round)."""
        if round_index is None:
            round_index = self.get_audit(audit_id).round
        raw = self.jobs.call("getRoundState", audit_id, round_index)
        (phase, round_, attempt, members, receipts, seals, opens, worker_opened, challenge_drawn, published, pending,
         publish_deadline, private_draw, receipt_known, d) = raw
        # revealBy is not on-chain (Jobs keeps the grace out of every other deadline's gas): drawBy + the grace
        deadlines = spec_audit.RoundDeadlines(*d, reveal_by=d[2] + self.preset.PRIVATE_REVEAL_GRACE_BLOCKS)
        return RoundState(Phase(phase), round_, attempt, members, receipts, seals, opens, worker_opened, challenge_drawn, published,
                          pending, publish_deadline, deadlines, private_draw, receipt_known)

    def get_party(self, audit_id: int, round_index: int, slot: int) -> dict:
        node, root, num_positions, opening_hash, opened, vote, slashed = self.jobs.call("getParty", audit_id, round_index, slot)
        return {"node": node, "root": bytes(root), "num_positions": num_positions, "opening_hash": bytes(opening_hash),
                "opened": opened, "vote": vote, "slashed": slashed}

    # --- Disputes ------------------------------------------------------------------------------
    def escalate(self, sender: LocalAccount, audit_id: int) -> Tx:
        return self._send(self.disputes, "escalate", audit_id, sender=sender, value=self.preset.DISPUTE_BOND_WEI)

    def draw_escalation(self, sender: LocalAccount, audit_id: int) -> Tx:
        """The escalation round's committee draw: `draw_round` of round 1."""
        return self.draw_round(sender, audit_id)

    def contest(self, sender: LocalAccount, audit_id: int, round_index: int, slot: int, cells: list[tuple[int, int]]) -> Tx:
        """Demand proofs of party ``slot``'s leaves at (position, layer) ``cells``; value = contest id."""
        return self._send(self.disputes, "contest", audit_id, round_index, slot, [c[0] for c in cells], [c[1] for c in cells],
                          sender=sender, value=self.preset.DISPUTE_BOND_WEI, event="Contested", field="contestId")

    def answer_contest(self, sender: LocalAccount, contest_id: int, cells: list[tuple[int, int]], opening: Opening) -> Tx:
        """Prove the contested cells from ``opening`` (the party's posted opening, with proofs)."""
        order = {(item.leaf.position, item.leaf.layer): i for i, item in enumerate(opening.leaves)}
        missing = [c for c in cells if c not in order]
        if missing:
            raise InvalidInput(f"the opening has no leaf at {missing[:3]}")
        indices = [order[c] for c in cells]
        siblings = [list(opening.leaves[i].proof.siblings) for i in indices]
        return self._send(self.disputes, "answerContest", contest_id, [c[0] for c in cells], [c[1] for c in cells],
                          spec_audit.encode_opening_leaves(opening), indices, siblings, sender=sender)

    def get_answered_opening(self, contest_id: int, model: OnchainModel, from_block: int = 0) -> Opening:
        """The contested party's leaves and Merkle proofs at the contested cells, as its answer
        (`ContestAnswered`) published them in calldata: what anyone needs to adjudicate the party
        (a first-round member the appeal contradicts: docs/protocol.md §12 "Accountable votes")."""
        logs = self.disputes.web3.events.ContestAnswered().get_logs(from_block=from_block, argument_filters={"contestId": contest_id})
        if not logs:
            raise InvalidInput(f"contest {contest_id} has no answer on-chain")
        tx = self.chain.rpc("eth_getTransaction", lambda: self.chain.w3.eth.get_transaction(logs[0]["transactionHash"]))
        _, args = self.disputes.web3.decode_function_input(tx["input"])
        contest = self.disputes.call("getContest", contest_id)
        party = self.get_party(contest[0], contest[1], contest[2])
        leaves = spec_audit.decode_opening_leaves(bytes(args["opening"]), model.fingerprint_dims)
        layers = list(model.committed_layers)
        items = []
        for index, siblings in zip(args["leafIndices"], args["siblings"], strict=True):
            leaf = leaves[index]
            position = leaf.position * len(layers) + layers.index(leaf.layer)
            proof = MerkleProof(position, party["num_positions"] * len(layers), tuple(bytes(x) for x in siblings))
            items.append(LeafOpening(leaf, proof))
        return Opening(party["root"], tuple(items))

    def resolve_contest(self, sender: LocalAccount, contest_id: int) -> Tx:
        return self._send(self.disputes, "resolveContest", contest_id, sender=sender)

    def release_bond(self, sender: LocalAccount, contest_id: int) -> Tx:
        """Pay a member's answered contest's held bond: back to the challenger once the member was
        proven a liar, else to the member once it can no longer be (Disputes.releaseBond)."""
        return self._send(self.disputes, "releaseBond", contest_id, sender=sender)

    def adjudicate(self, sender: LocalAccount, audit_id: int, round_index: int, slot: int,
                   worker_opening: Opening, member_opening: Opening, only: set | None = None) -> Tx:
        """Re-run member ``slot``'s comparison on-chain over every cell the worker opened, or over
        the (position, layer) cells in ``only`` (the token cells an appeal round checked too)."""
        member_cells = {(i.leaf.position, i.leaf.layer): i for i in member_opening.leaves}
        picked = [(k, w) for k, w in enumerate(worker_opening.leaves) if only is None or (w.leaf.position, w.leaf.layer) in only]
        pairs = [(w.leaf, w.proof, member_cells[(w.leaf.position, w.leaf.layer)]) for _, w in picked]
        cells = [(encode(w), list(wp.siblings), encode(m.leaf), list(m.proof.siblings)) for w, wp, m in pairs]
        # The worker's leaves as it posted them, each cell's leaf at its index there.
        posted = (spec_audit.encode_opening_leaves(worker_opening), [k for k, _ in picked])
        return self._send(self.disputes, "adjudicate", audit_id, round_index, slot, cells, posted, sender=sender)

    def adjudicate_across_rounds(self, sender: LocalAccount, audit_id: int, slot: int, appeal_slot: int,
                                 member_opening: Opening, appeal_opening: Opening, cells: list[tuple[int, int]]) -> Tx:
        """Count appeal member ``appeal_slot``'s contradiction of first-round member ``slot`` (it
        voted agree): their leaves fail against each other on the last-layer token ``cells``
        after the appeal decided FAIL (``appeal_slot`` a disagree voter) or the worker's default;
        a majority of the appeal's seats slashes (Disputes.adjudicateAcrossRounds). Each opening
        with its proofs."""
        member = {(i.leaf.position, i.leaf.layer): i for i in member_opening.leaves}
        appeal = {(i.leaf.position, i.leaf.layer): i for i in appeal_opening.leaves}
        missing = [c for c in cells if c not in member or c not in appeal]
        if missing:
            raise InvalidInput(f"an opening has no leaf at {missing[:3]}")
        pairs = [(encode(appeal[c].leaf), list(appeal[c].proof.siblings), encode(member[c].leaf), list(member[c].proof.siblings))
                 for c in sorted(cells)]
        return self._send(self.disputes, "adjudicateAcrossRounds", audit_id, slot, appeal_slot, pairs, sender=sender)

    # --- undelivered committee jobs (Delivery; verillm.spec.delivery) --------------------------
    def claim_undelivered(self, member: LocalAccount, audit_id: int, slot: int) -> Tx:
        """Member ``slot`` says its verification job never came, bonding DELIVERY_CLAIM_BOND_WEI;
        value = the publish deadline."""
        return self._send(self.delivery, "claimUndelivered", audit_id, slot, sender=member, value=self.preset.DELIVERY_CLAIM_BOND_WEI,
                          event="DeliveryClaimed", field="publishDeadline")

    def publish_transcript(self, sender: LocalAccount, audit_id: int, tokens: list[int], sampling) -> Tx:
        """Publish a claimed job: the worker's input ‖ output tokens and its receipt's sampling."""
        return self._send(self.delivery, "publishTranscript", audit_id, spec_delivery.encode_transcript_tokens(tokens),
                          sampling.temperature_milli, sampling.top_k, sampling.top_p_ppm, sampling.seed, sender=sender)

    def slash_undelivered(self, sender: LocalAccount, audit_id: int) -> Tx:
        """After an unanswered publication window: slash the worker; value = the slashed wei."""
        return self._send(self.delivery, "slashUndelivered", audit_id, sender=sender,
                          event="DeliveryDefaulted", field="slashedWei")

    def release_claim_bonds(self, sender: LocalAccount, audit_id: int, round_index: int) -> Tx:
        """Return the claim bonds of a round whose every receipt came with nothing published."""
        return self._send(self.delivery, "releaseClaimBonds", audit_id, round_index, sender=sender)

    def get_claim_bonds(self, audit_id: int, round_index: int) -> list[str]:
        """The claimants of ``round_index`` whose delivery claim bonds Delivery still holds."""
        return list(self.delivery.call("getClaimBonds", audit_id, round_index))

    def penalize_silent_seat(self, sender: LocalAccount, audit_id: int, round_index: int, attempt: int, slot: int) -> Tx:
        """Arm seat (round, attempt, slot) while it is empty in a committing round, or, once the
        seat was redrawn or its round abandoned empty, take its holder's MEMBER_PENALTY_BPS;
        value = the penalty (0 when armed)."""
        return self._send(self.disputes, "penalizeSilentSeat", audit_id, round_index, attempt, slot, sender=sender,
                          event="SilentSeat", field="penaltyWei")

    def get_availability(self, audit_id: int) -> dict:
        """The current round's claim window: publish deadline (0: no claim), round, published."""
        deadline, round_index, published = self.jobs.call("availability", audit_id)
        return {"publish_deadline": deadline, "round": round_index, "published": published}

    def get_published_transcript(self, audit_id: int, from_block: int = 0) -> spec_delivery.Transcript | None:
        """The transcript published for ``audit_id`` (from its event), or None."""
        logs = self.delivery.web3.events.TranscriptPublished().get_logs(
            from_block=from_block, argument_filters={"auditId": audit_id})
        if not logs:
            return None
        args = logs[0]["args"]
        sampling = SamplingParams(args["temperatureMilli"], args["topK"], args["topPPpm"], args["seed"])
        return spec_delivery.Transcript(spec_delivery.decode_transcript_tokens(bytes(args["tokens"])), sampling)

    # --- batching promises (Coverage; verillm.spec.promise) -----------------------------------
    def get_promise_domain(self):
        """Return the EIP-712 domain promises are signed for: this chain and the Coverage contract."""
        return SigningDomain(chain_id=self.chain.chain_id, verifying_contract=bytes.fromhex(self.coverage.address[2:]))

    def claim_omitted(self, sender: LocalAccount, signed) -> Tx:
        """Claim a signed promise's receipt was not batched in time, with the bond; value = the claim id."""
        p = signed.promise
        promise = (p.receipt_hash, Web3.to_checksum_address(p.dispatcher), p.batch_by_block)
        return self._send(self.coverage, "claimOmitted", promise, signed.signature, sender=sender,
                          value=self.preset.OMISSION_CLAIM_BOND_WEI, event="OmissionClaimed", field="claimId")

    def prove_included(self, sender: LocalAccount, claim_id: int, batch_id: int, proof) -> Tx:
        """Answer claim ``claim_id`` with a MerkleProof of its receipt hash in batch ``batch_id``;
        value = the OmissionAnswered event's fields (paidWei to the dispatcher, refundedWei to the claimant)."""
        return self._send(self.coverage, "proveIncluded", claim_id, batch_id, proof.index, list(proof.siblings), sender=sender,
                          event="OmissionAnswered")

    def slash_omission(self, sender: LocalAccount, claim_id: int) -> Tx:
        """After an unanswered proof window: slash the dispatcher; value = the slashed wei."""
        return self._send(self.coverage, "slashOmission", claim_id, sender=sender, event="OmissionSlashed", field="slashedWei")

    # --- signed streams (Coverage; verillm.spec.stream) ------------------------------------------
    def slash_stream_equivocation(self, sender: LocalAccount, evidence) -> Tx:
        """Slash a worker that signed two outputs for one job (`verillm.spec.stream.Equivocation`:
        a signed prefix and its receipt with the transcript, or a second, no shorter prefix with its
        tokens); value = the slashed wei. The caller is credited slashRewardBps of it."""
        p, r, q = evidence.prefix, evidence.receipt, evidence.other
        receipt = compute_receipt_tuple(r) if r is not None else _EMPTY_RECEIPT
        other = _prefix_tuple(q.prefix) if q is not None else _EMPTY_PREFIX
        return self._send(self.coverage, "slashStreamEquivocation", _prefix_tuple(p.prefix), p.signature, receipt,
                          r.signature if r is not None else b"", other, q.signature if q is not None else b"", evidence.packed_tokens,
                          sender=sender, event="StreamEquivocationSlashed", field="slashedWei")

    def get_omission_claim(self, claim_id: int) -> dict:
        receipt_hash, dispatcher, batch_by, claimant, deadline, state = self.coverage.call("getClaim", claim_id)
        return {"receipt_hash": bytes(receipt_hash), "dispatcher": dispatcher, "batch_by_block": batch_by,
                "claimant": claimant, "prove_deadline": deadline, "state": state}

    def advance_to_next_epoch(self) -> int:
        """Mine to the first block of the next stake epoch (dev chains); return that epoch.
        Registrations and stake changes weigh in draws from the next epoch on."""
        epoch_blocks = self.registry.call("epochBlocks")
        number = self.chain.get_block()["number"]
        self.chain.mine(epoch_blocks - number % epoch_blocks)
        return self.registry.call("currentEpoch")

