"""Adversarial review (2026-11-26) of the private start that keeps the worker's receipt back
(`Batches.startPrivateAudit`, `Jobs.revealRound` / `supplyReceipt` / `lapse`; docs/protocol.md §12
"Private draws").

A private start carries a `ReceiptClaim` (worker, model, horizon) that nothing checks until the
reveal, except the worker through the signature over the receipt hash. Each test replays one
party's moves; the three real problems it found are fixed (each test's docstring says how it
went before), the others are attacks that fail, each citing the guard that stops it. Every test ends by checking
that Jobs' balance covers its fee pool and every credit.

Deployment: MINIMAL (every job selected), six nodes, rolled back after each test (conftest
`world`). The audited job is node 0's, dispatched by node 1.
"""

import dataclasses

import pytest
from eth_account import Account
from web3 import Web3

from helpers.chain import reverts
from helpers.contracts import World
from verillm.chain.errors import TransactionReverted
from verillm.spec.audit import Phase, compute_batch_proof, compute_draw_commitment, compute_private_draw_bond
from verillm.spec.hashing import keccak256
from verillm.spec.receipt import compute_receipt_hash, compute_signing_digest, sign_digest, sign_receipt

SECRET = keccak256(b"reviewed dispatcher's secret")
_NONCES = iter(range(7000, 8000))


def _worker(world: World):
    return world.make_worker(world.nodes[0], nonce=next(_NONCES))


def _start_claiming(world: World, receipt, *, sender=None, worker: str | None = None, model_id: bytes | None = None,
                    horizon: int | None = None, signature: bytes | None = None, value: int | None = None, batch=None):
    """Batch ``receipt`` alone (dispatcher node 1), draw, and start it privately with a claim of
    the dispatcher's choosing (default: the receipt's own fields). Returns (Tx, batch)."""
    dispatcher = world.nodes[1]
    if batch is None:
        batch, _, _ = world.post_and_draw(dispatcher, [receipt])
    claim = (Web3.to_checksum_address(worker or "0x" + receipt.worker.hex()), model_id or receipt.model_id,
             receipt.auditable_until_block if horizon is None else horizon)
    siblings = list(compute_batch_proof(batch.levels, 0).siblings)
    p = world.protocol
    tx = p._send(p.batches, "startPrivateAudit", batch.batch_id, 0, compute_receipt_hash(receipt), claim,
                 signature or receipt.signature, siblings, compute_draw_commitment(SECRET), sender=sender or dispatcher.account,
                 value=compute_private_draw_bond(world.preset) if value is None else value,
                 event="AuditStarted", field="auditId", emitter=p.jobs, optional=True)
    return dataclasses.replace(tx, value=tx.value or 0), batch  # 0: skipped (AuditSkipped)


def _mine_past_draw_window(world: World, audit_id: int) -> None:
    """Mine to the first block `lapse` accepts: after the draw window (a private draw's: its reveal grace too)."""
    state = world.protocol.get_round_state(audit_id)
    last = state.deadlines.reveal_by if state.private_draw else state.deadlines.draw_by
    world.chain.mine(last + 1 - world.chain.get_block_number())


def _assert_solvent(world: World, *extra: str) -> None:
    """Jobs holds at least its fee pool plus every credit owed (the accounting invariant)."""
    jobs = world.protocol.jobs
    holders = {n.address for n in world.nodes} | {world.outsider.address, world.owner.address, *extra}
    owed = jobs.call("feePoolWei") + sum(world.protocol.get_credit(a) for a in holders)
    assert world.chain.w3.eth.get_balance(jobs.address) >= owed


# --- problems the review found, fixed ---------------------------------------------------------


