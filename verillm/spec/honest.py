"""What a member votes, when a vote is a lie, and when a round deserves escalation. Pure.

A member votes on the worker from the worker's opened leaves and its own: "agree" when every
opened cell is within the model's on-chain thresholds and every output token within its
sampling margin (`is_onchain_agreement`, what `Disputes.adjudicate` re-runs), and — a check
the contract cannot run because it needs the worker's output length and budget — the output
did not stop early unless the member's own sampler would stop there too.

A vote is provably a lie (`Disputes.adjudicate` slashes it) only when the member voted
"agree" while the on-chain comparison over the worker's posted leaves fails. A "disagree" is
never adjudicated: it may rest on the stop rule, which the contract cannot run (an honest
member that caught a truncated output votes "disagree" although every opened cell passes); a
false "disagree" is a minority vote, settled by the vote or by escalation — except after an
appeal: once the appeal round decided PASS and the first round's majority passed too (two rounds
agreeing), a first-round member whose posted leaves fail the
cell test on the appeal cells (the token cells every round checks) is a provable liar whatever
it voted (`compute_hunt_targets`: which members the worker's node hunts, and on which cells).
Symmetrically, once the appeal round decided FAIL (or the worker's default) and the first
round's majority failed too, a first-round
member that voted "agree" and whose posted leaves fail on those cells against the leaves of a
majority of the appeal's seats is a provable liar (`Disputes.adjudicateAcrossRounds`, one count
per appeal seat; `compute_vouch_targets`: which members an appeal seat's node hunts, and on
which cells). After an appeal that overturned the first round, nobody is hunted: one round's
votes against another's convict nobody in full (Proportionality, docs/protocol.md §12); the
members the final verdict contradicts take the minority penalty at settlement.

Who appeals (`Disputes.escalate`, standing): the worker's node appeals a FAIL or a TIE of its own
job (`is_worker_appeal_warranted`: its data are honest, so a FAIL is the committee's and a TIE
leaves honest work unverified); the dispatcher's node when proven data contradict the verdict
(`is_escalation_warranted`).
"""

from collections.abc import Mapping

from verillm.spec.audit import (OnchainModel, compute_appeal_cells, compute_cell_squared_error, compute_f32_bits, is_cell_within,
                                is_onchain_agreement)
from verillm.spec.compare import is_stopped_early
from verillm.spec.settlement import AGREE, DISAGREE, FAIL, PASS, TIE, WORKER_DEFAULT
from verillm.spec.types import Leaf
from verillm.spec.constants import FLAG_NEXT_WITHIN_MARGIN, FLAG_STOP_WITHIN_MARGIN, MAX_CONTEST_CELLS

Cells = Mapping[tuple[int, int], Leaf]


def is_early_stop_unjustified(member: Cells, model: OnchainModel, prompt_len: int, output_tokens: tuple[int, ...],
                              max_new_tokens: int, stop_tokens: tuple[int, ...], member_output: tuple[int, ...]) -> bool:
    """Return whether the output stopped early while the member's sampler would not stop there."""
    if not is_stopped_early(output_tokens, max_new_tokens, stop_tokens):
        return False
    final = member.get((prompt_len + len(output_tokens) - 1, model.committed_layers[-1]))
    would_stop = bool(member_output and member_output[0] in stop_tokens) or bool(final is not None and final.flags & FLAG_STOP_WITHIN_MARGIN)
    return not would_stop


def compute_member_vote(worker: Cells, member: Cells, model: OnchainModel, prompt_len: int, output_tokens: tuple[int, ...],
                        max_new_tokens: int, stop_tokens: tuple[int, ...], member_output: tuple[int, ...]) -> bool:
    """Return an honest member's vote: True = agree with the worker."""
    if not is_onchain_agreement(worker, member, model, prompt_len, len(output_tokens)):
        return False
    return not is_early_stop_unjustified(member, model, prompt_len, output_tokens, max_new_tokens, stop_tokens, member_output)


def is_provable_lie(vote: int, onchain_agrees: bool, full_vote_agrees: bool) -> bool:
    """Return whether adjudicating this vote slashes the member and is right to.

    ``onchain_agrees``: the contract's comparison over the worker's full opening;
    ``full_vote_agrees``: `compute_member_vote` over the same leaves (never looser).
    """
    del full_vote_agrees  # a "disagree" is never adjudicated on-chain (see the module note)
    return vote == AGREE and not onchain_agrees


def is_escalation_warranted(verdict: int, proven_agreements: list[bool]) -> bool:
    """Return whether a first round's verdict should go to a larger committee.

    ``proven_agreements``: for each member whose opening was proven against its root, whether
    its data agree with the worker (`compute_member_vote`). A failing verdict while some
    proven member computed the same as the worker means the committee is split on real data:
    colluding members, or a broken one — a larger committee decides. A PASS is escalated when
    most proven members' own data contradict it (a colluding majority outvoted them).
    """
    if verdict == PASS:
        return bool(proven_agreements) and 2 * sum(proven_agreements) < len(proven_agreements)
    return verdict in (FAIL, TIE) and any(proven_agreements)


def is_worker_appeal_warranted(verdict: int) -> bool:
    """Return whether an honest worker's node appeals its own first round's verdict: a FAIL (its
    data are honest: the committee lied or erred) or a TIE (honest work left unverified, e.g. a
    lazy "agree" voided as a proven lie against a false "disagree"; a decisive appeal refunds the
    bond, and every first-round vote the final verdict contradicts takes the minority penalty).
    Never a PASS or the worker's own default."""
    return verdict in (FAIL, TIE)


