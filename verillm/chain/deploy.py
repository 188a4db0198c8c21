"""Deploying the protocol contracts, and the address book a deployment leaves behind.

A deployment is a plan: an ordered list of steps, each deploying one contract with
constructor args computed from the preset and the addresses deployed so far, or calling a
function to wire contracts together. The protocol's plan is `verillm.chain.protocol.PROTOCOL_STEPS`;
`verillm chain deploy` runs it and writes the address book.
"""

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from eth_account.signers.local import LocalAccount

from verillm.chain.artifacts import ArtifactStore
from verillm.chain.chain import Chain, ContractHandle
from verillm.errors import ConfigError
from verillm.spec.params import Preset


@dataclass(frozen=True)
class DeployContext:
    """What a step's args builder may read."""

    preset: Preset
    deployer: str
    chain_id: int
    addresses: dict[str, str]
    """Address-book keys deployed by earlier steps."""
    artifacts: ArtifactStore
    """Where the plan's ABIs come from (e.g. to read a constructor's struct layout)."""


ArgsBuilder = Callable[[DeployContext], tuple]


def _no_args(_: DeployContext) -> tuple:
    return ()


@dataclass(frozen=True)
class DeployStep:
    """Deploy ``contract`` (an artifact name) and record it under ``key`` (default: the name)."""

    contract: str
    build_args: ArgsBuilder = _no_args
    key: str | None = None
    value_wei: int = 0

    @property
    def book_key(self) -> str:
        return self.key or self.contract


@dataclass(frozen=True)
class CallStep:
    """Call ``function`` on the contract recorded under ``key`` (wiring, roles, initial config)."""

    key: str
    function: str
    build_args: ArgsBuilder = _no_args




@dataclass(frozen=True)
class Deployment:
    """An address book: where each contract of one deployment lives."""

    chain_id: int
    preset: str
    deployer: str
    addresses: dict[str, str]
    contracts: dict[str, str]
    """Address-book key -> artifact name (they differ when one contract is deployed twice)."""
    start_block: int = 0
    """The block of the first deployment transaction: where event readers start."""
    extra: dict = field(default_factory=dict)

    def get(self, chain: Chain, key: str) -> ContractHandle:
        """Return a handle on the contract recorded under ``key``."""
        if key not in self.addresses:
            raise ConfigError(f"deployment has no contract {key!r}; it has {sorted(self.addresses)}")
        if chain.chain_id != self.chain_id:
            raise ConfigError(f"deployment is for chain id {self.chain_id}, connected to {chain.chain_id}")
        return chain.at(self.contracts[key], self.addresses[key])

    def save(self, path: str | Path) -> None:
        """Write the address book as JSON."""
        Path(path).write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "Deployment":
        """Read an address book written by `save`."""
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(**raw)
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(f"cannot read deployment {path}: {exc}") from exc


def deploy_plan(chain: Chain, preset: Preset, sender: LocalAccount, plan: tuple[DeployStep | CallStep, ...]) -> Deployment:
    """Run ``plan`` step by step and return the resulting address book."""
    if not plan:
        raise ConfigError("the deploy plan is empty")
    addresses: dict[str, str] = {}
    contracts: dict[str, str] = {}
    start_block = chain.get_block_number() + 1
    for step in plan:
        ctx = DeployContext(preset=preset, deployer=sender.address, chain_id=chain.chain_id,
                            addresses=dict(addresses), artifacts=chain.artifacts)
        if isinstance(step, DeployStep):
            handle = chain.deploy(step.contract, *step.build_args(ctx), sender=sender, value=step.value_wei)
            addresses[step.book_key], contracts[step.book_key] = handle.address, step.contract
        else:
            _run_call_step(chain, step, ctx, contracts, sender)
    return Deployment(chain_id=chain.chain_id, preset=preset.name, deployer=sender.address,
                      addresses=addresses, contracts=contracts, start_block=start_block)


def _run_call_step(chain: Chain, step: CallStep, ctx: DeployContext, contracts: dict[str, str], sender: LocalAccount) -> None:
    if step.key not in ctx.addresses:
        raise ConfigError(f"deploy plan calls {step.key}.{step.function} before deploying {step.key}")
    target = chain.at(contracts[step.key], ctx.addresses[step.key])
    target.transact(step.function, *step.build_args(ctx), sender=sender)
