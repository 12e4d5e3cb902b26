"""RMSNorm cases for bench.py: Qwen3-8B's norms (hidden, q_norm, k_norm, the fused residual add), LTX-Video 2B's
norm1 (no weight) and the Hugging Face blog's shapes; forward+backward at 8192 x 4096, per head 8192 x 32 x 128,
rows of 128 (32768 x 128), the fused add at 8192 x 4096, and the tiny shapes that also get a host time.

- Bytes: 2x + w; fused add 4x + w. Forward+backward: 5x + 3w (the backward reads grad_out, x and w, writes dx and
  dw); fused add 8x + 3w (it reads grad_out, grad_h, h and w, writes one dx for x and residual, and dw).
- Reference: the exact math in float64 (x * rsqrt(mean(x^2) + eps) * w; the fused add normalizes h = x + residual
  and returns h too). Tolerance: 4 roundings of the dtype, relative: Qwen3's rounding rounds twice.
- Baselines: eager = transformers' Qwen3RMSNorm (holding the case's weight), diffusers' RMSNorm without weight
  (LTX-Video norm1/norm2), or an exact copy when the library is not installed; F.rms_norm (one fused aten kernel,
  weight dtype = x dtype); liger (liger_rms_norm, liger_fused_add_rms_norm; in_place=False: the backward then
  leaves grad_out alone) and quack (quack.rmsnorm, with autograd) when importable. Ours runs with its defaults
  (rounding="model": Qwen3's rounding).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from ._common import LTX_GRID, Case, DiffusersRMSNormCopy, dims, liger, nbytes, optional, randn, rel, rms_normalized

OP = "rmsnorm"
IMPLS = ["ours", "eager", "F.rms_norm", "compile", "liger", "quack"]
EPS = 1e-6  # Qwen3-8B rms_norm_eps and LTX-Video norm_eps
HF_BLOG_SHAPES = [(1, 1024, 2048), (2, 1024, 2048), (4, 1024, 2048), (1, 4096, 2048), (2, 4096, 3072), (1, 8192, 2048)]
HF_BLOG_SHAPES += [(4, 4096, 3072)]


class Qwen3RMSNormCopy(nn.Module):
    """transformers' Qwen3RMSNorm: normalize in fp32, round to the input dtype, then multiply by the weight."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def eager_rms_norm(dim: int, weight: torch.Tensor | None) -> nn.Module:
    """Qwen3RMSNorm with the given weight, or (no weight) diffusers' RMSNorm as LTX-Video's norm1/norm2 use it."""
    if weight is None:
        cls = optional("diffusers.models.normalization", "RMSNorm")
        return cls(dim, eps=EPS, elementwise_affine=False) if cls else DiffusersRMSNormCopy(EPS)
    module = (optional("transformers.models.qwen3.modeling_qwen3", "Qwen3RMSNorm") or Qwen3RMSNormCopy)(dim, eps=EPS)
    del module.weight  # then the case's weight tensor itself (not a Parameter copy): its gradient is the one checked
    module.weight = weight
    return module


