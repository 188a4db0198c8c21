"""The loss ledger of the protocol fuzzer (issue 34; docs/protocol.md §13 "Generic adversary").

Every wei the chain takes out of a node's stake leaves a `Registry.Slashed(node, amount, stakeLeft,
by)` log; the contract that asked names the rule in the same transaction (the rule's own event:
`Jobs.PartySlashed` with its reason, `Batches.DispatcherSlashed` with its reason,
`Coverage.OmissionSlashed`, `Delivery.DeliveryDefaulted`, `Disputes.ContestLost`,
`Disputes.Adjudicated` — with `Disputes.Contradicted` before it when the path was
`adjudicateAcrossRounds`). `read_takes` pairs each Slashed log with its rule's event (same node,
same amount where the event has one). `LEDGER` is the one table of rule → who can lose → what the
rule may take from a party that acted honestly; `ProtocolMachine`'s generic cast checks every take
from an honest node against it after every step (`fuzz_generic.LedgerChecks`).

What the events do not say (reported to the lead, not changed here: the contracts are other
helpers' work): `PartySlashed` names no round or seat (its audit's round is read back, and
"missed opening or minority vote" is one reason for two rules); `Registry.Slashed` carries the
contract, not the rule; credits leave `Jobs` only by the owner's own `claim`, so a credit needs no
rule but "never decreases".
"""

from dataclasses import dataclass

from eth_abi import decode as abi_decode
from eth_utils import to_checksum_address

from verillm.spec.hashing import keccak256

BPS = 10_000


def _topic(signature: str) -> str:
    return "0x" + keccak256(signature.encode()).hex()


SLASHED = _topic("Slashed(address,uint256,uint256,address)")
ROUND_DECIDED = _topic("RoundDecided(uint256,uint8,uint8,uint8,uint8)")
CONTRADICTED = _topic("Contradicted(uint256,uint8,uint8,uint256)")


@dataclass(frozen=True)
class Rule:
    """One row of the ledger: who the rule can take from, and its bound for an honest party."""

    who: str
    honest_bound: str  # "0", or "MEMBER_PENALTY_BPS if captured": its round's adversarial seats ≥ half
    principle: str  # docs/protocol.md §12 (issue 34) principle that sets the bound


ZERO, PENALTY_IF_CAPTURED, STAKE_IF_FRAMED = "0", "MEMBER_PENALTY_BPS if captured", "the stake if round 0 and a later round captured"
PENALTY = "MEMBER_PENALTY_BPS"  # a missed deadline that gains its party nothing: the penalty, whatever anyone else does

# rule (contract.reason or contract.function) → Rule. An honest party's take by a rule missing here is bound 0.
LEDGER = {
    "Jobs.failed audit": Rule("the worker", STAKE_IF_FRAMED, "proportionality: one round's bare verdict never takes an honest "
                              "worker's stake (it appeals a FAIL); a captured round 0 and a captured later round agreeing (the "
                              "appeal, or the decider after an honest appeal) is §13's priced framing residual"),
    "Jobs.overturned": Rule("the worker", PENALTY_IF_CAPTURED, "proportionality: a FAIL round 0's majority does not share (the appeal's, with or without "
                            "a decider agreeing, over a round-0 PASS or TIE; round 0's after a decider's TIE): MEMBER_PENALTY_BPS, "
                            "met by an honest worker only in a captured round"),
    "Jobs.missed opening or minority vote": Rule("a member", PENALTY_IF_CAPTURED,
                                                 "proportionality: outvoted by a captured round costs MEMBER_PENALTY_BPS"),
    "Jobs.missed committee draw": Rule("the dispatcher", ZERO, "keepability: an honest dispatcher draws in its window"),
    "Jobs.late private draw": Rule("the dispatcher", PENALTY, "proportionality: a reveal mined after drawBy (a loaded machine) is the same "
                                   "draw, re-rolls nothing: MEMBER_PENALTY_BPS, never the stake"),
    "Jobs.missed private draw": Rule("the dispatcher", ZERO, "proportionality: an honest reveal lands within its grace (revealBy); "
                                     "only a reveal withheld past it gets the re-roll the full slash is for"),
    "Batches.missed draw": Rule("the dispatcher", ZERO, "keepability"),
    "Batches.missed audit start": Rule("the dispatcher", ZERO, "keepability"),
    "Coverage.slashOmission": Rule("the dispatcher", ZERO, "keepability: a promise accepted while able stays keepable"),
    "Delivery.slashUndelivered": Rule("the worker", ZERO, "standing: a false claim costs its author, not the worker"),
    "Disputes.resolveContest": Rule("any party contested", ZERO, "an honest party answers every contest with its proofs"),
    "Disputes.adjudicate": Rule("a member", ZERO, "proportionality: a full slash needs the member's own data to contradict it"),
    "Disputes.adjudicateAcrossRounds": Rule("a first-round member", ZERO,
                                            "proportionality: one captured appeal's data never convict an honest voter"),
}


@dataclass(frozen=True)
class Take:
    """Wei taken from ``node``'s stake by ``rule`` (``audit_id`` / ``round`` where its event names them)."""

    tx: str
    block: int
    node: str
    amount: int
    stake_before: int
    by: str
    rule: str
    audit_id: int | None = None
    round: int | None = None


