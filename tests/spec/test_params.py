"""Spec tests for `verillm.spec.params`: the protocol parameters, in presets.

A `Preset` is one complete set of parameters with units in the names (`MIN_STAKE_WEI`,
`EPOCH_BLOCKS`). `MAINNET` is the reference network; `MINIMAL` keeps every rule with small
numbers for tests. Contracts hold the same values under camelCase names (`minStakeWei`);
`Preset.from_contract_params` reads them back, and refuses a name it does not know.
"""

import dataclasses

import pytest

from verillm.errors import ConfigError
from verillm.spec.params import MAINNET, MINIMAL, PRESETS, Preset, compute_preset_name, compute_timeline, compute_timeline_problems, get_preset

PARAMETER_NAMES = [f.name for f in dataclasses.fields(Preset) if f.name != "name"]


def camel_case(preset_name: str) -> str:
    """``MIN_STAKE_WEI`` -> ``minStakeWei``: the contracts' spelling, written independently here."""
    first, *rest = preset_name.lower().split("_")
    return first + "".join(word.capitalize() for word in rest)


def contract_params(preset: Preset) -> dict[str, int]:
    return {camel_case(name): getattr(preset, name) for name in PARAMETER_NAMES}


@pytest.mark.parametrize(
    "field, attribute",
    [
        ("minStakeWei", "MIN_STAKE_WEI"),
        ("committeeSize", "COMMITTEE_SIZE"),
        ("auditRateBps", "AUDIT_RATE_BPS"),
        ("omissionClaimWindowBlocks", "OMISSION_CLAIM_WINDOW_BLOCKS"),
    ],
)
def test_a_contract_field_name_maps_to_the_preset_attribute(field, attribute):
    assert compute_preset_name(field) == attribute


def test_every_preset_attribute_round_trips_through_its_camel_case_name():
    assert all(compute_preset_name(camel_case(name)) == name for name in PARAMETER_NAMES)


@pytest.mark.parametrize("preset", [MINIMAL, MAINNET], ids=lambda p: p.name)
def test_a_preset_read_back_from_contract_params_has_the_same_values(preset):
    assert Preset.from_contract_params(contract_params(preset), name=preset.name) == preset
    assert Preset.from_contract_params(contract_params(preset)).name == "onchain"


def test_a_parameter_the_contracts_do_not_hold_keeps_its_default():
    params = contract_params(MINIMAL)
    del params["fingerprintDims"]  # per model, in the Registry: not in the parameter structs
    preset = Preset.from_contract_params(params)
    assert preset.FINGERPRINT_DIMS == Preset(name="x").FINGERPRINT_DIMS == 1
    assert preset.MIN_STAKE_WEI == MINIMAL.MIN_STAKE_WEI


def test_an_unknown_contract_field_is_refused_naming_it():
    # The contracts and this class drifted apart: better to stop than to ignore a parameter.
    with pytest.raises(ConfigError, match="BOGUS_WINDOW_BLOCKS"):
        Preset.from_contract_params({**contract_params(MINIMAL), "bogusWindowBlocks": 5})


def test_replace_changes_only_the_named_parameters():
    changed = MINIMAL.replace(COMMITTEE_SIZE=5, EPOCH_BLOCKS=200)
    assert (changed.COMMITTEE_SIZE, changed.EPOCH_BLOCKS) == (5, 200)
    assert changed.replace(COMMITTEE_SIZE=3, EPOCH_BLOCKS=150) == MINIMAL
    assert MINIMAL.COMMITTEE_SIZE == 3  # presets are frozen: replace returns a copy


def test_replace_refuses_an_unknown_parameter():
    with pytest.raises(ConfigError, match=r"unknown protocol parameters: \['COMITTEE_SIZE'\]"):
        MINIMAL.replace(COMITTEE_SIZE=5)


def test_presets_are_found_by_name_and_an_unknown_name_is_refused():
    assert get_preset("minimal") is MINIMAL and get_preset("mainnet") is MAINNET
    assert set(PRESETS) == {"minimal", "mainnet"}
    with pytest.raises(ConfigError, match="unknown preset 'testnet'"):
        get_preset("testnet")


# The rules `contracts/src/Params.sol` checks at deploy; every preset must pass them.


@pytest.mark.parametrize("p", [MINIMAL, MAINNET], ids=lambda p: p.name)
def test_every_preset_satisfies_the_contracts_parameter_rules(p):
    assert p.COMMITTEE_SIZE % 2 == 1, "committees are odd so a majority exists"
    assert p.ESCALATION_COMMITTEE_SIZE % 2 == 1 and p.ESCALATION_COMMITTEE_SIZE > p.COMMITTEE_SIZE
    assert p.MEMBER_PENALTY_BPS <= p.SLASH_FRACTION_BPS <= 10_000 and p.AUDIT_RATE_BPS <= 10_000
    # The per-job levy pays, in expectation, every audit's fees (committee + worker).
    assert p.AUDIT_RATE_BPS * (p.COMMITTEE_SIZE + 1) * p.AUDIT_FEE_WEI <= 10_000 * p.JOB_FEE_WEI
    assert 0 < p.DRAW_WINDOW_BLOCKS < 256 and 0 < p.OPEN_WINDOW_BLOCKS < 256, "a seed block hash must stay readable"
    t = compute_timeline(p)  # the windows composed once (Params.timeline), hand-checked in test_timeline.py
    assert p.EPOCH_BLOCKS >= t.round_draw_span
    assert p.UNBONDING_BLOCKS >= t.leaver_duty_span and p.UNBONDING_BLOCKS >= 2 * p.EPOCH_BLOCKS
    assert p.BATCH_BY_BLOCKS + p.OMISSION_CLAIM_WINDOW_BLOCKS < p.UNBONDING_BLOCKS
    assert p.BATCH_BY_BLOCKS <= p.AUDIT_HORIZON_BLOCKS and p.MAX_TRANSCRIPT_TOKENS <= 8_192
    assert p.RECEIPT_HORIZON_BLOCKS > p.BATCH_BY_BLOCKS + t.start_span, "a receipt outlives its promised batch's last start, with lag to spare"
    assert compute_timeline_problems(p) == []


def test_minimal_audits_every_job_and_mainnet_five_percent():
    assert (MINIMAL.AUDIT_RATE_BPS, MAINNET.AUDIT_RATE_BPS) == (10_000, 500)
