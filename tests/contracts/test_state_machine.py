"""The audit state machine of docs/protocol.md §12, walked against the contract: in every state an
audit can reach (each phase, before, inside and after each of its windows, with a claim standing
or answered, escalated, lapsed), every permissionless call is tried in the next block, and the
calls the contract accepts must be exactly those `verillm.spec.audit.compute_due_steps` names (the
twin the node, the drive command and the fuzzer act on). A call made in another phase than its
row of `TRANSITIONS` must revert `UnexpectedPhase(auditId, actual, expected)` with the codes of
`spec.audit.Phase`, and every transition must leave the round in a phase its row allows.

After the worker opened, the walk also tries each member's own two calls (rows `seal_vote` and
`open_and_vote`: not permissionless, so outside `compute_due_steps`) and checks them against their
rows' windows: a member seals once, by members_seal_by; it opens what it sealed only once every
member sealed or after members_seal_by, by members_open_by; and finalize is due only when every
member opened or after members_open_by."""

from eth_abi import decode as abi_decode
from eth_utils import function_abi_to_4byte_selector, keccak
from web3.exceptions import ContractCustomError, ContractLogicError

from verillm.spec import settlement as spec
from verillm.spec.audit import (TRANSITIONS, Phase, compute_due_steps, compute_opening_hash, compute_round_deadlines, compute_vote_salt,
                                compute_vote_seal, encode_opening_leaves)

from verillm.spec.deadlines import compute_round_deadline
from helpers.contracts import PRESET, AuditRun

PERMISSIONLESS = {t.call: t for t in TRANSITIONS if t.permissionless}
CONTRACT_NAMES = {"draw_round": "drawRound", "lapse": "lapse", "replace_missing": "replaceMissing", "slash_undelivered": "slashUndelivered",
                  "draw_challenge": "drawChallenge", "finalize": "finalize", "settle": "settle"}
UNEXPECTED_PHASE = keccak(text="UnexpectedPhase(uint256,uint8,uint8)")[:4]
TOO_EARLY = keccak(text="TooEarly(uint256)")[:4]


def _accepts(world, call: str, audit_id: int) -> tuple[bool, bytes]:
    """Whether ``call`` on ``audit_id`` runs in the next block (eth_call on the pending block);
    the revert data otherwise."""
    handle = world.protocol.delivery if call == "slash_undelivered" else world.protocol.jobs
    item = next(i for i in handle.web3.abi if i.get("type") == "function" and i["name"] == CONTRACT_NAMES[call])
    data = "0x" + (function_abi_to_4byte_selector(item) + audit_id.to_bytes(32, "big")).hex()
    try:
        world.chain.w3.eth.call({"from": world.outsider.address, "to": handle.address, "data": data}, "pending")
    except (ContractCustomError, ContractLogicError) as exc:
        raw = exc.data if isinstance(exc.data, str) else exc.args[0]
        return False, bytes.fromhex(str(raw)[2:]) if str(raw).startswith("0x") else b""
    return True, b""


def _check(world, audit_id: int, label: str, walked: set) -> tuple:
    """The contract accepts exactly the due steps; a call of another phase reverts UnexpectedPhase."""
    state = world.protocol.get_round_state(audit_id)
    head = world.chain.get_block_number()
    due = set(compute_due_steps(state, head + 1))
    accepted = set()
    for call, row in PERMISSIONLESS.items():
        ok, error = _accepts(world, call, audit_id)
        if ok:
            accepted.add(call)
        elif row.phase != state.phase and call != "slash_undelivered":  # Delivery asks Jobs: the same guard
            assert error[:4] == UNEXPECTED_PHASE, (label, call, error.hex())
            got_id, actual, expected = abi_decode(["uint256", "uint8", "uint8"], error[4:])
            assert (got_id, actual, expected) == (audit_id, state.phase, row.phase), (label, call)
    assert accepted == due, f"{label}: the contract accepts {sorted(accepted)}, compute_due_steps says {sorted(due)} ({state})"
    _check_phase_deadline(world, state, audit_id, head + 1, due, label)
    walked.add((state.phase, tuple(sorted(due))))
    return state


