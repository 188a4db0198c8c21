"""`verillm bench gas`: the protocol's gas, measured on a real anvil.

Starts anvil, deploys Registry/Jobs/Disputes with the chosen preset's money and committee
parameters (windows are mined through), registers nodes, and walks one batch and one full
audit with a dispute (its members seal their votes, then open them): every number is
`gasUsed` from a mined receipt. Fingerprints are synthetic (the contracts see only leaves, roots
and receipts); the opening size follows --prompt-tokens, --output-tokens, --layers and the
preset's CHALLENGE_POSITIONS.
"""

import click
import numpy as np
from eth_account import Account

from verillm.bench.tables import format_table, write_json
from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilProcess
from verillm.chain.protocol import Protocol
from verillm.spec.audit import OnchainModel, compute_draw_commitment, compute_vote_salt
from verillm.spec import vrf
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.commitment import JobTrace, compute_commitment, compute_opening
from verillm.spec.hashing import keccak256
from verillm.spec.params import get_preset
from verillm.spec.receipt import SigningDomain, compute_auditable_until_block, compute_receipt_hash, sign_receipt
from verillm.spec.types import Receipt, SamplingParams
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN

MODEL_ID = keccak256(b"verillm gas bench model")
NODES = 11  # a worker, a committee of 3 and a fresh escalation committee of up to 7


def _index_bytes(i: int) -> bytes:
    """One byte below 256 (the historical keys, so figures at 11 nodes are unchanged), 4 above."""
    return bytes([i]) if i < 256 else i.to_bytes(4, "big")


def _vrf_seed(i: int) -> bytes:
    return bytes([i + 1]) * 32 if i + 1 < 256 else keccak256(b"gas bench vrf" + i.to_bytes(4, "big"))


class GasRun:
    """One deployment and the parties of one audit."""

    def __init__(self, chain, preset, layers: tuple[int, ...], prompt: int, output: int, nodes: int = NODES):
        self.chain, self.preset, self.layers, self.prompt, self.output = chain, preset, layers, prompt, output
        self.owner = chain.dev_accounts[0]
        self.protocol = Protocol.deploy(chain, preset, self.owner)
        model = OnchainModel(MODEL_ID, layers, preset.FINGERPRINT_DIMS, (50_000,) * len(layers), (30_000,) * len(layers), 8)
        self.protocol.add_model(self.owner, model)
        self.domain = SigningDomain(chain.chain_id, bytes.fromhex(self.protocol.jobs.address[2:]))
        self.nodes = []
        for i in range(nodes):
            account = chain.dev_accounts[1 + i] if i < 9 else self._funded(i)
            self.nodes.append((account, vrf.derive_secret_key(_vrf_seed(i))))
        self.gas = {}

    def _funded(self, i: int):
        account = Account.from_key(keccak256(b"gas bench node" + _index_bytes(i)))
        self.chain.transfer(self.owner, account.address, 10 * self.preset.MIN_STAKE_WEI)
        return account

    def register_all(self) -> None:
        for i, (account, key) in enumerate(self.nodes):
            tx = self.protocol.register(account, key, f"https://node{i}.example", [MODEL_ID], 2 * self.preset.MIN_STAKE_WEI)
            self.gas.setdefault("register", tx.gas_used)
        self.protocol.advance_to_next_epoch()  # registrations weigh in draws from the next epoch

    def party(self, index: int, positions: int, max_new: int, noise_seed: int, jitter_scale: float = 1e-7):
        base = np.random.default_rng(7).standard_normal((self.prompt + self.output, len(self.layers), self.preset.FINGERPRINT_DIMS))
        jitter = np.random.default_rng(noise_seed).standard_normal(base.shape) * jitter_scale
        trace = JobTrace(tuple(range(self.output)), (base + jitter)[:positions].astype(np.float32),
                         np.full(positions, FLAG_NEXT_WITHIN_MARGIN, dtype=np.uint8))
        commitment = compute_commitment(trace, self.layers)
        account = self.nodes[index][0]
        # the worker's job reads the prompt; a member's reads the worker's prompt ‖ output, so its
        # input hash is the worker's output hash (a receipt's outputHash covers input ‖ output)
        worker_job = max_new != 1
        inputs = self.prompt if worker_job else self.prompt + self.output
        receipt = Receipt(keccak256(b"job" + _index_bytes(index)), MODEL_ID, b"\x01" * 32 if worker_job else b"\x02" * 32,
                          b"\x02" * 32 if worker_job else b"\x03" * 32, SamplingParams(), max_new,
                          commitment.root, positions, bytes.fromhex(account.address[2:]), b"\x00" * 65,
                          input_tokens=inputs, output_tokens=positions + 1 - inputs,
                          auditable_until_block=compute_auditable_until_block(self.chain.get_block_number(), self.preset))
        return trace, commitment, sign_receipt(receipt, account.key, self.domain)

    def mine_past(self, blocks: int) -> None:
        self.chain.mine(blocks + 1)


