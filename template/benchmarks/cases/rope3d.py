"""RoPE3D cases for bench.py: LTX-Video 2B's self-attention (attn1) on its latent grids; one tensor, q and k
together, and q and k with cos/sin computed in the kernel from the grid; forward+backward at 2 x 7392 x 2048 and on
the tiny shape (1 x 1 x 2048, a 1 x 1 x 1 grid) that also gets a host time.

- Bytes: one tensor 2x + cos + sin; q+k 4x + cos + sin; q+k with in-kernel cos/sin 4x. Forward+backward: twice
  that (the backward reads grad_out and cos/sin, writes the gradient of x; cos/sin get none).
- Reference: the rotation in float64 with diffusers' fp32 cos/sin tables (float64 copies), also for the in-kernel
  cos/sin, whose angles differ from the tables' by ~1e-3 rad at LTX's largest (|angle| up to 1.6e4 rad): that
  variant's absolute tolerance (and its gradients' relative one) is 5e-3 of the largest |x| instead of 2 roundings.
- Baselines: eager = diffusers' apply_rotary_emb with cos/sin from LTXVideoRotaryPosEmbed (or exact copies when
  diffusers is not installed). For RoPE with in-kernel cos/sin the baselines apply precomputed diffusers cos/sin, as
  every LTX layer does (the model builds them once per forward). Liger's RoPE rotates halves (Llama), not LTX's
  interleaved pairs: no liger baseline.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import torch
from torch import nn

from ._common import LTX_GRID, LTX_LATENT_SCALE, Case, nbytes, optional, randn, rel

OP = "rope3d"
IMPLS = ["ours", "eager", "compile"]
LTX_ROPE_SCALE = LTX_LATENT_SCALE  # LTXPipeline's rope_interpolation_scale
GRID_FLOOR = 5e-3  # in-kernel angles differ from diffusers' fp32 angles (|angle| up to 1.6e4 rad) by ~1e-3 rad


def apply_rotary_emb_copy(x: torch.Tensor, freqs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """diffusers' LTX apply_rotary_emb: interleaved pairs over the full width, fp32 math, one rounding."""
    cos, sin = freqs
    x_real, x_imag = x.unflatten(2, (-1, 2)).unbind(-1)
    x_rotated = torch.stack([-x_imag, x_real], dim=-1).flatten(2)
    return (x.float() * cos + x_rotated.float() * sin).to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The float64 reference: apply_rotary_emb's math in x's dtype, without rounding."""
    x_real, x_imag = x.unflatten(-1, (-1, 2)).unbind(-1)
    return x * cos + torch.stack([-x_imag, x_real], dim=-1).flatten(-2) * sin


def reference_one(t: dict) -> torch.Tensor:
    return rotate(t["x"], t["cos"], t["sin"])


def reference_qk(t: dict) -> tuple[torch.Tensor, torch.Tensor]:
    return rotate(t["q"], t["cos"], t["sin"]), rotate(t["k"], t["cos"], t["sin"])


def rotary_emb() -> Callable:
    return optional("diffusers.models.transformers.transformer_ltx", "apply_rotary_emb") or apply_rotary_emb_copy


class RotaryQK(nn.Module):
    """What each LTX attn1 does with the precomputed cos/sin: rotate q, then k."""

    def __init__(self) -> None:
        super().__init__()
        self.rotate = rotary_emb()

    def forward(self, q, k, cos, sin):
        return self.rotate(q, (cos, sin)), self.rotate(k, (cos, sin))


def ltx_cos_sin(batch: int, grid: tuple[int, int, int], dim: int, device: torch.device):
    """fp32 cos/sin [batch, S, dim] exactly as diffusers' LTXVideoRotaryPosEmbed builds them for LTXPipeline."""
    shape = (batch, math.prod(grid), dim)
    if device.type == "meta":
        return torch.empty(shape, device=device), torch.empty(shape, device=device)
    frames, height, width = grid
    cls = optional("diffusers.models.transformers.transformer_ltx", "LTXVideoRotaryPosEmbed")
    if cls is not None:
        module = cls(dim=dim, base_num_frames=20, base_height=2048, base_width=2048, patch_size=1, patch_size_t=1)
        return module(torch.empty(batch, 1, dim, device=device), frames, height, width, LTX_ROPE_SCALE)
    # A copy of LTXVideoRotaryPosEmbed.forward (same fp32 op order) for when diffusers is not installed.
    axes = [torch.arange(n, dtype=torch.float32, device=device) for n in grid]
    coords = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=0).unsqueeze(0).repeat(batch, 1, 1, 1, 1)
    for axis, base in enumerate((20, 2048, 2048)):
        coords[:, axis : axis + 1] = coords[:, axis : axis + 1] * LTX_ROPE_SCALE[axis] * 1 / base
    coords = coords.flatten(2, 4).transpose(1, 2)
    theta = 10000.0
    freqs = theta ** torch.linspace(math.log(1.0, theta), math.log(theta, theta), dim // 6, device=device)
    freqs = freqs * math.pi / 2.0
    freqs = (freqs * (coords.unsqueeze(-1) * 2 - 1)).transpose(-1, -2).flatten(2)
    cos, sin = freqs.cos().repeat_interleave(2, dim=-1), freqs.sin().repeat_interleave(2, dim=-1)
    pad = dim % 6
    cos = torch.cat([torch.ones_like(cos[:, :, :pad]), cos], dim=-1)
    sin = torch.cat([torch.zeros_like(sin[:, :, :pad]), sin], dim=-1)
    return cos, sin


def cases() -> list[Case]:
    def make(batch, grid, variant):
        seq = math.prod(grid)

        def inputs(dtype, device):
            cos, sin = ltx_cos_sin(batch, grid, 2048, device)
            if variant == "one":
                return {"x": randn((batch, seq, 2048), dtype, device), "cos": cos, "sin": sin}
            q, k = randn((batch, seq, 2048), dtype, device), randn((batch, seq, 2048), dtype, device)
            return {"q": q, "k": k, "cos": cos, "sin": sin, "grid": grid}

        return inputs

    def impls_one(kernel, t):
        return {
            "ours": (kernel.rope3d, (t["x"], t["cos"], t["sin"])),
            "eager": (rotary_emb(), (t["x"], (t["cos"], t["sin"]))),
        }

    def impls_qk(kernel, t):
        return {
            "ours": (kernel.rope3d_qk, (t["q"], t["k"], t["cos"], t["sin"])),
            "eager": (RotaryQK(), (t["q"], t["k"], t["cos"], t["sin"])),
        }

    def impls_grid(kernel, t):
        grid_call = functools.partial(kernel.rope3d_qk_grid, rope_interpolation_scale=LTX_ROPE_SCALE)
        return {
            "ours": (grid_call, (t["q"], t["k"], *t["grid"])),
            "eager": (RotaryQK(), (t["q"], t["k"], t["cos"], t["sin"])),
        }

    def tolerance_for(variant):
        floor = GRID_FLOOR if variant == "qk_grid" else 1e-5

        def tolerance(dtype, t):
            x = t["x"] if "x" in t else t["q"]
            return rel(dtype, 2), rel(dtype, 2, floor) * float(x.abs().max())

        return tolerance

    def one_moved(t):
        return 2 * nbytes(t["x"]) + nbytes(t["cos"], t["sin"])

    def qk_moved(t):
        return 2 * nbytes(t["q"], t["k"]) + nbytes(t["cos"], t["sin"])

    def grid_moved(t):
        return 2 * nbytes(t["q"], t["k"])

    variants = {  # impls, bytes, reference, the inputs that get gradients
        "one": (impls_one, one_moved, reference_one, ("x",)),
        "qk": (impls_qk, qk_moved, reference_qk, ("q", "k")),
        "qk_grid": (impls_grid, grid_moved, reference_qk, ("q", "k")),
    }

    def case(variant, batch, grid, quick=False, train=False, host=False, quick_train=False):
        impls, moved, reference, grads = variants[variant]
        return Case(
            OP,
            variant,
            f"ltx-2b.attn1.{batch}x{math.prod(grid)}x2048",
            (batch, math.prod(grid), 2048),
            make(batch, grid, variant),
            impls,
            moved,
            tolerance_for(variant),
            quick,
            reference=reference,
            grads=grads,
            train=train or host,
            quick_train=quick_train,
            moved_train=lambda t: 2 * moved(t),
            host=host,
            grad_floor=GRID_FLOOR if variant == "qk_grid" else 1e-5,
        )

    found = [
        case(variant, 2, grid, seq == 7392, seq == 7392, quick_train=seq == 7392 and variant == "qk")
        for seq, grid in LTX_GRID.items()
        for variant in variants
    ]
    return found + [case(variant, 1, (1, 1, 1), quick=True, host=True) for variant in variants]
