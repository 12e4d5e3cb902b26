"""Why bench.py's queued flush left ours at 0.8x where decode_profiler's queued state did not: order and the eager
timer before each GPU time, on bench.py's own GpuTimer (queued flush) and EagerTimer."""
import sys

import torch

P = sys.argv[1]
sys.path.insert(0, f"{P}/torch-ext")
sys.path.insert(0, f"{P}/benchmarks")
sys.path.insert(0, "/root/lab")
import timing  # noqa: E402
from decode_replay import add_norm, implementations, qwen_norm  # noqa: E402

kernel = __import__("ltx_kernels")
gpu, eager = timing.GpuTimer(), timing.EagerTimer()
cn, ca = torch.compile(qwen_norm), torch.compile(add_norm)
print(torch.cuda.get_device_name(), gpu.method)
for rows in (32, 128, 512):
    x = torch.randn(rows, 4096, device="cuda").bfloat16()
    r = torch.randn(rows, 4096, device="cuda").bfloat16()
    w = (torch.rand(4096, device="cuda") * 0.9 + 0.1).bfloat16()
    impls = implementations(kernel, cn, ca, x, r, w, False)
    for f in impls.values():
        f()
    torch.cuda.synchronize()
    for variant in ("fwd", "rev", "eager-fwd", "eager-rev", "fwd2"):
        names = list(impls) if "rev" not in variant else list(reversed(impls))
        t = {}
        for n in names:
            if variant.startswith("eager"):
                eager(impls[n])
            t[n], how = gpu(impls[n])
        print(f"rows {rows:4d} {variant:9s} " + "  ".join(f"{n} {t[n]:6.2f}" for n in impls), flush=True)