def test_a_false_past_horizon_claim_cannot_skip_a_selected_audit(world):
    """Fixed (Jobs._isSkipped): a private start skips only a receipt proven taken. The review
    replayed a colluding dispatcher claiming a live receipt's horizon passed at block 1: the start
    was skipped, the bond came back and the index counted as handled (slashMissedStart refused),
    so the cheat's selected audit was cancelled for 0 wei instead of a missed-start slash. Now the
    claim is refused (ReceiptExpired): the dispatcher starts it with startAudit, whose skip reads
    the receipt, or is slashed for the missed start."""
    cheat = world.make_worker(world.nodes[0], offset=0.3, nonce=next(_NONCES))  # a fabricated trace
    assert cheat.receipt.auditable_until_block > world.chain.get_block_number() + 10  # the real receipt is live
    with reverts("ReceiptExpired"):
        _start_claiming(world, cheat.receipt, horizon=1)  # "its horizon passed at block 1"
    _assert_solvent(world)


def test_a_claim_naming_a_throwaway_worker_cannot_skip_a_selected_audit(world):
    """Fixed (Jobs._isSkipped): the signature binds the claimed worker to the receipt hash, not to
    the receipt's worker field, so a dispatcher could sign the real hash with an unregistered key
    and name it: "its worker is gone", skipped for free. Now refused (NotActiveNode)."""
    cheat = world.make_worker(world.nodes[0], offset=0.3, nonce=next(_NONCES))
    throwaway = Account.from_key(keccak256(b"reviewer's throwaway key"))  # never registered
    digest = compute_signing_digest(cheat.receipt, world.domain)  # the real receipt's hash, signed by another key
    signature = sign_digest(digest, bytes(throwaway.key), bytes.fromhex(throwaway.address[2:]), "the throwaway")
    with reverts("NotActiveNode"):
        _start_claiming(world, cheat.receipt, worker=throwaway.address, signature=signature)
    _assert_solvent(world, throwaway.address)


# --- attacks that fail ----------------------------------------------------------------------------


@pytest.mark.parametrize("lie", ["model", "horizon", "worker-signed-by-dispatcher"])
def test_a_false_claim_that_opens_an_audit_costs_more_than_a_missed_start(world, lie):
    """A claim that does not skip but cannot be borne out (another model, a later horizon, or the
    dispatcher naming itself as worker with its own signature): the reveal reverts ReceiptMismatch
    (`_acceptReceipt`), so does every supplyReceipt; the dispatcher is slashed at the first lapse
    and loses its bond, the second lapse abandons without a second slash and unlocks everyone.
    The price of voiding the audit is slash + bond, above a missed start's slash alone."""
    cheat = _worker(world)
    dispatcher = world.nodes[1]
    kwargs = {"model": {"model_id": keccak256(b"a model nobody serves")},
              "horizon": {"horizon": cheat.receipt.auditable_until_block + 10**6},
              "worker-signed-by-dispatcher": {"worker": dispatcher.address, "signature": sign_digest(
                  compute_signing_digest(cheat.receipt, world.domain), bytes(dispatcher.account.key),
                  bytes.fromhex(dispatcher.address[2:]), "the dispatcher")}}[lie]
    stake, credit = world.stakes()[dispatcher.address], world.protocol.get_credit(dispatcher.address)
    tx, _ = _start_claiming(world, cheat.receipt, **kwargs)
    audit_id = tx.value
    assert audit_id != 0
    world.chain.mine(world.preset.AUDIT_DRAW_DELAY_BLOCKS + 1)
    with reverts("ReceiptMismatch"):
        world.protocol.reveal_round(dispatcher.account, audit_id, SECRET, cheat.receipt, [])
    _mine_past_draw_window(world, audit_id)
    world.protocol.lapse(world.outsider, audit_id)
    slashed = stake - world.stakes()[dispatcher.address]
    assert slashed > 0
    with reverts("ReceiptMismatch"):  # the client holding the real receipt cannot show it either
        world.protocol.supply_receipt(world.outsider, audit_id, cheat.receipt)
    _mine_past_draw_window(world, audit_id)
    world.protocol.lapse(world.outsider, audit_id)
    assert world.protocol.get_round_state(audit_id).phase == Phase.ABANDONED
    assert stake - world.stakes()[dispatcher.address] == slashed  # slashed once
    assert world.protocol.get_credit(dispatcher.address) == credit  # the bond stayed in the pool
    assert all(world.protocol.get_node(n.address)["locks"] == 0 for n in world.nodes)  # nobody locked beyond the 2nd lapse
    _assert_solvent(world)


