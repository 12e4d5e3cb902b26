"""RMSNorm over the last dimension, exact to the modules it replaces.

Rounding decides where the result is rounded to the input dtype when there is a weight:

* ``"model"`` (default): normalize in fp32, round to the input dtype, then multiply by the weight and round
  again -- transformers' ``Qwen3RMSNorm`` / ``LlamaRMSNorm`` and diffusers' ``RMSNorm`` with a weight.
* ``"single"``: multiply by the weight in fp32 and round once -- ``torch.nn.RMSNorm`` / ``F.rms_norm``.

Without a weight (diffusers ``RMSNorm(elementwise_affine=False)``) both round once. The input may have any
number of leading dimensions (per-head norms pass ``[tokens, heads, head_dim]`` with a ``[head_dim]`` weight)
and rows may be strided, but the last dimension must be contiguous.
"""

from __future__ import annotations

import torch

from ._ops import ops

_ROUNDING = ("model", "single")


def _single_rounding(rounding: str) -> bool:
    if rounding not in _ROUNDING:
        raise ValueError(f"rounding must be one of {_ROUNDING}, got {rounding!r}")
    return rounding == "single"


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    *,
    rounding: str = "model",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x * rsqrt(mean(x**2, -1) + eps) [* weight]``, computed in fp32; returns a tensor of x's dtype."""
    single = _single_rounding(rounding)
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    ops.rms_norm(out, x, weight, eps, single)
    return out


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    *,
    rounding: str = "model",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pre-norm decoder step in one pass: ``h = x + residual`` (rounded to x's dtype, as the model stores
    it), then ``rms_norm(h)``. Returns ``(rms_norm(h), h)``; ``h`` is the next layer's residual."""
    single = _single_rounding(rounding)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    new_residual = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    ops.fused_add_rms_norm(out, new_residual, x, residual, weight, eps, single)
    return out, new_residual
