"""What the simulator says an omission claim costs (`Coverage.sol`, docs/protocol.md §12
"Batching promises"), checked against the contracts by `verillm sim replay`.

The engine models receipt coverage as a flag (`RuleSet.omission_possible`): under the landed rules
a dispatcher cannot leave a promised receipt out of every batch without being slashed, so the
adversary never omits. This module is that rule's money, claim by claim: a claim left unanswered
slashes the dispatcher (`slashOmission`: SLASH_FRACTION_BPS of its stake; the claimant gets its
bond back plus SLASH_REWARD_BPS of the slash, the rest goes to the fee pool); a claim answered by
an inclusion proof (`proveIncluded`) credits the dispatcher its answer's cost (OMISSION_ANSWER_GAS at
the answer's gas price, capped at the bond) and refunds the rest of the bond to the claimant.
Under a rule set where omission is possible nothing happens to either party.
"""

from dataclasses import dataclass

from verillm.spec.promise import compute_answer_payout, compute_omission_payout
from verillm.spec.params import Preset
from verillm.spec.settlement import compute_slash
from verillm.sim.rules import RuleSet


@dataclass(frozen=True)
class OmissionOutcome:
    """Wei moved by one omission claim, beyond the bond the claimant paid in ETH."""

    dispatcher_slashed_wei: int
    dispatcher_credit_wei: int
    claimant_credit_wei: int
    fee_pool_wei: int


def settle_omission(preset: Preset, rules: RuleSet, dispatcher_stake_wei: int, included: bool,
                    answer_gas_price_wei: int = 0) -> OmissionOutcome:
    """One claim on a promise whose receipt was (``included``) or was not batched in time; an
    answer sent at ``answer_gas_price_wei``."""
    bond = preset.OMISSION_CLAIM_BOND_WEI
    if not rules.omission_possible and not included:
        slashed = compute_slash(dispatcher_stake_wei, preset)
        credit, to_pool = compute_omission_payout(slashed, bond, preset.SLASH_REWARD_BPS)
        return OmissionOutcome(slashed, 0, credit, to_pool)
    if not rules.omission_possible:  # the dispatcher answers with the proof: paid its answer, the rest refunded
        paid, refunded = compute_answer_payout(bond, preset.OMISSION_ANSWER_GAS, answer_gas_price_wei)
        return OmissionOutcome(0, paid, refunded, 0)
    return OmissionOutcome(0, 0, 0, 0)  # no promise, no claim: the omission costs nothing
