"""Jobs for benchmarks and calibration: varied lengths and sampling, from a named seed.

Calibration and detection draw from disjoint seeds and prompt sets, so the false-rejection
rate the detection benchmark reports is measured on jobs the thresholds never saw. The
devnet's prompts belong to the calibration set: the demo's traffic is what the shipped
profile must accept (a stale profile once rejected an honest devnet job, `docs/benchmarks.md`).
"""

import random
from dataclasses import dataclass

from verillm.engine.text import compute_chat_tokens
from verillm.spec.hashing import keccak256
from verillm.spec.job import compute_model_id
from verillm.spec.types import Job, ModelManifest, SamplingParams

SMOLLM2_PROMPTS = (
    "What is the capital of France?", "Explain photosynthesis in two sentences.",
    "Write a haiku about the sea.", "List three prime numbers greater than 50.",
    "How do I reverse a list in Python?", "What causes the seasons on Earth?",
    "Translate 'good morning' into Spanish and German.", "Give me a tip for better sleep.",
    "Summarize the plot of Romeo and Juliet.", "What is a hash function?",
    "Why is the sky blue?", "Name the planets of the solar system.",
    "Write a short thank-you note to a colleague.", "What is the difference between RAM and storage?",
    "How many legs does a spider have?", "Suggest a name for a bakery.",
    "What is 17 times 23?", "Describe a cat to someone who has never seen one.",
    "What does HTTP stand for?", "Give two arguments for learning history.",
    "How does a bicycle stay upright?", "Write a limerick about a robot.",
    "What is the boiling point of water at sea level?", "Explain recursion to a child.",
    "What are the primary colors?", "Recommend a book for a long flight.",
    "What is the Pythagorean theorem?", "How do vaccines work?",
    "Write one sentence that uses the word 'serendipity'.", "What is the tallest mountain on Earth?",
    "Give a recipe idea with eggs and spinach.", "Why do we have leap years?",
    "What is machine learning?", "Describe the water cycle.",
    "Write a motivational quote.", "What is the speed of light?",
    "How do I make a cup of tea?", "What is the largest ocean?",
    "Explain what a blockchain is in simple terms.", "Name three famous painters.",
    "What is the function of the heart?", "Write a two-line poem about autumn.",
    "What is an API?", "How do plants get water?",
    "Give me a fun fact about octopuses.", "What is inflation in economics?",
    "How do airplanes fly?", "What is the meaning of 'carpe diem'?",
)

# What `verillm devnet` sends (greedy, 16 tokens): part of the calibration set, never of the detection set.
DEVNET_PROMPTS = (
    "What is the capital of France?", "How many legs does a spider have?", "Write one sentence about the sea.",
    "Name three prime numbers.", "What colour is the sky on a clear day?", "Give me a word that rhymes with cat.",
    "What do bees make?", "Say hello in Spanish.", "What is two plus three?", "Name a planet in our solar system.",
)
CALIBRATION_PROMPTS = SMOLLM2_PROMPTS[0::3] + tuple(p for p in DEVNET_PROMPTS if p not in SMOLLM2_PROMPTS[0::3])
DETECTION_PROMPTS = tuple(p for i, p in enumerate(SMOLLM2_PROMPTS) if i % 3 and p not in DEVNET_PROMPTS)

SAMPLING_MIX = (
    SamplingParams(),  # greedy
    SamplingParams(temperature_milli=700, top_k=40, top_p_ppm=900_000),
    SamplingParams(temperature_milli=1000),
    SamplingParams(temperature_milli=300, top_p_ppm=950_000),
)


@dataclass(frozen=True)
class Workload:
    """How to make a set of jobs."""

    name: str
    count: int
    max_new_tokens: int = 32
    sampled_only: bool = False


def _sampling(rng: random.Random, sampled_only: bool) -> SamplingParams:
    choices = SAMPLING_MIX[1:] if sampled_only else SAMPLING_MIX
    base = rng.choice(choices)
    return SamplingParams(base.temperature_milli, base.top_k, base.top_p_ppm, rng.getrandbits(63))


def _tiny_prompt(rng: random.Random, vocab: int) -> tuple[int, ...]:
    length = rng.choice([4, 9, 17, 40, 75, 130, 260])
    return tuple(rng.randrange(3, vocab) for _ in range(length))


def _chat_prompt(rng: random.Random, tokenizer, index: int, split: str) -> tuple[int, ...]:
    prompts = CALIBRATION_PROMPTS if split == "calibration" else DETECTION_PROMPTS
    return compute_chat_tokens(tokenizer, [{"role": "user", "content": prompts[index % len(prompts)]}])


def make_jobs(workload: Workload, model_name: str, manifest: ModelManifest, tokenizer, seed_name: str) -> list[Job]:
    """Return ``workload.count`` jobs for ``model_name`` ("tiny" or a chat model), reproducible from ``seed_name``."""
    rng = random.Random(seed_name)
    model_id = compute_model_id(manifest)
    jobs = []
    for i in range(workload.count):
        if model_name != "tiny":
            prompt = _chat_prompt(rng, tokenizer, i, seed_name)
        else:
            prompt = _tiny_prompt(rng, manifest.vocab_size)
        nonce = keccak256(f"{seed_name}/{workload.name}/{i}".encode())
        jobs.append(Job(model_id, prompt, _sampling(rng, workload.sampled_only), workload.max_new_tokens, nonce))
    return jobs