def _measure_batch(run: GasRun, batch_size: int, worker_receipt) -> tuple[object, dict]:
    """Post a batch of ``batch_size`` receipts (the worker's first) and draw it. A batch is
    posted once before, so the figures are the steady state (the contract's first batch also
    pays for creating its counters: reported as post_batch_first)."""
    hashes = [compute_receipt_hash(worker_receipt)] + [keccak256(b"receipt%d" % i) for i in range(1, batch_size)]
    dispatcher, key = run.nodes[1]
    first = run.protocol.post_batch(dispatcher, [keccak256(b"warm-up")] * batch_size)
    run.gas["post_batch_first"] = first.gas_used
    posted = run.protocol.post_batch(dispatcher, hashes)
    run.mine_past(run.preset.AUDIT_DRAW_DELAY_BLOCKS)
    drawn = run.protocol.draw_audit(dispatcher, posted.value.batch_id, key)
    return posted.value, {"post_batch": posted.gas_used, "audit_draw": drawn.gas_used}


def _cells(run: GasRun, audit_id: int, positions: int):
    seed = run.protocol.get_audit(audit_id).challenge_seed
    challenge = compute_challenge(seed, run.prompt, run.output, run.layers, run.preset.CHALLENGE_POSITIONS)
    return compute_opened_cells(challenge, positions)


def _measure_batches(run: GasRun, batch_size: int, batches: int) -> dict:
    """The happy path over ``batches`` more batches: a BLS draw's gas varies with its hash to G1's
    retries, so a single batch's per-job figure moves by ±20%; the mean is the budget's measure."""
    dispatcher, key = run.nodes[1]
    per_job = []
    for i in range(batches):
        posted = run.protocol.post_batch(dispatcher, [keccak256(b"mean %d %d" % (i, j)) for j in range(batch_size)])
        run.mine_past(run.preset.AUDIT_DRAW_DELAY_BLOCKS)
        drawn = run.protocol.draw_audit(dispatcher, posted.value.batch_id, key)
        per_job.append((posted.gas_used + drawn.gas_used) / batch_size)
    return {"per_job_amortized_batches": batches, "per_job_amortized_mean": round(sum(per_job) / batches),
            "per_job_amortized_min": round(min(per_job)), "per_job_amortized_max": round(max(per_job))}


