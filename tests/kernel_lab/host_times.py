# Host time per call (tiny tensors, GPU idle), with the project's benchmarks/timing.host_us: ours against F.rms_norm.
# Template developers' tool (see run.sh): from a built project root with LOCAL_KERNELS set,
#   python /path/to/tests/kernel_lab/host_times.py   (a project rendered with docs/example-answers.yml)
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, "benchmarks")
from kernels import get_kernel
from timing import host_us

k = get_kernel("my-org/ltx-kernels", version=1)
dev, bf = "cuda", torch.bfloat16
x = torch.randn(1, 4096, device=dev, dtype=bf)
w = torch.randn(4096, device=dev, dtype=bf, requires_grad=True)
g = torch.randn_like(x)
xs = torch.randn(1, 1, 2048, device=dev, dtype=bf)
sc = torch.randn(1, 1, 2048, device=dev, dtype=bf, requires_grad=True)
sh = torch.randn(1, 1, 2048, device=dev, dtype=bf, requires_grad=True)
xg = torch.randn(1, 4096, device=dev, dtype=bf, requires_grad=True)
cases = {
    "rms weight fwd ours": lambda: k.rms_norm(x, w),
    "rms weight fwd F.rms_norm": lambda: F.rms_norm(x, (4096,), w, 1e-6),
    "rms weight train ours": lambda: torch.autograd.grad(k.rms_norm(x, w), (w,), g),
    "rms weight train F.rms_norm": lambda: torch.autograd.grad(F.rms_norm(x, (4096,), w, 1e-6), (w,), g),
    "rms no weight fwd ours": lambda: k.rms_norm(x),
    "rms no weight fwd F.rms_norm": lambda: F.rms_norm(x, (4096,), None, 1e-6),
    "fused add fwd ours (weight grad)": lambda: k.fused_add_rms_norm(x, x, w),
    "adaln train ours": lambda: torch.autograd.grad(k.adaln(xs, sc, sh), (sc, sh), xs),
    "geglu train ours": lambda: torch.autograd.grad(k.geglu(xg), (xg,), x[:, :2048]),
}
# Where the forward+backward's host time goes: each op alone, called through its overload, against aten's.
ops = sys.modules[k.__name__ + "._ops"].ops  # loaded by the package
xd = x.detach()
rstd = torch.ops.aten._fused_rms_norm(xd, [4096], w.detach(), 1e-6)[1]
cases |= {
    "rms fwd op ours": lambda: ops.rms_norm_fwd.default(xd, w, 1e-6, False, None),
    "rms bwd op ours": lambda: ops.rms_norm_bwd.default(g, None, xd, w, 1e-6, False),
    "rms fwd op aten": lambda: torch.ops.aten._fused_rms_norm.default(xd, [4096], w, 1e-6),
    "rms bwd op aten": lambda: torch.ops.aten._fused_rms_norm_backward.default(g, xd, [4096], rstd, w, [True, True]),
    "autograd.grad of x * w": lambda: torch.autograd.grad(x * w, (w,), g),
}
for name, fn in cases.items():
    us, waited = host_us(fn)
    print(f"host {name:36s} {us:7.1f} us{'  (GPU-bound?)' if waited > 0.1 else ''}")
