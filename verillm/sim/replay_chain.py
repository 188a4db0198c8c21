"""A MINIMAL deployment on anvil that a simulated audit is replayed through, step by step.

The contracts see only receipts, roots, openings and votes, so traces are synthetic (seeded
Gaussian fingerprints, as `tests/contracts/contract_scenario.py` builds them): a cheating
worker's trace sits far from the honest one, and a member's vote is what the simulator chose
(the contracts take a vote as posted unless someone contests or adjudicates it, which the
simulator does not model). Nodes are registered in the order of the simulator's pool, so
pool index i is the i-th candidate of the Registry's model list.
"""

from dataclasses import dataclass

import numpy as np
from eth_account import Account

from verillm.chain.protocol import Protocol
from verillm.spec.audit import OnchainModel
from verillm.errors import InvalidInput
from verillm.spec import vrf
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.commitment import JobTrace, compute_commitment, compute_opening
from verillm.spec.hashing import keccak256
from verillm.spec.job import compute_tokens_hash, compute_transcript_hash
from verillm.spec.params import Preset
from verillm.spec.receipt import SigningDomain, compute_auditable_until_block, compute_receipt_hash, sign_receipt
from verillm.spec.types import Receipt, SamplingParams
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN
from verillm.sim.sortition import GWEI, Pool

MODEL_ID = keccak256(b"verillm sim replay model")
LAYERS = (1, 3)
DIMS = 2
MODEL = OnchainModel(MODEL_ID, LAYERS, DIMS, max_cell_error_ppb=(50_000, 50_000), rms_error_ppb=(30_000, 30_000), min_cells_for_rms=4)
PROMPT_LEN, OUTPUT_TOKENS = 6, 10
PROMPT_TOKENS = tuple(range(100, 100 + PROMPT_LEN))
TRANSCRIPT = PROMPT_TOKENS + tuple(range(OUTPUT_TOKENS))
"""The worker's input ‖ output: its receipt's outputHash hashes it, so it can be published when a
member claims its job (`Delivery.publishTranscript`), and every member's inputHash is that hash."""
WORKER_OUTPUT_HASH = compute_transcript_hash(PROMPT_TOKENS, TRANSCRIPT[PROMPT_LEN:])
CHEAT_OFFSET = 1e-2
FEE_POOL_RECEIPTS = 64
"""Dummy receipts batched once, so the levy fills the fee pool and no payment is capped (the
simulator settles with an uncapped pool)."""


@dataclass(frozen=True)
class ChainNode:
    account: object
    vrf_key: int

    @property
    def address(self) -> str:
        return self.account.address


def _trace(positions: int, offset: float = 0.0) -> JobTrace:
    base = np.random.default_rng(7).standard_normal((PROMPT_LEN + OUTPUT_TOKENS, len(LAYERS), DIMS)).astype(np.float32)
    fingerprints = (base + np.float32(offset))[:positions]
    return JobTrace(output_tokens=tuple(range(OUTPUT_TOKENS)), fingerprints=fingerprints,
                    flags=np.full(positions, FLAG_NEXT_WITHIN_MARGIN, dtype=np.uint8))