DEADLINE_FIELDS = ("entered_block", "draw_after", "draw_by", "commit_by", "challenge_after", "worker_open_by", "members_seal_by", "members_open_by",
                   "verdict_block", "dispute_by")  # Jobs `Deadlines`, in its order
TIMEOUT_CALLS = {Phase.DRAWING: "lapse", Phase.COMMITTING: "replace_missing", Phase.DECIDED: "settle"}


def _check_phase_deadline(world, state, audit_id: int, block: int, due: set, label: str) -> None:
    """The deadline the status route shows for the round's phase (`spec.deadlines.compute_round_deadline`)
    is one Jobs.getDeadlines returns (revealBy: drawBy + the grace; a claim's: getRoundState's publish
    deadline), and the contract enforces it: past it a permissionless call moves the round on (unless a
    contest is pending), at or before it the phase's timeout call is refused."""
    deadline = compute_round_deadline(state)
    if deadline is None:
        assert state.phase in (Phase.SETTLED, Phase.ABANDONED, Phase.LAPSED, Phase.NONE), (label, state)
        return
    phase, raw = world.protocol.jobs.call("getDeadlines", audit_id, state.round)
    onchain = dict(zip(DEADLINE_FIELDS, raw))
    expected = {"reveal_by": onchain["draw_by"] + PRESET.PRIVATE_REVEAL_GRACE_BLOCKS, "round_draw_by": onchain["draw_by"],
                "publish_by": state.publish_deadline}.get(deadline.name, onchain.get(deadline.name))
    assert phase == state.phase and deadline.block == expected, (label, deadline, onchain)
    if block > deadline.block and state.pending_contests == 0:
        assert due, f"{label}: past {deadline} nothing moves the round on"
    elif block <= deadline.block:
        timeout = "slash_undelivered" if deadline.name == "publish_by" else TIMEOUT_CALLS.get(state.phase)
        assert timeout is None or timeout not in due, (label, deadline, due)


def _member_accepts(world, member, function: str, args: list) -> tuple[bool, bytes]:
    """Whether member ``member`` may call Jobs.``function(*args)`` in the next block; the revert data otherwise."""
    jobs = world.protocol.jobs
    data = jobs.web3.encode_abi(function, args=args)
    try:
        world.chain.w3.eth.call({"from": member.node.address, "to": jobs.address, "data": data}, "pending")
    except (ContractCustomError, ContractLogicError) as exc:
        raw = str(exc.data if isinstance(exc.data, str) else exc.args[0])
        return False, bytes.fromhex(raw[2:]) if raw.startswith("0x") else b""
    return True, b""


def _check_members(world, run: AuditRun, label: str) -> None:
    """Each member may seal and open exactly in its rows' windows (seal_vote, open_and_vote), with
    the seal and salt `World.seal_member` uses (its honest vote)."""
    state = world.protocol.get_round_state(run.audit_id)
    block, d = world.chain.get_block_number() + 1, state.deadlines
    sealed_count = 0
    for slot, member in enumerate(run.members):
        party = world.protocol.get_party(run.audit_id, state.round, slot + 1)
        sealed = party["opened"] or party["opening_hash"] != bytes(32)  # the seal until it opens
        sealed_count += sealed
        opening, agree = world.opening(run, member), world.honest_vote(run, member)
        salt = compute_vote_salt(bytes(member.node.account.key), run.audit_id, state.round, slot)
        seal = compute_vote_seal(run.audit_id, state.round, slot, agree, compute_opening_hash(opening), salt)
        may_seal = state.worker_opened and not sealed and block <= d.members_seal_by
        all_sealed_or_late = state.seals == state.members or block > d.members_seal_by
        may_open = sealed and not party["opened"] and all_sealed_or_late and block <= d.members_open_by
        ok, _ = _member_accepts(world, member, "sealVote", [run.audit_id, slot, seal])
        assert ok == may_seal, (label, slot, "sealVote", state)
        ok, error = _member_accepts(world, member, "openAndVote", [run.audit_id, slot, encode_opening_leaves(opening), agree, salt])
        assert ok == may_open, (label, slot, "openAndVote", state)
        if sealed and not all_sealed_or_late:  # its own seal in, another's missing: it must wait
            assert error[:4] == TOO_EARLY, (label, slot, error.hex())
    assert state.seals == sealed_count, (label, state)


