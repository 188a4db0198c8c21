"""Sealed votes (Jobs.sealVote / openAndVote; issue 20 "no copying"), each rule replayed with an attacker's
moves against the real contracts on anvil: a member seals keccak256(0x1e ‖ seat ‖ vote ‖ opening
hash ‖ salt) with `sealVote`, and shows the preimage with `openAndVote` only once every member has
sealed or the seal window has closed. A vote cannot be read before the last seal, copied into
another seat, or changed after the others are seen; a seal never opened is a missed opening."""

from helpers.chain import reverts
from verillm.spec import settlement as spec
from verillm.spec.audit import compute_opening_hash, compute_vote_salt, compute_vote_seal, encode_opening_leaves
from verillm.spec.hashing import keccak256

from helpers.contracts import PRESET, AuditRun, replace_leaf_fingerprint


def _opened(world, nonce: int = 0) -> AuditRun:
    """An honest worker (node 0, dispatched by node 1) has opened; its three members posted honest receipts."""
    run = world.start(world.make_worker(world.nodes[0], nonce=nonce), dispatcher=world.nodes[1])
    world.post_members(run, [world.make_member(n) for n in world.committee(run)])
    world.open_worker(run)
    return run


def _mine_to(world, block: int) -> None:
    """Mine until the head is ``block``. anvil estimates gas (where the client sees a revert,
    mining nothing) with block.number == ``block``, and mines the next transaction in ``block + 1``:
    a window's last block is reached from ``last - 1``, and a closed window's TooLate is read at
    ``last + 1`` (at ``last`` the estimate passes and the mined transaction reverts undecoded)."""
    head = world.chain.get_block_number()
    assert head <= block, (head, block)
    if head < block:
        world.chain.mine(block - head)


def _deadlines(world, run: AuditRun):
    return world.protocol.get_round_state(run.audit_id).deadlines


def _open(world, run: AuditRun, slot: int, opening=None, agree=None, salt=None):
    """Member ``slot`` opens; each of ``opening``, ``agree``, ``salt`` defaults to what it sealed."""
    sealed_opening, sealed_agree, sealed_salt = run.sealed[(0, slot)]
    return world.protocol.open_and_vote(run.members[slot].node.account, run.audit_id, slot, sealed_opening if opening is None else opening,
                                        sealed_agree if agree is None else agree, sealed_salt if salt is None else salt)


def _seal_calldata(world, tx) -> bytes:
    return bytes(world.chain.w3.eth.get_transaction(tx.receipt["transactionHash"])["input"])


def _settle_and_check(world, run: AuditRun, members: list[spec.MemberRecord]) -> spec.Settlement:
    """Wait out the open window, finalize, settle; every stake, credit and the pool must move
    exactly as `verillm.spec.settlement` computes from ``members`` (round 0, worker opened)."""
    _mine_to(world, _deadlines(world, run).members_open_by + 1)
    world.protocol.finalize(world.outsider, run.audit_id)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    stakes, pool = world.stakes(), world.protocol.jobs.call("feePoolWei")
    credits = {n.address: world.protocol.get_credit(n.address) for n in world.nodes}
    record = spec.AuditRecord(run.worker.node.address, (spec.RoundRecord(True, tuple(members)),))
    expected = spec.compute_settlement(record, stakes, pool, world.preset)
    assert world.protocol.settle(world.outsider, run.audit_id).value == expected.verdict
    after = world.stakes()
    assert {a: stakes[a] - after[a] for a in stakes if stakes[a] != after[a]} == expected.slashed_wei
    assert {a: world.protocol.get_credit(a) - c for a, c in credits.items() if world.protocol.get_credit(a) != c} == {
        a: v for a, v in expected.credits_wei.items() if v}
    assert world.protocol.jobs.call("feePoolWei") == expected.fee_pool_wei
    return expected


# --- nobody reads a vote before the last seal; an opening is what was sealed ------------------------


