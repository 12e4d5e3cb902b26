"""Liger's RMSNorm and fused add + RMSNorm at decode sizes (bf16 rows of 4096) beside `rms_norm_lab decode`, for ncu's
gpu__time_duration: each output is checked against float64 first, then 9 calls of each, interleaved.

    ncu --csv --metrics gpu__time_duration.sum --cache-control all -k regex:rms_norm python3 liger_decode.py
"""

import torch
from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
from liger_kernel.ops.rms_norm import LigerRMSNormFunction

EPS = 1e-6
# Liger rounds x * rstd to bf16 (rstd in fp32), multiplies by the weight and rounds again: an rstd a hair off the
# float64 one can move the first rounding by one bf16 step (up to 2^-7 relative), and the last rounding adds up to
# half a step (2^-8).
TOLERANCE = 2**-7 + 2**-8


def reference(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h64 = h.double()
    n = (h64 * torch.rsqrt(h64.pow(2).mean(-1, keepdim=True) + EPS)).bfloat16().double()
    return n * w.double()


def error(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.double() - ref).abs() / (ref.abs() + 1e-2)).max().item()


def run(rows: int) -> None:
    g = torch.Generator(device="cuda").manual_seed(rows)
    x = torch.rand(rows, 4096, device="cuda", generator=g).mul_(6).sub_(3).bfloat16()
    r = torch.rand(rows, 4096, device="cuda", generator=g).mul_(6).sub_(3).bfloat16()
    w = torch.rand(4096, device="cuda", generator=g).mul_(0.9).add_(0.3).bfloat16()
    e1 = error(LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False), reference(x, w))
    y, s = LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False)
    h = (x.float() + r.float()).bfloat16()
    e2 = error(y, reference(h, w))
    assert torch.equal(s, h), "Liger's residual sum differs from the bf16-rounded sum"
    print(f"liger {rows}x4096 err fwd {e1:.1e} add {e2:.1e}", "WRONG" if max(e1, e2) > TOLERANCE else "")
    for _ in range(9):
        LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
        LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False)


if __name__ == "__main__":
    for rows in (1, 8, 32, 128, 256, 512, 1024, 2048, 4096, 8192):
        run(rows)
    torch.cuda.synchronize()
