"""The generic adversary of the protocol fuzzer (issue 34; docs/protocol.md §13 "Generic adversary").

It is not told what to do. Each of its steps, one adversarial identity — one of the colluding
registered nodes (`GenericMachine.adversaries`, together with the cheater up to 49% of the stake:
captured committees and appeals are common) or the unregistered outsider — calls one external
non-view function of one protocol contract, enumerated from the ABIs (`external_functions`: a
function added to a contract is fuzzed without editing this file), with arguments built from
everything public, in any block inside or at the edge of a window:
    calls seen      the calldata of every transaction that landed (honest parties' receipts,
                    openings, seals, answers with their Merkle proofs, batches, claims), replayed
                    as they were or with one argument changed (`PublicPool`)
    values seen     per ABI type and parameter name: audit, contest, claim and batch ids, rounds,
                    slots, roots, seals, leaves, proofs (`PublicPool.values`), with edges (0, 1,
                    the largest id + 1, the type's maximum), and for a payable call the right
                    value, one wei less or more, zero, or another preset amount
    what it knows   what the colluders can compute themselves (`proposals`): receipts over
                    fabricated data (shared by all colluders: they copy each other's leaves),
                    seals and openings of either vote on fabricated or honestly computed data
                    (colluders in one round vote alike unless the draw says otherwise), contests of
                    any seat's challenged cells, adjudications of any member against the worker's
                    posted leaves or of any first-round member against any appeal seat, with any
                    opening public or its own, escalations of any audit, omission claims of any
                    promise; each with the argument list the protocol's own client would build
A window edge: before its call, the step may mine up to 4 blocks toward a deadline of a live
round, omission claim or promise (that block − 1, the block, or + 1). The named strategies of the
older cast stay (node 5's rules, the griefer's, the cheater's): seeds and weight, not the search.
Counts: `STATS["generic"]` (calls by contract.function: sent, landed).
"""

import dataclasses
import random

from eth_abi.exceptions import EncodingError
from hypothesis import strategies as st
from hypothesis.stateful import rule

from helpers.contracts import PRESET
from fuzz_generic_moves import ColluderMoves

CONTRACTS = ("registry", "batches", "jobs", "disputes", "delivery", "coverage")
POOL_CAP = 24  # values kept per (type, name): the newest
EDGE_STEP_BLOCKS = 4  # as `mine`: never a whole window without an honest pass
SELF_EXITS = {("registry", "deregister"), ("registry", "withdraw")}  # a colluder's exit is for good: 1 in 10 of its draws
SEAT_MOVES = ("postCommitteeReceipt", "sealVote", "openAndVote", "claimUndelivered")
GENERIC_WEIGHT = 36  # the generic rule's aliases: about half of all steps in a machine of ~40 named rules


def _abi_type(item: dict) -> str:
    if item["type"].startswith("tuple"):
        return "(" + ",".join(_abi_type(c) for c in item["components"]) + ")" + item["type"][5:]
    return item["type"]


def external_functions(protocol) -> list[tuple[str, str, list[dict], bool]]:
    """(contract, function, inputs, payable) of every external non-view function of the six contracts."""
    out = []
    for name in CONTRACTS:
        for item in getattr(protocol, name).web3.abi:
            if item.get("type") == "function" and item["stateMutability"] not in ("view", "pure"):
                out.append((name, item["name"], item["inputs"], item["stateMutability"] == "payable"))
    return out



class PublicPool:
    """Every call that landed (by anyone) and every argument value seen, by ABI type and name."""

    def __init__(self):
        self.calls: dict[tuple[str, str], list] = {}  # (contract, function) → [(args, value)]
        self.values: dict[tuple[str, str], list] = {}  # (type, name) → values; ("", type) → values of any name

    def add_value(self, abi_type: str, name: str, value) -> None:
        for key in ((abi_type, name), ("", abi_type)):
            bucket = self.values.setdefault(key, [])
            if value not in bucket:
                bucket.append(value)
                del bucket[:-POOL_CAP]

    def add_call(self, contract: str, function: str, inputs: list[dict], args: tuple, value: int) -> None:
        bucket = self.calls.setdefault((contract, function), [])
        bucket.append((args, value))
        del bucket[:-POOL_CAP]
        for item, arg in zip(inputs, args):
            self.add_value(_abi_type(item), item["name"], arg)


class RecordingSender:
    """Wraps the fuzzer's sender: every call that lands is public (its calldata is on-chain)."""

    def __init__(self, inner, pool: PublicPool, names: dict, inputs: dict):
        self.inner, self.pool, self.names, self.inputs = inner, pool, names, inputs

    def __call__(self, handle, function, *args, value: int = 0, **kw):
        tx = self.inner(handle, function, *args, value=value, **kw)
        contract = self.names.get(handle.address)
        if contract is not None and (contract, function) in self.inputs:
            self.pool.add_call(contract, function, self.inputs[(contract, function)], args, value)
        return tx

    def __getattr__(self, name):  # `_function` and the rest of FastSender, for the late moves' queue
        return getattr(self.inner, name)


