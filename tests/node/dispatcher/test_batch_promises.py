"""The dispatcher's batching promises (node/dispatcher/promises.py) on a real anvil with the real
tables (SQLite on disk): a kept job gets a signed promise (the same one when repeated), the
batcher posts before the promise falls due, an inactive node promises nothing, and a griefer's
claim on a batched receipt is answered by the node's watcher step, which takes the bond."""

import pytest
from eth_keys import keys

from verillm.chain.events import get_events
from verillm.spec import promise as spec
from verillm.spec import vrf
from verillm.spec.hashing import keccak256
from verillm.spec.params import MINIMAL
from verillm.spec.receipt import SigningDomain, compute_receipt, compute_receipt_hash, sign_receipt
from verillm.spec.types import Job, SamplingParams

from verillm.node.dispatcher.batches import BatchScheduler
from verillm.node.dispatcher.chainio import ChainIO
from verillm.node.dispatcher.promises import CannotPromise, OmissionAnswers, Promises, compute_post_margin
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.dispatcher.watcher import compute_event_row
from verillm.node.keys import compute_node_key
from verillm.node.metrics import NodeMetrics
from verillm.node.store.store import open_store

from one_node_chain import one_node_deployment

MODEL_ID = keccak256(b"promise test model")


@pytest.fixture(scope="module")
def deployed(anvil_installed):
    with one_node_deployment(MODEL_ID) as world:
        yield world


def _job_and_receipt(i: int, key, domain: SigningDomain, protocol, horizon_blocks: int = MINIMAL.RECEIPT_HORIZON_BLOCKS):
    """A job and its receipt signed at the chain head, auditable for ``horizon_blocks`` (an honest worker's: the preset's)."""
    job = Job(MODEL_ID, (1, 2, 3), SamplingParams(), 4, i.to_bytes(32, "big"))
    until = protocol.chain.get_block_number() + horizon_blocks
    return job, sign_receipt(compute_receipt(job, (5, 6), b"\x09" * 32, key.address, until), key.private_key, domain)


def _node(deployed, tmp_path):
    anvil, protocol, node, _ = deployed
    key = compute_node_key(bytes(node.key))
    tables = DispatcherTables(open_store(tmp_path / "node.sqlite").db)
    chainio = ChainIO(anvil.url, protocol.deployment, key, tables)
    domain = SigningDomain(protocol.chain.chain_id, bytes.fromhex(protocol.jobs.address[2:]))
    return key, tables, chainio, domain


async def test_a_kept_job_gets_a_promise_the_batcher_keeps_and_a_claim_is_answered(deployed, tmp_path):
    _, protocol, node, client = deployed
    key, tables, chainio, domain = _node(deployed, tmp_path)
    promises = Promises(chainio, tables, key)
    batches = BatchScheduler(chainio, tables, NodeMetrics(), vrf.derive_secret_key(b"\x01" * 32), 8, max_wait_s=10_000)
    batches.promises = promises
    await promises.verify_capacity()
    job, receipt = _job_and_receipt(1, key, domain, protocol)
    tables.insert_dispatched_job(b"\x01" * 32, job, key.address, "", (5, 6), receipt, False)
    head = protocol.chain.get_block_number()
    signed = await promises.make(b"\x01" * 32, receipt)
    spec.verify_promise_signature(signed, protocol.get_promise_domain())
    assert signed.promise == spec.BatchPromise(compute_receipt_hash(receipt), key.address, head + MINIMAL.BATCH_BY_BLOCKS)
    assert await promises.make(b"\x01" * 32, receipt) == signed  # a repeated job gets the same promise
    # Neither full nor old: only the promise's deadline makes the batch due, a margin before it.
    due_at = signed.promise.batch_by_block - compute_post_margin(MINIMAL.BATCH_BY_BLOCKS)
    assert not batches.is_batch_due(due_at - 1) and batches.is_batch_due(due_at)
    protocol.chain.mine(due_at - protocol.chain.get_block_number())
    await batches.post_batch(batches.create_batch())
    posted = protocol.batches.call("getBatch", tables.get_batch(1)["batch_id"])
    assert posted[3] <= signed.promise.batch_by_block
    # A griefer claims anyway; the node's watcher step answers from its own tables.
    protocol.chain.mine(signed.promise.batch_by_block + 1 - protocol.chain.get_block_number())
    claim_id = protocol.claim_omitted(client, signed).value
    rows = [compute_event_row(e) for e in get_events(protocol.chain, [protocol.coverage], 0)]
    tables.record_events("protocol", rows, protocol.chain.get_block_number() + 1)
    await OmissionAnswers(chainio, tables).advance(protocol.chain.get_block_number())
    assert protocol.get_omission_claim(claim_id)["state"] == spec.ANSWERED
    answered = get_events(protocol.chain, [protocol.coverage], 0, names={"OmissionAnswered"})[-1].args
    # Paid its answer's gas at the answer's price, capped at the bond; the rest back to the griefer.
    assert protocol.jobs.call("credits", node.address) == answered["paidWei"] > 0
    assert answered["paidWei"] + answered["refundedWei"] == MINIMAL.OMISSION_CLAIM_BOND_WEI
    assert protocol.jobs.call("credits", client.address) == answered["refundedWei"]
    assert not await OmissionAnswers(chainio, tables).answer(claim_id, signed.promise.receipt_hash)  # resolved: nothing sent


