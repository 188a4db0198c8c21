"""`verillm chain add-model` finds the tolerance profile of the model a node serves: by model id,
never by the manifest's name (a model loaded from files is named by family and shape: SmolLM2's
manifest is `llama-30x576-…`, and add-model on a SmolLM2 node used to fail as docs/operators.md
ran it). A profile calibrated into --profile-dir wins; a manifest no shipped model hashes to is
refused instead of registered with another model's thresholds."""

import dataclasses

import pytest

from verillm.cli.chain import compute_add_model_profile
from verillm.engine.profiles import get_profile_path, load_profile
from verillm.errors import ConfigError
from verillm.spec.job import compute_model_id


def test_a_shipped_model_is_found_by_its_model_id(tiny_model):
    manifest = tiny_model[2]
    assert compute_add_model_profile(manifest, compute_model_id(manifest), "mainnet", None, "no-such-dir") == load_profile("tiny", "float32")


def test_a_model_no_shipped_one_hashes_to_is_refused(tiny_model, tmp_path):
    renamed = dataclasses.replace(tiny_model[2], name="tiny-but-not-the-shipped-one")
    with pytest.raises(ConfigError, match="no shipped model has this id"):
        compute_add_model_profile(renamed, compute_model_id(renamed), "mainnet", None, tmp_path)


def test_a_profile_calibrated_into_the_profile_dir_wins(tiny_model, tmp_path):
    manifest = tiny_model[2]
    model_id = compute_model_id(manifest)
    calibrated = dataclasses.replace(load_profile("tiny", "float32"), model="calibrated here")
    get_profile_path(tmp_path, model_id, "float32").write_text(calibrated.to_json())
    assert compute_add_model_profile(manifest, model_id, "mainnet", None, tmp_path).model == "calibrated here"


@pytest.mark.smollm2
def test_smollm2_served_from_its_files_gets_the_shipped_smollm2_profile(smollm2_model, tmp_path):
    manifest = smollm2_model[2]
    assert "smollm2" not in manifest.name.lower()  # what broke the name-based lookup
    profile = compute_add_model_profile(manifest, compute_model_id(manifest), "mainnet", None, tmp_path)
    assert profile == load_profile("smollm2", "float32")
