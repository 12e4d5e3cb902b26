"""Correctness before timing (bench.py): every implementation's outputs, and in forward+backward mode its gradients,
against a float64 reference, on fresh random inputs, into memory filled with NaN.

The reference is the case's `reference` (the exact math, on float64 copies of the inputs), or else its eager
implementation run on float64 copies. An output o passes when every element satisfies
    |o - ref| <= atol + rtol * |ref|
with (rtol, atol) from the case's `tolerance(dtype, inputs)`: a few unit roundoffs u of the dtype (bf16 2^-8,
fp16 2^-11, fp32 2^-24, never tighter than 1e-5: fp32 math) relative to the reference, plus an absolute term
where the op can cancel. A gradient g passes when
    |g - ref| <= rtol * (|ref| + rms(ref)),  rtol = max(GRAD_ROUNDINGS * u, case.grad_floor)
(a backward reduces and cancels: its error scales with the gradient's typical size, not each element's). NaN never
passes, and every output must have the dtype of its input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Callable

import torch
from cases._common import Case, randn, rel

GRAD_ROUNDINGS = 8


def as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def float64_copies(inputs: dict, grads: Sequence[str] = ()) -> dict:
    """The inputs with every floating-point tensor as a float64 copy (those named in `grads` requiring grad)."""
    copies = {}
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            value = value.detach().to(torch.float64).requires_grad_(name in grads)
        copies[name] = value
    return copies


def references(
    case: Case, inputs: dict, dtype: torch.dtype, grads: Sequence[str], kernel: Any
) -> tuple[tuple[torch.Tensor, ...], list[torch.Tensor], tuple[torch.Tensor, ...]]:
    """(float64 outputs, grad_outs, float64 gradients of the inputs named in `grads`): grad_outs are random tensors
    (never zeros) in the outputs' shapes and `dtype`, the same for every implementation of the case, and the
    gradients are the reference's for them; both empty without `grads` (forward only)."""
    copies = float64_copies(inputs, grads)
    with torch.set_grad_enabled(bool(grads)):
        if case.reference is not None:
            outputs = as_tuple(case.reference(copies))
        else:
            fn, args = case.impls(kernel, copies)["eager"]
            outputs = as_tuple(fn(*args))
        if not grads:
            return tuple(o.detach() for o in outputs), [], ()
        grad_outs = [randn(o.shape, dtype, o.device) for o in outputs]
        expected = torch.autograd.grad(outputs, [copies[n] for n in grads], [g.to(torch.float64) for g in grad_outs])
    return tuple(o.detach() for o in outputs), grad_outs, expected


def training_call(fn: Callable, args: tuple, targets: list[torch.Tensor], grad_outs: list[torch.Tensor]) -> Callable:
    """One forward + backward: fn(*args), then the gradients of `targets` for grad_outs (torch.autograd.grad, so
    nothing accumulates between calls). Returns (outputs, gradients)."""

    def call():
        outputs = as_tuple(fn(*args))
        return outputs, torch.autograd.grad(outputs, targets, grad_outs)

    return call


def rms(t: torch.Tensor) -> float:
    return float(t.double().pow(2).mean().sqrt()) if t.numel() else 0.0


def mismatch(
    actual, expected, dtypes: Sequence[torch.dtype], rtol: float, atol: float | Sequence[float], what: str = "output"
) -> str | None:
    """None when every element satisfies |actual - expected| <= atol + rtol * |expected| (NaN never does) and each
    actual tensor has its dtype in `dtypes`; else one line that says where and by how much. `atol`: one for all, or
    one per tensor."""
    actual, expected = as_tuple(actual), as_tuple(expected)
    if len(actual) != len(expected):
        return f"{len(actual)} {what}s, expected {len(expected)}"
    atols = list(atol) if isinstance(atol, (list, tuple)) else [atol] * len(expected)
    for index, (a, e, dtype, tol) in enumerate(zip(actual, expected, dtypes, atols)):
        where = f"{what} {index}: " if len(actual) > 1 or what != "output" else ""
        if not isinstance(a, torch.Tensor):
            return f"{where}got {type(a).__name__}, expected a tensor"
        if a.shape != e.shape or a.dtype != dtype:
            return f"{where}got {tuple(a.shape)} {a.dtype}, expected {tuple(e.shape)} {dtype}"
        a64, e64 = a.detach().double(), e.double()
        bound = tol + rtol * e64.abs()
        excess = ((a64 - e64).abs() - bound).nan_to_num(nan=math.inf)
        bad = int((excess > 0).sum())
        if bad:
            i = int(excess.flatten().argmax())
            return (
                f"{where}{bad} of {a.numel()} elements off (worst: got {a64.flatten()[i].item():.6g}, expected "
                f"{e64.flatten()[i].item():.6g}, allowed +-{bound.flatten()[i].item():.3g})"
            )
    return None


def check(
    case: Case,
    dtype: torch.dtype,
    inputs: dict,
    result,
    expected: tuple[torch.Tensor, ...],
    expected_grads: tuple[torch.Tensor, ...],
    grads: Sequence[str],
) -> str | None:
    """What is wrong with one call's result (outputs, or (outputs, gradients) in forward+backward mode), or None."""
    plain = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    rtol, atol = case.tolerance(dtype, plain)
    outputs, actual_grads = result if expected_grads else (result, ())
    problem = mismatch(outputs, expected, [dtype] * len(expected), rtol, atol)
    if problem or not expected_grads:
        return problem
    grad_rtol = rel(dtype, GRAD_ROUNDINGS, case.grad_floor)
    atols = [grad_rtol * rms(g) for g in expected_grads]
    dtypes = [inputs[name].dtype for name in grads]
    problem = mismatch(actual_grads, expected_grads, dtypes, grad_rtol, atols, what="gradient")
    return f"{problem} (gradients of {', '.join(grads)})" if problem else None


def poison(shapes: Sequence[tuple[torch.Size, torch.dtype]], device: torch.device) -> None:
    """Return the allocator's cached blocks, then allocate blocks of these sizes filled with NaN and free them: the
    next call's outputs of these sizes land in NaN, so an element it does not write fails the check."""
    if device.type != "cuda":
        return
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    blocks = [torch.full(shape, math.nan, dtype=dtype, device=device) for shape, dtype in shapes]
    del blocks
