"""Host time per call taken apart, on a tiny fused add + RMSNorm (1 x 4096 bf16, the GPU idle): our ops with and
without their Python wrapper, grad mode and autograd, forward and forward+backward, beside F.rms_norm and an add
+ F.rms_norm (what the fused add replaces); medians of 9 interleaved rounds of 300 calls, then torch.profiler's CPU
self times of three forward+backward calls. Template developers' tool (not part of generated projects); from a built
project root with LOCAL_KERNELS set (a project rendered with docs/example-answers.yml):

    python /path/to/tests/kernel_lab/host_parts.py

docs/benchmarks.md, "2026-12-07 (cooperative)", has what it showed on an H200.
"""

import statistics
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "benchmarks")
import bench  # noqa: E402  (the project's benchmarks/bench.py: how it loads the kernel)
from host_rounds import host_rounds  # noqa: E402  (beside this file)

ROUNDS, CALLS, WARMUP = 9, 300, 200

kernel, how = bench.load_kernel(None)
ops = kernel._ops.ops
dev, dt = torch.device("cuda"), torch.bfloat16
x = torch.randn(1, 4096, device=dev, dtype=dt, requires_grad=True)
r = torch.randn(1, 4096, device=dev, dtype=dt, requires_grad=True)
w = torch.randn(4096, device=dev, dtype=dt, requires_grad=True)
gy, gh = torch.randn_like(x), torch.randn_like(x)
xd, rd, wd = x.detach(), r.detach(), w.detach()
h = (xd + rd).contiguous()
grad = torch.autograd.grad
fused_op, rms_op, bwd_op = ops.fused_add_rms_norm_fwd.default, ops.rms_norm_fwd.default, ops.rms_norm_bwd.default
cases = {  # name -> (call, grad mode)
    "rms fwd (grad mode, w requires grad)": (lambda: kernel.rms_norm(x, w), True),
    "F.rms_norm fwd (grad mode)": (lambda: F.rms_norm(x, (4096,), w, 1e-6), True),
    "fused fwd (grad mode)": (lambda: kernel.fused_add_rms_norm(x, r, w), True),
    "rms fwd, no grad": (lambda: kernel.rms_norm(xd, wd), False),
    "fused fwd, no grad": (lambda: kernel.fused_add_rms_norm(xd, rd, wd), False),
    "F.rms_norm fwd, no grad": (lambda: F.rms_norm(xd, (4096,), wd, 1e-6), False),
    "raw rms_norm_fwd op, no grad": (lambda: rms_op(xd, wd, 1e-6, False, None), False),
    "raw fused_add_rms_norm_fwd op, no grad": (lambda: fused_op(xd, rd, wd, 1e-6, False, None), False),
    "raw rms_norm_bwd op (rms)": (lambda: bwd_op(gy, None, xd, wd, 1e-6, False), False),
    "raw rms_norm_bwd op (fused, grad_residual)": (lambda: bwd_op(gy, gh, h, wd, 1e-6, False), False),
    "empty_like x2": (lambda: (torch.empty_like(xd), torch.empty_like(xd)), False),
    "rms fwd+bwd": (lambda: grad((kernel.rms_norm(x, w),), (x, w), (gy,)), True),
    "F.rms_norm fwd+bwd": (lambda: grad((F.rms_norm(x, (4096,), w, 1e-6),), (x, w), (gy,)), True),
    "fused fwd+bwd (both grads)": (lambda: grad(kernel.fused_add_rms_norm(x, r, w), (x, r, w), (gy, gh)), True),
    "fused fwd+bwd (grad of y only)": (lambda: grad(kernel.fused_add_rms_norm(x, r, w)[0], (x, r, w), gy), True),
    "add + F.rms_norm fwd+bwd": (
        lambda: grad((F.rms_norm(x + r, (4096,), w, 1e-6), x + r), (x, r, w), (gy, gh)),
        True,
    ),
    "rms fwd+bwd, x only": (lambda: grad((kernel.rms_norm(x, wd),), (x,), (gy,)), True),
    "F.rms_norm fwd+bwd, x only": (lambda: grad((F.rms_norm(x, (4096,), wd, 1e-6),), (x,), (gy,)), True),
}
names = list(cases)
# rounds start at the first, second and third case in turn (as run on 2026-12-07), so that none is always first
times, _ = host_rounds(cases, ROUNDS, CALLS, WARMUP, lambda round_: names[round_ % 3 :] + names[: round_ % 3])
print(f"host us per call, median of {ROUNDS} rounds of {CALLS} ({how})")
for name, t in times.items():
    print(f"{name:45s} {statistics.median(t):7.2f}  [{min(t):6.2f} - {max(t):6.2f}]")

for name in ("fused fwd+bwd (both grads)", "rms fwd+bwd", "F.rms_norm fwd+bwd"):
    fn, grad_mode = cases[name]
    with torch.set_grad_enabled(grad_mode), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(100):
            fn()
    print(f"== {name}: CPU self time, 100 calls")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60))