async def test_a_node_behind_on_its_promises_or_inactive_takes_no_job(deployed, tmp_path):
    _, protocol, node, _ = deployed
    key, tables, chainio, domain = _node(deployed, tmp_path)
    promises = Promises(chainio, tables, key)
    job, receipt = _job_and_receipt(2, key, domain, protocol)
    tables.insert_dispatched_job(b"\x02" * 32, job, key.address, "", (5, 6), receipt, False)
    signed = await promises.make(b"\x02" * 32, receipt)
    protocol.chain.mine(signed.promise.batch_by_block + 1 - protocol.chain.get_block_number())
    with pytest.raises(CannotPromise, match="behind"):
        await promises.verify_capacity()
    stranger = compute_node_key(bytes(protocol.chain.dev_accounts[7].key))  # never registered: could post no batch
    with pytest.raises(CannotPromise, match="not active"):
        await Promises(ChainIO(deployed[0].url, protocol.deployment, stranger, tables), tables, stranger).verify_capacity()


async def test_a_client_checks_a_promise_on_receipt_against_the_chain_head(deployed, tmp_path):
    """`verillm.client.promise.verify_promise_on_receipt` (what `verillm complete --rpc-url` runs): the
    node's fresh promise passes; a backdated one (its claim window may already be closed), a far
    one, one about another receipt and one signed for another deployment are refused, each saying why."""
    from verillm.errors import InvalidProof, InvalidSignature
    from verillm.client.promise import verify_promise_on_receipt

    _, protocol, _, _ = deployed
    key, tables, chainio, domain = _node(deployed, tmp_path)
    job, receipt = _job_and_receipt(3, key, domain, protocol)
    tables.insert_dispatched_job(b"\x03" * 32, job, key.address, "", (5, 6), receipt, False)
    signed = await Promises(chainio, tables, key).make(b"\x03" * 32, receipt)
    receipt_hash = compute_receipt_hash(receipt)
    head = verify_promise_on_receipt(signed, receipt, protocol)
    assert head <= signed.promise.batch_by_block <= head + MINIMAL.BATCH_BY_BLOCKS
    coverage_domain = protocol.get_promise_domain()

    def signed_for(due: int, about: bytes = receipt_hash, signing_domain=coverage_domain):
        return spec.sign_promise(spec.BatchPromise(about, key.address, due), key.private_key, signing_domain)

    with pytest.raises(InvalidProof, match="backdated"):
        verify_promise_on_receipt(signed_for(head - 1), receipt, protocol)
    with pytest.raises(InvalidProof, match="later than head"):
        verify_promise_on_receipt(signed_for(head + MINIMAL.BATCH_BY_BLOCKS + 2), receipt, protocol)
    with pytest.raises(InvalidProof, match="another receipt"):
        verify_promise_on_receipt(signed_for(head + 5, about=b"\x07" * 32), receipt, protocol)
    with pytest.raises(InvalidSignature):
        verify_promise_on_receipt(signed_for(head + 5, signing_domain=domain), receipt, protocol)  # the Jobs domain, not Coverage's
    stranger = keys.PrivateKey(b"\x0e" * 32)  # signs correctly, but has no stake a claim could lock
    unstaked = spec.sign_promise(spec.BatchPromise(receipt_hash, stranger.public_key.to_canonical_address(), head + 5), stranger.to_bytes(), coverage_domain)
    with pytest.raises(InvalidProof, match="not an active registered node"):
        verify_promise_on_receipt(unstaked, receipt, protocol)


