"""Why a node cannot serve: its own on-chain standing, and whether the network can audit its jobs.

A node with the dispatcher role answers every request with 503 `no_workers` until enough
registered, staked workers declare its model. From the outside that looks like a broken
node; these reasons say what is missing, in the order an operator fixes them:

- not registered in the Registry (`verillm node register`);
- deregistered and unbonding;
- stake below the protocol minimum (`verillm node top-up`), e.g. after a slash;
- the model it serves not added to the Registry (the deployer's `verillm chain add-model`),
  or not declared by this node (`verillm node models`);
- too few workers weigh in this epoch's committee draws: `Jobs._drawMembers` excludes the
  job's worker AND its dispatcher (and members drawn before), so a job another worker runs
  leaves the weighted workers minus two (minus one when this dispatcher serves no weight) for
  a committee of `committeeSize`; fewer, and its audit is abandoned ("pool exhausted").
  Weights are the Registry's for the current epoch (`getModelWeights`): a registration or a
  stake change weighs from the next epoch on, so the reason names that epoch's count and block.
  A node that has unbonded, or was slashed (or left below the minimum) this epoch, is not counted although it
  still weighs this epoch: no round seeded after its unbond or its slash draws it
  (`Registry.outBlock`, `Registry.drawCommittee`).

`compute_serving_reasons` is pure; `read_serving_state` reads the chain (blocking, through
`verillm.chain.protocol.Protocol`); `ReadinessMonitor` caches the reasons for /healthz and
the dispatcher's `no_workers` message. `verillm node status` prints the same reasons.
"""

import asyncio
import time
from dataclasses import dataclass

from web3 import Web3

from verillm.chain.errors import TransactionReverted


@dataclass(frozen=True)
class ServingState:
    """What the chain says about one node and one model."""

    address: str
    registered: bool
    active: bool
    stake_wei: int
    unbonding_end_block: int
    models: tuple[bytes, ...]
    model_id: bytes
    model_added: bool
    weighted_now: tuple[str, ...]
    """Lower-case addresses with weight in the current epoch's draws of the model, those out of
    its draws from now on left out (unbonded or slashed: `Registry.outBlock`)."""
    weighted_next: tuple[str, ...]
    """... from the next epoch on (a registration, top-up or departure made now weighs then)."""
    min_stake_wei: int
    committee_size: int
    next_epoch_block: int = 0


def read_serving_state(protocol, address: str, model_id: bytes) -> ServingState:
    """Read a node's registration and the model's workers from the contracts (blocking)."""
    node = protocol.get_node(Web3.to_checksum_address(address))
    epoch = protocol.registry.call("currentEpoch")
    now, later = ([n for n in _weighted(protocol.registry.call("getModelWeights", model_id, e))
                   if not protocol.registry.call("outBlock", Web3.to_checksum_address(n), e)] for e in (epoch, epoch + 1))
    now, later = tuple(now), tuple(later)
    try:
        model_added = bool(protocol.registry.call("getModelConfig", model_id)[0])
    except TransactionReverted as exc:  # the view reverts UnknownModel for a model never added
        if exc.error != "UnknownModel":
            raise
        model_added = False
    return ServingState(Web3.to_checksum_address(address), node["registered"], node["active"], node["stake_wei"],
                        node["unbonding_end_block"], tuple(node["models"]), model_id, model_added, now, later,
                        protocol.preset.MIN_STAKE_WEI, protocol.preset.COMMITTEE_SIZE, (epoch + 1) * protocol.preset.EPOCH_BLOCKS)


def _weighted(table) -> tuple[str, ...]:
    nodes, weights = table
    return tuple(n.lower() for n, w in zip(nodes, weights, strict=True) if w > 0)


def compute_needed_workers(committee_size: int, dispatcher_weighted: bool) -> int:
    """Return how many workers must weigh in a draw for every job this dispatcher routes to be
    auditable: a committee, plus the job's worker, plus this dispatcher when it weighs too
    (both are excluded from the committee, `Jobs._drawMembers`)."""
    return committee_size + 1 + (1 if dispatcher_weighted else 0)


def compute_committee_reason(state: ServingState) -> str | None:
    """Return why jobs routed by this node cannot all be audited in this epoch, or None."""
    me, model = state.address.lower(), "0x" + state.model_id.hex()
    weighs = me in state.weighted_now
    needed = compute_needed_workers(state.committee_size, weighs)
    if len(state.weighted_now) >= needed:
        return None
    reason = (f"{len(state.weighted_now)} workers weigh in this epoch's committee draws for model {model}"
              f"{' (this node among them)' if weighs else ''}; a job needs {needed}: its worker, "
              f"{'this dispatcher, ' if weighs else ''}and a committee of {state.committee_size} drawn from the others "
              f"(Jobs._drawMembers excludes the job's worker and its dispatcher), else its audit is abandoned (pool exhausted)")
    if set(state.weighted_next) != set(state.weighted_now):
        reason += f"; {len(state.weighted_next)} weigh from the next epoch (block {state.next_epoch_block})"
    return reason


def compute_serving_reasons(state: ServingState) -> list[str]:
    """Return why this node cannot serve (its own standing first, then the network's); [] when it can."""
    model, reasons = "0x" + state.model_id.hex(), []
    if not state.registered:
        reasons.append(f"this node ({state.address}) is not registered in the Registry: run `verillm node register`")
    elif state.unbonding_end_block:
        reasons.append(f"this node deregistered and is unbonding until block {state.unbonding_end_block}; it takes no new jobs")
    elif state.stake_wei < state.min_stake_wei:
        reasons.append(f"this node's stake {state.stake_wei / 1e18:g} ETH is below the minimum {state.min_stake_wei / 1e18:g} ETH "
                       "(slashed?): run `verillm node top-up`")
    if not state.model_added:
        reasons.append(f"model {model} is not added to the Registry: the deployment's owner runs `verillm chain add-model`")
    elif state.registered and not state.unbonding_end_block and state.model_id not in state.models:
        reasons.append(f"this node does not declare model {model}: run `verillm node models --model-id {model}`")
    committee = compute_committee_reason(state) if state.model_added else None
    return reasons + ([committee] if committee else [])


class ReadinessMonitor:
    """The reasons of one node for its served model, read at most every ``refresh_s``."""

    def __init__(self, chainio, address: bytes, model_id: bytes, refresh_s: float = 5.0):
        self.chainio, self.address, self.model_id, self.refresh_s = chainio, "0x" + address.hex(), model_id, refresh_s
        self.reasons: list[str] | None = None
        self.read_at = 0.0
        self._lock = asyncio.Lock()

    async def get_reasons(self) -> list[str]:
        """Return the current reasons (re-read from the chain when older than ``refresh_s``)."""
        async with self._lock:
            if self.reasons is None or time.monotonic() - self.read_at >= self.refresh_s:
                state = await self.chainio.read_for_clients(read_serving_state, self.chainio.protocol, self.address, self.model_id)
                self.reasons, self.read_at = compute_serving_reasons(state), time.monotonic()
        return self.reasons
