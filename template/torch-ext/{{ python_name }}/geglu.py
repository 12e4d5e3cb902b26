"""GEGLU as in diffusers' ``GEGLU`` module (``diffusers.models.activations.GEGLU``), applied to the output of
its projection: ``module(x) == geglu(module.proj(x))``.

The last dimension of the input holds ``[value | gate]``: the FIRST half is the value and the SECOND half is
the gate (``hidden_states, gate = proj(x).chunk(2, dim=-1)``), and the result is ``value * gelu(gate)`` with
the exact erf GELU by default, like diffusers (``F.gelu(gate)``). ``approximate="tanh"`` selects the tanh form
``0.5 * g * (1 + tanh(sqrt(2 / pi) * (g + 0.044715 * g**3)))`` instead.

Rounding reproduces the eager module rather than rounding once: ``F.gelu`` computes in fp32 and returns a tensor
of the input dtype, and the multiply then rounds again. The kernel does the same -- GELU in fp32, rounded to
the dtype, times the value in fp32, rounded. The product of two bf16/fp16 numbers is exact in fp32 and the GELU
formulas evaluate in the order of ATen's CUDA kernel, so the output equals diffusers' wherever the fp32 GELU values
agree (rounding once instead would differ from eager by 1 ulp in about a quarter of the elements).
Rows may be strided (any leading dimensions that fold into evenly spaced rows); the last dimension must be
contiguous.
"""

from __future__ import annotations

import torch

from ._ops import ops

_APPROXIMATE = ("none", "tanh")


def geglu(x: torch.Tensor, *, approximate: str = "none", out: torch.Tensor | None = None) -> torch.Tensor:
    """``value * gelu(gate)`` with ``value, gate = x.chunk(2, dim=-1)``: x ``[..., 2 * inner]`` gives a tensor of
    x's dtype and shape ``[..., inner]``."""
    if approximate not in _APPROXIMATE:
        raise ValueError(f"approximate must be one of {_APPROXIMATE}, got {approximate!r}")
    if out is None:
        shape = (*x.shape[:-1], x.shape[-1] // 2) if x.dim() > 0 else ()
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
    ops.geglu(out, x, approximate == "tanh")
    return out
