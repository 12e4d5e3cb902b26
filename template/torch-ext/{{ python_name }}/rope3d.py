"""LTX-Video's 3-D rotary position embedding, exact to diffusers' ``transformer_ltx`` module.

* ``rope3d(x, cos, sin)`` is ``apply_rotary_emb(x, (cos, sin))``: interleaved pairs ``(x[2i], x[2i+1])`` over the
  full, un-split hidden width, rotated by fp32 cos/sin tables of shape ``[B, S, D]`` (or ``[1, S, D]``, shared by
  the batch). It reproduces diffusers' fp32 arithmetic and its one rounding to x's dtype, so given the same tables
  the result is the same, bit for bit.
* ``rope3d_qk(q, k, cos, sin)``: the same for q and k in one launch, reading each cos/sin value once for both.
* ``rope3d_qk_grid(q, k, num_frames, height, width, ...)``: q and k rotated by the tables that
  ``LTXVideoRotaryPosEmbed`` would build for the latent grid, computed in the kernel (no table traffic at all).
* ``ltx_rope_cos_sin(num_frames, height, width, dim, ...)``: those tables, from the same in-kernel generator.

The generator follows ``LTXVideoRotaryPosEmbed(dim, base_num_frames, base_height, base_width, patch_size,
patch_size_t, theta)(hidden_states, num_frames, height, width, rope_interpolation_scale)`` step by step in fp32
(the path without ``video_coords``): token ``s = (f * height + h) * width + w``; per axis
``g = index * rope_interpolation_scale[a] * patch / base`` (raw indices when the scale is None); channel pair j
(after ``dim % 6`` identity channels) turns by ``freqs[j // 3] * (2 * g[j % 3] - 1)``, with
``freqs = theta ** linspace(0, 1, dim // 6) * pi / 2`` computed here with diffusers' own torch ops. Angles reach
~1.6e4 rad, where one fp32 ulp is ~1e-3, so the tables match diffusers' on the GPU to a few fp32 ulps but differ
from exact (float64) values by up to ~4e-3 in the highest-frequency channels, as diffusers' own do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ._common import refuse_grad_with_out
from ._ops import add_op_namespace_prefix, ops

_FREQS: dict = {}
# The in-kernel generator's parameters on the device, per (grid options, dim, device): see _grid_params. A model's
# every layer calls rope3d_qk_grid with the same options, so a call costs a dict lookup and passes one tensor.
_GRID: dict = {}
_GRID_ENTRIES = 64  # a bound on the above (a caller could vary the options, e.g. a scale per frame rate)
# The functional ops, resolved to their overloads once; their autograd formulas are registered in C++
# (torch-ext/rope3d.cpp), so a call costs no Python beyond the wrapper's few lines.
_rope3d_fwd = ops.rope3d_fwd.default
_rope3d_qk_fwd = ops.rope3d_qk_fwd.default
_rope3d_qk_grid_fwd = ops.rope3d_qk_grid_fwd.default


def _frequencies(dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """``LTXVideoRotaryPosEmbed``'s fp32 frequency vector (pi / 2) * theta ** linspace(0, 1, dim // 6), made with
    the same torch ops on the same device as diffusers makes it, so that it is bit-identical; cached."""
    key = (dim, theta, device)
    freqs = _FREQS.get(key)
    if freqs is None:
        freqs = theta ** torch.linspace(
            math.log(1.0, theta), math.log(theta, theta), dim // 6, device=device, dtype=torch.float32
        )
        freqs = freqs * math.pi / 2.0
        capturing = torch.compiler.is_compiling() or torch.cuda.is_current_stream_capturing()
        if device.type == "cuda" and not capturing:
            _FREQS[key] = freqs  # never cache a tensor a CUDA graph capture or a compiled graph has not computed yet
    return freqs


def _grid_options(
    rope_interpolation_scale: Sequence[float] | None,
    theta: float,
    base_num_frames: float,
    base_height: float,
    base_width: float,
    patch_size: float,
    patch_size_t: float,
) -> list[float]:
    """The generator's per-axis factors (frames, height, width), checked: [scale x3, patch x3, base x3], all ones
    when the scale is None (diffusers then uses the raw integer coordinates)."""
    if rope_interpolation_scale is not None:
        try:
            scale = [float(v) for v in rope_interpolation_scale]
        except (TypeError, ValueError, RuntimeError):
            scale = []
        if len(scale) != 3:
            got = rope_interpolation_scale
            raise ValueError(f"rope_interpolation_scale must be None or 3 numbers (frames, height, width), got {got!r}")
    if not (theta > 0 and theta != 1):
        raise ValueError(f"theta must be positive and not 1, got {theta!r}")
    if rope_interpolation_scale is None:
        return [1.0] * 9
    base = [float(base_num_frames), float(base_height), float(base_width)]
    if 0.0 in base:
        raise ValueError(f"base_num_frames, base_height and base_width must be non-zero, got {base}")
    return [*scale, float(patch_size_t), float(patch_size), float(patch_size), *base]


def _grid_params(options: tuple, dim: int, device: torch.device) -> torch.Tensor:
    """The generator's parameters as the kernel reads them (``Rope3dGrid::params``), fp32 ``[9 + dim // 6]`` on
    ``device``: per axis the factors of ``grid * rope_interpolation_scale[a] * patch / base`` as diffusers applies
    them on CUDA (a tensor times a number rounds the number to fp32; dividing by a number multiplies by its fp32
    reciprocal), so scale x3, patch x3 and 1 / base x3, then the frequencies. Cached per (options, dim, device) as
    _frequencies caches; a list of scales is keyed as a tuple."""
    if isinstance(options[0], list):
        options = (tuple(options[0]), *options[1:])
    key = (options, dim, device)
    try:
        params = _GRID.get(key)
    except TypeError:  # an unhashable option (e.g. a tensor of scales): built at every call
        key, params = None, None
    if params is None:
        factors = _grid_options(*options)
        freqs = _frequencies(dim, float(options[1]), device)
        # Filled in on the device, not copied from the host, so that a CUDA graph capture or a compiled graph can
        # build it too. The reciprocal: the float64 quotient of fp32 numbers rounded to fp32 once is the correctly
        # rounded fp32 quotient (53 >= 2 * 24 + 2 bits), which is what the fp32 division on CUDA gives.
        exact = torch.empty(len(factors), dtype=torch.float64, device=device)
        for i, factor in enumerate(factors):
            exact[i].fill_(factor)  # (`exact[i] = factor` would copy a host tensor)
        head = exact.float()
        head[6:] = (1.0 / head[6:].double()).float()
        params = torch.cat([head, freqs])
        cached_freqs = _FREQS.get((dim, float(options[1]), device)) is freqs  # not while capturing (_frequencies)
        if key is not None and cached_freqs and not torch.compiler.is_compiling():
            if len(_GRID) >= _GRID_ENTRIES:
                _GRID.clear()
            _GRID[key] = params
    return params


def rope3d(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """diffusers' ``apply_rotary_emb(x, (cos, sin))`` for x ``[B, S, D]`` (D even); cos/sin fp32 ``[B, S, D]`` or
    ``[1, S, D]``. ``out[2i] = x[2i] cos[2i] - x[2i+1] sin[2i]``, ``out[2i+1] = x[2i+1] cos[2i+1] + x[2i] sin[2i+1]``
    in fp32, rounded once to x's dtype. ``out`` may be x itself (in place). x, ``out`` and the tables may have any
    batch and token strides (the last dimension contiguous). Differentiable (x, and cos/sin when they require grad)
    and torch.compile-friendly, except with ``out=``."""
    if out is None:
        return _rope3d_fwd(x, cos, sin, False)
    refuse_grad_with_out("rope3d", x, cos, sin)
    ops.rope3d(out, x, cos, sin)
    return out


def _outputs(out) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise ValueError(f"out must be a pair of tensors (q_out, k_out), got {type(out).__name__}")
    return out[0], out[1]


def rope3d_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rope3d(q, cos, sin), rope3d(k, cos, sin))`` in one launch, as ``LTXVideoAttnProcessor`` applies it to the
    self-attention query and key; q and k have the same shape and dtype. ``out=(q_out, k_out)`` may be (q, k)."""
    if out is None:
        return _rope3d_qk_fwd(q, k, cos, sin, False)
    refuse_grad_with_out("rope3d_qk", q, k, cos, sin)
    q_out, k_out = _outputs(out)
    ops.rope3d_qk(q_out, k_out, q, k, cos, sin)
    return q_out, k_out