class AddNorm(nn.Module):
    """The Qwen3 decoder's residual step: h = x + residual (rounded to x's dtype), then norm(h); returns both."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x + residual
        return self.norm(h), h


def add_then_f_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None):
    h = x + residual
    return F.rms_norm(h, (h.shape[-1],), weight, EPS), h


def quack_rms_norm(x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    return optional("quack", "rmsnorm")(x.reshape(-1, x.shape[-1]), weight, eps=EPS).view(x.shape)


def quack_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None):
    flat = (x.reshape(-1, x.shape[-1]), residual.reshape(-1, x.shape[-1]))
    out, new_residual = optional("quack", "rmsnorm")(flat[0], weight, residual=flat[1], eps=EPS, prenorm=True)
    return out.view(x.shape), new_residual.view(x.shape)


def quack_available() -> bool:
    return callable(optional("quack", "rmsnorm"))  # `quack.rmsnorm` is the function when the package loads


def reference(t: dict) -> torch.Tensor:
    y = rms_normalized(t["x"], EPS)
    return y if t["weight"] is None else y * t["weight"]


def add_reference(t: dict) -> tuple[torch.Tensor, torch.Tensor]:
    h = t["x"] + t["residual"]
    return reference({"x": h, "weight": t["weight"]}), h


def cases() -> list[Case]:
    def make(shape, weighted, fused_add=False):
        def inputs(dtype, device):
            t = {
                "x": randn(shape, dtype, device),
                "weight": randn(shape[-1], dtype, device, 0.1, 1.0) if weighted else None,
            }
            if fused_add:
                t["residual"] = randn(shape, dtype, device)
            return t

        return inputs

    def impls(kernel, t):
        x, w = t["x"], t["weight"]
        found = {
            "ours": (kernel.rms_norm, (x, w, EPS)),
            "eager": (eager_rms_norm(x.shape[-1], w), (x,)),
            "F.rms_norm": (F.rms_norm, (x, (x.shape[-1],), w, EPS)),
        }
        if liger():  # casting_mode="llama": Qwen3's rounding
            found["liger"] = (functools.partial(liger().liger_rms_norm, in_place=False), (x, w, EPS))
        if quack_available():
            found["quack"] = (quack_rms_norm, (x, w))
        return found

    def add_impls(kernel, t):
        x, r, w = t["x"], t["residual"], t["weight"]
        found = {
            "ours": (kernel.fused_add_rms_norm, (x, r, w, EPS)),
            "eager": (AddNorm(eager_rms_norm(x.shape[-1], w)), (x, r)),
            "F.rms_norm": (add_then_f_rms_norm, (x, r, w)),
        }
        if liger():
            found["liger"] = (functools.partial(liger().liger_fused_add_rms_norm, in_place=False), (x, r, w, EPS))
        if quack_available():
            found["quack"] = (quack_add_rms_norm, (x, r, w))
        return found

    def tolerance(dtype, t):
        rtol = rel(dtype, 4)  # Qwen3's rounding rounds twice; the others once
        return rtol, rtol * 1e-2

    def moved(t):
        return 2 * nbytes(t["x"]) + nbytes(t["weight"])

    def add_moved(t):
        return 4 * nbytes(t["x"]) + nbytes(t["weight"])

    def train_moved(t):
        return 5 * nbytes(t["x"]) + 3 * nbytes(t["weight"])

    def add_train_moved(t):
        return 8 * nbytes(t["x"]) + 3 * nbytes(t["weight"])

    def case(variant, label, shape, quick=False, train=False, host=False, quick_train=False):
        fused = variant == "fused_add"
        return Case(
            OP,
            variant,
            f"{label}.{dims(shape)}",
            shape,
            make(shape, variant != "no_weight", fused),
            add_impls if fused else impls,
            add_moved if fused else moved,
            tolerance,
            quick,
            reference=add_reference if fused else reference,
            grads=("x", "residual", "weight") if fused else ("x", "weight"),
            train=train or host,
            quick_train=quick_train,
            moved_train=add_train_moved if fused else train_moved,
            host=host,
        )

    hidden_rows = (1, 8, 32, 128, 512, 1024, 2048, 4096, 8192, 16384)
    found = [
        case(
            "weight",
            "qwen3-8b.hidden",
            (rows, 4096),
            rows in (1, 128, 8192),
            rows == 8192,
            rows == 1,
            rows in (1, 8192),
        )
        for rows in hidden_rows
    ]
    for tokens in (128, 1024, 8192):
        found.append(case("weight", "qwen3-8b.q_norm", (tokens, 32, 128), tokens == 8192, tokens == 8192))
        found.append(case("weight", "qwen3-8b.k_norm", (tokens, 8, 128)))
    found.append(case("weight", "qwen3-8b.k_norm-rows", (32768, 128), train=True))  # 4096 tokens x 8 heads as rows
    found += [case("no_weight", "ltx-2b.norm1", (2, s, 2048), s == 7392) for s in LTX_GRID]
    found.append(case("no_weight", "ltx-2b.norm1", (1, 1, 2048), quick=True, host=True))
    found += [case("weight", "hf-blog", shape) for shape in HF_BLOG_SHAPES]
    add_rows = (1, 128, 2048, 8192)
    found += [
        case("fused_add", "qwen3-8b.add_norm", (rows, 4096), rows in (1, 8192), rows == 8192, rows == 1, rows == 8192)
        for rows in add_rows
    ]
    return found