async def test_a_receipt_whose_horizon_ends_before_its_batch_could_be_audited_is_refused(deployed, tmp_path):
    """The cheat: a worker signs auditableUntilBlock short of its batch's last audit start, so a
    selected start of its receipt would be skipped (`Jobs.openAudit`) and it is never audited.
    The honest dispatcher treats the receipt as that worker's failure (`Promises.verify_horizon`,
    before it keeps the job) and, if the head moved on since, promises an earlier batch rather
    than one the receipt would not outlive; the client refuses a promise its receipt does not
    outlive (`verify_promise_on_receipt`). The honest worker's horizon passes both."""
    from verillm.errors import InvalidProof
    from verillm.client.promise import verify_promise_on_receipt
    from verillm.spec.params import compute_timeline

    _, protocol, _, _ = deployed
    key, tables, chainio, domain = _node(deployed, tmp_path)
    promises = Promises(chainio, tables, key)
    start_span = compute_timeline(protocol.preset).start_span
    least = protocol.preset.BATCH_BY_BLOCKS + start_span  # a promise made now + the batch's start span
    _, honest = _job_and_receipt(4, key, domain, protocol)
    await promises.verify_horizon(honest)
    _, cheat = _job_and_receipt(5, key, domain, protocol, horizon_blocks=least - 1)
    with pytest.raises(InvalidProof, match="auditable only until"):
        await promises.verify_horizon(cheat)
    # Signed exactly at the least horizon, then the head moves before the promise: the promise is
    # due earlier (the batcher posts by it), so the receipt still outlives its batch's last start.
    job, tight = _job_and_receipt(6, key, domain, protocol, horizon_blocks=least)
    await promises.verify_horizon(tight)
    tables.insert_dispatched_job(b"\x06" * 32, job, key.address, "", (5, 6), tight, False)
    protocol.chain.mine(3)
    signed = await promises.make(b"\x06" * 32, tight)
    assert signed.promise.batch_by_block == tight.auditable_until_block - start_span < protocol.chain.get_block_number() + protocol.preset.BATCH_BY_BLOCKS
    verify_promise_on_receipt(signed, tight, protocol)
    # A colluding dispatcher that promises head + BATCH_BY_BLOCKS anyway: the client refuses it.
    head = protocol.chain.get_block_number()
    late = spec.sign_promise(spec.BatchPromise(compute_receipt_hash(tight), key.address, head + protocol.preset.BATCH_BY_BLOCKS),
                             key.private_key, protocol.get_promise_domain())
    with pytest.raises(InvalidProof, match="auditable only until"):
        verify_promise_on_receipt(late, tight, protocol)


async def test_an_expired_receipt_is_started_publicly_so_it_is_skipped_not_left_to_a_missed_start_slash(deployed, tmp_path):
    """A private start is skipped only for a receipt proven taken (`Jobs._isSkipped`): the node's
    private start of a receipt whose horizon passed is refused (`ReceiptExpired`), and the node
    starts it publicly, which skips it: the leaf is handled, nobody can slash a missed start."""
    _, protocol, node, client = deployed
    key, tables, chainio, domain = _node(deployed, tmp_path)
    batches = BatchScheduler(chainio, tables, NodeMetrics(), vrf.derive_secret_key(b"\x01" * 32), 8, max_wait_s=10_000)
    job, receipt = _job_and_receipt(7, key, domain, protocol, horizon_blocks=2)
    tables.insert_dispatched_job(b"\x07" * 32, job, key.address, "", (5, 6), receipt, False)
    await batches.post_batch(batches.create_batch())
    batch = tables.get_batch(tables.get_batches(("posted",))[-1]["id"])
    protocol.chain.mine(MINIMAL.AUDIT_DRAW_DELAY_BLOCKS + 1)
    await batches.advance_posted(batch, protocol.chain.get_block_number())
    batch = tables.get_batch(batch["id"])
    [(selected, requested)] = batches.get_selection(batch)  # MINIMAL selects every job
    assert protocol.chain.get_block_number() > receipt.auditable_until_block  # expired before its start
    await batches.start_audit(batch, selected, requested)
    skipped = get_events(protocol.chain, [protocol.jobs], 0, names={"AuditSkipped"})
    assert [e.args["receiptHash"] for e in skipped][-1] == compute_receipt_hash(receipt)
    protocol.chain.mine(MINIMAL.START_WINDOW_BLOCKS + 1)
    with pytest.raises(Exception, match="AlreadyHandled"):  # the missed-start slash has nothing to take
        protocol.slash_missed_start(client, batch["batch_id"], 0)


