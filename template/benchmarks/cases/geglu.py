"""GEGLU cases for bench.py: the activation after the projection of diffusers' GEGLU, x = [..., 2 * inner], on
LTX-Video 2B-sized rows (inner 8192) and the Hugging Face blog's shape, with the exact (erf) and tanh gelu;
forward+backward at 14784 x 16384 and on the tiny shape (1 x 16384) that also gets a host time.

- Bytes: 1.5x (x read once, half its size written). Forward+backward: 4x (the backward reads grad_out and x,
  writes dx).
- Reference: the exact math in float64 (`hidden * gelu(gate)`, the same approximation). Tolerance: 4 roundings of
  the dtype relative (eager rounds gelu(gate), then the product), plus 1e-5 of the largest |x| absolute.
- Baselines: eager = diffusers GEGLU's `hidden_states * F.gelu(gate)` after `x.chunk(2, -1)`; liger's
  LigerGELUMulFunction when importable, forward only and tanh only (its only gelu): the same math as eager (gelu
  in fp32, rounded, times hidden), on contiguous halves, its best case. Not in forward+backward: its backward
  writes the gradients into its two inputs' memory, and a gradient of x, the projection's output, would cost it two
  copies and a concatenation that a model with separate gate and up projections would not need.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from ._common import Case, dims, liger, nbytes, randn, rel


def reference_for(approximate: str):
    def reference(t):
        hidden_states, gate = t["x"].chunk(2, dim=-1)
        return hidden_states * F.gelu(gate, approximate=approximate)

    return reference


OP = "geglu"
IMPLS = ["ours", "eager", "compile", "liger"]


class GEGLUActivation(nn.Module):
    """diffusers' GEGLU after its projection: `hidden_states, gate = x.chunk(2, -1); hidden_states * gelu(gate)`."""

    def __init__(self, approximate: str) -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden_states, gate = x.chunk(2, dim=-1)
        return hidden_states * F.gelu(gate, approximate=self.approximate)


def cases() -> list[Case]:
    approximate = {"erf": "none", "tanh": "tanh"}

    def make(shape):
        return lambda dtype, device: {"x": randn(shape, dtype, device)}

    def impls_for(variant):
        def impls(kernel, t):
            x = t["x"]
            found = {
                "ours": (functools.partial(kernel.geglu, approximate=approximate[variant]), (x,)),
                "eager": (GEGLUActivation(approximate[variant]), (x,)),
            }
            # liger_geglu(a, b) = gelu_tanh(a) * b, a = gate, b = value; forward only (the docstring says why)
            if variant == "tanh" and liger() and not x.requires_grad:
                inner = x.shape[-1] // 2
                found["liger"] = (liger().liger_geglu, (x[..., inner:].contiguous(), x[..., :inner].contiguous()))
            return found

        return impls

    def tolerance(dtype, t):  # eager rounds gelu(gate) and the product; erf(x) near -1 cancels: absolute floor
        return rel(dtype, 4), 1e-5 * float(t["x"].abs().max())

    def moved(t):
        return nbytes(t["x"]) * 3 // 2

    def train_moved(t):
        return 4 * nbytes(t["x"])

    # x = the GEGLU projection's output [..., 2 * inner]: LTX-2B-sized (inner 8192, B*S rows) and the HF blog's.
    shapes = [("ltx-2b-sized", (2 * s, 2 * 8192), s == 7392, False) for s in (2688, 7392, 8064)]
    shapes += [("hf-blog", (2, 1024, 2 * 2048), False, False), ("ltx-2b-sized", (1, 2 * 8192), True, True)]
    return [
        Case(
            OP,
            variant,
            f"{label}.{dims(shape)}",
            shape,
            make(shape),
            impls_for(variant),
            moved,
            tolerance,
            quick,
            reference=reference_for(approximate[variant]),
            grads=("x",),
            train=quick,
            quick_train=quick and not host and variant == "tanh",  # LTX-Video's gelu (the tanh approximation)
            moved_train=train_moved,
            host=host,
        )
        for label, shape, quick, host in shapes
        for variant in approximate
    ]
