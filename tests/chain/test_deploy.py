"""Deploy plans, the address book, and `verillm chain deploy` against a real anvil."""

import dataclasses
import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from verillm.chain import CallStep, Deployment, DeployStep, deploy_plan
from verillm.chain import protocol
from verillm.cli.chain import chain as chain_cli
from verillm.errors import ConfigError
from verillm.spec.params import MINIMAL, compute_sized_preset

# A plan in the protocol's shape, over the test contract: args from the preset, then wiring.
PROBE_PLAN = (
    DeployStep("ChainProbe", lambda ctx: (ctx.preset.MIN_STAKE_WEI,), key="Probe"),
    DeployStep("ChainProbe", lambda ctx: (ctx.preset.JOB_FEE_WEI,), key="SecondProbe"),
    CallStep("Probe", "store", lambda ctx: (1, int(ctx.addresses["SecondProbe"], 16))),
)


def test_deploy_plan_builds_args_from_preset_and_earlier_addresses(chain, tmp_path):
    deployment = deploy_plan(chain, MINIMAL, chain.dev_accounts[0], PROBE_PLAN)
    assert set(deployment.addresses) == {"Probe", "SecondProbe"}
    probe = deployment.get(chain, "Probe")
    assert probe.call("minValueWei") == MINIMAL.MIN_STAKE_WEI
    assert deployment.get(chain, "SecondProbe").call("minValueWei") == MINIMAL.JOB_FEE_WEI
    assert probe.call("values", 1) == int(deployment.addresses["SecondProbe"], 16)
    assert deployment.start_block <= chain.get_block_number()
    path = tmp_path / "addresses.json"
    deployment.save(path)
    assert Deployment.load(path) == deployment


def test_plan_errors_are_clear(chain):
    with pytest.raises(ConfigError, match="empty"):
        deploy_plan(chain, MINIMAL, chain.dev_accounts[0], ())
    with pytest.raises(ConfigError, match="before deploying Probe"):
        deploy_plan(chain, MINIMAL, chain.dev_accounts[0], (CallStep("Probe", "store"),))
    with pytest.raises(ConfigError, match="no compiled artifact for contract 'Nope'"):
        deploy_plan(chain, MINIMAL, chain.dev_accounts[0], (DeployStep("Nope"),))


def test_deployment_refuses_another_chain(tester_chain):
    deployment = deploy_plan(tester_chain, MINIMAL, tester_chain.dev_accounts[0], PROBE_PLAN[:1])
    wrong = Deployment(**{**deployment.__dict__, "chain_id": 1})
    with pytest.raises(ConfigError, match="chain id 1"):
        wrong.get(tester_chain, "Probe")


def test_cli_deploy_writes_the_address_book(anvil_process, artifacts, tmp_path, monkeypatch):
    monkeypatch.setattr(protocol, "PROTOCOL_STEPS", PROBE_PLAN)
    monkeypatch.setenv("VERILLM_ARTIFACTS_DIR", str(artifacts.dirs[0]))
    out = tmp_path / "addresses.json"
    key = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"  # anvil dev account 0
    result = CliRunner().invoke(chain_cli, ["deploy", "--rpc-url", anvil_process.url, "--preset", "minimal",
                                            "--key", key, "--out", str(out)])
    assert result.exit_code == 0, result.output
    book = json.loads(out.read_text())
    assert book["chain_id"] == 31337 and book["preset"] == "minimal"
    assert set(book["addresses"]) == {"Probe", "SecondProbe"}


def test_cli_deploy_without_key_fails(anvil_process, monkeypatch):
    monkeypatch.delenv("VERILLM_DEPLOYER_KEY", raising=False)
    result = CliRunner().invoke(chain_cli, ["deploy", "--rpc-url", anvil_process.url])
    assert isinstance(result.exception, ConfigError)


def _preset_for_contracts(**overrides):
    """MINIMAL plus whatever ProtocolParams fields the preset does not have yet (a stand-in
    preset object: the plan reads attributes only)."""
    fields = {f.name: getattr(MINIMAL, f.name) for f in dataclasses.fields(MINIMAL)}
    extra = {"MAX_COMMITTEE_REDRAWS": 4, "DRAW_WINDOW_BLOCKS": 20, "START_WINDOW_BLOCKS": 20, "PROOF_WINDOW_BLOCKS": 20}
    merged = {**extra, **fields, **overrides}
    # the contracts require epochs and unbonding to cover the timeline (Params.validate)
    sized = compute_sized_preset(MINIMAL.replace(**{k: v for k, v in merged.items() if k != "name"}))
    return SimpleNamespace(**{f.name: getattr(sized, f.name) for f in dataclasses.fields(sized)})


def test_protocol_params_follow_the_struct_in_the_abi(artifacts):
    assert protocol.compute_preset_name("minStakeWei") == "MIN_STAKE_WEI"
    assert protocol.compute_preset_name("auditRateBps") == "AUDIT_RATE_BPS"
    names = [c["name"] for c in protocol.get_params_components(artifacts)]
    values = protocol.compute_protocol_params(_preset_for_contracts(), artifacts)
    assert values[names.index("minStakeWei")] == MINIMAL.MIN_STAKE_WEI
    assert values[names.index("committeeSize")] == MINIMAL.COMMITTEE_SIZE
    stripped = SimpleNamespace(name="stripped", MIN_STAKE_WEI=1)
    with pytest.raises(ConfigError, match="preset 'stripped' lacks .*'JOB_FEE_WEI'"):
        protocol.compute_protocol_params(stripped, artifacts)


def test_protocol_plan_deploys_and_wires_the_contracts(anvil_chain):
    preset = _preset_for_contracts()
    deployment = deploy_plan(anvil_chain, preset, anvil_chain.dev_accounts[0], protocol.PROTOCOL_STEPS)
    assert set(deployment.addresses) == {"Registry", "Jobs", "Batches", "Disputes", "Delivery", "Coverage"}
    registry = deployment.get(anvil_chain, "Registry")
    assert registry.call("jobs") == deployment.addresses["Jobs"]
    assert registry.call("batches") == deployment.addresses["Batches"]
    assert deployment.get(anvil_chain, "Jobs").call("batches") == deployment.addresses["Batches"]
    assert registry.call("disputes") == deployment.addresses["Disputes"]
    assert registry.call("coverage") == deployment.addresses["Coverage"]
    assert deployment.get(anvil_chain, "Jobs").call("disputes") == deployment.addresses["Disputes"]
    assert deployment.get(anvil_chain, "Jobs").call("delivery") == deployment.addresses["Delivery"]
    assert registry.call("delivery") == deployment.addresses["Delivery"]
