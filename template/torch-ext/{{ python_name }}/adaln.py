"""AdaLN modulation in one pass: ``norm(x) * (1 + scale) + shift`` over the last dimension, norm without weight.

* ``norm="rms"`` (default): LTX-Video's transformer block, ``norm1``/``norm2`` =
  ``diffusers.models.normalization.RMSNorm(dim, eps=1e-6, elementwise_affine=False)``, then
  ``norm_hidden_states * (1 + scale_msa) + shift_msa`` (``LTXVideoTransformerBlock.forward``).
* ``norm="layer"``: ``torch.nn.LayerNorm(dim, eps=1e-6, elementwise_affine=False)`` (mean and biased variance),
  then the same modulation: DiT / PixArt / Flux adaLN and LTX-Video's ``norm_out`` step.

Everything is computed in fp32 and rounded once to the result's dtype. The eager chain rounds after the norm,
after ``1 + scale``, after the product and after the sum, so the two differ by a few units of the addends' last
place, more where ``norm(x) * (1 + scale)`` and ``shift`` nearly cancel.

``x`` is ``(B, S, D)``. ``scale`` and ``shift`` have shape ``(B, 1, D)`` or ``(B, D)`` (one row per sample:
text-to-video) or ``(B, S, D)`` (one row per token: image-to-video and condition pipelines); a batch of 1 is shared
by all samples. ``(B, D)`` means per sample here, unlike torch broadcasting, which would read it as ``(S, D)``.
Only the last dimension of each tensor must be contiguous: the strided ``ada_values.unbind(dim=2)`` views of the
LTX block are used as they are, and x and ``out=`` may have any batch and token strides (a sequence-first tensor
transposed, a token slice).

Dtypes: ``scale`` and ``shift`` share one, x's or, beside a bfloat16 or float16 x, float32 (a model kept in fp32
under ``torch.autocast``); the result has theirs, as the eager chain's type promotion gives it. A float32 result is
computed in fp32 without rounding, where the chain's norm module may round norm(x) to x's dtype first (diffusers'
RMSNorm does; ``nn.LayerNorm`` does outside autocast, not under it): the two then differ by up to one unit roundoff
of x's dtype times the addends. Gradients come back in each tensor's own dtype.
"""

from __future__ import annotations

import torch

from ._common import refuse_grad_with_out
from ._ops import add_op_namespace_prefix, ops

# norm -> the ops' layer_norm flag. The autograd formula is registered in C++ (torch-ext/adaln.cpp), and the op is
# resolved to its overload once: a call costs no Python beyond the wrapper's few lines.
_LAYER_NORM = {"rms": False, "layer": True}
_adaln_fwd = ops.adaln_fwd.default


def adaln(
    x: torch.Tensor,
    scale: torch.Tensor,
    shift: torch.Tensor,
    eps: float = 1e-6,
    *,
    norm: str = "rms",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``norm(x) * (1 + scale) + shift``, computed in fp32; returns a tensor of x's shape and scale's dtype.
    Differentiable (x, scale and shift) and torch.compile-friendly, except with ``out=``. ``out`` may be x itself
    (in place); one that shares memory with x, scale or shift otherwise is refused."""
    try:
        layer = _LAYER_NORM[norm]
    except (KeyError, TypeError):
        raise ValueError(f"norm must be one of {tuple(_LAYER_NORM)}, got {norm!r}") from None
    if out is None:
        return _adaln_fwd(x, scale, shift, eps, layer)
    refuse_grad_with_out("adaln", x, scale, shift)
    ops.adaln(out, x, scale, shift, eps, layer)
    return out


@torch.library.register_fake(add_op_namespace_prefix("adaln_fwd"))
def _(x, scale, shift, eps, layer_norm):
    return x.new_empty(x.shape, dtype=scale.dtype)


@torch.library.register_fake(add_op_namespace_prefix("adaln_bwd"))
def _(grad_out, x, scale, shift, eps, layer_norm, scale_grad, shift_grad):
    # a gradient not asked for is an empty tensor, as the kernel returns it
    return (
        x.new_empty(x.shape),
        scale.new_empty(scale.shape if scale_grad else 0),
        shift.new_empty(shift.shape if shift_grad else 0),
    )


@torch.library.register_fake(add_op_namespace_prefix("adaln"))
def _(out, x, scale, shift, eps, layer_norm):
    return None