def test_a_shown_worker_receipt_cannot_be_replayed_into_another_audit(world):
    """The reveal's worker receipt is public once shown; it matches only its own audit's started
    hash (`_acceptReceipt`: "not the started receipt"), in a reveal or a supplyReceipt."""
    dispatcher = world.nodes[1]
    first, second = _worker(world), _worker(world)
    run_a = world.start(first, dispatcher=dispatcher, secret=SECRET)
    run_b = world.start(second, dispatcher=dispatcher, secret=keccak256(b"second secret"))
    world.reveal(run_a, dispatcher, SECRET, [world.make_member(n) for n in world.preview(run_a, SECRET)])
    world.preview(run_b, keccak256(b"second secret"))
    with reverts("ReceiptMismatch"):
        world.protocol.reveal_round(dispatcher.account, run_b.audit_id, keccak256(b"second secret"), first.receipt, [])
    _mine_past_draw_window(world, run_b.audit_id)
    world.protocol.lapse(world.outsider, run_b.audit_id)
    with reverts("ReceiptMismatch"):
        world.protocol.supply_receipt(world.outsider, run_b.audit_id, first.receipt)
    world.protocol.supply_receipt(world.outsider, run_b.audit_id, second.receipt)  # the true one still goes
    with reverts("AlreadyHandled"):  # and only once
        world.protocol.supply_receipt(world.outsider, run_b.audit_id, second.receipt)
    _assert_solvent(world)


def test_strangers_cannot_commit_show_or_underpay_for_the_dispatcher(world):
    """Guards of the new path: only the batch's dispatcher commits (`PrivateDrawRefused`), with the
    bond (`WrongFee`), for the receipt's signer (`InvalidSignature`); nobody shows the receipt
    before the reveal window closes (`PrivateDraw`), nor reveals but the dispatcher (`NotParty`)."""
    worker = _worker(world)
    dispatcher = world.nodes[1]
    batch, _, _ = world.post_and_draw(dispatcher, [worker.receipt])
    with reverts("PrivateDrawRefused"):
        _start_claiming(world, worker.receipt, sender=world.outsider, batch=batch)
    with reverts("WrongFee"):
        _start_claiming(world, worker.receipt, value=0, batch=batch)
    with reverts("InvalidSignature"):  # another node named as worker, with the real worker's signature
        _start_claiming(world, worker.receipt, worker=world.nodes[2].address, batch=batch)
    tx, _ = _start_claiming(world, worker.receipt, batch=batch)
    with reverts("PrivateDraw"):
        world.protocol.supply_receipt(world.outsider, tx.value, worker.receipt)
    world.chain.mine(world.preset.AUDIT_DRAW_DELAY_BLOCKS + 1)
    with reverts("NotParty"):
        world.protocol.reveal_round(world.nodes[2].account, tx.value, SECRET, worker.receipt, [])
    _assert_solvent(world)


def test_nothing_public_before_the_reveal_names_the_receipt_s_lengths_or_hashes(world):
    """Before the reveal, the audit's views and its AuditStarted event hold no field of the receipt
    beyond the claim: no output length, no transcript hash, no commitment root."""
    worker = _worker(world)
    tx, _ = _start_claiming(world, worker.receipt)
    audit_id = tx.value
    started = world.protocol.jobs.web3.events.AuditStarted().process_receipt(tx.receipt)[0]["args"]
    assert started["outputTokens"] == 0
    assert world.protocol.get_audit(audit_id).num_positions == 0
    assert tuple(world.protocol.jobs.call("transcriptOf", audit_id)) == (bytes(32), bytes(32), 0)
    assert bytes(world.protocol.get_party(audit_id, 0, 0)["root"]) == bytes(32)
    assert not world.protocol.get_round_state(audit_id).receipt_known