def _opening(world, run: AuditRun, label: str, walked: set, finalize: bool):
    """`_check` and `_check_members` in an opening state after the worker opened; finalize is due
    (and accepted) exactly when ``finalize`` says: every member opened, or past members_open_by."""
    state = _check(world, run.audit_id, f"opening, {label}", walked)
    assert state.phase == Phase.OPENING and state.worker_opened, (label, state)
    assert ("finalize" in compute_due_steps(state, world.chain.get_block_number() + 1)) == finalize, (label, state)
    _check_members(world, run, label)
    return state


def _deadlines_match(world, audit_id: int, round_index: int) -> None:
    """Jobs' deadlines are spec.audit.compute_round_deadlines over the blocks the round recorded."""
    got = world.protocol.get_round_state(audit_id, round_index).deadlines
    _, commit, ready, verdict, *_ = world.protocol.jobs.call("getRound", audit_id, round_index)
    assert got == compute_round_deadlines(got.entered_block, commit, ready, verdict, PRESET)


def _to(world, block: int) -> None:
    """Mine to ``block`` (the head): the next block is block + 1."""
    head = world.chain.get_block_number()
    assert head <= block, (head, block)
    world.chain.mine(block - head)


def test_every_state_accepts_exactly_the_due_calls_and_every_other_call_names_its_phase(world):
    walked: set = set()
    worker = world.make_worker(world.nodes[0])
    run = world.start(worker, dispatcher=world.nodes[1], draw=False)
    a = run.audit_id
    d = _check(world, a, "drawing, seed block not mined", walked).deadlines
    _to(world, d.draw_after)
    _check(world, a, "drawing, in the draw window", walked)
    snapshot = world.chain.snapshot()
    _to(world, d.draw_by)
    _check(world, a, "drawing, draw window over", walked)
    world.chain.mine(1)  # a transaction's gas is estimated at the head: one block more for a "> deadline" call
    world.protocol.lapse(world.outsider, a)
    assert _check(world, a, "round 0 lapsed: abandoned", walked).phase == Phase.ABANDONED
    world.chain.revert(snapshot)
    world.chain.mine(1)
    world.protocol.draw_round(world.outsider, a)
    d = _check(world, a, "committing", walked).deadlines
    _deadlines_match(world, a, 0)
    members = [world.make_member(n) for n in world.committee(run)]
    snapshot = world.chain.snapshot()
    _to(world, d.commit_by)
    _check(world, a, "committing, deadline passed, no claim", walked)
    world.chain.revert(snapshot)
    snapshot = world.chain.snapshot()
    publish_by = world.protocol.claim_undelivered(world.committee(run)[0].account, a, 0).value
    _check(world, a, "committing, claim window open", walked)
    _to(world, publish_by)
    state = _check(world, a, "committing, claim unanswered", walked)
    assert state.publish_deadline == publish_by and not state.published
    _to(world, state.deadlines.commit_by)
    _check(world, a, "committing, claim standing past the commit deadline: no redraw", walked)
    world.chain.mine(1)
    world.protocol.slash_undelivered(world.outsider, a)
    assert _check(world, a, "decided by the worker's default", walked).phase == Phase.DECIDED
    world.chain.revert(snapshot)
    world.post_members(run, members)
    d = _check(world, a, "opening, challenge seed block not mined", walked).deadlines
    _deadlines_match(world, a, 0)
    _to(world, d.challenge_after)
    _check(world, a, "opening, challenge window", walked)
    snapshot = world.chain.snapshot()
    _to(world, d.worker_open_by)
    _check(world, a, "opening, the worker silent past its window", walked)
    world.chain.revert(snapshot)
    world.open_worker(run)
    d = _opening(world, run, "the worker opened, members' seals due", walked, finalize=False).deadlines
    assert d.worker_open_by < d.members_seal_by < d.members_open_by
    _deadlines_match(world, a, 0)
    world.seal_member(run, 0)
    assert _opening(world, run, "one seal in", walked, finalize=False).seals == 1
    snapshot = world.chain.snapshot()  # the last member never seals
    for slot in range(1, len(members) - 1):
        world.seal_member(run, slot)
    _to(world, d.members_seal_by - 1)
    assert _opening(world, run, "a seal missing, the seal window's last block: nobody opens", walked, finalize=False).seals == len(members) - 1
    _to(world, d.members_seal_by)
    _opening(world, run, "a seal missing, past the seal window: the seals open, no late seal", walked, finalize=False)
    world.chain.mine(1)  # a transaction's gas is estimated at the head: one block more for a "> deadline" call
    for slot in range(len(members) - 1):
        world.open_member(run, slot)
    assert _opening(world, run, "every seal opened, a member silent", walked, finalize=False).opens == len(members) - 1
    _to(world, d.members_open_by - 1)
    _opening(world, run, "a member silent, the open window's last block", walked, finalize=False)
    _to(world, d.members_open_by)
    _opening(world, run, "a member silent past the open window", walked, finalize=True)
    world.chain.revert(snapshot)
    for slot in range(1, len(members)):
        world.seal_member(run, slot)
    state = _opening(world, run, "every member sealed: the openings due at once", walked, finalize=False)
    assert (state.seals, state.opens) == (len(members), 0)
    world.open_member(run, 0)
    assert _opening(world, run, "one vote opened", walked, finalize=False).opens == 1
    for slot in range(1, len(members)):
        world.open_member(run, slot)
    assert _opening(world, run, "every vote opened", walked, finalize=True).opens == len(members)
    world.protocol.finalize(world.outsider, a)
    d = _check(world, a, "decided, dispute window", walked).deadlines
    _deadlines_match(world, a, 0)
    snapshot = world.chain.snapshot()
    world.protocol.escalate(world.nodes[1].account, a)  # the dispatcher: standing (issue 34)
    d1 = _check(world, a, "escalated: round 1 drawing", walked).deadlines
    _to(world, d1.draw_by)
    _check(world, a, "round 1 undrawn past its window", walked)
    world.chain.mine(1)
    world.protocol.lapse(world.outsider, a)
    assert world.protocol.get_round_state(a, 1).phase == Phase.LAPSED  # terminal, not ESCALATING for ever
    _check(world, a, "round 1 lapsed: round 0 settles", walked)
    world.chain.revert(snapshot)
    _to(world, d.dispute_by)
    _check(world, a, "decided, dispute window over", walked)
    world.chain.mine(1)
    assert world.protocol.settle(world.outsider, a).value == spec.PASS
    _check(world, a, "settled", walked)
    # every phase of the table was walked, each with its due call and without
    assert {p for p, _ in walked} >= {Phase.DRAWING, Phase.COMMITTING, Phase.OPENING, Phase.DECIDED, Phase.SETTLED, Phase.ABANDONED}
    assert {s for _, due in walked for s in due} == set(PERMISSIONLESS)


