# Batch-1 decode vs one prefill over the same tokens, exact kernels, on CUDA: the first submodule
# whose output differs in any bit, per differing position (docs/vllm.md, "The reference engine on
# a GPU"). Run on a lent GPU machine after scripts/gpu-check.sh has set up /tmp/verillm-site:
#   PYTHONPATH=/tmp/verillm-site python3 -P scripts/gpu-diag-modules.py OUTDIR [tiny|smollm2-shape] [JOBS]
import collections, json, os, sys, torch
from verillm.engine.exact_attention import make_exact_cache  # registers the exact attention
from verillm.engine.exact import exact_kernels
from verillm.bench.device import build_seeded_model
model, tok, _, _ = build_seeded_model(sys.argv[2] if len(sys.argv) > 2 else "smollm2-shape", "bfloat16")
model = model.cuda()
names = {m: n for n, m in model.named_modules() if n}
rec = []
def hook(m, args, out):
    o = out[0] if isinstance(out, tuple) else out
    if torch.is_tensor(o) and o.dim() == 3:
        rec.append((names[m], o.detach().clone()))
for m in names:
    m.register_forward_hook(hook)
g = torch.Generator().manual_seed(0)
firsts, counts, jobs, positions = collections.Counter(), 0, 0, 0
with torch.no_grad(), exact_kernels(model):
    for job in range(int(sys.argv[3]) if len(sys.argv) > 3 else 40):
        plen = int(torch.randint(1, 60, (1,), generator=g))
        ids = torch.randint(3, 1000, (1, plen), generator=g).cuda()
        rec.clear(); steps = []
        out = model(input_ids=ids, use_cache=True, past_key_values=make_exact_cache(model.config))
        steps.append({n: o[:, -1] for n, o in rec}); cache = out.past_key_values
        seq = ids
        for t in range(40):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], 1)
            rec.clear()
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            steps.append({n: o[:, -1] for n, o in rec})
        rec.clear()
        model(input_ids=seq, use_cache=False)
        full = collections.OrderedDict((n, o) for n, o in rec)
        jobs += 1
        for i, step in enumerate(steps):
            p = plen - 1 + i
            positions += 1
            for n, o in full.items():
                if n in step and not torch.equal(step[n].view(torch.int16), o[:, p].view(torch.int16)):
                    firsts[n.split(".")[-1] if "layers." in n else n] += 1; counts += 1
                    if counts <= 12: print(f"job {job} position {p}: first differing module {n}", flush=True)
                    break
res = {"jobs": jobs, "positions": positions, "differing_positions": counts, "first_differing_module_kinds": dict(firsts)}
print(res)
json.dump(res, open(os.path.join(sys.argv[1], f"modules-{sys.argv[2] if len(sys.argv) > 2 else 'smollm2-shape'}.json"), "w"))