def test_a_skipped_private_start_credits_exactly_the_bond_and_keeps_the_books(world):
    """A receipt another audit already owns: the second selected private start is skipped, the
    bond credited at once (never entering the pool), the pool unchanged."""
    worker = _worker(world)
    world.start(worker, dispatcher=world.nodes[2], secret=keccak256(b"first dispatcher"))  # the receipt's audit
    dispatcher = world.nodes[1]
    credit, pool = world.protocol.get_credit(dispatcher.address), world.protocol.jobs.call("feePoolWei")
    tx, _ = _start_claiming(world, worker.receipt)  # the same receipt, in node 1's batch
    assert tx.value == 0
    assert world.protocol.get_credit(dispatcher.address) - credit == compute_private_draw_bond(world.preset)
    assert world.protocol.jobs.call("feePoolWei") - pool == world.preset.JOB_FEE_WEI  # only the batch's levy
    _assert_solvent(world)


def test_a_receipt_with_bad_lengths_is_refused_by_both_starts(world):
    """A worker signing a receipt whose lengths Jobs refuses (numPositions ≠ P + N − 1) cannot be
    audited by either start: the public one reverts at the start, the private one at the reveal
    (the dispatcher slashed either way: missed start, or missed reveal plus its bond). An honest
    dispatcher never batches one: its router checks the binding first (verify_receipt_binding)."""
    good = _worker(world)
    bad = sign_receipt(dataclasses.replace(good.receipt, num_positions=good.receipt.num_positions + 1), world.nodes[0].account.key, world.domain)
    dispatcher = world.nodes[1]
    batch, _, _ = world.post_and_draw(dispatcher, [bad])
    with reverts("ReceiptMismatch"):
        world.protocol.start_audit(dispatcher.account, batch.batch_id, 0, bad, batch.levels)
    tx, _ = _start_claiming(world, bad, batch=batch)
    world.chain.mine(world.preset.AUDIT_DRAW_DELAY_BLOCKS + 1)
    with reverts("ReceiptMismatch"):
        world.protocol.reveal_round(dispatcher.account, tx.value, SECRET, bad, [])
    _assert_solvent(world)


def _missed_reveal(world):
    """Node 1 starts node 0's job privately and never reveals; the lapse opens the public fallback.
    Returns the worker, the run and the fallback window's last block."""
    worker = _worker(world)
    run = world.start(worker, dispatcher=world.nodes[1], secret=SECRET)
    _mine_past_draw_window(world, run.audit_id)
    world.protocol.lapse(world.outsider, run.audit_id)
    return worker, run, world.protocol.get_round_state(run.audit_id).deadlines.draw_by


def test_a_receipt_is_shown_only_while_a_draw_still_fits_after_it(world):
    """Fixed (Jobs.supplyReceipt refuses the fallback window's last block): after a missed reveal
    (the dispatcher down: slashed at the first lapse), a receipt shown in the last block left no
    block to draw in, and the next lapse slashed the dispatcher a second time for a draw nobody
    could make (the review replayed it: its re-staked MIN_STAKE_WEI taken in full). Now the last
    block refuses it, and a receipt shown a block earlier is drawn in the last one."""
    worker, run, draw_by = _missed_reveal(world)
    world.chain.mine(draw_by - 1 - world.chain.get_block_number())
    with reverts("TooLate|a window that closed"):  # would be mined at draw_by
        world.protocol.supply_receipt(worker.node.account, run.audit_id, worker.receipt)
    _assert_solvent(world)


def test_a_receipt_shown_a_block_before_the_end_is_drawn_in_the_last_one(world):
    worker, run, draw_by = _missed_reveal(world)
    world.chain.mine(draw_by - 2 - world.chain.get_block_number())
    world.protocol.supply_receipt(worker.node.account, run.audit_id, worker.receipt)  # mined at draw_by - 1
    assert len(world.protocol.draw_round(world.outsider, run.audit_id).value) == world.preset.COMMITTEE_SIZE  # mined at draw_by
    assert world.protocol.get_round_state(run.audit_id).phase == Phase.COMMITTING
    _assert_solvent(world)
