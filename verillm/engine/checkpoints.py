"""Model sources: what `--model` names, and loading it from local files only.

`--model` takes a short alias (`tiny`: the seeded test Llama built in memory; `smollm2`: the
SmolLM2-135M-Instruct directory converted once into the cache), a local Hugging Face
directory (config.json, safetensors weights, tokenizer.json, a chat template), or a GGUF file.
Nothing is downloaded: every load passes ``local_files_only`` and a missing file raises
`ModelFileMissing` naming it before transformers is asked for anything. Resolving a source
imports neither torch nor transformers (the devnet parent and profile lookups use it).
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path

from verillm import envs
from verillm.errors import ModelFileMissing, UnknownModel

ALIASES = ("tiny", "smollm2")
SMOLLM2_DIRECTORY_NAME = "smollm2-135m-instruct-fp32"


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from."""

    kind: str
    """"tiny" (built from a seed), "hf_dir" or "gguf"."""
    path: Path | None
    """The directory or GGUF file; None for tiny."""
    alias: str | None
    """The short name when the source is an alias's (tiny, smollm2): its shipped profiles apply."""


def get_cache_dir() -> Path:
    """Return the directory for converted weights ($VERILLM_CACHE_DIR, default ~/.cache/verillm)."""
    return envs.get_cache_dir()


def get_smollm2_directory() -> Path:
    """Return the cache directory SmolLM2 is converted into (it may not exist yet)."""
    return get_cache_dir() / SMOLLM2_DIRECTORY_NAME


def _is_same_path(a: Path, b: Path) -> bool:
    return a.exists() and b.exists() and os.path.samefile(a, b)


def resolve_model_source(spec: str) -> ModelSource:
    """Return the source ``spec`` names: an alias, an existing HF directory or an existing .gguf file."""
    if spec == "tiny":
        return ModelSource("tiny", None, "tiny")
    if spec == "smollm2":
        return ModelSource("hf_dir", get_smollm2_directory(), "smollm2")
    path = Path(spec).expanduser()
    if path.is_dir():
        return ModelSource("hf_dir", path.resolve(), "smollm2" if _is_same_path(path, get_smollm2_directory()) else None)
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource("gguf", path.resolve(), None)
    if path.is_file():
        raise UnknownModel(f"--model {spec}: a file that is not a .gguf; give a GGUF file or a Hugging Face directory")
    if os.sep in spec or spec.endswith(".gguf"):
        raise ModelFileMissing(f"--model {spec}: no such directory or GGUF file")
    raise UnknownModel(f"unknown model {spec!r}: not an alias ({', '.join(ALIASES)}) nor a directory or .gguf file")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelFileMissing(f"{path} is not valid JSON: {exc}") from exc


def _check_weights(directory: Path) -> None:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(_read_json(index).get("weight_map", {}).values()))
        missing = [s for s in shards if not (directory / s).is_file()]
        if not shards or missing:
            raise ModelFileMissing(f"{directory}: weight shards listed in {index.name} are missing: {missing or 'none listed'}")
        return
    if not (directory / "model.safetensors").is_file():
        pickles = sorted(p.name for p in directory.glob("*.bin"))
        hint = f" ({', '.join(pickles)} found: pickled weights are not loaded, convert them to safetensors)" if pickles else ""
        raise ModelFileMissing(f"{directory}: no model.safetensors or model.safetensors.index.json{hint}")


def verify_hf_directory(directory: Path) -> None:
    """Raise ModelFileMissing naming the first file a served HF directory lacks."""
    for name in ("config.json", "tokenizer.json"):
        if not (directory / name).is_file():
            raise ModelFileMissing(f"{directory}: missing {name}")
    _check_weights(directory)
    tokenizer_config = directory / "tokenizer_config.json"
    has_template = (directory / "chat_template.jinja").is_file() or (directory / "chat_template.json").is_file()
    if not has_template and not (tokenizer_config.is_file() and _read_json(tokenizer_config).get("chat_template")):
        raise ModelFileMissing(f"{directory}: missing a chat template (chat_template.jinja, or chat_template in tokenizer_config.json)")


def load_hf_directory(directory: Path, torch_dtype):
    """Return (model, tokenizer) from a local HF directory, checked first, in ``torch_dtype``."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from verillm.engine.families import get_family, prepare_model

    verify_hf_directory(directory)
    get_family(AutoConfig.from_pretrained(directory, local_files_only=True))  # refuse before reading weights
    hf_logging.disable_progress_bar()  # per-tensor bars would flood node and test logs
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch_dtype, local_files_only=True)
    return prepare_model(model.eval()), tokenizer


def load_gguf(path: Path, torch_dtype):
    """Return (model, tokenizer) from a GGUF file, dequantized into ``torch_dtype``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from verillm.engine.families import prepare_model

    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    if not tokenizer.chat_template:
        raise ModelFileMissing(f"{path}: the GGUF carries no tokenizer.chat_template")
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch_dtype, local_files_only=True)
    return prepare_model(model.eval()), tokenizer