def test_every_row_of_the_table_leads_where_it_says(world):
    """Each transition's resulting phase is one its row of TRANSITIONS lists (§12)."""
    rows = {(t.phase, t.call): t.to for t in TRANSITIONS}
    run = world.start(world.make_worker(world.nodes[0], nonce=3), dispatcher=world.nodes[1], draw=False)
    a = run.audit_id

    def step(call, *args, **kw):
        before = world.protocol.get_round_state(a).phase
        getattr(world.protocol, call)(*args, **kw)
        after = world.protocol.get_round_state(a, world.protocol.get_round_state(a).round if call != "lapse" else None).phase
        assert after in rows[(before, call)] or (call == "post_committee_receipt" and after in (Phase.COMMITTING, Phase.OPENING)), \
            (call, before, after)

    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    step("draw_round", world.outsider, a)
    members = [world.make_member(n) for n in world.committee(run)]
    run.members = members
    for slot, member in enumerate(members):
        step("post_committee_receipt", world.outsider, a, slot, member.receipt)
    world.chain.mine(PRESET.AUDIT_DRAW_DELAY_BLOCKS + 1)
    step("draw_challenge", world.outsider, a)
    step("open_worker", run.worker.node.account, a, world.opening(run, run.worker))
    salts = [compute_vote_salt(bytes(m.node.account.key), a, 0, slot) for slot, m in enumerate(members)]
    for slot, member in enumerate(members):
        step("seal_vote", member.node.account, a, 0, slot, world.opening(run, member), True, salts[slot])
    for slot, member in enumerate(members):
        step("open_and_vote", member.node.account, a, slot, world.opening(run, member), True, salts[slot])
    step("finalize", world.outsider, a)
    world.chain.mine(PRESET.DISPUTE_WINDOW_BLOCKS + 1)
    step("settle", world.outsider, a)
    assert world.protocol.get_audit(a).phase == Phase.SETTLED


