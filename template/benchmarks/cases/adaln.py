"""AdaLN cases for bench.py: LTX-Video 2B's modulated norm1, norm1(x) * (1 + scale) + shift, with one scale/shift per
sample (B1D) and per token (BSD); forward+backward at 2 x 7392 x 2048 and on the tiny shape (1 x 1 x 2048) that also
gets a host time.

- Bytes: 2x + scale + shift. Forward+backward: 5x + 3 scale + shift, + shift again where its gradient is a sum (the
  backward reads grad_out, x and scale, writes dx, dscale and a summed dshift; a per-token shift's gradient is
  grad_out itself, no bytes, in autograd's add, torch.compile's graph and ours alike).
- Reference: the exact math in float64. Tolerance: 8 roundings of the dtype relative, plus 16 of the largest shift
  absolute (eager rounds three times, and n * (1 + scale) + shift can cancel).
- Baselines: eager = LTX's `norm1(x) * (1 + scale) + shift`, norm1 = diffusers' RMSNorm without weight (or an exact
  copy when diffusers is not installed); liger's modulated RMSNorm (with its backward; in_place=False) when
  importable.
"""

from __future__ import annotations

import functools

from torch import nn

from ._common import Case, DiffusersRMSNormCopy, dims, liger, nbytes, optional, randn, rel, rms_normalized

OP = "adaln"
IMPLS = ["ours", "eager", "compile", "liger"]
EPS = 1e-6  # LTX-Video norm_eps
VARIANTS = ("B1D", "BSD")  # one scale/shift per sample, per token


class AdaLNEager(nn.Module):
    """LTX-Video's block: norm1(hidden) * (1 + scale_msa) + shift_msa, norm1 = RMSNorm without weight, eps 1e-6."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        cls = optional("diffusers.models.normalization", "RMSNorm")
        self.norm = cls(dim, eps=EPS, elementwise_affine=False) if cls else DiffusersRMSNormCopy(EPS)

    def forward(self, x, scale, shift):
        return self.norm(x) * (1 + scale) + shift


def reference(t):
    return rms_normalized(t["x"], EPS) * (1 + t["scale"]) + t["shift"]


def cases() -> list[Case]:
    def make(batch, seq, per_token):
        def inputs(dtype, device):
            modulation = (batch, seq if per_token else 1, 2048)
            return {
                "x": randn((batch, seq, 2048), dtype, device),
                "scale": randn(modulation, dtype, device, 0.1),
                "shift": randn(modulation, dtype, device, 0.1),
            }

        return inputs

    def impls(kernel, t):
        x, scale, shift = t["x"], t["scale"], t["shift"]
        found = {"ours": (kernel.adaln, (x, scale, shift, EPS)), "eager": (AdaLNEager(x.shape[-1]), (x, scale, shift))}
        if liger():
            found["liger"] = (
                functools.partial(liger().liger_modulated_rms_norm, in_place=False),
                (x, None, scale, shift, EPS),
            )
        return found

    def tolerance(dtype, t):  # eager rounds three times and n * (1 + scale) + shift can cancel
        return rel(dtype, 8), rel(dtype, 16) * float(t["shift"].abs().max())

    def moved(t):
        return 2 * nbytes(t["x"]) + nbytes(t["scale"], t["shift"])

    def train_moved(t):
        summed_shift = t["shift"].shape != t["x"].shape  # else d shift = grad_out itself
        return 5 * nbytes(t["x"]) + 3 * nbytes(t["scale"]) + (2 if summed_shift else 1) * nbytes(t["shift"])

    def case(variant, shape, quick=False, train=False, host=False, quick_train=False):
        return Case(
            OP,
            variant,
            f"ltx-2b.norm1-modulated.{dims(shape)}",
            shape,
            make(shape[0], shape[1], variant == "BSD"),
            impls,
            moved,
            tolerance,
            quick,
            reference=reference,
            grads=("x", "scale", "shift"),
            train=train or host,
            quick_train=quick_train,
            moved_train=train_moved,
            host=host,
        )

    found = [
        case(variant, (2, seq, 2048), seq == 7392, seq == 7392, quick_train=seq == 7392 and variant == "BSD")
        for seq in (2688, 7392, 8064)
        for variant in VARIANTS
    ]
    return found + [case(variant, (1, 1, 2048), quick=True, host=True) for variant in VARIANTS]