def test_no_member_opens_before_every_member_sealed_and_an_opening_is_what_was_sealed(world):
    run = _opened(world)
    world.seal_member(run, 0)
    world.seal_member(run, 1)
    seal_by = _deadlines(world, run).members_seal_by
    with reverts("TooEarly") as early:  # member 2 has not sealed and may still: member 0's vote stays hidden
        _open(world, run, 0)
    assert list(early.value.error_args.values()) == [seal_by + 1]
    party = world.protocol.get_party(run.audit_id, 0, 1)
    assert (party["opened"], party["vote"]) == (False, spec.NO_VOTE)
    world.seal_member(run, 2)  # the last seal: openings may come at once
    opening, agree, salt = run.sealed[(0, 0)]
    other_salt = compute_vote_salt(bytes(run.members[0].node.account.key), run.audit_id, 0, 1)  # its own key, another seat's salt
    for forged in ({"agree": not agree}, {"opening": replace_leaf_fingerprint(opening, 3, 0.5)}, {"salt": other_salt}, {"salt": bytes(32)}):
        with reverts("SealMismatch"):  # the other vote, other leaves, another salt
            _open(world, run, 0, **forged)
    _open(world, run, 0)
    party = world.protocol.get_party(run.audit_id, 0, 1)
    assert (party["opened"], party["vote"], party["opening_hash"]) == (True, spec.AGREE, compute_opening_hash(opening))
    assert world.chain.get_block_number() <= seal_by  # opened inside the seal window: every member had sealed


def test_after_the_seal_window_the_sealed_open_and_a_silent_member_cannot(world):
    run = _opened(world)
    world.seal_member(run, 0)
    world.seal_member(run, 1)
    with reverts("TooEarly"):
        _open(world, run, 0)
    _mine_to(world, _deadlines(world, run).members_seal_by + 1)  # the seal window closed
    _open(world, run, 0)
    opening = world.opening(run, run.members[2])
    salt = compute_vote_salt(bytes(run.members[2].node.account.key), run.audit_id, 0, 2)
    with reverts("SealMismatch"):  # it never sealed: no preimage matches an empty seal
        world.protocol.open_and_vote(run.members[2].node.account, run.audit_id, 2, opening, world.honest_vote(run, run.members[2]), salt)
    _open(world, run, 1)
    expected = _settle_and_check(world, run, [spec.MemberRecord(m.node.address) for m in run.members[:2]]
                                 + [spec.MemberRecord(run.members[2].node.address, opened=False, vote=spec.NO_VOTE)])
    assert expected.verdict == spec.PASS and set(expected.slashed_wei) == {run.members[2].node.address}


# --- a copied seal cannot be opened ----------------------------------------------------------------


def test_a_copied_seal_cannot_be_opened_and_its_copier_is_slashed_as_a_missed_opening(world):
    run = _opened(world)
    sealed = world.seal_member(run, 0)
    copied = _seal_calldata(world, sealed)[-32:]  # member 0's seal, read from its transaction
    assert copied == world.protocol.get_party(run.audit_id, 0, 1)["opening_hash"]
    copier = run.members[1].node.account
    world.chain.transact(world.protocol.jobs, "sealVote", run.audit_id, 1, copied, sender=copier)
    world.seal_member(run, 2)
    _open(world, run, 0)  # member 0's preimage is now public: leaves, vote and salt
    opening, agree, salt = run.sealed[(0, 0)]
    with reverts("SealMismatch"):  # the seal binds member 0's seat
        world.protocol.open_and_vote(copier, run.audit_id, 1, opening, agree, salt)
    with reverts("SealMismatch"):  # nor do its own leaves open it
        world.protocol.open_and_vote(copier, run.audit_id, 1, world.opening(run, run.members[1]), agree, salt)
    _open(world, run, 2)
    with reverts("TooEarly"):  # the copier's seal is still open to its opening until membersOpenBy
        world.protocol.finalize(world.outsider, run.audit_id)
    members = [spec.MemberRecord(m.node.address) for m in run.members]
    members[1] = spec.MemberRecord(copier.address, opened=False, vote=spec.NO_VOTE)
    expected = _settle_and_check(world, run, members)
    assert expected.verdict == spec.PASS and set(expected.slashed_wei) == {copier.address}
    honest = (run.members[0].node.address, run.members[2].node.address)
    assert all(expected.credits_wei[a] >= PRESET.AUDIT_FEE_WEI for a in honest)  # paid, with a share of the copier's penalty


# --- a sealed vote cannot be changed after the others are seen --------------------------------------