def measure_gas(preset_name: str, batch_size: int, prompt: int, output: int, layers: tuple[int, ...], nodes: int = NODES,
                batches: int = 1) -> dict:
    """Walk a batch and an audit with a dispute on a fresh anvil; return gas per step."""
    preset = get_preset(preset_name)
    with AnvilProcess() as anvil:
        run = GasRun(RpcChain(anvil.url), preset, layers, prompt, output, nodes)
        run.register_all()
        w_trace, w_commit, w_receipt = run.party(0, prompt + output - 1, output, 0)
        batch, gas = _measure_batch(run, batch_size, w_receipt)
        run.gas.update(gas)
        selected = run.protocol.is_audited(batch.batch_id, 0)
        fee = preset.COMMITTEE_SIZE * preset.AUDIT_FEE_WEI  # a request's fee; a private start's bond, returned at the reveal
        # A selected job is drawn privately by its dispatcher, as the node does; a request publicly.
        secret = keccak256(b"gas bench draw secret")
        commitment = compute_draw_commitment(secret) if selected else bytes(32)
        tx = run.protocol.start_audit(run.nodes[1][0], batch.batch_id, 0, w_receipt, batch.levels, fee, draw_commitment=commitment)
        audit_id, run.gas["start_audit"] = tx.value, tx.gas_used
        run.mine_past(preset.AUDIT_DRAW_DELAY_BLOCKS)  # the committee is drawn from a blockhash after the start
        committee = run.protocol.preview_committee(audit_id, secret) if selected else _draw_public(run, audit_id)
        index_of = {a.address: i for i, (a, _) in enumerate(run.nodes)}
        # member 0's data disagree with the worker's, and it votes agree: the dispute below has a lie to find
        members = [run.party(index_of[m], prompt + output, 1, 1 + slot, 1.0 if slot == 0 else 1e-7) for slot, m in enumerate(committee)]
        if selected:
            seats = [(slot, receipt) for slot, (_, _, receipt) in enumerate(members)]
            run.gas["reveal_round"] = run.protocol.reveal_round(run.nodes[1][0], audit_id, secret, w_receipt, seats).gas_used
        else:
            _post_receipts(run, audit_id, members)
        run.mine_past(preset.AUDIT_DRAW_DELAY_BLOCKS)
        run.gas["draw_challenge"] = run.protocol.draw_challenge(run.owner, audit_id).gas_used
        worker_opening = compute_opening(w_trace, w_commit, _cells(run, audit_id, prompt + output - 1))
        run.gas["open"] = run.protocol.open_worker(run.nodes[0][0], audit_id, worker_opening).gas_used
        openings = _vote_members(run, audit_id, [run.nodes[index_of[m]][0] for m in committee], members)
        run.gas["verdict"] = run.protocol.finalize(run.owner, audit_id).gas_used
        run.gas["dispute"] = run.protocol.adjudicate(run.owner, audit_id, 0, 1, worker_opening, openings[0]).gas_used
        _measure_contest(run, audit_id, worker_opening)
        run.gas["escalate"] = run.protocol.escalate(run.nodes[1][0], audit_id).gas_used  # the dispatcher: standing (issue 34)
        run.mine_past(preset.AUDIT_DRAW_DELAY_BLOCKS)
        run.gas["draw_escalation"] = run.protocol.draw_escalation(run.owner, audit_id).gas_used
        if selected:
            _measure_public_start(run, prompt, output)
        report = _report(run, preset, batch_size, prompt, output, len(worker_opening.leaves), selected)
        return report | _measure_batches(run, batch_size, batches) if batches > 1 else report


def _vote_members(run: GasRun, audit_id: int, accounts, members) -> list:
    """Every member seals its vote (`sealVote`, salted from its key), then each opens it
    (`openAndVote`; all sealed, so no window is waited out). Gas per member, in seat order."""
    openings, salts = [], []
    run.gas["seal_vote_by_member"], run.gas["open_and_vote_by_member"] = [], []
    for slot, ((trace, commitment, _), account) in enumerate(zip(members, accounts)):
        openings.append(compute_opening(trace, commitment, _cells(run, audit_id, run.prompt + run.output)))
        salts.append(compute_vote_salt(account.key, audit_id, 0, slot))
        run.gas["seal_vote_by_member"].append(run.protocol.seal_vote(account, audit_id, 0, slot, openings[-1], True, salts[-1]).gas_used)
    for slot, account in enumerate(accounts):
        run.gas["open_and_vote_by_member"].append(run.protocol.open_and_vote(account, audit_id, slot, openings[slot], True, salts[slot]).gas_used)
    return openings


def _draw_public(run: GasRun, audit_id: int) -> list[str]:
    run.gas["draw_round"] = run.protocol.draw_round(run.owner, audit_id).gas_used
    return run.protocol.get_committee(audit_id, 0)


def _post_receipts(run: GasRun, audit_id: int, members) -> None:
    for slot, (_, _, receipt) in enumerate(members):
        run.gas["committee_receipt"] = run.protocol.post_committee_receipt(run.owner, audit_id, slot, receipt).gas_used


def _measure_public_start(run: GasRun, prompt: int, output: int) -> None:
    """The public first round beside the private one: a selected job started without a commitment,
    drawn with drawRound, its receipts posted one by one."""
    worker = len(run.nodes) - 1
    _, _, receipt = run.party(worker, prompt + output - 1, output, 0)
    dispatcher, key = run.nodes[1]
    batch = run.protocol.post_batch(dispatcher, [compute_receipt_hash(receipt)]).value
    run.mine_past(run.preset.AUDIT_DRAW_DELAY_BLOCKS)
    run.protocol.draw_audit(dispatcher, batch.batch_id, key)
    fee = 0 if run.protocol.is_audited(batch.batch_id, 0) else run.preset.COMMITTEE_SIZE * run.preset.AUDIT_FEE_WEI
    tx = run.protocol.start_audit(dispatcher, batch.batch_id, 0, receipt, batch.levels, fee)
    run.gas["start_audit_public"] = tx.gas_used
    run.mine_past(run.preset.AUDIT_DRAW_DELAY_BLOCKS)
    committee = _draw_public(run, tx.value)
    index_of = {a.address: i for i, (a, _) in enumerate(run.nodes)}
    _post_receipts(run, tx.value, [run.party(index_of[m], prompt + output, 1, 1 + slot) for slot, m in enumerate(committee)])