def rope3d_qk_grid(
    q: torch.Tensor,
    k: torch.Tensor,
    num_frames: int,
    height: int,
    width: int,
    *,
    rope_interpolation_scale: Sequence[float] | None = None,
    theta: float = 10000.0,
    base_num_frames: int = 20,
    base_height: int = 2048,
    base_width: int = 2048,
    patch_size: int = 1,
    patch_size_t: int = 1,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``rope3d_qk(q, k, cos, sin)`` with the cos/sin of ``LTXVideoRotaryPosEmbed(dim=D, base_num_frames,
    base_height, base_width, patch_size, patch_size_t, theta)(q, num_frames, height, width,
    rope_interpolation_scale)`` generated in the kernel. q and k are ``[B, num_frames * height * width, D]``.
    LTXPipeline passes ``rope_interpolation_scale = (8 / frame_rate, 32, 32)``."""
    dim = q.shape[-1] if q.dim() > 0 else 0
    options = (rope_interpolation_scale, theta, base_num_frames, base_height, base_width, patch_size, patch_size_t)
    params = _grid_params(options, dim, q.device)
    if out is None:
        return _rope3d_qk_grid_fwd(q, k, params, num_frames, height, width, False)
    refuse_grad_with_out("rope3d_qk_grid", q, k)
    q_out, k_out = _outputs(out)
    ops.rope3d_qk_grid(q_out, k_out, q, k, params, num_frames, height, width)
    return q_out, k_out


def ltx_rope_cos_sin(
    num_frames: int,
    height: int,
    width: int,
    dim: int,
    *,
    rope_interpolation_scale: Sequence[float] | None = None,
    theta: float = 10000.0,
    base_num_frames: int = 20,
    base_height: int = 2048,
    base_width: int = 2048,
    patch_size: int = 1,
    patch_size_t: int = 1,
    device: torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp32 ``(cos, sin)`` tables ``[1, num_frames * height * width, dim]`` of ``LTXVideoRotaryPosEmbed`` (same
    arguments as ``rope3d_qk_grid``), written by the kernels' generator; feed them to ``rope3d``/``rope3d_qk``.
    diffusers returns one copy per batch entry; these broadcast over the batch instead. They are made on
    ``device`` (None or ``"cuda"``: the current GPU)."""
    options = (rope_interpolation_scale, theta, base_num_frames, base_height, base_width, patch_size, patch_size_t)
    _grid_options(*options)  # its errors first
    if min(num_frames, height, width, dim) < 0:
        raise ValueError(
            f"num_frames, height, width and dim must be non-negative, got {(num_frames, height, width, dim)}"
        )
    device = torch.device("cuda" if device is None else device)
    if device.type == "cuda" and device.index is None:  # the current GPU, by index: it keys the frequency cache
        device = torch.device("cuda", torch.cuda.current_device())
    shape = (1, num_frames * height * width, dim)
    cos = torch.empty(shape, dtype=torch.float32, device=device)
    sin = torch.empty(shape, dtype=torch.float32, device=device)
    ops.rope3d_cos_sin(cos, sin, _grid_params(options, dim, device), num_frames, height, width)
    return cos, sin


# torch.compile: shapes of the functional ops' outputs (the out-variants return nothing).
@torch.library.register_fake(add_op_namespace_prefix("rope3d_fwd"))
def _(x, cos, sin, transpose):
    return x.new_empty(x.shape)


@torch.library.register_fake(add_op_namespace_prefix("rope3d_qk_fwd"))
def _(q, k, cos, sin, transpose):
    return q.new_empty(q.shape), k.new_empty(k.shape)


@torch.library.register_fake(add_op_namespace_prefix("rope3d_qk_grid_fwd"))
def _(q, k, params, num_frames, height, width, transpose):
    return q.new_empty(q.shape), k.new_empty(k.shape)


@torch.library.register_fake(add_op_namespace_prefix("rope3d"))
def _(out, x, cos, sin):
    return None


@torch.library.register_fake(add_op_namespace_prefix("rope3d_qk"))
def _(q_out, k_out, q, k, cos, sin):
    return None


@torch.library.register_fake(add_op_namespace_prefix("rope3d_qk_grid"))
def _(q_out, k_out, q, k, params, num_frames, height, width):
    return None


@torch.library.register_fake(add_op_namespace_prefix("rope3d_cos_sin"))
def _(cos, sin, params, num_frames, height, width):
    return None
