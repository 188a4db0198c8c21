"""Receipt horizons (docs/protocol.md §12 "Receipt horizons"): every receipt carries the last block
an audit of it may start in (`ReceiptData.auditableUntilBlock`, signed by its worker: its head +
RECEIPT_HORIZON_BLOCKS). `Jobs.openAudit` skips a selected start and refuses a request after it,
whoever batched the receipt, so an active worker's duties for a job end at its horizon + the audit
span, as a leaver's end at its unbond + the leaver span. Each attacker's moves, replayed on anvil:

- the hostage-taker holding an active worker's old receipt: before, it batched the receipt years
  later and requested its audit (locking the stake, slashing a node that pruned its trace); now
  the request reverts ReceiptExpired and a selected start is skipped, nobody locked;
- the cheating worker that signs a short horizon so no audit can start: its selected start is
  skipped (so a client and an honest dispatcher must refuse such a receipt: tests/node/dispatcher/
  test_batch_promises.py replays that refusal; tests/spec/test_timeline.py shows a receipt batched
  by its promise always outlives its batch's last start);
- the colluding dispatcher that batches late so that the start falls past the horizon: the
  client's omission claim slashes it (its late batch cannot answer: BatchTooLate).
"""

import dataclasses

import pytest

from helpers.chain import reverts
from verillm.chain import RpcChain
from verillm.spec import promise as spec_promise
from verillm.spec.params import compute_timeline
from verillm.spec.receipt import compute_auditable_until_block, compute_receipt_hash, sign_receipt

from helpers.contracts import CHEAT_OFFSET, PRESET, Party, World

FEE = PRESET.COMMITTEE_SIZE * PRESET.AUDIT_FEE_WEI


def _land_at(world, block: int) -> None:
    """Mine so that the next transaction is included in block ``block`` (anvil automines)."""
    head = world.chain.get_block_number()
    assert head < block, (head, block)
    world.chain.mine(block - 1 - head)


def _land_after(world, deadline: int) -> None:
    """Mine so that the next transaction's gas estimate (run at the head) sees a block past
    ``deadline``: it lands in deadline + 2."""
    _land_at(world, deadline + 2)


def _with_horizon(world, party: Party, until: int) -> Party:
    receipt = dataclasses.replace(party.receipt, signature=b"\x00" * 65, auditable_until_block=until)
    return dataclasses.replace(party, receipt=sign_receipt(receipt, party.node.account.key, world.domain))


@pytest.fixture
def requests_world(world_base):
    """A deployment whose draw selects nothing (AUDIT_RATE_BPS = 0): every audit is requested and paid."""
    snapshot = world_base.chain.snapshot()  # before the deployment: the module's nonces stay right
    yield World(RpcChain(world_base.chain.url), PRESET.replace(AUDIT_RATE_BPS=0))
    world_base.chain.revert(snapshot)