class ReplayWorld:
    """``stakes_min`` nodes (stake in MIN_STAKE units each) serving one model."""

    def __init__(self, chain, preset: Preset, stakes_min: tuple[int, ...]):
        if preset.AUDIT_RATE_BPS != 10_000:
            raise InvalidInput("the replay batches one receipt per audit: it needs a preset that audits every job (MINIMAL)")
        self.chain, self.preset = chain, preset
        self.owner, self.outsider = chain.dev_accounts[0], chain.dev_accounts[9]
        self.protocol = Protocol.deploy(chain, preset, self.owner)
        self.protocol.add_model(self.owner, MODEL)
        self.nodes = []
        for i, units in enumerate(stakes_min):
            account = Account.from_key(keccak256(b"sim replay node" + i.to_bytes(4, "big")))
            stake = units * preset.MIN_STAKE_WEI
            chain.transfer(self.owner, account.address, stake + 10**18)
            node = ChainNode(account, vrf.derive_secret_key(keccak256(b"sim replay vrf" + i.to_bytes(4, "big"))))
            self.protocol.register(account, node.vrf_key, f"http://127.0.0.1:{9100 + i}", [MODEL_ID], stake)
            self.nodes.append(node)
        self.protocol.advance_to_next_epoch()
        addresses, stakes = self.protocol.get_model_nodes(MODEL_ID)
        order = {n.address.lower(): n for n in self.nodes}
        self.nodes = [order[a.lower()] for a in addresses]  # pool index = Registry candidate order
        self.index = {n.address.lower(): i for i, n in enumerate(self.nodes)}
        self.stakes_wei = list(stakes)
        self.domain = SigningDomain(chain_id=chain.chain_id, verifying_contract=bytes.fromhex(self.protocol.jobs.address[2:]))
        self.protocol.post_batch(self.nodes[0].account, [keccak256(b"levy" + bytes([i])) for i in range(FEE_POOL_RECEIPTS)])

    def pool(self, adversarial: np.ndarray) -> Pool:
        return Pool(np.array([s // GWEI for s in self.stakes_wei], dtype=np.int64), adversarial)

    # --- parties ---------------------------------------------------------------------------
    def receipt(self, node: ChainNode, trace: JobTrace, member: bool, nonce: int) -> tuple[Receipt, object]:
        commitment = compute_commitment(trace, LAYERS)
        inputs = PROMPT_LEN + OUTPUT_TOKENS if member else PROMPT_LEN
        receipt = Receipt(
            job_hash=keccak256(b"job" + nonce.to_bytes(8, "big") + bytes.fromhex(node.address[2:])), model_id=MODEL_ID,
            input_hash=WORKER_OUTPUT_HASH if member else compute_tokens_hash(PROMPT_TOKENS),
            output_hash=b"\x33" * 32 if member else WORKER_OUTPUT_HASH,
            sampling=SamplingParams(), max_new_tokens=1 if member else 16,
            commitment_root=commitment.root, num_positions=trace.num_positions,
            worker=bytes.fromhex(node.address[2:]), signature=b"\x00" * 65,
            input_tokens=inputs, output_tokens=trace.num_positions + 1 - inputs,
            auditable_until_block=compute_auditable_until_block(self.chain.get_block_number(), self.preset))
        return sign_receipt(receipt, node.account.key, self.domain), commitment

    def worker_trace(self, cheated: bool) -> JobTrace:
        return _trace(PROMPT_LEN + OUTPUT_TOKENS - 1, CHEAT_OFFSET if cheated else 0.0)

    def member_trace(self) -> JobTrace:
        return _trace(PROMPT_LEN + OUTPUT_TOKENS)

    def opening(self, audit_id: int, trace: JobTrace, commitment):
        state = self.protocol.get_audit(audit_id)
        challenge = compute_challenge(state.challenge_seed, PROMPT_LEN, OUTPUT_TOKENS, LAYERS, self.preset.CHALLENGE_POSITIONS)
        return compute_opening(trace, commitment, compute_opened_cells(challenge, trace.num_positions))

    # --- reads ------------------------------------------------------------------------------
    def committee(self, audit_id: int, round_index: int) -> list[int]:
        return [self.index[a.lower()] for a in self.protocol.get_committee(audit_id, round_index)]

    def round_phase(self, audit_id: int, round_index: int) -> int:
        return self.protocol.jobs.call("getRound", audit_id, round_index)[0]

    def balances(self) -> tuple[list[int], list[int]]:
        stakes = [self.protocol.get_node(n.address)["stake_wei"] for n in self.nodes]
        credits = [self.protocol.get_credit(n.address) for n in self.nodes]
        return stakes, credits


__all__ = ["ReplayWorld", "compute_receipt_hash"]