def test_a_private_round_accepts_exactly_the_due_calls_and_falls_back_to_a_public_draw(world):
    """A first round its dispatcher committed to draw privately: nobody else can draw it in its
    window (only `reveal_round`, a party's step); past it, `lapse` slashes the dispatcher and the
    round is entered again for a public draw; a reveal leads where its row says."""
    walked: set = set()
    rows = {(t.phase, t.call): t.to for t in TRANSITIONS}
    secret = b"\x5e" * 32
    run = world.start(world.make_worker(world.nodes[0], nonce=4), dispatcher=world.nodes[1], secret=secret)
    a = run.audit_id
    d = _check(world, a, "private drawing, seed block not mined", walked).deadlines
    assert world.protocol.get_round_state(a).private_draw
    _to(world, d.draw_after)
    _check(world, a, "private drawing, in the window: nothing permissionless", walked)
    snapshot = world.chain.snapshot()
    members = [world.make_member(n) for n in world.preview(run, secret)]
    world.reveal(run, world.nodes[1], secret, members)
    assert world.protocol.get_round_state(a).phase in rows[(Phase.DRAWING, "reveal_round")]
    _check(world, a, "revealed with every receipt: opening", walked)
    world.chain.revert(snapshot)
    _to(world, d.draw_by)
    _check(world, a, "private drawing, window over: the late reveal's grace, nothing permissionless", walked)
    _to(world, d.reveal_by)
    _check(world, a, "private drawing, grace over", walked)
    world.chain.mine(1)
    world.protocol.lapse(world.outsider, a)
    state = _check(world, a, "private draw missed: drawing publicly, seed block not mined", walked)
    assert state.phase in rows[(Phase.DRAWING, "lapse")] and not state.private_draw
    assert not state.receipt_known  # the private start kept the worker's receipt back
    _to(world, state.deadlines.draw_after)
    _check(world, a, "fallback: public draw window, the receipt not shown: nothing permissionless", walked)
    world.protocol.supply_receipt(world.outsider, a, run.worker.receipt)
    assert world.protocol.get_round_state(a).phase in rows[(Phase.DRAWING, "supply_receipt")]
    _check(world, a, "fallback: public draw window, the receipt shown", walked)
    world.chain.mine(1)
    world.protocol.draw_round(world.outsider, a)
    assert _check(world, a, "fallback drawn", walked).phase == Phase.COMMITTING