class GenericAdversary(ColluderMoves):
    """Mixin of `GenericMachine` (see the module note)."""

    def _generic_setup(self) -> None:
        self.functions = external_functions(self.p)
        self.inputs = {(c, f): inputs for c, f, inputs, _ in self.functions}
        self.pool = PublicPool()
        names = {getattr(self.p, c).address: c for c in CONTRACTS}
        self.recording = RecordingSender(self.sender, self.pool, names, self.inputs)
        self.p._send = self.recording
        self.preimages: dict = {}  # (audit, round, slot) → (opening, agree, salt) a colluder sealed
        self.votes: dict = {}  # (audit, round) → the colluders' vote in that round, once one sealed
        self.colluder_data: dict = {}  # (audit, node) → the kind of data its receipt committed to (`_colluder`)
        amounts = {v for k, v in vars(type(PRESET)).items() if k.endswith("_WEI") and isinstance(v, int)}
        amounts |= {getattr(PRESET, k) for k in dir(PRESET) if k.endswith("_WEI") and isinstance(getattr(PRESET, k), int)}
        self.amounts = sorted(a for a in amounts if 0 < a <= 10 * PRESET.MIN_STAKE_WEI)

    # --- the step --------------------------------------------------------------------------
    def _generic(self, seed: int, edge: int) -> None:
        rng = random.Random(f"{seed}:{len(self.path)}:{self.nonce}")  # hypothesis repeats small seeds; the step varies them
        if edge == 3:
            self._to_edge(rng)
        self._refresh_ids()
        contract, function, inputs, payable, proposals = self._pick_function(rng)
        if function in SEAT_MOVES and proposals and rng.random() < 0.8:
            # the colluders act as one: the move in every colluder seat of that round, each by its node
            calls = [(args, value, hint, on_success) for args, value, hint, on_success in proposals]
        else:
            calls = [self._build(rng, contract, function, inputs, payable, proposals)]
        landed = 0
        for args, value, sender, on_success in calls:
            landed += self._send_generic(contract, function, args, value, sender or self.world.outsider, on_success)
        self._step(f"generic:{contract}.{function}" + (f":landed{landed}" if landed else ""))

    def _send_generic(self, contract: str, function: str, args, value: int, sender, on_success) -> int:
        self._count_generic(f"{contract}.{function}:sent")
        try:
            tx = self._try(self.p._send, getattr(self.p, contract), function, *args, sender=sender, value=value)
        except (EncodingError, OverflowError, TypeError, ValueError):
            tx = None  # arguments no ABI encoder takes: nothing sent
            self._count_generic(f"{contract}.{function}:unencodable")
        if tx is None:
            return 0
        self._count_generic(f"{contract}.{function}:landed")
        if on_success is not None:
            on_success()
        return 1

    def _pick_function(self, rng):
        """(contract, function, inputs, payable, proposals): any function a third of the time
        (every function stays in the search: an access check that is missing is found there);
        else a move in one of the colluders' own seats (receipt, seal, opening: a seat it never
        fills is replaced, so captured rounds need it), or a function it has material for now
        (what it can build, else calls seen)."""
        roll = rng.random()
        if roll < 0.2:
            contract, function, inputs, payable = self.functions[rng.randrange(len(self.functions))]
            return contract, function, inputs, payable, self._proposals(contract, function, rng) if rng.random() < 0.5 else []
        by_name = {f[1]: f for f in self.functions}
        names = list(SEAT_MOVES) if roll < 0.55 else [f[1] for f in self.functions if hasattr(self, f"_propose_{f[1]}")]
        rng.shuffle(names)
        for name in names[:6]:
            if name in by_name:
                proposals = self._proposals(by_name[name][0], name, rng)
                if proposals:
                    return (*by_name[name], proposals)
        seen = [f for f in self.functions if (f[0], f[1]) in self.pool.calls]
        return (*(rng.choice(seen) if seen else self.functions[rng.randrange(len(self.functions))]), [])

    def _count_generic(self, what: str) -> None:
        self.stats["generic"][what] = self.stats["generic"].get(what, 0) + 1

    def _actors(self) -> list:
        return [self._node(i).account for i in sorted(self.adversaries)] + [self.world.outsider]

    def _build(self, rng, contract, function, inputs, payable, proposals):
        """(args, value, sender, on_success) of one call (the outsider half the time: a colluder's
        exit is for good, and five of them leaving early would leave nothing to capture)."""
        sender = self.world.outsider if rng.random() < 0.5 else rng.choice(self._actors())
        if (contract, function) in SELF_EXITS and rng.random() < 0.9:
            sender = self.world.outsider
        roll = rng.random()
        seen = self.pool.calls.get((contract, function), [])
        if proposals:
            args, value, hint, on_success = rng.choice(proposals)
            sender = hint if hint is not None and rng.random() < 0.8 else sender
        elif seen and roll < 0.85:
            (args, value), on_success = rng.choice(seen), None
        else:
            args, value, on_success = tuple(self._synth(rng, _abi_type(i), i["name"]) for i in inputs), 0, None
            value = self._value(rng, payable, 0)
            return args, value, sender, None
        args = list(args)
        if args and rng.random() < 0.2:  # one argument changed: another value of its type, or an edge
            k = rng.randrange(len(args))
            args[k] = self._synth(rng, _abi_type(inputs[k]), inputs[k]["name"])
            on_success = None
        return tuple(args), self._value(rng, payable, value), sender, on_success

    def _value(self, rng, payable: bool, right: int) -> int:
        r = rng.random()
        if not payable:
            return 0 if r < 0.97 else 1
        if r < 0.7:
            return right
        return rng.choice([0, max(right - 1, 0), right + 1] + self.amounts)

    # --- values from the public pool --------------------------------------------------------
    def _refresh_ids(self) -> None:
        """Ids the chain has made, with edges: the pool's uint256 of those names."""
        audits = [t.run.audit_id for t in self.audits]
        for a in audits:
            self.pool.add_value("uint256", "auditId", a)
        for cid in range(self.disputes("contestCount")):
            self.pool.add_value("uint256", "contestId", cid)
        for cid in range(1, self.coverage("claimCount") + 1):
            self.pool.add_value("uint256", "claimId", cid)
        for pr in self.promises:
            if pr.batch_id is not None:
                self.pool.add_value("uint256", "batchId", pr.batch_id)

    def _synth(self, rng, abi_type: str, name: str):
        """A value of ``abi_type``: one seen under this name or type, an edge, or a fresh one."""
        if abi_type.endswith("]"):
            inner = abi_type[:abi_type.rindex("[")]
            size = abi_type[abi_type.rindex("[") + 1:-1]
            seen = self.pool.values.get((abi_type, name)) or self.pool.values.get(("", abi_type))
            if seen and rng.random() < 0.7:
                return rng.choice(seen)
            n = int(size) if size else rng.choice([0, 1, 2])
            return [self._synth(rng, inner, name) for _ in range(n)]
        seen = self.pool.values.get((abi_type, name)) or self.pool.values.get(("", abi_type)) or []
        if seen and rng.random() < 0.75:
            value = rng.choice(seen)
            if abi_type.startswith("uint") and rng.random() < 0.3:
                return max(0, value + rng.choice([-1, 1]))
            return value
        if abi_type.startswith("("):
            parts, depth, cur = [], 0, ""
            for ch in abi_type[1:-1]:
                if ch == "," and depth == 0:
                    parts.append(cur)
                    cur = ""
                    continue
                depth += ch in "([" and 1 or 0
                depth -= ch in ")]" and 1 or 0
                cur += ch
            parts.append(cur)
            return tuple(self._synth(rng, p, "") for p in parts if p)
        if abi_type.startswith("uint") or abi_type.startswith("int"):
            bits = int(abi_type.lstrip("uint") or 256)
            top = 2 ** bits - 1 if abi_type.startswith("uint") else 2 ** (bits - 1) - 1
            head = self.reads.head()
            return rng.choice([0, 1, 2, 3, len(self.audits) + 1, min(top, head), min(top, head + 1), top])
        if abi_type == "address":
            return rng.choice([n.address for n in self.world.nodes] + [self.world.outsider.address, self.p.jobs.address])
        if abi_type == "bool":
            return rng.random() < 0.5
        if abi_type.startswith("bytes") and abi_type != "bytes":
            return rng.choice([bytes(int(abi_type[5:])), rng.randbytes(int(abi_type[5:]))])
        if abi_type == "bytes":
            return rng.choice([b"", rng.randbytes(rng.choice([1, 32, 65]))])
        if abi_type == "string":
            return rng.choice(["", "x"])
        raise AssertionError(f"no synthesis for ABI type {abi_type}")

    # --- window edges ---------------------------------------------------------------------------
    def _to_edge(self, rng) -> None:
        """Mine (≤ EDGE_STEP_BLOCKS) toward the last block of a live window, or one before or after it."""
        edges = []
        for t in self._live():
            rs = self.round_state(t.run.audit_id)
            edges += [d for d in dataclasses.astuple(rs.deadlines) if d]
            if rs.publish_deadline:
                edges.append(rs.publish_deadline)
        edges += [pr.batch_by for pr in self.promises]
        head = self.reads.head()
        targets = [e + rng.choice([-1, 0, 1]) for e in edges]
        targets = [x for x in targets if x > head + 1]
        if targets:
            gap = min(targets) - 1 - head if rng.random() < 0.5 else rng.choice(targets) - 1 - head
            if gap > 0:
                self._mine(min(EDGE_STEP_BLOCKS, gap))


def _alias(k: int):
    @rule(seed=st.integers(0, 2**32 - 1), edge=st.integers(0, 3))
    def generic(self, seed, edge):
        """One call of the generic adversary (``edge`` 0: in this block; else toward a window edge first)."""
        self._generic(seed, edge)
    generic.__name__ = f"generic_{k}"
    return generic


for _k in range(GENERIC_WEIGHT):
    setattr(GenericAdversary, f"generic_{_k}", _alias(_k))