def _reasons(receipt: dict, names: dict) -> list[dict]:
    """The rule events of one transaction's receipt, decoded: node, amount (None if the event has
    none), rule, audit id, round, and the log index."""
    topics = {
        _topic("PartySlashed(uint256,address,uint256,string)"): "PartySlashed",
        _topic("DispatcherSlashed(uint256,address,uint256,string)"): "DispatcherSlashed",
        _topic("OmissionSlashed(uint256,address,uint256)"): "OmissionSlashed",
        _topic("DeliveryDefaulted(uint256,address,uint256)"): "DeliveryDefaulted",
        _topic("ContestLost(uint256,address,uint256)"): "ContestLost",
        _topic("Adjudicated(uint256,uint8,uint8,address,bool,uint8)"): "Adjudicated",
    }
    across = any(log["topics"][0] == CONTRADICTED for log in receipt["logs"])
    out = []
    for log in receipt["logs"]:
        kind = topics.get(log["topics"][0])
        if kind is None:
            continue
        node = to_checksum_address("0x" + log["topics"][2][-40:])
        first = int(log["topics"][1], 16)
        data = bytes.fromhex(log["data"][2:])
        entry = {"node": node, "index": int(log["logIndex"], 16), "audit_id": None, "round": None, "amount": None}
        if kind == "PartySlashed":
            amount, reason = abi_decode(["uint256", "string"], data)
            entry.update(rule=f"Jobs.{reason}", amount=amount, audit_id=first)
        elif kind == "DispatcherSlashed":
            amount, reason = abi_decode(["uint256", "string"], data)
            entry.update(rule=f"Batches.{reason}", amount=amount)
        elif kind == "OmissionSlashed":
            entry.update(rule="Coverage.slashOmission", amount=abi_decode(["uint256"], data)[0])
        elif kind == "DeliveryDefaulted":
            entry.update(rule="Delivery.slashUndelivered", amount=abi_decode(["uint256"], data)[0], audit_id=first)
        elif kind == "ContestLost":
            entry.update(rule="Disputes.resolveContest", amount=abi_decode(["uint256"], data)[0], contest_id=first)
        else:
            node = to_checksum_address("0x" + log["topics"][2][-40:])
            round_index = abi_decode(["uint8", "uint8", "bool", "uint8"], data)[0]
            entry.update(rule="Disputes.adjudicateAcrossRounds" if across else "Disputes.adjudicate", audit_id=first, round=round_index)
        out.append(entry)
    return out


def read_takes(rpc, protocol, from_block: int, to_block: int) -> list[Take]:
    """Every stake taken in blocks [from_block, to_block], each with the rule that took it (an
    unpaired take's rule is "unattributed:<contract>", which the ledger bounds at 0)."""
    if to_block < from_block:
        return []
    logs = rpc.call("eth_getLogs", [{"fromBlock": hex(from_block), "toBlock": hex(to_block), "address": protocol.registry.address,
                                     "topics": [SLASHED]}])
    if not logs:
        return []
    names = {getattr(protocol, n).address.lower(): n.capitalize() for n in ("jobs", "batches", "coverage", "delivery", "disputes")}
    takes, receipts = [], {}
    for log in logs:
        tx = log["transactionHash"]
        if tx not in receipts:
            receipts[tx] = (rpc.call("eth_getTransactionReceipt", [tx]), set())
        receipt, used = receipts[tx]
        node = to_checksum_address("0x" + log["topics"][1][-40:])
        amount, left, by = abi_decode(["uint256", "uint256", "address"], bytes.fromhex(log["data"][2:]))
        index = int(log["logIndex"], 16)
        # the rule's event of the same node (and amount, where it has one), unused: the nearest after the
        # Slashed log, else before it (Disputes emits Adjudicated before it slashes)
        fits = [r for r in _reasons(receipt, names) if r["index"] not in used and r["node"] == node and r["amount"] in (None, amount)]
        reason = min(fits, key=lambda r: (r["index"] < index, abs(r["index"] - index)), default=None)
        if reason is None:
            takes.append(Take(tx, int(log["blockNumber"], 16), node, amount, amount + left, by, f"unattributed:{names.get(by.lower(), by)}"))
            continue
        used.add(reason["index"])
        takes.append(Take(tx, int(log["blockNumber"], 16), node, amount, amount + left, names.get(by.lower(), by), reason["rule"],
                          reason["audit_id"], reason["round"]))
    return takes


def honest_bound(take: Take, captured: bool, preset, framed: bool = False) -> int:
    """What ``take``'s rule may take from a party that acted honestly (``captured``: its round's
    adversarial seats are at least half the seats; ``framed``: round 0 of its audit and a later
    round were — the appeal, or the decider)."""
    rule = LEDGER.get(take.rule)
    if rule is None or rule.honest_bound == ZERO:
        return 0
    if rule.honest_bound == STAKE_IF_FRAMED:
        return take.stake_before if framed else 0
    if rule.honest_bound == PENALTY:
        return take.stake_before * preset.MEMBER_PENALTY_BPS // BPS
    return take.stake_before * preset.MEMBER_PENALTY_BPS // BPS if captured else 0


def read_decided(rpc, jobs_address: str, from_block: int, to_block: int, audit_id: int | None = None) -> list[tuple[int, int, int]]:
    """(audit id, round, verdict) of every RoundDecided in the range (of one audit, if named)."""
    if to_block < from_block:
        return []
    topics = [ROUND_DECIDED] + ([] if audit_id is None else ["0x" + audit_id.to_bytes(32, "big").hex()])
    logs = rpc.call("eth_getLogs", [{"fromBlock": hex(from_block), "toBlock": hex(to_block), "address": jobs_address, "topics": topics}])
    out = []
    for log in logs:
        round_index, verdict, _, _ = abi_decode(["uint8", "uint8", "uint8", "uint8"], bytes.fromhex(log["data"][2:]))
        out.append((int(log["topics"][1], 16), round_index, verdict))
    return out
