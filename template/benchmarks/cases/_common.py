"""What the case modules share: the Case record, random inputs, tolerances, optional imports and model geometry.

A file in cases/ whose name starts with "_" is a helper like this one, not an op; bench.py's docstring says what an
op's case module defines.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any, Callable

import torch
from torch import nn

UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}
# LTX-Video 2B's latent sequences: S -> latent grid (F', H', W') of the videos LTXPipeline makes; and the scale it
# passes with the grid (VAE temporal compression / frame rate, spatial compression, spatial compression).
LTX_GRID = {2688: (7, 16, 24), 4992: (13, 16, 24), 7392: (21, 16, 22), 8064: (21, 16, 24)}
LTX_LATENT_SCALE = (8 / 25, 32, 32)

Impls = dict[str, tuple[Callable, tuple]]  # impl name -> (callable, positional args); always "ours" and "eager"


@functools.cache
def optional(module: str, attr: str | None = None) -> Any:
    """`module` (or `module.attr`) when importable, else None: model libraries and competitors are never required."""
    try:
        found = importlib.import_module(module)
        return getattr(found, attr) if attr else found
    except Exception:  # not installed, or broken at import (e.g. a CUDA DSL runtime that does not load)
        return None


def liger() -> Any:
    """Liger Kernel's functional API, or None."""
    return optional("liger_kernel.transformers.functional")


@dataclasses.dataclass
class Case:
    """One benchmark case: an op's variant on one shape, run in every selected dtype (bench.py's docstring says how
    each field is used)."""

    op: str  # the case module's OP
    variant: str
    name: str  # model.module.shape; --shapes matches substrings of "op/variant/name"
    shape: tuple[int, ...]  # of the main input
    make: Callable[[torch.dtype, torch.device], dict]  # fresh random inputs (never zeros); works on "meta"
    impls: Callable[[Any, dict], Impls]  # (kernel, inputs) -> implementations to check and time
    moved: Callable[[dict], int]  # bytes: each input read once + each output written once
    tolerance: Callable[[torch.dtype, dict], tuple[float, float]]  # (rtol, atol) of outputs vs the float64 reference
    quick: bool = False  # one of the few cases --quick runs
    reference: Callable[[dict], Any] | None = None  # float64 inputs -> the exact outputs; None: eager on float64
    grads: tuple[str, ...] = ()  # the inputs that get gradients in forward+backward mode (None ones are skipped)
    train: bool = False  # also time forward+backward (needs grads)
    quick_train: bool = False  # --quick also runs its forward+backward (needs train)
    moved_train: Callable[[dict], int] | None = None  # bytes of forward + backward (None: no GB/s for those rows)
    host: bool = False  # a tiny shape (the GPU idles): also measure the host time per call
    grad_floor: float = 1e-5  # the gradients' relative tolerance is never below this (checks.py)
    label: str = dataclasses.field(init=False)  # "op/variant/name"

    def __post_init__(self) -> None:
        self.label = f"{self.op}/{self.variant}/{self.name}"
        if self.train and not self.grads:
            raise ValueError(f"{self.label}: train=True needs grads (the inputs that get gradients)")
        if self.quick_train and not (self.quick and self.train):
            raise ValueError(f"{self.label}: quick_train=True needs quick and train")


def nbytes(*tensors: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def rms_normalized(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x**2, -1) + eps) in x's dtype: the float64 references' RMSNorm."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rel(dtype: torch.dtype, roundings: float, floor: float = 1e-5) -> float:
    """A relative tolerance of `roundings` unit roundoffs of dtype, never tighter than `floor` (fp32 math noise)."""
    return max(roundings * UNIT_ROUNDOFF[dtype], floor)


def randn(shape, dtype, device, scale=1.0, offset=0.0) -> torch.Tensor:
    return (offset + scale * torch.randn(shape, device=device)).to(dtype)


class DiffusersRMSNormCopy(nn.Module):
    """diffusers' RMSNorm(dim, eps, elementwise_affine=False) (LTX-Video norm1/norm2): one rounding at the end. The
    reference of the norms without weight, kept here so that it needs no diffusers."""

    def __init__(self, eps: float) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return hidden_states.to(input_dtype)
