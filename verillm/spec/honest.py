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
false "disagree" is a minority vote, settled by the vote or by escalation.
"""

from collections.abc import Mapping

from verillm.spec.audit import OnchainModel, is_onchain_agreement
from verillm.spec.compare import is_stopped_early
from verillm.spec.settlement import AGREE, FAIL, PASS, TIE
from verillm.spec.types import Leaf
from verillm.spec.constants import FLAG_STOP_WITHIN_MARGIN

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