def test_a_hostage_taker_cannot_request_an_active_workers_receipt_after_its_horizon(requests_world):
    world = requests_world
    worker, hostage = world.nodes[0], world.nodes[3]
    kept = world.make_worker(worker).receipt  # an honest receipt the hostage-taker holds on to
    assert kept.auditable_until_block == compute_auditable_until_block(world.chain.get_block_number(), PRESET)
    _land_at(world, kept.auditable_until_block - PRESET.START_WINDOW_BLOCKS // 2)  # batched and drawn shortly before the horizon
    batch, _, _ = world.post_and_draw(hostage, [kept])
    _land_after(world, kept.auditable_until_block)  # the horizon has passed; the start window has not
    assert world.chain.get_block_number() < world.protocol.get_batch(batch.batch_id)["drawn_block"] + PRESET.START_WINDOW_BLOCKS
    with reverts(f"ReceiptExpired.*{kept.auditable_until_block + 1}"):
        world.protocol.start_audit(hostage.account, batch.batch_id, 0, kept, batch.levels, FEE)
    # The worker is still active (not a leaver): before the receipt horizon this request opened an
    # audit and locked its stake. Now its duties for the job ended at the horizon.
    node = world.protocol.get_node(worker.address)
    assert node["active"] and node["locks"] == 0
    # At its last block the same receipt is still auditable: the horizon is the last start, inclusive.
    fresh = world.make_worker(worker, nonce=1).receipt
    _land_at(world, fresh.auditable_until_block - PRESET.START_WINDOW_BLOCKS // 2)
    again, _, _ = world.post_and_draw(hostage, [fresh])
    _land_at(world, fresh.auditable_until_block)
    assert world.protocol.start_audit(hostage.account, again.batch_id, 0, fresh, again.levels, FEE).value > 0


def test_a_selected_start_past_the_horizon_is_skipped_and_its_dispatcher_not_slashed(world):
    # The cheat's own move: a worker signs a horizon that ends before its batch is drawn, so its
    # selected start is skipped (a client and an honest dispatcher refuse such a receipt). The
    # dispatcher that started it did its duty: no missed-start slash.
    cheat, dispatcher = world.nodes[0], world.nodes[1]
    head = world.chain.get_block_number()
    short = _with_horizon(world, world.make_worker(cheat, offset=CHEAT_OFFSET), head + 2)
    batch, _, _ = world.post_and_draw(dispatcher, [short.receipt])
    assert world.chain.get_block_number() > short.receipt.auditable_until_block
    assert world.protocol.is_audited(batch.batch_id, 0)
    assert world.protocol.start_audit(dispatcher.account, batch.batch_id, 0, short.receipt, batch.levels).value == 0
    assert world.protocol.get_node(cheat.address)["locks"] == 0  # nothing audits it: the client's check is what stops it
    _land_after(world, world.protocol.get_batch(batch.batch_id)["drawn_block"] + PRESET.START_WINDOW_BLOCKS)
    with reverts("AlreadyHandled"):
        world.protocol.slash_missed_start(world.outsider, batch.batch_id, 0)


def test_a_dispatcher_batching_late_to_push_the_start_past_the_horizon_is_slashed(world):
    # The collusion: a cheating worker signs an honest-looking horizon (head + RECEIPT_HORIZON_BLOCKS,
    # which the client accepts against the promise); its dispatcher promises head + BATCH_BY_BLOCKS
    # but batches after the promise, so that a draw and start at their windows' ends fall past the
    # horizon and the start is skipped. The client's omission claim slashes the dispatcher: a batch
    # posted after the promised block does not answer it.
    cheat, dispatcher = world.nodes[0], world.nodes[1]
    client = world.outsider
    worker = world.make_worker(cheat, offset=CHEAT_OFFSET)
    until, head = worker.receipt.auditable_until_block, world.chain.get_block_number()
    receipt_hash = compute_receipt_hash(worker.receipt)
    promise = spec_promise.BatchPromise(receipt_hash, bytes.fromhex(dispatcher.address[2:]),
                                        spec_promise.compute_batch_by_block(head, PRESET.BATCH_BY_BLOCKS))
    signed = spec_promise.sign_promise(promise, dispatcher.account.key, world.protocol.get_promise_domain())
    t = compute_timeline(PRESET)
    assert until >= promise.batch_by_block + t.start_span  # what the client checks: a batch in time is auditable
    late_post = until - t.start_span + 1  # the first block whose batch, drawn and started at the edges, misses the horizon
    assert promise.batch_by_block < late_post <= promise.batch_by_block + PRESET.OMISSION_CLAIM_WINDOW_BLOCKS
    _land_at(world, late_post)
    posted = world.protocol.post_batch(dispatcher.account, [receipt_hash]).value
    claim = world.protocol.claim_omitted(client, signed).value  # the client sees no batch by the promised block, and claims
    proof = spec_promise.compute_inclusion_proof([receipt_hash], receipt_hash)
    with reverts("BatchTooLate"):  # the late batch does not answer it
        world.protocol.prove_included(dispatcher.account, claim, posted.batch_id, proof)
    stake = world.protocol.get_node(dispatcher.address)["stake_wei"]
    _land_after(world, world.protocol.get_omission_claim(claim)["prove_deadline"])
    assert world.protocol.slash_omission(client, claim).value == stake * PRESET.SLASH_FRACTION_BPS // 10_000 > 0
    # The escape it bought: drawn and started at the windows' ends, past the horizon, skipped.
    _land_at(world, late_post + PRESET.AUDIT_DRAW_DELAY_BLOCKS + PRESET.DRAW_WINDOW_BLOCKS)
    drawn = world.protocol.draw_audit(dispatcher.account, posted.batch_id, dispatcher.vrf_key).receipt["blockNumber"]
    _land_at(world, drawn + PRESET.START_WINDOW_BLOCKS)
    assert world.chain.get_block_number() + 1 > until
    assert world.protocol.start_audit(dispatcher.account, posted.batch_id, 0, worker.receipt, posted.levels).value == 0
