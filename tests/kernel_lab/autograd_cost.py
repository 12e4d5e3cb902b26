"""Host time per call of the two ways of recording an op in the autograd graph (autograd_cost.cpp), against
F.rms_norm, on the CPU: `python tests/kernel_lab/autograd_cost.py` (builds the extension with torch's
cpp_extension on first use, then prints µs per call, best of 5 rounds)."""

import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

HERE = Path(__file__).parent
load(name="hx_ext", sources=[str(HERE / "autograd_cost.cpp")], verbose=False)
x = torch.randn(1, 4096)
w = torch.ones(4096, requires_grad=True)
g = torch.randn(1, 4096)


def per_call(f, n=20000):
    for _ in range(1000):
        f()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


fwd, fwdf, fwdn = (
    torch.ops.hx.fwd.default,
    torch.ops.hx.fwdf.default,
    torch.ops.hx.fwdn.default,
)
cases = {
    "no graph (the op below autograd), forward": (
        lambda: fwd(x, w.detach(), 1e-6),
        20000,
    ),
    "torch::autograd::Function, forward": (lambda: fwdf(x, w, 1e-6), 20000),
    "graph node (record_graph), forward": (lambda: fwdn(x, w, 1e-6), 20000),
    "F.rms_norm, forward": (
        lambda: torch.nn.functional.rms_norm(x, (4096,), w, 1e-6),
        20000,
    ),
    "torch::autograd::Function, forward+backward": (
        lambda: fwdf(x, w, 1e-6).backward(g),
        5000,
    ),
    "graph node (record_graph), forward+backward": (
        lambda: fwdn(x, w, 1e-6).backward(g),
        5000,
    ),
    "F.rms_norm, forward+backward": (
        lambda: torch.nn.functional.rms_norm(x, (4096,), w, 1e-6).backward(g),
        5000,
    ),
}
print(f"torch {torch.__version__}, CPU tensors 1 x 4096 (the ops do no work), µs per call")
for name, (fn, n) in cases.items():
    print(f"{name:46s} {per_call(fn, n):6.1f}")