def compute_lie_cells(worker: Cells, member: Cells, model: OnchainModel, prompt_len: int, output_tokens: int) -> tuple[tuple[int, int], ...]:
    """Return the appeal cells where ``member``'s leaf fails the on-chain cell test against
    ``worker``'s (Disputes._compare per cell: outside the layer's band, or its token not flagged
    within the margin), sorted, at most MAX_CONTEST_CELLS: enough for one contest and one
    adjudication. Empty when the member's data pass every appeal cell — an honest "disagree" on
    honest data (the stop rule) is never hunted. A cell either side lacks is skipped."""
    slot = len(model.committed_layers) - 1
    failing = []
    for cell in sorted(compute_appeal_cells(prompt_len, output_tokens, model.committed_layers)):
        w, m = worker.get(cell), member.get(cell)
        if w is None or m is None:
            continue
        sum_sq = compute_cell_squared_error([compute_f32_bits(v) for v in w.fingerprint], [compute_f32_bits(v) for v in m.fingerprint])
        if not is_cell_within(sum_sq, model.fingerprint_dims, model.max_cell_error_ppb[slot]) or not m.flags & FLAG_NEXT_WITHIN_MARGIN:
            failing.append(cell)
    return tuple(failing[:MAX_CONTEST_CELLS])


def compute_hunt_targets(appeal_verdict: int, worker: Cells, members: Mapping[int, Cells], model: OnchainModel,
                         prompt_len: int, output_tokens: int, *, first_majority: int) -> dict[int, tuple[tuple[int, int], ...]]:
    """Return, for each first-round member slot to hunt, the cells to contest and adjudicate it on.

    Only after the appeal round decided PASS (the worker's data found honest) of a first round
    whose majority (``first_majority``, `settlement.compute_majority`) passed too — after an
    overturned FAIL or TIE, `Disputes.adjudicate` reverts `NoFault` on a "disagree", so a contest
    would only cost its bond —, and only members
    whose posted leaves fail there (`compute_lie_cells`): ``worker`` is the worker's own leaves,
    ``members`` each first-round member's leaves as posted in its `openAndVote`, by party slot.
    A contest the member answers makes the hunter whole only if the adjudication then slashes
    it, so nobody whose data pass is ever contested."""
    if appeal_verdict != PASS or first_majority != PASS:
        return {}
    targets = {slot: compute_lie_cells(worker, cells, model, prompt_len, output_tokens) for slot, cells in sorted(members.items())}
    return {slot: cells for slot, cells in targets.items() if cells}


def is_cell_contradicted(reference: Leaf, member: Leaf, model: OnchainModel) -> bool:
    """Return whether ``member``'s last-layer leaf fails against ``reference``'s, as
    Disputes.adjudicateAcrossRounds judges one cell: outside the last layer's band; with a band of
    0 (exact mode) any differing bit, the flags included."""
    band = model.max_cell_error_ppb[len(model.committed_layers) - 1]
    sum_sq = compute_cell_squared_error([compute_f32_bits(v) for v in reference.fingerprint], [compute_f32_bits(v) for v in member.fingerprint])
    return not is_cell_within(sum_sq, model.fingerprint_dims, band) or (band == 0 and reference.flags != member.flags)


def compute_vouch_targets(appeal_verdict: int, own_vote: int, own: Cells, members: Mapping[int, Cells], votes: Mapping[int, int],
                          model: OnchainModel, prompt_len: int, output_tokens: int, *,
                          first_majority: int) -> dict[int, tuple[tuple[int, int], ...]]:
    """Return, for each first-round member slot an appeal member hunts, the cells to contest
    and adjudicate it on (`Disputes.adjudicateAcrossRounds`; its own data are the reference the
    contract compares with).

    Only after the appeal round decided FAIL, by a node that voted "disagree" in it, or the
    worker's default, by any node of the appeal (a cheat that does not open there shields no
    partner), and only when the first round's majority (``first_majority``) failed the worker
    too (two rounds against the member; after an overturned PASS or TIE `adjudicateAcrossRounds`
    reverts `NoFault`), only members that voted "agree"
    (``votes``, by party slot: an honest "disagree" the appeal upheld is never hunted) and whose
    posted leaves (``members``) fail against ``own`` on the appeal cells (`is_cell_contradicted`),
    sorted, at most MAX_CONTEST_CELLS."""
    if appeal_verdict not in (FAIL, WORKER_DEFAULT) or (appeal_verdict == FAIL and own_vote != DISAGREE) or first_majority != FAIL:
        return {}
    targets = {}
    for slot, cells in sorted(members.items()):
        if votes.get(slot) != AGREE:
            continue
        common = [c for c in sorted(compute_appeal_cells(prompt_len, output_tokens, model.committed_layers)) if c in own and c in cells]
        failing = [c for c in common if is_cell_contradicted(own[c], cells[c], model)]
        if failing:
            targets[slot] = tuple(failing[:MAX_CONTEST_CELLS])
    return targets


def is_hunt_in_time(head: int, dispute_by: int, proof_window_blocks: int) -> bool:
    """Return whether a contest sent at ``head`` (mined at head + 1) leaves a block to adjudicate
    within the appeal's dispute window even if the liar answers at its proof window's last block:
    later, a liar could answer too late to be adjudicated and keep the hunter's bond."""
    return head + 1 + proof_window_blocks + 1 <= dispute_by
