"""The protocol contracts' deploy plan, with constructor params taken from a preset.

The contracts take a `ProtocolParams` struct whose fields mirror the preset's names in camel
case (`minStakeWei` ↔ `MIN_STAKE_WEI`). The struct's shape is read from the compiled ABI, so a
field added on both sides needs no change here; a field missing from the preset is an error
naming it.
"""

import re

from verillm.chain.artifacts import ArtifactStore
from verillm.chain.deploy import CallStep, DeployContext, DeployStep
from verillm.errors import ConfigError


def compute_preset_name(field: str) -> str:
    """Return the preset attribute for a struct field: ``minStakeWei`` -> ``MIN_STAKE_WEI``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", field).upper()


def get_params_components(artifacts: ArtifactStore, contract: str = "Registry") -> list[dict]:
    """Return the ABI components of the ProtocolParams argument of ``contract``'s constructor."""
    constructor = next((e for e in artifacts.get(contract).abi if e.get("type") == "constructor"), None)
    params = [i for i in (constructor or {}).get("inputs", []) if i.get("internalType") == "struct ProtocolParams"]
    if not params:
        raise ConfigError(f"{contract}'s constructor takes no ProtocolParams struct")
    return params[0]["components"]


def compute_protocol_params(preset, artifacts: ArtifactStore) -> tuple:
    """Return the ProtocolParams tuple for ``preset``, in the struct's field order."""
    components = get_params_components(artifacts)
    missing = [compute_preset_name(c["name"]) for c in components if not hasattr(preset, compute_preset_name(c["name"]))]
    if missing:
        raise ConfigError(f"preset {preset.name!r} lacks {missing}, which the contracts' ProtocolParams needs")
    return tuple(getattr(preset, compute_preset_name(c["name"])) for c in components)


def _params(ctx: DeployContext) -> tuple:
    return compute_protocol_params(ctx.preset, ctx.artifacts)


PROTOCOL_STEPS = (
    DeployStep("Registry", lambda ctx: (_params(ctx),)),
    DeployStep("Jobs", lambda ctx: (ctx.addresses["Registry"], _params(ctx))),
    DeployStep("Disputes", lambda ctx: (ctx.addresses["Jobs"], ctx.addresses["Registry"], _params(ctx))),
    CallStep("Registry", "bindProtocol", lambda ctx: (ctx.addresses["Jobs"], ctx.addresses["Disputes"])),
    CallStep("Jobs", "bindDisputes", lambda ctx: (ctx.addresses["Disputes"],)),
)
