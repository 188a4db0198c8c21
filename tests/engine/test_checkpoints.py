"""Models from a path: same files → same model id; every missing file is a typed error naming it;
the manifest is derived from the files (committed-layer rule, stop tokens, name)."""

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from verillm.engine.checkpoints import resolve_model_source
from verillm.engine.manifests import MAX_COMMITTED_LAYER_GAP, compute_committed_layers
from verillm.engine.models import load_model
from verillm.engine.tiny_checkpoints import save_tiny_checkpoint
from verillm.errors import ModelFileMissing, UnknownModel, UnsupportedModel
from verillm.spec.job import compute_model_id


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory):
    return save_tiny_checkpoint("qwen2", tmp_path_factory.mktemp("ckpt") / "tiny-qwen2")


@pytest.fixture
def copy_of(qwen2_dir, tmp_path):
    def _copy(name: str = "elsewhere"):
        return shutil.copytree(qwen2_dir, tmp_path / name)

    return _copy


def _model_id(path) -> bytes:
    return compute_model_id(load_model(str(path))[2])


def test_committed_layer_rule():
    assert compute_committed_layers(4) == (1, 2, 4)  # the tiny Llama: unchanged
    assert compute_committed_layers(30) == (1, 15, 30)  # SmolLM2: unchanged
    assert compute_committed_layers(1) == (1,) and compute_committed_layers(2) == (1, 2)
    assert compute_committed_layers(32) == (1, 16, 32)
    assert compute_committed_layers(80) == (1, 16, 32, 48, 64, 80)
    for layers in range(1, 200):
        committed = compute_committed_layers(layers)
        assert committed[0] == 1 and committed[-1] == layers  # the token check runs on the last
        assert all(b - a <= MAX_COMMITTED_LAYER_GAP for a, b in zip(committed, committed[1:]))


def test_two_copies_of_a_directory_have_the_same_model_id(qwen2_dir, copy_of):
    assert _model_id(qwen2_dir) == _model_id(copy_of("another-name"))


def test_manifest_is_derived_from_the_files(qwen2_dir):
    model, tokenizer, manifest = load_model(str(qwen2_dir))
    assert manifest.name.startswith("qwen2-4x64-") and manifest.name.endswith(manifest.weights_digest[:4].hex())
    # generation_config lists <|endoftext|> and <|im_end|>; the ChatML template ends a turn with <|im_end|>.
    assert tokenizer.convert_ids_to_tokens(list(manifest.stop_tokens)) == ["<|endoftext|>", "<|im_end|>"]
    assert (manifest.num_layers, manifest.hidden_size, manifest.vocab_size, manifest.max_context_tokens) == (4, 64, 1024, 2048)
    assert manifest.committed_layers == (1, 2, 4) and manifest.dtype == "float32"
    bf16 = load_model(str(qwen2_dir), "bfloat16")[2]
    assert bf16.dtype == "bfloat16" and bf16.weights_digest != manifest.weights_digest


def test_changed_weights_or_template_change_the_model_id(qwen2_dir, copy_of):
    original = _model_id(qwen2_dir)
    weights = copy_of("weights")
    tensors = load_file(weights / "model.safetensors")
    tensors["model.norm.weight"][0] += 1e-3
    save_file(tensors, weights / "model.safetensors", metadata={"format": "pt"})
    assert _model_id(weights) != original
    template = copy_of("template")
    (template / "chat_template.jinja").write_text((template / "chat_template.jinja").read_text().replace("assistant", "bot"))
    assert _model_id(template) != original


def test_turn_end_token_of_the_template_is_a_stop_token(copy_of):
    directory = copy_of()
    generation = json.loads((directory / "generation_config.json").read_text())
    generation["eos_token_id"] = 0
    (directory / "generation_config.json").write_text(json.dumps(generation))
    model, tokenizer, manifest = load_model(str(directory))
    assert manifest.stop_tokens == (0, tokenizer.convert_tokens_to_ids("<|im_end|>"))


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors", "chat_template.jinja"])
def test_a_missing_file_is_named(name, copy_of):
    directory = copy_of()
    (directory / name).unlink()
    with pytest.raises(ModelFileMissing, match=name.split(".")[0] if name != "chat_template.jinja" else "chat template"):
        load_model(str(directory))


def test_pickled_weights_and_missing_shards_are_refused(copy_of):
    directory = copy_of()
    (directory / "model.safetensors").rename(directory / "pytorch_model.bin")
    with pytest.raises(ModelFileMissing, match="pytorch_model.bin found"):
        load_model(str(directory))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(ModelFileMissing, match="model-00001-of-00002.safetensors"):
        load_model(str(directory))


def test_an_unsupported_architecture_is_refused_before_loading(copy_of):
    directory = copy_of()
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(UnsupportedModel, match="bert"):
        load_model(str(directory))


def test_names_and_paths_that_do_not_exist(tmp_path):
    with pytest.raises(UnknownModel, match="not an alias"):
        load_model("gpt-17")
    with pytest.raises(ModelFileMissing, match="no such directory"):
        load_model(str(tmp_path / "nope"))
    with pytest.raises(ModelFileMissing, match="no such directory"):
        load_model("model.gguf")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(UnknownModel, match="not a .gguf"):
        load_model(str(tmp_path / "weights.bin"))


def test_aliases_resolve_without_loading():
    assert resolve_model_source("tiny").kind == "tiny"
    smollm2 = resolve_model_source("smollm2")
    assert smollm2.kind == "hf_dir" and smollm2.alias == "smollm2" and smollm2.path.name == "smollm2-135m-instruct-fp32"


@pytest.mark.slow
@pytest.mark.smollm2
def test_a_gguf_and_the_directory_converted_from_it_have_the_same_model_id():
    from verillm.engine.models import SMOLLM2_GGUF, get_smollm2_gguf_dir

    gguf = load_model(str(get_smollm2_gguf_dir() / SMOLLM2_GGUF))[2]  # dequantized into fp32 on load
    assert resolve_model_source(str(get_smollm2_gguf_dir() / SMOLLM2_GGUF)).kind == "gguf"
    assert gguf == load_model("smollm2")[2]
