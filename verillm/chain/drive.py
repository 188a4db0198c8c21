"""Drive the audits that lock a node's stake to their end (`verillm node withdraw --drive`).

A stake stays locked while any audit it is a party to (worker, dispatcher, or member of a
round's committee) is not SETTLED or ABANDONED (`Registry.lock`, docs/protocol.md §12 "Stake
locks and unbonding"). Contracts do not act by themselves: an audit whose dispatcher stalls
ends only when someone makes the next permissionless call once its deadline has passed. This
module is that someone for an operator who wants its stake back: for each audit locking the
address it reads the round's state (`Jobs.getRoundState`) and sends exactly the step the state
machine says is due (`verillm.spec.audit.compute_due_steps`, the contract's guards mirrored).
It never acts for another party: opening, voting, contesting and escalating are left to them.
"""

from dataclasses import dataclass

from verillm.spec.audit import TERMINAL_PHASES, compute_due_steps


@dataclass(frozen=True)
class DriveReport:
    """What `drive_locking_audits` did: the steps sent, and what still holds the stake."""

    sent: tuple[tuple[int, str], ...]
    """(audit id, step) in the order sent."""
    waiting: tuple[int, ...]
    """Audits still open: no permissionless step is due yet (or only other parties can act)."""
    locks: int
    """The Registry's lock count for the address after driving."""


def find_locking_audits(protocol, address: str) -> list[int]:
    """Return the ids of the open audits ``address`` is a party to, oldest first."""
    address = address.lower()
    found = []
    for audit_id in range(1, protocol.jobs.call("auditCount") + 1):
        audit = protocol.get_audit(audit_id)
        if audit.phase in TERMINAL_PHASES:
            continue
        parties = {audit.worker.lower(), audit.dispatcher.lower()}
        for round_index in range(audit.round + 1):
            parties |= {m.lower() for m in protocol.get_committee(audit_id, round_index)}
        if address in parties:
            found.append(audit_id)
    return found


def drive_audit(protocol, sender, audit_id: int) -> tuple[list[str], bool]:
    """Send every permissionless step of ``audit_id`` that is due, until none is; return the
    steps sent and whether the audit has ended."""
    sent = []
    while protocol.get_audit(audit_id).phase not in TERMINAL_PHASES:
        due = compute_due_steps(protocol.get_round_state(audit_id), protocol.chain.get_block_number() + 1)
        if not due:
            return sent, False
        getattr(protocol, due[0])(sender, audit_id)
        sent.append(due[0])
    return sent, True


def drive_locking_audits(protocol, sender) -> DriveReport:
    """Drive every open audit that locks ``sender``'s stake as far as the chain allows now."""
    sent = []
    waiting = []
    for audit_id in find_locking_audits(protocol, sender.address):
        steps, ended = drive_audit(protocol, sender, audit_id)
        sent += [(audit_id, step) for step in steps]
        if not ended:
            waiting.append(audit_id)
    return DriveReport(tuple(sent), tuple(waiting), protocol.get_node(sender.address)["locks"])

