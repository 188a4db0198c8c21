"""A protocol deployment on anvil with registered nodes, and the steps of an audit.

Traces are synthetic (seeded Gaussian fingerprints): the contracts see only leaves, roots and
receipts, so a trace whose fingerprints sit far from the worker's is exactly what a cheating
worker or a lazy member puts on-chain. `tests/contracts/test_e2e_audit.py` also runs real
engines.
"""

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from eth_account import Account

from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilProcess
from verillm.chain.artifacts import ArtifactStore
from verillm.chain.protocol import Protocol
from verillm.spec.audit import OnchainModel, compute_draw_commitment, compute_vote_salt
from verillm.spec import vrf
from verillm.spec.audit import is_onchain_agreement
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.commitment import Commitment, JobTrace, compute_commitment, compute_opening
from verillm.spec.hashing import keccak256
from verillm.spec.params import MINIMAL, Preset
from verillm.spec.settlement import FAIL, PASS
from verillm.spec.receipt import SigningDomain, compute_auditable_until_block, compute_receipt_hash, sign_receipt
from verillm.spec.types import Opening, Receipt, SamplingParams
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN

TEST_ARTIFACTS = Path(__file__).parents[1] / "contracts" / "solidity" / "artifacts"  # node tests/contracts/solidity/compile.js


def connect(anvil: AnvilProcess) -> RpcChain:
    """A chain client that also knows the test-only contracts."""
    return RpcChain(anvil.url, artifacts=ArtifactStore((TEST_ARTIFACTS,)))

PRESET = MINIMAL
MODEL_ID = keccak256(b"verillm test model")
LAYERS = (1, 3)
DIMS = 2
MODEL = OnchainModel(MODEL_ID, LAYERS, DIMS, max_cell_error_ppb=(50_000, 50_000), rms_error_ppb=(30_000, 30_000), min_cells_for_rms=4)
PROMPT_LEN = 6
OUTPUT_TOKENS = 10
NODE_STAKES_WEI = (3, 2, 2, 1, 1, 1)  # × MIN_STAKE_WEI, dev accounts 1..6
HONEST_NOISE = 1e-6  # 1,000 ppb: far inside the 50,000 ppb band
CHEAT_OFFSET = 1e-2  # 10,000,000 ppb: far outside it


@dataclass(frozen=True)
class Node:
    account: object
    vrf_key: int

    @property
    def address(self) -> str:
        return self.account.address


def compute_trace(positions: int, seed: int = 7, offset: float = 0.0, noise: float = 0.0, noise_seed: int = 0) -> JobTrace:
    """A trace over ``positions`` positions; ``offset``/``noise`` move every fingerprint."""
    base = np.random.default_rng(seed).standard_normal((PROMPT_LEN + OUTPUT_TOKENS, len(LAYERS), DIMS)).astype(np.float32)
    jitter = np.random.default_rng(1000 + noise_seed).standard_normal(base.shape).astype(np.float32) * np.float32(noise)
    fingerprints = (base + jitter + np.float32(offset))[:positions]
    flags = np.full(positions, FLAG_NEXT_WITHIN_MARGIN, dtype=np.uint8)
    return JobTrace(output_tokens=tuple(range(OUTPUT_TOKENS)), fingerprints=fingerprints, flags=flags)


@dataclass
class Party:
    """A worker or member: its node, trace, commitment and signed receipt."""

    node: Node
    trace: JobTrace
    commitment: Commitment
    receipt: Receipt


@dataclass
class AuditRun:
    audit_id: int
    worker: Party
    members: list[Party] = field(default_factory=list)
    sealed: dict = field(default_factory=dict)
    """(round, slot) → (opening, agree, salt) a member sealed (`World.seal_member`)."""


