"""RMSNorm over the last dimension, exact to the modules it replaces.

Rounding decides where the result is rounded to the input dtype when there is a weight:

* ``"model"`` (default): normalize in fp32, round to the input dtype, then multiply by the weight and round
  again -- transformers' ``Qwen3RMSNorm`` / ``LlamaRMSNorm`` and diffusers' ``RMSNorm`` with a weight.
* ``"single"``: multiply by the weight in fp32 and round once -- ``torch.nn.RMSNorm`` / ``F.rms_norm``.

Without a weight (diffusers ``RMSNorm(elementwise_affine=False)``) both round once. The input may have any
number of leading dimensions (per-head norms pass ``[tokens, heads, head_dim]`` with a ``[head_dim]`` weight)
with any strides -- row slices, permuted views, q after ``.transpose(1, 2)`` -- for inputs and ``out=`` alike;
only the last dimension must be contiguous.

Mixed precision (a model kept in fp32 and run under ``torch.autocast``): beside a bfloat16 or float16 input the
weight may be float32, and the result is then what the module returns:

* ``"model"``: float32, ``weight * normalized(x).to(x.dtype)`` (transformers' type promotion);
* ``"single"``: x's dtype, rounded once (``F.rms_norm`` with a weight of another dtype), or float32 with
  ``out_dtype=torch.float32``, not rounded at all (diffusers' ``RMSNorm`` with a float32 weight,
  ``torch.nn.RMSNorm`` under an autocast that computes it in float32, as torch releases whose autocast lists
  ``rms_norm`` do).

``out_dtype`` (x's dtype or, with a float32 weight, float32) overrides that default. Any other combination of
dtypes is refused with one line. Gradients come back in each tensor's own dtype (an fp32 weight's is summed in
fp32, as for every weight).
"""

from __future__ import annotations

import torch

from ._common import refuse_grad_with_out
from ._ops import add_op_namespace_prefix, ops

# rounding -> the ops' single_rounding flag. The autograd formulas are registered in C++ (torch-ext/rms_norm.cpp),
# and the ops are resolved to their overloads once: a call costs no Python beyond the wrapper's few lines.
_SINGLE_ROUNDING = {"model": False, "single": True}
_rms_norm_fwd = ops.rms_norm_fwd.default
_fused_add_rms_norm_fwd = ops.fused_add_rms_norm_fwd.default


def _single_rounding(rounding: str) -> bool:
    try:
        return _SINGLE_ROUNDING[rounding]
    except (KeyError, TypeError):
        raise ValueError(f"rounding must be one of {tuple(_SINGLE_ROUNDING)}, got {rounding!r}") from None


def _out_dtype(x: torch.Tensor, weight: torch.Tensor | None, single: bool, out_dtype: torch.dtype | None):
    """The result's dtype when it is not x's (None): the one asked for, or transformers' type promotion."""
    if out_dtype is None and weight is not None and not single and weight.dtype != x.dtype:
        out_dtype = torch.promote_types(x.dtype, weight.dtype)  # skipped when equal: host time
    return None if out_dtype == x.dtype else out_dtype


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    *,
    rounding: str = "model",
    out_dtype: torch.dtype | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x * rsqrt(mean(x**2, -1) + eps) [* weight]``, computed in fp32; returns a tensor of x's dtype, or
    float32 beside a float32 weight (see the module's docstring). Differentiable (x and weight) and
    torch.compile-friendly, except with ``out=`` (whose dtype is then the result's). ``out`` may be x itself (in
    place); one that shares memory with x or weight otherwise is refused."""
    single = _single_rounding(rounding)
    if out is None:
        return _rms_norm_fwd(x, weight, eps, single, _out_dtype(x, weight, single, out_dtype))
    refuse_grad_with_out("rms_norm", x, weight)
    if out_dtype is not None and out_dtype != out.dtype:
        raise ValueError(f"out_dtype={out_dtype} but out has dtype {out.dtype}; pass one of them")
    ops.rms_norm(out, x, weight, eps, single)
    return out


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    *,
    rounding: str = "model",
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pre-norm decoder step in one pass: ``h = x + residual`` (rounded to x's dtype, as the model stores
    it), then ``rms_norm(h)``. Returns ``(rms_norm(h), h)``; ``h`` is the next layer's residual and has x's
    dtype, ``rms_norm(h)`` the dtype rms_norm gives it. Differentiable."""
    single = _single_rounding(rounding)
    return _fused_add_rms_norm_fwd(x, residual, weight, eps, single, _out_dtype(x, weight, single, out_dtype))


# torch.compile: shapes of the functional ops' outputs (the out-variants return nothing).
@torch.library.register_fake(add_op_namespace_prefix("rms_norm_fwd"))
def _(x, weight, eps, single_rounding, out_dtype=None):
    return x.new_empty(x.shape, dtype=x.dtype if out_dtype is None else out_dtype)


@torch.library.register_fake(add_op_namespace_prefix("fused_add_rms_norm_fwd"))
def _(x, residual, weight, eps, single_rounding, out_dtype=None):
    return x.new_empty(x.shape, dtype=x.dtype if out_dtype is None else out_dtype), x.new_empty(x.shape)


@torch.library.register_fake(add_op_namespace_prefix("rms_norm_bwd"))
def _(grad_out, grad_residual, x, weight, eps, single_rounding):
    return x.new_empty(x.shape), (x.new_empty(0) if weight is None else weight.new_empty(weight.shape))


@torch.library.register_fake(add_op_namespace_prefix("rms_norm"))
def _(out, x, weight, eps, single_rounding):
    return None


@torch.library.register_fake(add_op_namespace_prefix("fused_add_rms_norm"))
def _(out, residual_out, x, residual, weight, eps, single_rounding):
    return None
