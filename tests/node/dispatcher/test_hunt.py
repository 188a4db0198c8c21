"""The worker's node hunts the members that framed it (docs/protocol.md §12 "Accountable votes"),
on a real anvil with the real contracts, the node's real seat driver (`PartyDuties`, fed the
chain's events as its watcher feeds them), its SQLite store and its retained trace.

Round 0 of an honest job: two colluders commit fabricated data and vote DISAGREE, the third
member votes DISAGREE on honest data (the stop rule). The worker appeals (as its node does), the
appeal passes. One round against another convicts nobody in full (issue 34, Proportionality):
the node contests nobody (a contest would only cost its bond), the framers take the minority
penalty at settlement.

A round 0 that ties (a lazy agree voided as a proven lie against a false disagree): the worker's
node appeals it (Honest work gets verified).

The cross-round duty: round 0 fails a cheat over one colluder's agree (its partner hedges with a
disagree); the dispatcher appeals; the nodes of three appeal members (a majority of its seats)
open, vote disagree, and once the appeal decides FAIL again (two rounds against the agree) hunt
the agree their own data contradict (`adjudicateAcrossRounds`, each node's contradiction counted
once), never a disagree."""

import json

import pytest

from verillm.chain import RpcChain
from verillm.chain.anvil import AnvilProcess
from verillm.chain.events import EventPoller
from verillm.spec import settlement as spec
from verillm.spec.audit import Phase
from verillm.spec.challenge import compute_challenge, compute_opened_cells
from verillm.spec.commitment import compute_opening
from verillm.spec.types import Job, SamplingParams

from verillm.node.config import LimitsConfig
from verillm.node.dispatcher.audit.duties import PartyDuties, PartyFaults
from verillm.node.dispatcher.chainio import ChainIO
from verillm.node.dispatcher.watcher import compute_event_row
from verillm.node.keys import compute_node_key
from verillm.node.metrics import NodeMetrics
from verillm.node.store.dispatcher_tables import DispatcherTables
from verillm.node.store.store import open_store
from verillm.node.worker.commit import JobOutput
from verillm.node.worker.openings import Openings
from verillm.node.worker.trace_blob import encode_trace_blob

from helpers.contracts import LAYERS, MODEL_ID, OUTPUT_TOKENS, PRESET, PROMPT_LEN, World

pytestmark = pytest.mark.usefixtures("anvil_installed")


class RetainedJobs:
    """The worker's openings from its store, as `Worker.open_own_cells` serves them (real `Openings`
    over the retained trace blob; no engine: the served model only names the committed layers)."""

    class Served:
        class manifest:  # noqa: N801 - the attribute path `Openings` reads
            committed_layers = LAYERS
            stop_tokens = ()

    served = Served  # a member's vote reads the stop tokens

    def __init__(self, store, key):
        self.openings = Openings(self.Served, store, key, LimitsConfig(), NodeMetrics())

    async def open_own_cells(self, job_hash, cells=None, challenge=None):
        return await self.openings.open_for_duty(job_hash, cells, challenge)


@pytest.fixture
def framed(tmp_path):
    with AnvilProcess() as anvil:
        world = World(RpcChain(anvil.url), PRESET, extra_nodes=9)  # round 0, the appeal and its decider
        worker, run, round0 = world.start_framed(votes=lambda slot: False)  # two liars, and an honest dissenter
        start = world.chain.get_block_number()
        yield anvil, world, run, worker, round0, start


def _node(anvil, world, worker, tmp_path):
    """A party's node: its store holds the job it ran (receipt and retained trace)."""
    key = compute_node_key(bytes(worker.node.account.key))
    store = open_store(tmp_path / f"{worker.node.address}.sqlite")
    job = Job(MODEL_ID, tuple(range(worker.receipt.input_tokens)), SamplingParams(), worker.receipt.max_new_tokens, b"\x00" * 32)
    store.insert_job(worker.receipt.job_hash, job, key.address)
    store.complete_job(worker.receipt.job_hash, JobOutput(worker.receipt, worker.trace.output_tokens, encode_trace_blob(worker.trace)))
    tables = DispatcherTables(store.db)
    chainio = ChainIO(anvil.url, world.protocol.deployment, key, tables)
    duties = PartyDuties(chainio, tables, store, RetainedJobs(store, key), PartyFaults())
    return chainio, tables, duties


