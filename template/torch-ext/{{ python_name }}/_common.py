"""Helpers shared by the op wrappers."""

from __future__ import annotations

import torch


def refuse_grad_with_out(op: str, *tensors: torch.Tensor | None) -> None:
    """``out=`` writes through the op's out-variant, which autograd cannot see: refuse rather than silently drop a
    gradient."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise RuntimeError(f"{op}(..., out=...) does not record gradients; call {op} without out= to get them")
