"""Run as a separate process (so oneDNN reads ONEDNN_MAX_CPU_ISA at start): load a bf16 model,
report the kernel class it measures, run the given jobs and write the traces.

    python tests/engine/kernel_class_worker.py MODEL JOBS.json OUT.npz [MODE [WEIGHTS.pt]]

MODE: "exact" (the per-machine kernels, the default) or "canonical". WEIGHTS.pt: a state dict
to run instead of the model's own weights (the seeded tiny model's init, `normal_`, draws other
values without SIMD: `ATEN_CPU_CAPABILITY=default` would otherwise build another model).

JOBS.json: a list of [input_tokens, max_new_tokens, temperature_milli, seed]. OUT.npz holds
``kernel_class``, ``model_id`` and per job ``tokens_i``, ``fingerprints_i``, ``flags_i``; or
``refused`` with the ConfigError's message.
"""

import dataclasses
import json
import sys

import numpy as np
import torch

from verillm.engine.manifests import compute_weights_digest
from verillm.engine.models import load_model
from verillm.engine.torch_engine import TorchEngine
from verillm.errors import ConfigError
from verillm.spec.types import Job, SamplingParams


def main(model_name: str, jobs_path: str, out_path: str, mode: str = "exact", weights_path: str | None = None) -> None:
    try:
        model, tokenizer, manifest = load_model(model_name, "bfloat16", mode=mode)
    except ConfigError as exc:
        np.savez(out_path, refused=str(exc))
        return
    if weights_path:
        model.load_state_dict(torch.load(weights_path))
        manifest = dataclasses.replace(manifest, weights_digest=compute_weights_digest(model))
    engine = TorchEngine(model, tokenizer, manifest, max_batch_size=3, num_threads=1)
    specs = json.loads(open(jobs_path).read())
    jobs = [Job(engine.model_id, tuple(tokens), SamplingParams(temperature_milli=t, seed=s), n, bytes([i]) * 32) for i, (tokens, n, t, s) in enumerate(specs)]
    arrays = {"kernel_class": manifest.kernel_class, "model_id": engine.model_id.hex(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    for i, trace in enumerate(engine.run(jobs)):
        arrays.update({f"tokens_{i}": np.asarray(trace.output_tokens), f"fingerprints_{i}": trace.fingerprints, f"flags_{i}": trace.flags})
    np.savez(out_path, **arrays)


if __name__ == "__main__":
    main(*sys.argv[1:6])
