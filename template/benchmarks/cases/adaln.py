"""AdaLN cases for bench.py: LTX-Video 2B's modulated norm1, norm1(x) * (1 + scale) + shift, with one scale/shift per
sample (B1D) and per token (BSD).

- Bytes: 2x + scale + shift.
- Baselines: eager = LTX's `norm1(x) * (1 + scale) + shift`, norm1 = diffusers' RMSNorm without weight (or an exact
  copy when diffusers is not installed); liger's modulated RMSNorm when importable.
"""

from __future__ import annotations

from torch import nn

from ._common import Case, DiffusersRMSNormCopy, liger, nbytes, optional, randn, rel

OP = "adaln"
IMPLS = ["ours", "eager", "compile", "liger"]
EPS = 1e-6  # LTX-Video norm_eps


class AdaLNEager(nn.Module):
    """LTX-Video's block: norm1(hidden) * (1 + scale_msa) + shift_msa, norm1 = RMSNorm without weight, eps 1e-6."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        cls = optional("diffusers.models.normalization", "RMSNorm")
        self.norm = cls(dim, eps=EPS, elementwise_affine=False) if cls else DiffusersRMSNormCopy(EPS)

    def forward(self, x, scale, shift):
        return self.norm(x) * (1 + scale) + shift


def cases() -> list[Case]:
    def make(seq, per_token):
        def inputs(dtype, device):
            modulation = (2, seq if per_token else 1, 2048)
            return {
                "x": randn((2, seq, 2048), dtype, device),
                "scale": randn(modulation, dtype, device, 0.1),
                "shift": randn(modulation, dtype, device, 0.1),
            }

        return inputs

    def impls(kernel, t):
        x, scale, shift = t["x"], t["scale"], t["shift"]
        found = {"ours": (kernel.adaln, (x, scale, shift, EPS)), "eager": (AdaLNEager(x.shape[-1]), (x, scale, shift))}
        if liger():
            found["liger"] = (liger().liger_modulated_rms_norm, (x, None, scale, shift, EPS))
        return found

    def tolerance(dtype, t):  # eager rounds three times and n * (1 + scale) + shift can cancel
        return rel(dtype, 8), rel(dtype, 16) * float(t["shift"].abs().max())

    def moved(t):
        return 2 * nbytes(t["x"]) + nbytes(t["scale"], t["shift"])

    return [
        Case(
            OP,
            variant,
            f"ltx-2b.norm1-modulated.2x{seq}x2048",
            (2, seq, 2048),
            make(seq, variant == "BSD"),
            impls,
            moved,
            tolerance,
            seq == 7392,
        )
        for seq in (2688, 7392, 8064)
        for variant in ("B1D", "BSD")
    ]