async def test_a_backlog_near_its_promise_goes_out_in_one_batch_and_the_post_lands_in_time(deployed, tmp_path):
    """Issue 35's duty bench: one batch posts at a time, and batches of `batch_max_receipts` (4 on the devnet) at
    96 completions in flight posted up to 59 blocks past their promises. A promise near its deadline now takes
    every waiting receipt into the next batch, and the node's duty clock records the post's slack."""
    _, protocol, node, _ = deployed
    key, tables, chainio, domain = _node(deployed, tmp_path)
    promises = Promises(chainio, tables, key)
    batches = BatchScheduler(chainio, tables, NodeMetrics(), vrf.derive_secret_key(b"\x02" * 32), 4, max_wait_s=10_000)
    batches.promises = promises
    signed = []
    for i in range(10):
        job, receipt = _job_and_receipt(1000 + i, key, domain, protocol)
        job_hash = (1000 + i).to_bytes(32, "big")
        tables.insert_dispatched_job(job_hash, job, key.address, "", (5, 6), receipt, False)
        signed.append(await promises.make(job_hash, receipt))
    first_due = min(s.promise.batch_by_block for s in signed)
    due_at = first_due - compute_post_margin(MINIMAL.BATCH_BY_BLOCKS)
    protocol.chain.mine(max(0, due_at - protocol.chain.get_block_number()))
    head = protocol.chain.get_block_number()
    assert promises.is_post_due(head)
    row = batches.create_batch(head)
    assert tables.get_batch(row)["count"] == 10  # the whole backlog, not 4 of it
    await batches.post_batch(row)
    landed = [item for item in chainio.duties.landed if item.due.kind == "post_batch"]
    assert len(landed) == 1 and landed[0].due.by_block == first_due and landed[0].slack_blocks >= 0
    assert chainio.duties.missed == type(chainio.duties.missed)() and not chainio.duties.pending
async def test_unbond_flushes_every_promise_before_it_deregisters(deployed, tmp_path):
    """Issue 34, attack 3b, through the CLI path the guide gives (`verillm node unbond`): the node
    stops promising, its batcher posts the outstanding promise at once (long before it falls
    due), and only then does the CLI deregister; the client's claim is answered and the
    operator's stake is whole."""
    import asyncio
    import json

    from click.testing import CliRunner

    from verillm.cli.node import node as node_cli
    from verillm.errors import ChainError

    _, protocol, node, client = deployed
    chain = protocol.chain
    snapshot = chain.snapshot()
    try:
        key, tables, chainio, domain = _node(deployed, tmp_path)
        promises = Promises(chainio, tables, key)
        batches = BatchScheduler(chainio, tables, NodeMetrics(), vrf.derive_secret_key(b"\x01" * 32), 8, max_wait_s=10_000)
        batches.promises = promises
        job, receipt = _job_and_receipt(50, key, domain, protocol)
        tables.insert_dispatched_job(b"\x50" * 32, job, key.address, "", (5, 6), receipt, False)
        signed = await promises.make(b"\x50" * 32, receipt)
        assert not batches.is_batch_due(chain.get_block_number())  # not due by size, age or deadline
        stake = protocol.get_node(node.address)["stake_wei"]
        key_file, book = tmp_path / "key.json", tmp_path / "addresses.json"
        key_file.write_text(json.dumps({"address": node.address, "private_key": "0x" + bytes(node.key).hex()}))
        key_file.chmod(0o600)
        protocol.deployment.save(book)
        args = ["unbond", "--rpc-url", deployed[0].url, "--addresses", str(book), "--key-file", str(key_file),
                "--store", str(tmp_path / "node.sqlite"), "--flush-timeout", "120"]
        cli = asyncio.ensure_future(asyncio.to_thread(CliRunner().invoke, node_cli, args))
        while not cli.done():  # the node's batcher, ticking as the watcher does
            if batches.is_batch_due(chain.get_block_number()):
                await batches.post_batch(batches.create_batch(chain.get_block_number()))
            await asyncio.sleep(0.05)
        result = cli.result()
        assert result.exit_code == 0, result.output + repr(result.exception)
        assert "every promised receipt is in a posted batch" in result.stderr
        _, later = _job_and_receipt(51, key, domain, protocol)
        with pytest.raises(CannotPromise, match="leaving"):  # no new promise once the operator decided to leave
            await promises.make(b"\x51" * 32, later)
        with pytest.raises(CannotPromise, match="not active|leaving"):
            await promises.verify_capacity()
        left = chain.get_block_number()
        posted = tables.get_batches(("posted",))[-1]
        assert posted["posted_block"] < left <= signed.promise.batch_by_block + 1  # posted before it deregistered
        assert not protocol.get_node(node.address)["active"] and protocol.get_node(node.address)["unbonding_end_block"]
        chain.mine(max(0, signed.promise.batch_by_block + 1 - chain.get_block_number()))
        claim_id = protocol.claim_omitted(client, signed).value
        rows = [compute_event_row(e) for e in get_events(chain, [protocol.coverage], 0)]
        tables.record_events("protocol", rows, chain.get_block_number() + 1)
        answers = OmissionAnswers(chainio, tables)
        try:
            await answers.advance(chain.get_block_number())
        except ChainError as exc:  # the CLI sent `deregister` from the node's key: this tick's cached nonce was
            assert "nonce too low" in str(exc)  # stale, dropped on the error; the watcher's next tick re-reads it
            await answers.advance(chain.get_block_number())
        assert protocol.get_omission_claim(claim_id)["state"] == spec.ANSWERED
        assert protocol.get_node(node.address)["stake_wei"] == stake  # whole
    finally:
        chain.revert(snapshot)