def test_a_member_that_withholds_its_opening_after_seeing_the_others_is_slashed(world):
    run = _opened(world)
    for slot in range(3):  # member 2 seals a disagree against the honest worker
        world.seal_member(run, slot, vote=False if slot == 2 else None)
    _open(world, run, 0)
    _open(world, run, 1)  # two agrees: member 2 sees its disagree lose
    with reverts("SealMismatch"):  # it cannot switch to the majority
        _open(world, run, 2, agree=True)
    stakes = world.stakes()
    honest = [m.node.address for m in run.members[:2]]
    expected = _settle_and_check(world, run, [spec.MemberRecord(a) for a in honest]
                                 + [spec.MemberRecord(run.members[2].node.address, opened=False, vote=spec.NO_VOTE)])
    withheld = run.members[2].node.address
    assert expected.verdict == spec.PASS and set(expected.slashed_wei) == {withheld}
    assert expected.slashed_wei[withheld] == stakes[withheld] * PRESET.MEMBER_PENALTY_BPS // 10_000 > 0
    assert all(world.stakes()[a] == stakes[a] for a in honest + [run.worker.node.address])  # the honest lose nothing
    # A penalty is not a slash: a member left at or above the minimum stake keeps its weight in
    # this epoch's draws (an outvoted honest minority is not dropped from them); one left below
    # sits out every draw seeded from the penalty on (Registry.outBlock).
    out = world.protocol.registry.call("outBlock", withheld, world.protocol.registry.call("currentEpoch"))
    assert (out == 0) == (world.stakes()[withheld] >= PRESET.MIN_STAKE_WEI), (out, world.stakes()[withheld])


# --- the seal hides the vote ---------------------------------------------------------------------


def _jobs_storage_written(world, tx) -> dict:
    """The Jobs storage slots ``tx`` wrote, and their new values (anvil's prestate tracer)."""
    tx_hash = "0x" + bytes(tx.receipt["transactionHash"]).hex()
    trace = world.chain.w3.provider.make_request("debug_traceTransaction", [tx_hash, {"tracer": "prestateTracer", "tracerConfig": {"diffMode": True}}])
    post = {a.lower(): v for a, v in trace["result"]["post"].items()}
    return post[world.protocol.jobs.address.lower()]["storage"]


def _seal_as(world, run: AuditRun, agree: bool):
    """From a snapshot: member 0 seals ``agree`` (the same leaves and salt), then members 1 and 2
    seal; return what is public before any opening, and revert."""
    snapshot = world.chain.snapshot()
    try:
        tx = world.seal_member(run, 0, vote=agree)
        world.seal_member(run, 1)
        world.seal_member(run, 2)
        parties = [world.protocol.get_party(run.audit_id, 0, slot) for slot in (1, 2, 3)]
        state = world.protocol.get_round_state(run.audit_id)
        logs = [(tuple(bytes(t) for t in log["topics"]), bytes(log["data"])) for log in tx.receipt["logs"]]
        return {"calldata": _seal_calldata(world, tx), "storage": _jobs_storage_written(world, tx), "parties": parties, "logs": logs,
                "state": state, "verdict": world.protocol.jobs.call("currentVerdict", run.audit_id), "block": tx.receipt["blockNumber"]}
    finally:
        world.chain.revert(snapshot)
        run.sealed.clear()


def test_the_seal_hides_the_vote_until_the_opening(world):
    run = _opened(world)
    agree, disagree = _seal_as(world, run, True), _seal_as(world, run, False)
    assert agree["block"] == disagree["block"]
    seals = [view["calldata"][-32:] for view in (agree, disagree)]
    assert seals[0] != seals[1]
    opening_hash = compute_opening_hash(world.opening(run, run.members[0]))
    salt_free = {compute_vote_seal(run.audit_id, 0, 0, vote, opening_hash, bytes(32)) for vote in (True, False)}
    assert not salt_free & set(seals) and opening_hash not in seals  # nobody without the salt tries both votes
    # Everything public differs only by the seal itself: calldata, storage written, events, views.
    assert agree["calldata"][:-32] == disagree["calldata"][:-32]
    differing = {slot for slot in agree["storage"].keys() | disagree["storage"].keys() if agree["storage"].get(slot) != disagree["storage"].get(slot)}
    assert [(agree["storage"][s], disagree["storage"][s]) for s in differing] == [("0x" + seals[0].hex(), "0x" + seals[1].hex())]
    assert agree["logs"] == disagree["logs"]
    assert (agree["parties"][0]["opening_hash"], disagree["parties"][0]["opening_hash"]) == (seals[0], seals[1])
    assert [dict(p, opening_hash=None) for p in agree["parties"]] == [dict(p, opening_hash=None) for p in disagree["parties"]]
    assert all((p["opened"], p["vote"]) == (False, spec.NO_VOTE) for p in agree["parties"])
    assert (agree["state"], agree["verdict"]) == (disagree["state"], disagree["verdict"]) and agree["state"].seals == 3