async def _tick(world, chainio, tables, duties, poller) -> None:
    """What the node's watcher does each tick for its seats: record new events, advance each."""
    rows = [compute_event_row(e) for e in poller.poll()]
    for row in rows:
        duties.on_event(row["name"], json.loads(row["args"]), row["audit_id"])
    tables.record_events("protocol", rows, poller.next_block)
    head = world.chain.get_block_number()
    for duty in tables.get_duties():
        await duties.advance(duty, head)


def _round0_opening(world, run, party):
    seed = bytes(world.protocol.jobs.call("getRound", run.audit_id, 0)[4])
    challenge = compute_challenge(seed, PROMPT_LEN, OUTPUT_TOKENS, LAYERS, PRESET.CHALLENGE_POSITIONS)
    return compute_opening(party.trace, party.commitment, compute_opened_cells(challenge, party.trace.num_positions))


async def test_the_worker_node_appeals_its_fail_and_after_the_overturn_hunts_nobody(framed, tmp_path):
    anvil, world, run, worker, round0, start = framed
    chainio, tables, duties = _node(anvil, world, worker, tmp_path)
    tables.insert_duty(run.audit_id, 0, 0, worker.receipt.job_hash)
    poller = EventPoller(chainio.chain, [chainio.protocol.jobs, chainio.protocol.disputes], 0)
    stakes, credit = world.stakes(), world.protocol.get_credit(worker.node.address)

    await _tick(world, chainio, tables, duties, poller)  # the node appeals its FAIL
    assert world.protocol.get_audit(run.audit_id).round == 1
    world.draw_round(run)
    world.post_members(run, [world.make_member(n) for n in world.committee(run, 1)], 1)
    while not world.protocol.get_party(run.audit_id, 1, 0)["opened"]:  # the node opens its appeal seat
        await _tick(world, chainio, tables, duties, poller)
        world.chain.mine(1)
    world.vote_members(run)
    assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.PASS

    disputes = world.protocol.disputes.web3.events
    dispute_by = world.protocol.get_round_state(run.audit_id, 1).deadlines.dispute_by
    while world.chain.get_block_number() <= dispute_by + 1:
        await _tick(world, chainio, tables, duties, poller)
        world.chain.mine(1)
    assert disputes.Contested().get_logs(from_block=start) == []  # round 0 failed it: no second round agrees, nobody to prove a liar
    assert world.stakes() == stakes
    # The appeal's PASS contradicts round 0's FAIL: settling it enters the decider (round 2), which
    # the worker's node draws itself (a party's duty: a decider nobody draws abandons the audit),
    # then staffs like the appeal: it opens its seat there.
    assert world.protocol.settle(world.outsider, run.audit_id).value is None
    assert world.protocol.get_audit(run.audit_id).round == 2
    while world.protocol.get_round_state(run.audit_id, 2).phase == Phase.DRAWING:
        await _tick(world, chainio, tables, duties, poller)
        world.chain.mine(1)
    assert world.protocol.get_round_state(run.audit_id, 2).phase == Phase.COMMITTING  # drawn (by the node: nobody else drew)
    world.post_members(run, [world.make_member(n) for n in world.committee(run, 2)], 2)
    while not world.protocol.get_party(run.audit_id, 2, 0)["opened"]:  # the node opens its decider seat
        await _tick(world, chainio, tables, duties, poller)
        world.chain.mine(1)
    world.vote_members(run)
    assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.PASS
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    assert disputes.Contested().get_logs(from_block=start) == []  # rounds 1 and 2 agree, round 0 does not: no round-0 liar
    assert world.protocol.settle(world.outsider, run.audit_id).value == spec.PASS
    after = world.stakes()
    for member in round0:  # every round-0 DISAGREE: the minority penalty, the framers' as the honest dissenter's
        assert after[member.node.address] == stakes[member.node.address] * (10_000 - PRESET.MEMBER_PENALTY_BPS) // 10_000
    assert after[worker.node.address] == stakes[worker.node.address]
    assert world.protocol.get_credit(worker.node.address) >= credit + PRESET.DISPUTE_BOND_WEI  # its bond back (overturned), and its fee


