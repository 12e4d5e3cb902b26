"""GEGLU as in diffusers' ``GEGLU`` module (``diffusers.models.activations.GEGLU``), applied to the output of
its projection: ``module(x) == geglu(module.proj(x))``.

The last dimension of the input holds ``[value | gate]``: the FIRST half is the value and the SECOND half is
the gate (``hidden_states, gate = proj(x).chunk(2, dim=-1)``), and the result is ``value * gelu(gate)`` with
the exact erf GELU by default, like diffusers (``F.gelu(gate)``). ``approximate="tanh"`` selects the tanh form
``0.5 * g * (1 + tanh(sqrt(2 / pi) * (g + 0.044715 * g**3)))`` instead.

Rounding reproduces the eager module rather than rounding once: ``F.gelu`` computes in fp32 and returns a tensor
of the input dtype, and the multiply then rounds again. The kernel does the same -- GELU in fp32, rounded to
the dtype, times the value in fp32, rounded. The product of two bf16/fp16 numbers is exact in fp32, so the output
equals diffusers' wherever the fp32 GELU values round alike (rounding once instead would differ from eager by 1 ulp
in about a quarter of the elements). The tanh form evaluates in the order of ATen's CUDA kernel; the erf form
computes the normal CDF with its own polynomial (within two fp32 unit roundoffs of ``|gate| + |gelu(gate)|``, as
ATen's ``erff`` formula, and more accurate for gates below -4, where ``1 + erf`` cancels): in bf16/fp16 it equals
eager's except next to a rounding tie or, on that tail, where it is a few ulp nearer the exact value; in fp32 it is
a few ulp from eager's.
The input and ``out=`` may have any strides in their leading dimensions (row slices, permuted or transposed views,
any rank); the last dimension must be contiguous.
"""

from __future__ import annotations

import torch

from ._common import refuse_grad_with_out
from ._ops import add_op_namespace_prefix, ops

# approximate -> the ops' tanh_approx flag. The autograd formula is registered in C++ (torch-ext/geglu.cpp), and the
# op is resolved to its overload once: a call costs no Python beyond the wrapper's few lines.
_TANH_APPROX = {"none": False, "tanh": True}
_geglu_fwd = ops.geglu_fwd.default


def geglu(x: torch.Tensor, *, approximate: str = "none", out: torch.Tensor | None = None) -> torch.Tensor:
    """``value * gelu(gate)`` with ``value, gate = x.chunk(2, dim=-1)``: x ``[..., 2 * inner]`` gives a tensor of
    x's dtype and shape ``[..., inner]``. Differentiable and torch.compile-friendly, except with ``out=``; an
    ``out`` that shares memory with x is refused."""
    try:
        tanh = _TANH_APPROX[approximate]
    except (KeyError, TypeError):
        raise ValueError(f"approximate must be one of {tuple(_TANH_APPROX)}, got {approximate!r}") from None
    if out is None:
        return _geglu_fwd(x, tanh)
    refuse_grad_with_out("geglu", x)
    ops.geglu(out, x, tanh)
    return out


@torch.library.register_fake(add_op_namespace_prefix("geglu_fwd"))
def _(x, tanh_approx):
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@torch.library.register_fake(add_op_namespace_prefix("geglu_bwd"))
def _(grad_out, x, tanh_approx):
    return x.new_empty(x.shape)


@torch.library.register_fake(add_op_namespace_prefix("geglu"))
def _(out, x, tanh_approx):
    return None