def test_compute_vote_seal_is_the_contract_s_hash(world):
    """A seal computed in Python (the layout docs/protocol.md states) and posted raw is opened by
    the contract's own hashing of the preimage."""
    run = _opened(world)
    for slot in (0, 2):
        world.seal_member(run, slot)
    member = run.members[1]  # slot 1: the seat's byte is not zero
    opening, salt = world.opening(run, member), keccak256(b"a salt only member 1 knows")
    leaves = encode_opening_leaves(opening)
    seal = compute_vote_seal(run.audit_id, 0, 1, True, keccak256(leaves), salt)
    assert seal == keccak256(b"\x1e" + run.audit_id.to_bytes(8, "big") + bytes([0, 1, 1]) + keccak256(leaves) + salt)
    jobs = world.protocol.jobs
    world.chain.transact(jobs, "sealVote", run.audit_id, 1, seal, sender=member.node.account)
    world.chain.transact(jobs, "openAndVote", run.audit_id, 1, leaves, True, salt, sender=member.node.account)
    party = world.protocol.get_party(run.audit_id, 0, 2)
    assert (party["opened"], party["vote"], party["opening_hash"]) == (True, spec.AGREE, keccak256(leaves))


# --- the windows ------------------------------------------------------------------------------------


def test_seal_windows_worker_first_once_and_by_members_seal_by(world):
    run = world.start(world.make_worker(world.nodes[0]), dispatcher=world.nodes[1])
    world.post_members(run, [world.make_member(n) for n in world.committee(run)])
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    world.protocol.draw_challenge(world.outsider, run.audit_id)
    with reverts("WorkerNotOpened"):  # nothing to vote on yet
        world.seal_member(run, 0)
    world.protocol.open_worker(run.worker.node.account, run.audit_id, world.opening(run, run.worker))
    world.seal_member(run, 0)
    with reverts("AlreadyOpened"):  # one seal per seat: no re-sealing after a peek
        world.seal_member(run, 0, vote=False)
    seal_by = _deadlines(world, run).members_seal_by
    _mine_to(world, seal_by - 1)
    last = world.seal_member(run, 1)  # the window's last block
    assert last.receipt["blockNumber"] == seal_by
    _mine_to(world, seal_by + 1)
    with reverts("TooLate") as late:
        world.seal_member(run, 2)
    assert list(late.value.error_args.values()) == [seal_by + 1]


def test_open_and_finalize_windows(world):
    late = _opened(world, nonce=1)
    for slot in range(3):
        world.seal_member(late, slot)
    _open(world, late, 0)
    _open(world, late, 1)
    open_by = _deadlines(world, late).members_open_by
    _mine_to(world, open_by)
    with reverts("TooEarly") as early:  # member 2's seal is unopened and its window's last block not past
        world.protocol.finalize(world.outsider, late.audit_id)
    assert list(early.value.error_args.values()) == [open_by + 1]
    _mine_to(world, open_by + 1)
    with reverts("TooLate") as too_late:
        _open(world, late, 2)
    assert list(too_late.value.error_args.values()) == [open_by + 1]
    world.protocol.finalize(world.outsider, late.audit_id)
    assert world.protocol.get_party(late.audit_id, 0, 3)["opened"] is False
    # An audit whose members all opened is decided at once, long before its window ends.
    quick = _opened(world, nonce=2)
    world.vote_members(quick)
    decided = world.protocol.finalize(world.outsider, quick.audit_id)
    assert decided.value == spec.PASS and decided.receipt["blockNumber"] < _deadlines(world, quick).members_open_by