@pytest.fixture
def tied(tmp_path):
    """Round 0 of an honest job: a lazy member agrees over fabricated data (voided: adjudicated),
    a member with fabricated data disagrees, the honest third agrees: a TIE."""
    with AnvilProcess() as anvil:
        world = World(RpcChain(anvil.url), PRESET, extra_nodes=4)
        worker = world.make_worker(world.nodes[0])
        run = world.start(worker, dispatcher=world.nodes[1])
        committee = world.committee(run)
        round0 = [world.make_member(committee[0], offset=0.3), world.make_member(committee[1], offset=0.3), world.make_member(committee[2])]
        assert world.decide(run, round0, votes=lambda slot: slot != 1) == spec.PASS
        world.protocol.adjudicate(world.outsider, run.audit_id, 0, 1, _round0_opening(world, run, worker), _round0_opening(world, run, round0[0]))
        assert world.protocol.jobs.call("currentVerdict", run.audit_id) == spec.TIE
        yield anvil, world, run, worker, round0


async def test_the_worker_node_appeals_a_tie_of_its_own_job(tied, tmp_path):
    anvil, world, run, worker, round0 = tied
    chainio, tables, duties = _node(anvil, world, worker, tmp_path)
    tables.insert_duty(run.audit_id, 0, 0, worker.receipt.job_hash)
    poller = EventPoller(chainio.chain, [chainio.protocol.jobs, chainio.protocol.disputes], 0)
    await _tick(world, chainio, tables, duties, poller)
    assert world.protocol.get_audit(run.audit_id).round == 1
    assert world.protocol.jobs.call("getAuditExtra", run.audit_id)[3].lower() == worker.node.address.lower()  # the escalator


async def test_an_honest_members_node_answers_a_contest_and_collects_the_held_bond(framed, tmp_path):
    # A griefer contests the honest dissenter of round 0. Its node answers with its proofs; the
    # bond is held (the member might still be proven a liar) and its node collects it once the
    # windows have passed, before closing the seat.
    anvil, world, run, worker, round0, start = framed
    honest = round0[2]
    chainio, tables, duties = _node(anvil, world, honest, tmp_path)
    tables.insert_duty(run.audit_id, 0, 3, honest.receipt.job_hash)
    poller = EventPoller(chainio.chain, [chainio.protocol.jobs, chainio.protocol.disputes], 0)
    contest_id = world.protocol.contest(world.outsider, run.audit_id, 0, 3, [(PROMPT_LEN, LAYERS[-1])]).value
    credit = world.protocol.get_credit(honest.node.address)
    await _tick(world, chainio, tables, duties, poller)
    assert world.protocol.disputes.call("getContest", contest_id)[8]  # answered by its node
    assert world.protocol.get_credit(honest.node.address) == credit  # held
    while tables.get_duties():
        world.chain.mine(1)
        await _tick(world, chainio, tables, duties, poller)
        assert world.chain.get_block_number() < start + 3 * PRESET.DISPUTE_WINDOW_BLOCKS, "the seat never closed"
    assert world.protocol.get_credit(honest.node.address) == credit + PRESET.DISPUTE_BOND_WEI


@pytest.fixture
def vouched(tmp_path):
    with AnvilProcess() as anvil:
        world = World(RpcChain(anvil.url), PRESET, extra_nodes=4)
        worker, run, round0 = world.start_vouched_outvoted()  # colluder 1 agrees, colluder 2 and the honest member disagree: FAIL
        start = world.chain.get_block_number()
        yield anvil, world, run, worker, round0, start