class World:
    """One deployment with six registered nodes (dev accounts 1–6), on an anvil chain."""

    def __init__(self, chain, preset: Preset = PRESET, extra_nodes: int = 0):
        self.chain = chain
        self.preset = preset
        self.owner = chain.dev_accounts[0]
        self.protocol = Protocol.deploy(chain, preset, self.owner)
        self.protocol.add_model(self.owner, MODEL)
        accounts = chain.dev_accounts[1:7] + [self._funded_account(i) for i in range(extra_nodes)]
        self.nodes = [Node(a, vrf.derive_secret_key(bytes([i + 1]) * 32)) for i, a in enumerate(accounts)]
        for node, stake in zip(self.nodes, NODE_STAKES_WEI + (1,) * extra_nodes):
            self.protocol.register(node.account, node.vrf_key, f"http://127.0.0.1:{9000 + len(node.address) % 7}", [MODEL_ID], stake * preset.MIN_STAKE_WEI)
        self.protocol.advance_to_next_epoch()  # registrations weigh in draws from the next epoch
        self.domain = SigningDomain(chain_id=chain.chain_id, verifying_contract=bytes.fromhex(self.protocol.jobs.address[2:]))
        self.outsider = chain.dev_accounts[9]

    def _funded_account(self, i: int):
        account = Account.from_key(keccak256(b"extra node" + bytes([i])))
        self.chain.transfer(self.owner, account.address, 10**18)
        return account

    def node(self, address: str) -> Node:
        return next(n for n in self.nodes if n.address == address)

    def make_party(self, node: Node, trace: JobTrace, max_new_tokens: int, nonce: int = 0) -> Party:
        """A worker's job reads the prompt (hash 0x11…) and outputs OUTPUT_TOKENS (transcript hash
        0x22…); a member's (max_new_tokens 1) reads that transcript and outputs one token."""
        commitment = compute_commitment(trace, LAYERS)
        member = max_new_tokens == 1
        inputs = PROMPT_LEN + OUTPUT_TOKENS if member else PROMPT_LEN
        receipt = Receipt(
            job_hash=keccak256(b"job" + nonce.to_bytes(4, "big") + bytes.fromhex(node.address[2:])), model_id=MODEL_ID,
            input_hash=b"\x22" * 32 if member else b"\x11" * 32, output_hash=b"\x33" * 32 if member else b"\x22" * 32,
            sampling=SamplingParams(), max_new_tokens=max_new_tokens,
            commitment_root=commitment.root, num_positions=trace.num_positions,
            worker=bytes.fromhex(node.address[2:]), signature=b"\x00" * 65,
            input_tokens=inputs, output_tokens=trace.num_positions + 1 - inputs,
            auditable_until_block=compute_auditable_until_block(self.chain.get_block_number(), self.preset),
        )
        signed = sign_receipt(receipt, node.account.key, self.domain)
        return Party(node, trace, commitment, signed)

    def make_worker(self, node: Node, offset: float = 0.0, nonce: int = 0) -> Party:
        return self.make_party(node, compute_trace(PROMPT_LEN + OUTPUT_TOKENS - 1, offset=offset), max_new_tokens=16, nonce=nonce)

    def make_member(self, node: Node, noise: float = HONEST_NOISE, offset: float = 0.0, seed: int = 7) -> Party:
        trace = compute_trace(PROMPT_LEN + OUTPUT_TOKENS, seed=seed, offset=offset, noise=noise, noise_seed=int(node.address, 16) % 1000)
        return self.make_party(node, trace, max_new_tokens=1, nonce=99)

    # --- the steps of an audit -------------------------------------------------------------
    def post_and_draw(self, dispatcher: Node, receipts: list[Receipt]):
        """Post a batch, mine past its seed block, draw; return (PostedBatch, gas of each step)."""
        posted = self.protocol.post_batch(dispatcher.account, [compute_receipt_hash(r) for r in receipts])
        self.chain.mine(self.preset.AUDIT_DRAW_DELAY_BLOCKS + 1)
        drawn = self.protocol.draw_audit(dispatcher.account, posted.value.batch_id, dispatcher.vrf_key)
        return posted.value, posted.gas_used, drawn.gas_used

    def start(self, worker: Party, dispatcher: Node | None = None, draw: bool = True, secret: bytes | None = None) -> AuditRun:
        """Batch the worker's receipt alone, draw, start its audit (MINIMAL audits every job) and,
        unless ``draw`` is False, draw its committee once the round's seed block is mined. With
        ``secret`` the dispatcher commits to drawing round 0 privately (never drawn here: `reveal`)."""
        dispatcher = dispatcher or worker.node
        batch, _, _ = self.post_and_draw(dispatcher, [worker.receipt])
        commitment = compute_draw_commitment(secret) if secret else bytes(32)
        tx = self.protocol.start_audit(dispatcher.account, batch.batch_id, 0, worker.receipt, batch.levels, draw_commitment=commitment)
        run = AuditRun(tx.value, worker)
        if draw and not secret:
            self.draw_round(run)
        return run

    def preview(self, run: AuditRun, secret: bytes) -> list[Node]:
        """Mine past the round's seed block if needed; the private committee ``secret`` draws."""
        if self.chain.get_block_number() <= self.protocol.get_round_state(run.audit_id).deadlines.draw_after:
            self.chain.mine(self.preset.AUDIT_DRAW_DELAY_BLOCKS + 1)
        return [self.node(a) for a in self.protocol.preview_committee(run.audit_id, secret)]

    def reveal(self, run: AuditRun, dispatcher: Node, secret: bytes, members: list[Party]):
        """The dispatcher reveals its private draw with ``members``' receipts (slot = their order
        in the previewed committee)."""
        run.members = members
        return self.protocol.reveal_round(dispatcher.account, run.audit_id, secret, run.worker.receipt,
                                          [(slot, m.receipt) for slot, m in enumerate(members)])

    def draw_round(self, run: AuditRun):
        """Mine past the current round's seed block (entered + delay) and draw its committee."""
        self.chain.mine(self.preset.AUDIT_DRAW_DELAY_BLOCKS + 1)
        return self.protocol.draw_round(self.outsider, run.audit_id)

    def committee(self, run: AuditRun, round_index: int = 0) -> list[Node]:
        return [self.node(a) for a in self.protocol.get_committee(run.audit_id, round_index)]

    def post_members(self, run: AuditRun, members: list[Party], round_index: int = 0) -> None:
        run.members = members
        for slot, member in enumerate(members):
            self.protocol.post_committee_receipt(self.outsider, run.audit_id, slot, member.receipt)

    def challenge_cells(self, run: AuditRun, positions: int) -> list[tuple[int, int]]:
        state = self.protocol.get_audit(run.audit_id)
        challenge = compute_challenge(state.challenge_seed, PROMPT_LEN, OUTPUT_TOKENS, LAYERS, self.preset.CHALLENGE_POSITIONS)
        return compute_opened_cells(challenge, positions)

    def opening(self, run: AuditRun, party: Party) -> Opening:
        cells = self.challenge_cells(run, party.trace.num_positions)
        return compute_opening(party.trace, party.commitment, cells)

    def open_worker(self, run: AuditRun, opening: Opening | None = None):
        self.chain.mine(self.preset.AUDIT_DRAW_DELAY_BLOCKS + 1)
        if self.protocol.get_audit(run.audit_id).challenge_seed == bytes(32):
            self.protocol.draw_challenge(self.outsider, run.audit_id)
        return self.protocol.open_worker(run.worker.node.account, run.audit_id, opening or self.opening(run, run.worker))

    def honest_vote(self, run: AuditRun, member: Party) -> bool:
        worker = {(i.leaf.position, i.leaf.layer): i.leaf for i in self.opening(run, run.worker).leaves}
        mine = {(i.leaf.position, i.leaf.layer): i.leaf for i in self.opening(run, member).leaves}
        return is_onchain_agreement(worker, mine, MODEL, PROMPT_LEN, OUTPUT_TOKENS)

    def seal_member(self, run: AuditRun, slot: int, vote: bool | None = None, opening: Opening | None = None):
        """Member ``slot`` seals its vote (as its data say unless ``vote``) and its opening."""
        member = run.members[slot]
        round_index = self.protocol.get_audit(run.audit_id).round
        opening = opening or self.opening(run, member)
        agree = self.honest_vote(run, member) if vote is None else vote
        salt = compute_vote_salt(bytes(member.node.account.key), run.audit_id, round_index, slot)
        tx = self.protocol.seal_vote(member.node.account, run.audit_id, round_index, slot, opening, agree, salt)
        run.sealed[(round_index, slot)] = (opening, agree, salt)  # only once the contract took it
        return tx

    def open_member(self, run: AuditRun, slot: int, vote: bool | None = None, opening: Opening | None = None):
        """Member ``slot`` opens what it sealed (sealing first, with ``vote`` and ``opening``, if it
        has not): the contract accepts it once every member sealed or the seal window closed."""
        round_index = self.protocol.get_audit(run.audit_id).round
        if (round_index, slot) not in run.sealed:
            self.seal_member(run, slot, vote, opening)
        opening, agree, salt = run.sealed[(round_index, slot)]
        return self.protocol.open_and_vote(run.members[slot].node.account, run.audit_id, slot, opening, agree, salt)

    def vote_members(self, run: AuditRun, slots=None, votes=None, openings=None):
        """Every member in ``slots`` (default: all) seals, then each opens: ``votes(slot)`` and
        ``openings(slot)`` (None: as its data say). Returns the openAndVote transactions."""
        slots = range(len(run.members)) if slots is None else slots
        for slot in slots:
            self.seal_member(run, slot, None if votes is None else votes(slot), None if openings is None else openings(slot))
        if len(slots) < len(run.members):
            self.mine_past_seals(run)
        return [self.open_member(run, slot) for slot in slots]

    def mine_past_seals(self, run: AuditRun) -> None:
        """Mine past the round's seal window (its members' openings are then due, sealed or not)."""
        seal_by = self.protocol.get_round_state(run.audit_id).deadlines.members_seal_by
        if self.chain.get_block_number() <= seal_by:
            self.chain.mine(seal_by - self.chain.get_block_number() + 1)

    def decide(self, run: AuditRun, members: list[Party], round_index: int = 0, votes=None) -> int:
        """Run the current round from its drawn committee to its verdict: post ``members``' receipts,
        the worker opens, each member opens and votes (``votes(slot)``, or as its data say); return
        the verdict `finalize` reached."""
        self.post_members(run, members, round_index)
        self.open_worker(run)
        self.vote_members(run, votes=votes)
        return self.protocol.finalize(self.outsider, run.audit_id).value

    def start_framed(self, votes) -> tuple[Party, AuditRun, list[Party]]:
        """Round 0 on an honest worker (node 0, dispatched by node 1): its first two members commit
        fabricated data, the third is honest, slot k votes ``votes(k)``; the round decides FAIL."""
        return self._round0_with_two_fabricated_members(0.0, votes, FAIL)

    def pass_appeal(self, run: AuditRun, worker: Party):
        """The worker appeals; an honest appeal round decides PASS. Returns the escalate and drawRound transactions."""
        escalated = self.protocol.escalate(worker.node.account, run.audit_id)
        drawn = self.draw_round(run)
        assert self.decide(run, [self.make_member(n) for n in self.committee(run, 1)], 1) == PASS
        return escalated, drawn

    def start_vouched(self, votes=lambda slot: slot < 2) -> tuple[Party, AuditRun, list[Party]]:
        """Round 0 on a cheating worker (node 0, a fabricated trace, dispatched by node 1): its
        first two members collude (they commit the worker's fabricated data), the third is honest;
        slot k votes ``votes(k)`` (default: the colluders agree); the round decides PASS."""
        return self._round0_with_two_fabricated_members(0.3, votes, PASS)

    def start_vouched_outvoted(self) -> tuple[Party, AuditRun, list[Party]]:
        """Round 0 on a cheating worker (as `start_vouched`): colluder slot 0 agrees, colluder slot
        1 hedges with a disagree, the honest third disagrees; the round decides FAIL. The agree is a
        first-round minority: an appeal that fails the cheat again is the second round against it
        (`Disputes.adjudicateAcrossRounds` slashes only then, docs/protocol.md §12 "Proportionality")."""
        return self._round0_with_two_fabricated_members(0.3, lambda slot: slot == 0, FAIL)

    def _round0_with_two_fabricated_members(self, worker_offset: float, votes, verdict: int) -> tuple[Party, AuditRun, list[Party]]:
        """Worker node 0 (trace at ``worker_offset``) dispatched by node 1; round 0's first two
        members commit the fabricated trace (offset 0.3), the third the honest one; slot k votes
        ``votes(k)``; the round must decide ``verdict``."""
        worker = self.make_worker(self.nodes[0], offset=worker_offset)
        run = self.start(worker, dispatcher=self.nodes[1])
        committee = self.committee(run)
        round0 = [self.make_member(n, offset=0.3) for n in committee[:2]] + [self.make_member(committee[2])]
        assert self.decide(run, round0, votes=votes) == verdict
        return worker, run, round0

    def appeal(self, run: AuditRun, escalator: Node, offset: float = 0.0, finalize: bool = True) -> list[Party]:
        """``escalator`` appeals round 0; the appeal members commit a trace at ``offset`` (0: the
        honest one) and vote as their data say; finalized unless ``finalize`` is False. Returns
        the appeal's members."""
        self.protocol.escalate(escalator.account, run.audit_id)
        self.draw_round(run)
        members = [self.make_member(n, offset=offset) for n in self.committee(run, 1)]
        if finalize:
            self.decide(run, members, 1)
        else:
            self.post_members(run, members, 1)
        return members

    def decider(self, run: AuditRun, offset: float = 0.0, captured: int = 0, votes=None) -> tuple[list[Party], int]:
        """Settle an appeal that contradicted round 0 (PASS against FAIL): the audit enters its
        decider round (2) instead of settling; draw it and run it to its verdict. Its first
        ``captured`` seats commit a trace at ``offset``, the rest the honest one; each votes as its
        data say unless ``votes(slot)``. Returns the decider's members and its verdict."""
        self.chain.mine(self.preset.DISPUTE_WINDOW_BLOCKS + 1)
        self.protocol.jobs.transact("settle", run.audit_id, sender=self.outsider)
        assert self.protocol.get_audit(run.audit_id).round == 2, "the appeal did not contradict round 0: no decider"
        self.draw_round(run)
        seats = self.committee(run, 2)
        members = [self.make_member(n, offset=offset if i < captured else 0.0) for i, n in enumerate(seats)]
        return members, self.decide(run, members, 2, votes=votes)

    def finish(self, run: AuditRun):
        """Finalize, wait out the dispute window, settle; return the settled verdict."""
        self.protocol.finalize(self.outsider, run.audit_id)
        self.chain.mine(self.preset.DISPUTE_WINDOW_BLOCKS + 1)
        return self.protocol.settle(self.outsider, run.audit_id).value

    def stakes(self) -> dict[str, int]:
        return {n.address: self.protocol.get_node(n.address)["stake_wei"] for n in self.nodes}


def replace_leaf_fingerprint(opening: Opening, index: int, delta: float) -> Opening:
    """Return ``opening`` with one leaf's fingerprint moved (its proof left as it was)."""
    items = list(opening.leaves)
    leaf = items[index].leaf
    moved = dataclasses.replace(leaf, fingerprint=tuple(float(np.float32(v + delta)) for v in leaf.fingerprint))
    items[index] = dataclasses.replace(items[index], leaf=moved)
    return dataclasses.replace(opening, leaves=tuple(items))
