"""The devnet summary's `slashed` column lists convictions only; a member penalty (a minority
vote or a missed opening, which an honest job's audit may have) goes to `penalised`, named
(issue 23: an honest job read as a failed one)."""

from verillm.devnet.run import compute_slash_columns

NAMES = {"0xaa": "node 1", "0xbb": "node 5"}


def test_a_penalty_is_listed_apart_from_a_slash():
    honest_job = [{"node": "0xbb", "reason": "minority vote: it opened and voted against the verdict", "penalty": True}]
    assert compute_slash_columns(NAMES.get, honest_job) == ("-", "node 5 (minority vote)")
    failed_job = [{"node": "0xaa", "reason": "failed audit", "penalty": False},
                  {"node": "0xbb", "reason": "missed opening: it did not open after the worker did", "penalty": True}]
    assert compute_slash_columns(NAMES.get, failed_job) == ("node 1", "node 5 (missed opening)")
    assert compute_slash_columns(NAMES.get, []) == ("-", "-")


def test_a_vote_proven_a_lie_is_shown_as_a_lie_not_as_a_vote():
    """The votes cell renders the audit's outcome (spec.outcome via the status body's `chain_outcome`)."""
    from verillm.devnet.run import compute_vote_cell

    votes = [{"node": "0xaa", "vote": 1, "lie": False, "counted": True}, {"node": "0xbb", "vote": 1, "lie": True, "counted": False},
             {"node": "0xcc", "vote": 2, "lie": False, "counted": True}]
    assert compute_vote_cell(votes) == "✓✓(lie)✗"
    assert compute_vote_cell([]) == "-"