@pytest.mark.parametrize("cheat_opens", [True, False], ids=["appeal-fail", "appeal-default"])
async def test_the_appeal_dissenters_nodes_hunt_the_first_round_agrees_that_vouched_for_a_cheat(vouched, tmp_path, cheat_opens):
    # Three of the five appeal members run their nodes (a majority of the seats: the quorum the
    # slash needs); the other two are driven by the test, honest. Without ``cheat_opens`` the
    # cheat never opens in the appeal (a default, to shield its partners): nobody votes there,
    # and the nodes hunt with the data their receipts committed.
    anvil, world, run, worker, round0, start = vouched
    world.protocol.escalate(world.nodes[1].account, run.audit_id)  # the dispatcher appeals
    world.draw_round(run)
    appeal = [world.make_member(n) for n in world.committee(run, 1)]
    world.post_members(run, appeal, 1)
    quorum = len(appeal) // 2 + 1
    nodes = []
    for k, member in enumerate(appeal[:quorum]):
        chainio, tables, duties = _node(anvil, world, member, tmp_path)
        tables.insert_duty(run.audit_id, 1, k + 1, member.receipt.job_hash)
        nodes.append((chainio, tables, duties, EventPoller(chainio.chain, [chainio.protocol.jobs, chainio.protocol.disputes], 0)))
    hunters = [m.node.address for m in appeal[:quorum]]
    stakes, credits = world.stakes(), sum(world.protocol.get_credit(a) for a in hunters)

    async def tick_all():
        for chainio, tables, duties, poller in nodes:
            await _tick(world, chainio, tables, duties, poller)

    if cheat_opens:
        world.open_worker(run)
        while not all(world.protocol.get_party(run.audit_id, 1, k + 1)["opening_hash"] != bytes(32) for k in range(quorum)):  # the nodes seal
            await tick_all()
            world.chain.mine(1)
        for slot in range(quorum, len(appeal)):
            world.seal_member(run, slot)
        while not all(world.protocol.get_party(run.audit_id, 1, k + 1)["opened"] for k in range(quorum)):  # every seal is in: they open
            await tick_all()
            world.chain.mine(1)
        assert all(world.protocol.get_party(run.audit_id, 1, k + 1)["vote"] == spec.DISAGREE for k in range(quorum))
        for slot in range(quorum, len(appeal)):
            world.open_member(run, slot)
        assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.FAIL
    else:
        world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
        world.protocol.draw_challenge(world.outsider, run.audit_id)
        for _ in range(PRESET.OPEN_WINDOW_BLOCKS + 1):
            await tick_all()  # the nodes wait: no worker opening to vote on
            world.chain.mine(1)
        assert world.protocol.finalize(world.outsider, run.audit_id).value == spec.WORKER_DEFAULT

    disputes = world.protocol.disputes.web3.events
    answered = set()
    dispute_by = world.protocol.get_round_state(run.audit_id, 1).deadlines.dispute_by
    while world.chain.get_block_number() <= dispute_by + PRESET.PROOF_WINDOW_BLOCKS + 1:
        await tick_all()
        for log in disputes.Contested().get_logs(from_block=start):
            contest_id, slot = log["args"]["contestId"], log["args"]["slot"]
            if slot == 1 and contest_id not in answered:  # colluder 1 answers: its proofs adjudicate it
                cells = list(zip(log["args"]["positions"], log["args"]["layers"]))
                world.protocol.answer_contest(round0[0].node.account, contest_id, cells, _round0_opening(world, run, round0[0]))
                answered.add(contest_id)
        done = world.protocol.get_party(run.audit_id, 0, 1)["slashed"] and not world.protocol.get_audit(run.audit_id).pending_contests
        held = [i for i in range(world.protocol.disputes.call("contestCount")) if world.protocol.disputes.call("getContest", i)[8]
                and not world.protocol.disputes.call("getContest", i)[9]]
        if done and not held:
            break
        world.chain.mine(1)

    contested = {(log["args"]["round"], log["args"]["slot"]) for log in disputes.Contested().get_logs(from_block=start)}
    assert contested == {(0, 1)}  # the disagrees (the hedging colluder, the honest dissenter) are never contested
    assert len(disputes.Contested().get_logs(from_block=start)) == 1  # one contest per liar: the other hunters use its answer
    assert len(disputes.Contradicted().get_logs(from_block=start)) == quorum  # colluder 1: one per appeal node
    after = world.stakes()
    colluders = [round0[0].node.address]
    assert all(after[a] == stakes[a] * (10_000 - PRESET.SLASH_FRACTION_BPS) // 10_000 for a in colluders)
    assert after[round0[1].node.address] == stakes[round0[1].node.address] and after[round0[2].node.address] == stakes[round0[2].node.address]
    rewards = sum((stakes[a] - after[a]) * PRESET.SLASH_REWARD_BPS // 10_000 for a in colluders)
    bonds = len(disputes.Contested().get_logs(from_block=start)) * PRESET.DISPUTE_BOND_WEI
    assert sum(world.protocol.get_credit(a) for a in hunters) == credits + bonds + rewards  # every bond back, and the reward