def _measure_contest(run: GasRun, audit_id: int, worker_opening) -> None:
    """A contest of two of the worker's cells, answered with their proofs."""
    cells = [(i.leaf.position, i.leaf.layer) for i in worker_opening.leaves[:2]]
    contest = run.protocol.contest(run.owner, audit_id, 0, 0, cells)
    run.gas["contest"] = contest.gas_used
    run.gas["answer_contest"] = run.protocol.answer_contest(run.nodes[0][0], contest.value, cells, worker_opening).gas_used


def _report(run: GasRun, preset, batch_size: int, prompt: int, output: int, cells: int, selected: bool) -> dict:
    """``audited_path_total``: the first round as the node runs it — drawn privately and revealed
    with the receipts for a selected job, drawn publicly for a request; ``audited_path_total_public``:
    the same job drawn publicly (drawRound and one transaction per receipt)."""
    g = run.gas
    # each member's two transactions as measured (they differ by a few gas from seat to seat)
    votes = sum(g["seal_vote_by_member"]) + sum(g["open_and_vote_by_member"])
    rest = g["draw_challenge"] + g["open"] + g["verdict"] + votes
    public = g.get("start_audit_public", g["start_audit"]) + g["draw_round"] + preset.COMMITTEE_SIZE * g["committee_receipt"] + rest
    audited = g["start_audit"] + g["reveal_round"] + rest if selected else public
    return {
        "first_round": "private" if selected else "public (requested)", "reveal_round": g.get("reveal_round"),
        "start_audit_public": g.get("start_audit_public"), "audited_path_total_public": public,
        "register": g["register"], "post_batch": g["post_batch"], "post_batch_jobs": batch_size,
        "per_job_amortized": (g["post_batch"] + g["audit_draw"]) // batch_size, "audit_draw": g["audit_draw"],
        "post_batch_first": g["post_batch_first"],
        "open": g["open"], "verdict": g["verdict"], "dispute": g["dispute"],
        "start_audit": g["start_audit"], "draw_round": g["draw_round"], "committee_receipt": g["committee_receipt"], "draw_challenge": g["draw_challenge"],
        "seal_vote": g["seal_vote_by_member"][-1], "open_and_vote": g["open_and_vote_by_member"][-1],
        "seal_vote_by_member": g["seal_vote_by_member"], "open_and_vote_by_member": g["open_and_vote_by_member"],
        "contest": g["contest"], "answer_contest": g["answer_contest"], "escalate": g["escalate"],
        "draw_escalation": g["draw_escalation"], "audited_path_total": audited,
        "preset": preset.name, "committee_size": preset.COMMITTEE_SIZE, "prompt_tokens": prompt, "output_tokens": output,
        "nodes": len(run.nodes), "committed_layers": len(run.layers), "fingerprint_dims": preset.FINGERPRINT_DIMS, "worker_opened_cells": cells,
    }


@click.command()
@click.option("--preset", "preset_name", default="mainnet", show_default=True)
@click.option("--batch-size", type=int, default=128, show_default=True, help="Receipts per batch (≤ MAX_BATCH_RECEIPTS).")
@click.option("--prompt-tokens", type=int, default=64, show_default=True)
@click.option("--output-tokens", type=int, default=64, show_default=True)
@click.option("--layers", default="1,4,10,16,22,28,30", show_default=True, help="Committed layers (SmolLM2's set by default).")
@click.option("--nodes", type=click.IntRange(min=NODES), default=NODES, show_default=True, help="Registered nodes serving the model (sortition gas grows with it).")
@click.option("--batches", type=click.IntRange(min=1), default=1, show_default=True,
              help="Also post and draw this many more batches and report the per-job mean, min and max (a draw's gas varies).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def gas(preset_name, batch_size, prompt_tokens, output_tokens, layers, nodes, batches, json_path):
    """Gas of every protocol step on anvil, and the amortized cost per job."""
    report = measure_gas(preset_name, batch_size, prompt_tokens, output_tokens, tuple(int(x) for x in layers.split(",")), nodes, batches)
    click.echo(format_table(["step", "gas"], [[k, v] for k, v in report.items()]))
    write_json(json_path, report)
