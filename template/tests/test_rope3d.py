"""RoPE3D (LTX-Video): float64 references on fresh data, the in-kernel cos/sin generator against the formula and
against diffusers' LTXVideoRotaryPosEmbed, bit-exact parity with diffusers' apply_rotary_emb, and error messages."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from . import fuzz
from .huge import boundary_rows, require_free_memory
from .multi_gpu import MULTI_GPU_CHECKS, randn, two_gpus
from .utils import (
    U32,
    assert_close,
    assert_compiles,
    assert_grad_close,
    assert_rounded,
    float64_leaves,
    grads,
    laid_out,
    poisoned_like,
    rounding_bounds,
)

LTX_SCALE = (8 / 25, 32, 32)  # LTXPipeline: (VAE temporal ratio / frame_rate, spatial ratio, spatial ratio)

# Generator settings the tests cover: LTXPipeline's, none (raw integer coordinates: angles up to ~1.7e5 rad), and
# every option changed at once.
GENERATOR_CASES = {
    "ltx": dict(rope_interpolation_scale=LTX_SCALE),
    "no_scale": dict(rope_interpolation_scale=None),
    "custom": dict(
        rope_interpolation_scale=(0.4, 16, 24),
        theta=500.0,
        base_num_frames=17,
        base_height=1000,
        base_width=3000,
        patch_size=2,
        patch_size_t=3,
    ),
}
GENERATOR_OPTIONS = pytest.mark.parametrize("options", list(GENERATOR_CASES.values()), ids=list(GENERATOR_CASES))
LTX_GRID = (7, 16, 24)  # 49 frames at 512 x 768: S = 2688 tokens


def reference(x, cos, sin):
    """diffusers' apply_rotary_emb in float64, on the values the kernel sees."""
    xd = x.double()
    pairs = xd.unflatten(-1, (-1, 2))
    rotated = torch.stack([-pairs[..., 1], pairs[..., 0]], -1).flatten(-2)
    return xd * cos.double() + rotated * sin.double()


def bounds(x, cos, sin):
    """What the kernel may return (utils.rounding_bounds): x * cos + rotated * sin in fp32 (__fmul_rn, __fadd_rn:
    three roundings, each of at most a unit roundoff of the terms' magnitudes |x * cos| + |rotated * sin|, whatever
    |y|), rounded once to x's dtype; 2^-148 for a product below fp32's normal range."""
    xd = x.double()
    pairs = xd.unflatten(-1, (-1, 2))
    rotated = torch.stack([-pairs[..., 1], pairs[..., 0]], -1).flatten(-2)
    a, b = xd * cos.double(), rotated * sin.double()
    return rounding_bounds(a + b, 3 * U32 * (a.abs() + b.abs()) + 2**-148, x.dtype)


def assert_rotated(out, x, cos, sin, name="rope3d"):
    assert_rounded(f"{name} {out.dtype}", out, bounds(x, cos, sin))


def eager(x, cos, sin):
    """diffusers' apply_rotary_emb, op for op: the kernel reproduces its fp32 roundings, so results are equal."""
    x_real, x_imag = x.unflatten(2, (-1, 2)).unbind(-1)
    rotated = torch.stack([-x_imag, x_real], dim=-1).flatten(2)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


def random_tables(batch, seq, dim, device):
    """Independent random cos/sin for every channel (not a rotation), so that any channel mix-up shows."""
    return (
        torch.rand(batch, seq, dim, device=device) * 2 - 1,
        torch.rand(batch, seq, dim, device=device) * 2 - 1,
    )


def atol_of(x, factor):
    """A flat tolerance, factor * max|x|, for rope3d_qk_grid only: its in-kernel tables' fp32 angles (frequency times
    2g - 1, off by up to ~1e-3 rad at |angle| ~ 1.6e4, then sincosf) have no per-element bound here, so it is compared
    with the float64 formula to a fraction of its input's size. Given tables are exact: `bounds`."""
    return factor * x.abs().max().item()


def fp32_frequencies(dim, theta, device):
    """LTXVideoRotaryPosEmbed's fp32 frequency vector, with its torch ops (what the wrapper hands the kernel)."""
    freqs = theta ** torch.linspace(
        math.log(1.0, theta), math.log(theta, theta), dim // 6, device=device, dtype=torch.float32
    )
    return freqs * math.pi / 2.0


def grid_indices(frames, height, width, device):
    """(f, h, w) of token s = (f * height + h) * width + w, as [S, 3]."""
    axes = [torch.arange(n, device=device) for n in (frames, height, width)]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)


def formula_tables(
    frames,
    height,
    width,
    dim,
    scale=LTX_SCALE,
    base=(20, 2048, 2048),
    patch=(1, 1, 1),
    theta=10000.0,
    freqs=None,
    device="cpu",
    tokens=None,
):
    """LTXVideoRotaryPosEmbed's cos/sin [S, dim] in float64, from the formula: dim % 6 identity channels, then pair
    j = 3k + axis turned by freqs[k] * (2 g[axis] - 1). `freqs` (e.g. the fp32 vector) replaces the exact one;
    `tokens` (indices) keeps only those rows."""
    n, pad = dim // 6, dim % 6
    if freqs is None:
        freqs = math.pi / 2 * theta ** (torch.arange(n, dtype=torch.float64, device=device) / max(n - 1, 1))
    freqs = freqs.to(device=device, dtype=torch.float64)
    g = grid_indices(frames, height, width, device).double()
    if tokens is not None:
        g = g[tokens]
    if scale is not None:
        g = g * torch.tensor(scale, dtype=torch.float64, device=device)
        g = (
            g
            * torch.tensor(patch, dtype=torch.float64, device=device)
            / torch.tensor(base, dtype=torch.float64, device=device)
        )
    angle = (freqs[None, :, None] * (2 * g[:, None, :] - 1)).flatten(1)
    ones = torch.ones(g.shape[0], pad, dtype=torch.float64, device=device)
    cos = torch.cat([ones, angle.cos().repeat_interleave(2, -1)], -1)
    sin = torch.cat([ones * 0, angle.sin().repeat_interleave(2, -1)], -1)
    return cos, sin


def torch_fp32_tables(
    frames, height, width, dim, scale=LTX_SCALE, base=(20, 2048, 2048), patch=(1, 1), theta=10000.0, device="cuda"
):
    """LTXVideoRotaryPosEmbed.forward transcribed op for op (diffusers 0.35): fp32 [1, S, dim] tables."""
    grid_f, grid_h, grid_w = (torch.arange(n, dtype=torch.float32, device=device) for n in (frames, height, width))
    grid = torch.stack(torch.meshgrid(grid_f, grid_h, grid_w, indexing="ij"), dim=0).unsqueeze(0)
    if scale is not None:
        patch_size, patch_size_t = patch
        grid[:, 0:1] = grid[:, 0:1] * scale[0] * patch_size_t / base[0]
        grid[:, 1:2] = grid[:, 1:2] * scale[1] * patch_size / base[1]
        grid[:, 2:3] = grid[:, 2:3] * scale[2] * patch_size / base[2]
    grid = grid.flatten(2, 4).transpose(1, 2)
    freqs = fp32_frequencies(dim, theta, device)
    freqs = freqs * (grid.unsqueeze(-1) * 2 - 1)
    freqs = freqs.transpose(-1, -2).flatten(2)
    cos, sin = freqs.cos().repeat_interleave(2, dim=-1), freqs.sin().repeat_interleave(2, dim=-1)
    if dim % 6:
        cos = torch.cat([torch.ones_like(cos[:, :, : dim % 6]), cos], dim=-1)
        sin = torch.cat([torch.zeros_like(cos[:, :, : dim % 6]), sin], dim=-1)
    return cos, sin


SHAPES = [
    (2, 2688, 2048),  # LTX-Video 2B, 49 frames at 512 x 768, CFG batch
    (1, 105, 2048),  # the odd 3 x 5 x 7 grid
    (3, 7, 130),  # 130 % 8 != 0: the scalar-pair path
    (2, 5, 8),
    (1, 1, 2),
    (4, 33, 4104),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("tables", ["per_batch", "broadcast", "expanded"])
def test_matches_float64_reference(kernel, dtype, device, shape, tables):
    batch, seq, dim = shape
    x = torch.randn(shape, dtype=dtype, device=device)
    cos, sin = random_tables(batch if tables == "per_batch" else 1, seq, dim, device)
    if tables == "expanded":  # [B, S, D] with batch stride 0
        cos, sin = cos.expand(batch, -1, -1), sin.expand(batch, -1, -1)
    out = poisoned_like(x)
    result = kernel.rope3d(x, cos, sin, out=out)
    assert result is out and result.dtype == dtype
    assert_rotated(out, x, cos, sin)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("shape", [(2, 300, 2048), (3, 7, 130), (5, 300, 2048)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("tables", ["per_batch", "broadcast"])
def test_bitwise_equal_to_diffusers_formula(kernel, dtype, device, shape, tables):
    x = torch.randn(shape, dtype=dtype, device=device) * 3
    cos, sin = random_tables(shape[0] if tables == "per_batch" else 1, shape[1], shape[2], device)
    actual, expected = kernel.rope3d(x, cos, sin), eager(x, cos, sin)
    assert torch.equal(actual, expected), (
        f"differs from apply_rotary_emb at {(actual != expected).sum().item()} elements"
    )


@pytest.mark.kernels_ci
@pytest.mark.parametrize("shape", [(2, 2688, 2048), (5, 300, 2048), (3, 7, 130)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("tables", ["per_batch", "broadcast"])
def test_qk(kernel, dtype, device, shape, tables):
    q = torch.randn(shape, dtype=dtype, device=device)
    k = torch.randn(shape, dtype=dtype, device=device)
    cos, sin = random_tables(shape[0] if tables == "per_batch" else 1, shape[1], shape[2], device)
    out = (poisoned_like(q), poisoned_like(k))
    q_out, k_out = kernel.rope3d_qk(q, k, cos, sin, out=out)
    assert q_out is out[0] and k_out is out[1]
    assert_rotated(q_out, q, cos, sin, "q")
    assert_rotated(k_out, k, cos, sin, "k")
    assert torch.equal(q_out, kernel.rope3d(q, cos, sin)) and torch.equal(k_out, kernel.rope3d(k, cos, sin))


def test_in_place(kernel, dtype, device):
    x = torch.randn(2, 40, 2048, dtype=dtype, device=device)
    cos, sin = random_tables(2, 40, 2048, device)
    expected = bounds(x, cos, sin)
    assert kernel.rope3d(x, cos, sin, out=x) is x
    assert_rounded("in place", x, expected)
    q, k = torch.randn(2, 2, 40, 2048, dtype=dtype, device=device).unbind(0)
    expected_q, expected_k = bounds(q, cos, sin), bounds(k, cos, sin)
    kernel.rope3d_qk(q, k, cos, sin, out=(q, k))
    assert_rounded("q in place", q, expected_q)
    assert_rounded("k in place", k, expected_k)


@pytest.mark.parametrize("case", ["shifted_tokens", "swapped_pair", "q_out_is_k_out", "expanded"])
def test_overlapping_out_is_refused_before_anything_is_written(kernel, dtype, device, case):
    buf = torch.randn(2, 41, 256, dtype=dtype, device=device)
    q, k = buf[:, :40], torch.randn(2, 40, 256, dtype=dtype, device=device)
    cos, sin = random_tables(2, 40, 256, device)
    spare = torch.empty_like(q)
    calls = {
        "shifted_tokens": (lambda: kernel.rope3d(q, cos, sin, out=buf[:, 1:]), "out shares memory with x"),
        "swapped_pair": (lambda: kernel.rope3d_qk(q, k, cos, sin, out=(k, spare)), "q_out is the same tensor as k"),
        "q_out_is_k_out": (lambda: kernel.rope3d_qk(q, k, cos, sin, out=(spare, spare)), "q_out is the same tensor"),
        "expanded": (lambda: kernel.rope3d(q, cos, sin, out=spare[:1].expand(2, 40, 256)), "share memory"),
    }
    call, message = calls[case]
    before, k_before = buf.clone(), k.clone()
    with pytest.raises(RuntimeError, match=message):
        call()
    assert torch.equal(buf, before) and torch.equal(k, k_before)


@pytest.mark.parametrize("dim", [2048, 130])
def test_strided_and_unaligned(kernel, dtype, device, dim):
    cos_base, sin_base = random_tables(2, 40, dim + 8, device)
    cos, sin = cos_base[:, 3:33, 8:], sin_base[:, 3:33, 8:]  # tables with padded rows, offset 32 bytes
    wide = torch.randn(2, 30, dim + 64, dtype=dtype, device=device)
    x = wide[:, :, :dim]  # rows dim + 64 apart
    taller = torch.randn(2, 35, dim, dtype=dtype, device=device)
    y = taller[:, 2:32]  # batch stride 35 * dim: does not fold into evenly spaced rows
    flat = torch.randn(1 + 2 * 30 * dim, dtype=dtype, device=device)
    z = flat[1:].view(2, 30, dim)  # data pointer not 16-byte aligned: the scalar-pair path
    narrow = torch.randn(2, 30, dim + 2, dtype=dtype, device=device)
    w = narrow[:, :, :dim]  # row stride not a whole number of 16-byte vectors
    for t in (x, y, z, w):
        out = poisoned_like(torch.empty(2, 30, dim + 32, dtype=dtype, device=device))[:, :, 16 : 16 + dim]
        kernel.rope3d(t, cos, sin, out=out)
        assert_rotated(out, t, cos, sin)
    q_out, k_out = kernel.rope3d_qk(x, z, cos, sin)
    assert_rotated(q_out, x, cos, sin, "q")
    assert_rotated(k_out, z, cos, sin, "k")


@pytest.mark.parametrize("dim", [2048, 130])
def test_any_leading_strides(kernel, dtype, device, dim):
    """q and k of a sequence-first fused projection ([S, B, 3, D] seen as [B, S, D] each: batch and token strides
    that do not fold into evenly spaced rows), out= transposed and sliced, in place, and strided gradients."""
    qkv = torch.randn(30, 2, 3, dim, dtype=dtype, device=device)
    q, k = qkv[:, :, 0].transpose(0, 1), qkv[:, :, 1].transpose(0, 1)
    cos, sin = random_tables(1, 30, dim, device)
    q_out = laid_out((2, 30, dim), (1, 0), dtype, device, offset=8).fill_(float("nan"))
    every_other = torch.full((2, 60, dim), float("nan"), dtype=dtype, device=device)
    k_out = every_other[:, 1::2]
    result = kernel.rope3d_qk(q, k, cos, sin, out=(q_out, k_out))
    assert result[0] is q_out and result[1] is k_out
    assert_rotated(q_out, q, cos, sin, "q")
    assert_rotated(k_out, k, cos, sin, "k")
    assert every_other[:, ::2].isnan().all(), "wrote outside the output rows"
    grid = kernel.rope3d_qk_grid(q, k, 2, 3, 5, out=(poisoned_like(q), poisoned_like(k)))
    assert torch.equal(grid[0], kernel.rope3d_qk_grid(q.contiguous(), k.contiguous(), 2, 3, 5)[0])
    expected = bounds(q, cos, sin)
    assert kernel.rope3d(q, cos, sin, out=q) is q  # in place on the strided view
    assert_rounded("in place", q, expected)

    x = laid_out((2, 30, dim), (1, 0), dtype, device, offset=8).requires_grad_()
    dy = laid_out((2, 30, dim), (1, 0), dtype, device, offset=8)  # the gradient arrives strided too
    (actual,) = grads(kernel.rope3d(x, cos, sin), [x], dy)
    (x64,) = float64_leaves(x)
    assert_grad_close(actual, grads(reference(x64, cos, sin), [x64], dy.double())[0])
    qk = [laid_out((2, 30, dim), (1, 0), dtype, device).requires_grad_() for _ in range(2)]
    seeds = [laid_out((2, 30, dim), (1, 0), dtype, device) for _ in range(2)]
    actual = grads(kernel.rope3d_qk(*qk, cos, sin), qk, seeds)
    qk64 = float64_leaves(*qk)
    expected = grads([reference(t, cos, sin) for t in qk64], qk64, [t.double() for t in seeds])
    for a, e in zip(actual, expected):
        assert_grad_close(a, e)


GRIDS = [
    (2, *LTX_GRID, 2048),
    (1, 3, 5, 7, 2048),
    (2, 3, 5, 7, 130),
    (5, 2, 3, 50, 2048),
    (1, 2, 3, 4, 8),
    (2, 1, 1, 3, 2),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("case", GRIDS, ids=lambda c: "x".join(map(str, c)))
def test_grid_matches_float64_formula(kernel, dtype, device, case):
    batch, frames, height, width, dim = case
    q = torch.randn(batch, frames * height * width, dim, dtype=dtype, device=device)
    k = torch.randn_like(q)
    out = (poisoned_like(q), poisoned_like(k))
    q_out, k_out = kernel.rope3d_qk_grid(q, k, frames, height, width, rope_interpolation_scale=LTX_SCALE, out=out)
    assert q_out is out[0] and k_out is out[1]
    # The exact formula with diffusers' fp32 frequencies: what is left is the kernel's own fp32 angle (~1e-3 rad at
    # |angle| ~ 1.6e4) and its rounding to the dtype.
    cos, sin = formula_tables(frames, height, width, dim, freqs=fp32_frequencies(dim, 10000.0, device), device=device)
    assert_close(q_out, reference(q, cos, sin), atol=atol_of(q, 5e-3))
    assert_close(k_out, reference(k, cos, sin), atol=atol_of(k, 5e-3))
    # Where the frequencies are low (below 4 rad per unit of 2g - 1) the generator is as accurate as fp32 allows.
    low = slice(0, dim % 6 + 6 * (int((dim // 6 - 1) * math.log(8 / math.pi, 10000.0)) + 1))
    assert_close(q_out[..., low], reference(q, cos, sin)[..., low], atol=atol_of(q, 1e-5))


def test_grid_equals_qk_with_generated_tables(kernel, dtype, device):
    q = torch.randn(2, 105, 2048, dtype=dtype, device=device)
    k = torch.randn_like(q)
    cos, sin = kernel.ltx_rope_cos_sin(3, 5, 7, 2048, rope_interpolation_scale=LTX_SCALE, device=device)
    expected = kernel.rope3d_qk(q, k, cos, sin)
    actual = kernel.rope3d_qk_grid(q, k, 3, 5, 7, rope_interpolation_scale=LTX_SCALE)
    assert torch.equal(actual[0], expected[0]) and torch.equal(actual[1], expected[1])


def test_grid_options_parsed_once_per_options(kernel, dtype, device):
    # The wrapper keeps the generator's parameters per set of grid options (a dict lookup per call): the same options,
    # given as a tuple or a list, give the same bits, and other options other tables.
    q = torch.randn(1, 105, 2048, dtype=dtype, device=device)
    k = torch.randn_like(q)
    tables = {
        scale: kernel.ltx_rope_cos_sin(3, 5, 7, 2048, rope_interpolation_scale=scale, device=device)
        for scale in (LTX_SCALE, (0.4, 16, 24), None)
    }
    for _ in range(2):
        for scale, (cos, sin) in tables.items():
            expected = kernel.rope3d_qk(q, k, cos, sin)
            for given_as in (scale, None if scale is None else list(scale)):
                actual = kernel.rope3d_qk_grid(q, k, 3, 5, 7, rope_interpolation_scale=given_as)
                assert torch.equal(actual[0], expected[0]) and torch.equal(actual[1], expected[1]), (scale, given_as)
    assert not torch.equal(tables[LTX_SCALE][0], tables[(0.4, 16, 24)][0])


@GENERATOR_OPTIONS
def test_grid_parameters_built_inside_a_graph_capture_and_a_compiled_graph(kernel, dtype, device, options):
    # With nothing cached, the generator's parameters are made on the device (fills, no copy from the host): inside
    # a CUDA graph capture, whose replays recompute them, and inside a compiled graph. Both give eager's bits. (The
    # compiled graph takes the frequencies from eager's cache: computed in the graph, by Inductor's pow, their last
    # bits differ from eager's, and so do the highest-frequency channels' results.)
    import torch._dynamo

    caches = kernel.rope3d_qk_grid.__globals__  # rope3d.py's module namespace
    q = torch.randn(2, 105, 130, dtype=dtype, device=device)
    k = torch.randn_like(q)
    expected = kernel.rope3d_qk_grid(q, k, 3, 5, 7, **options)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        kernel.rope3d_qk(q, k, *kernel.ltx_rope_cos_sin(3, 5, 7, 130, device=device))  # loads the kernels
    torch.cuda.current_stream().wait_stream(stream)
    caches["_GRID"].clear()
    caches["_FREQS"].clear()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = kernel.rope3d_qk_grid(q, k, 3, 5, 7, **options)
    assert not caches["_GRID"] and not caches["_FREQS"]  # nothing the capture made is kept for later calls
    for out in captured:
        out.fill_(float("nan"))
    graph.replay()
    for got, want in zip(captured, expected):
        assert torch.equal(got, want)
    kernel.rope3d_qk_grid(q, k, 3, 5, 7, **options)  # caches the frequencies (and the parameters: cleared next)
    caches["_GRID"].clear()
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k: kernel.rope3d_qk_grid(q, k, 3, 5, 7, **options), fullgraph=True)
    for got, want in zip(compiled(q, k), expected):
        assert torch.equal(got, want)
    assert not caches["_GRID"]  # nor what a compiled graph made


@pytest.mark.kernels_ci
@pytest.mark.parametrize(
    "case", [(*LTX_GRID, 2048), (3, 5, 7, 2048), (3, 5, 7, 130), (2, 3, 4, 4)], ids=lambda c: "x".join(map(str, c))
)
def test_cos_sin_match_formula(kernel, device, case):
    frames, height, width, dim = case
    cos, sin = kernel.ltx_rope_cos_sin(frames, height, width, dim, rope_interpolation_scale=LTX_SCALE, device=device)
    assert cos.shape == sin.shape == (1, frames * height * width, dim) and cos.dtype == torch.float32
    pad = dim % 6
    assert torch.equal(cos[..., :pad], torch.ones_like(cos[..., :pad]))  # identity channels
    assert torch.equal(sin[..., :pad], torch.zeros_like(sin[..., :pad]))
    # diffusers' fp32 frequencies are within a few ulps of (pi / 2) * 10000 ** (k / (n - 1)) ...
    exact_freqs = math.pi / 2 * 10000.0 ** (torch.arange(dim // 6, dtype=torch.float64) / max(dim // 6 - 1, 1))
    torch.testing.assert_close(fp32_frequencies(dim, 10000.0, device).double().cpu(), exact_freqs, rtol=2e-6, atol=0)
    # ... and with those, the generator's tables are the formula's up to its fp32 angles.
    fp32_freqs = fp32_frequencies(dim, 10000.0, device)
    expected = formula_tables(frames, height, width, dim, freqs=fp32_freqs, device=device)
    torch.testing.assert_close(cos[0].double(), expected[0], rtol=0, atol=2e-3)
    torch.testing.assert_close(sin[0].double(), expected[1], rtol=0, atol=2e-3)
    # Against fully exact tables, the fp32 frequencies' own error (up to ~6e-3 rad at the top) adds in.
    exact = formula_tables(frames, height, width, dim, device=device)
    torch.testing.assert_close(cos[0].double(), exact[0], rtol=0, atol=1e-2)
    torch.testing.assert_close(sin[0].double(), exact[1], rtol=0, atol=1e-2)


@GENERATOR_OPTIONS
@pytest.mark.parametrize(
    "grid", [(3, 5, 7, 2048), (3, 5, 7, 130), (21, 16, 24, 2048)], ids=lambda g: "x".join(map(str, g))
)
def test_cos_sin_match_torch_fp32_generator(kernel, device, options, grid):
    """Same fp32 operations as diffusers' generator on this GPU (including torch's `tensor / number` = multiply by
    the fp32 reciprocal, which changes g by an ulp at 21 frames): equal angles, so only sincosf's last bits differ."""
    frames, height, width, dim = grid
    cos, sin = kernel.ltx_rope_cos_sin(frames, height, width, dim, device=device, **options)
    expected = torch_fp32_tables(
        frames,
        height,
        width,
        dim,
        scale=options["rope_interpolation_scale"],
        base=(options.get("base_num_frames", 20), options.get("base_height", 2048), options.get("base_width", 2048)),
        patch=(options.get("patch_size", 1), options.get("patch_size_t", 1)),
        theta=options.get("theta", 10000.0),
        device=device,
    )
    print(f"max |cos - torch fp32| {(cos - expected[0]).abs().max().item():.2e}")
    torch.testing.assert_close(cos, expected[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(sin, expected[1], rtol=0, atol=1e-5)


# Fuzzing and sanitizing (tests/fuzz.py, tools/sanitize.sh): one case, forward and backward, each tensor in a
# layout of its own (missing names: contiguous).


def check_case(kernel, dtype, device, shape, *, qk, tables, table_grads, seed, layouts):
    """rope3d, or rope3d_qk, into NaN-poisoned outputs; then the gradients (of cos and sin too with table_grads).
    tables: "per_batch" [B, S, D], "broadcast" [1, S, D], or "expanded" ([1, S, D] expanded to batch stride 0)."""
    at = lambda name: layouts.get(name, fuzz.Layout())  # noqa: E731
    gen = fuzz.generator(seed, device)
    batch, seq, dim = shape
    names = ("q", "k") if qk else ("x",)
    inputs = [at(name).like(fuzz.randn(shape, dtype, gen)) for name in names]
    table_shape = (batch if tables == "per_batch" else 1, seq, dim)
    cos1, sin1 = (
        at(name).like(torch.rand(table_shape, generator=gen, device=device) * 2 - 1) for name in ("cos", "sin")
    )

    def expand(table):
        return table.expand(batch, seq, dim) if tables == "expanded" else table

    outs = [at(f"{name}_out").empty(shape, dtype, device) for name in names]
    if qk:
        results = kernel.rope3d_qk(*inputs, expand(cos1), expand(sin1), out=tuple(out for out, _ in outs))
    else:
        results = (kernel.rope3d(inputs[0], expand(cos1), expand(sin1), out=outs[0][0]),)
    for result, (out, buffer), t in zip(results, outs, inputs):
        assert result is out
        fuzz.assert_written_only_inside(out, buffer)
        assert_rotated(out, t, cos1, sin1)

    leaves = [t.requires_grad_() for t in inputs] + (
        [cos1.requires_grad_(), sin1.requires_grad_()] if table_grads else []
    )
    seeds = tuple(at(f"d{name}").like(fuzz.randn(shape, dtype, gen)) for name in names)
    op = kernel.rope3d_qk if qk else kernel.rope3d
    actual = grads(op(*inputs, expand(cos1), expand(sin1)), leaves, seeds)
    *inputs64, cos64, sin64 = float64_leaves(*inputs, cos1, sin1)
    outputs64 = tuple(reference(t, expand(cos64), expand(sin64)) for t in inputs64)
    leaves64 = inputs64 + ([cos64, sin64] if table_grads else [])
    for a, e in zip(actual, grads(outputs64, leaves64, tuple(d.double() for d in seeds))):
        assert_grad_close(a, e)


def check_grid_case(kernel, dtype, device, batch, grid, dim, *, options, seed, layouts):
    """rope3d_qk_grid into NaN-poisoned outputs: equal to rope3d_qk with the generator's tables (which the other
    tests check against float64), and, where every g is at most 1 (angles within a few fp32 ulps), to the float64
    formula; then the gradients, equal to rope3d_qk's."""
    at = lambda name: layouts.get(name, fuzz.Layout())  # noqa: E731
    gen = fuzz.generator(seed, device)
    shape = (batch, math.prod(grid), dim)
    q, k = (at(name).like(fuzz.randn(shape, dtype, gen)) for name in ("q", "k"))
    (q_out, q_buffer), (k_out, k_buffer) = (at(name).empty(shape, dtype, device) for name in ("q_out", "k_out"))
    results = kernel.rope3d_qk_grid(q, k, *grid, out=(q_out, k_out), **options)
    assert results[0] is q_out and results[1] is k_out
    fuzz.assert_written_only_inside(q_out, q_buffer)
    fuzz.assert_written_only_inside(k_out, k_buffer)
    cos, sin = kernel.ltx_rope_cos_sin(*grid, dim, device=device, **options)
    expected = kernel.rope3d_qk(q, k, cos, sin)
    assert torch.equal(q_out, expected[0]) and torch.equal(k_out, expected[1])
    scale = options["rope_interpolation_scale"]
    theta = options.get("theta", 10000.0)
    base = (options.get("base_num_frames", 20), options.get("base_height", 2048), options.get("base_width", 2048))
    patch = (options.get("patch_size_t", 1), options.get("patch_size", 1), options.get("patch_size", 1))
    if scale is not None and all((n - 1) * s * p / b <= 1 for n, s, p, b in zip(grid, scale, patch, base)):
        freqs = fp32_frequencies(dim, theta, device)
        tables = formula_tables(*grid, dim, scale, base, patch, theta, freqs=freqs, device=device)
        assert_close(q_out, reference(q, *tables), atol=atol_of(q, 5e-3))
        assert_close(k_out, reference(k, *tables), atol=atol_of(k, 5e-3))

    seeds = tuple(at(name).like(fuzz.randn(shape, dtype, gen)) for name in ("dq", "dk"))
    leaves = [q.requires_grad_(), k.requires_grad_()]
    actual = grads(kernel.rope3d_qk_grid(q, k, *grid, **options), leaves, seeds)
    expected = grads(kernel.rope3d_qk(q, k, cos, sin), leaves, seeds)
    assert torch.equal(actual[0], expected[0]) and torch.equal(actual[1], expected[1])


@pytest.mark.fuzz
@given(
    dim=fuzz.widths(fuzz.MAX_WIDTH // 2).map(lambda n: 2 * n),
    qk=st.booleans(),
    tables=st.sampled_from(["per_batch", "broadcast", "expanded"]),
    table_grads=st.booleans(),
    data=st.data(),
)
def test_fuzz(kernel, dtype, device, dim, qk, tables, table_grads, data):
    batch = data.draw(fuzz.counts(8), label="batch")
    seq = data.draw(fuzz.counts(fuzz.MAX_ELEMENTS // (batch * dim)), label="seq")
    names = ["q", "k", "q_out", "k_out", "dq", "dk"] if qk else ["x", "x_out", "dx"]
    layouts = fuzz.draw_layouts(data, dim, cos=2, sin=2, **dict.fromkeys(names, 2))
    check_case(
        kernel,
        dtype,
        device,
        (batch, seq, dim),
        qk=qk,
        tables=tables,
        table_grads=table_grads,
        seed=data.draw(fuzz.seeds, label="seed"),
        layouts=layouts,
    )


@pytest.mark.fuzz
@given(
    dim=fuzz.widths(2048).map(lambda n: 2 * n), options=st.sampled_from(list(GENERATOR_CASES.values())), data=st.data()
)
def test_fuzz_grid(kernel, dtype, device, dim, options, data):
    batch = data.draw(fuzz.counts(4), label="batch")
    budget = fuzz.MAX_ELEMENTS // (batch * dim)
    frames = data.draw(fuzz.counts(budget), label="frames")
    height = data.draw(fuzz.counts(budget // frames), label="height")
    width = data.draw(fuzz.counts(budget // (frames * height)), label="width")
    layouts = fuzz.draw_layouts(data, dim, **dict.fromkeys(["q", "k", "q_out", "k_out", "dq", "dk"], 2))
    check_grid_case(
        kernel,
        dtype,
        device,
        batch,
        (frames, height, width),
        dim,
        options=options,
        seed=data.draw(fuzz.seeds, label="seed"),
        layouts=layouts,
    )


# Small odd, misaligned and strided cases for tools/sanitize.sh (compute-sanitizer is slow: keep them small).
SANITIZE_CASES = {
    "odd_misaligned": (
        (2, 7, 130),
        dict(qk=False, tables="per_batch", table_grads=True),
        dict(x=fuzz.Layout(offset=1), cos=fuzz.Layout(offset=3), x_out=fuzz.Layout(offset=1)),
    ),
    "qk_vectors_strided": (
        (2, 5, 264),
        dict(qk=True, tables="expanded", table_grads=True),
        dict(
            q=fuzz.Layout((1, 0), pad=8),
            k=fuzz.Layout(step=2, pad=528),
            sin=fuzz.Layout(pad=8),
            q_out=fuzz.Layout((1, 0)),
            dk=fuzz.Layout(offset=2),
        ),
    ),
}
SANITIZE_GRID_CASES = {
    "grid_odd": ((2, (3, 5, 7), 130), dict(options=GENERATOR_CASES["ltx"]), dict(q=fuzz.Layout(offset=1))),
    "grid_strided": (
        (1, (2, 3, 4), 264),
        dict(options=GENERATOR_CASES["custom"]),
        dict(k=fuzz.Layout((1, 0), pad=8), q_out=fuzz.Layout(step=2)),
    ),
}


@pytest.mark.sanitize
@pytest.mark.parametrize("case", [*SANITIZE_CASES, *SANITIZE_GRID_CASES])
def test_sanitize(kernel, dtype, device, case):
    if case in SANITIZE_CASES:
        shape, options, layouts = SANITIZE_CASES[case]
        check_case(kernel, dtype, device, shape, seed=0, layouts=layouts, **options)
    else:
        (batch, grid, dim), options, layouts = SANITIZE_GRID_CASES[case]
        check_grid_case(kernel, dtype, device, batch, grid, dim, seed=0, layouts=layouts, **options)


def test_empty(kernel, dtype, device):
    x = torch.empty(0, 4, 8, dtype=dtype, device=device)
    cos, sin = random_tables(1, 4, 8, device)
    assert kernel.rope3d(x, cos, sin).shape == (0, 4, 8)
    q = torch.empty(2, 0, 2048, dtype=dtype, device=device)
    assert kernel.rope3d_qk_grid(q, q, 0, 16, 24)[0].shape == (2, 0, 2048)
    assert kernel.ltx_rope_cos_sin(0, 16, 24, 2048, device=device)[0].shape == (1, 0, 2048)


@pytest.mark.slow
@pytest.mark.parametrize("dim", [2048, 2050], ids=["vectors", "scalar_pairs"])
def test_more_than_2_31_elements(kernel, dtype, device, dim):
    """batch x seq x dim > 2^31 with [1, S, D] tables, forward and backward (tables too, summed over the batch).
    Tokens around element 2^31, in every sample, against float64."""
    batch = 2
    seq = 2**31 // (batch * dim) + 2
    require_free_memory(batch * seq * dim * dtype.itemsize * 4 + seq * dim * 4 * 4)  # x, out, dy, dx; tables, grads
    x = torch.randn(batch, seq, dim, dtype=dtype, device=device)
    cos, sin = random_tables(1, seq, dim, device)
    out = kernel.rope3d(x, cos, sin, out=torch.full_like(x, float("nan")))
    assert not out.isnan().any(), "an element was not written"
    tokens = (boundary_rows(batch * seq, dim, device) % seq).unique()
    assert_rotated(out[:, tokens], x[:, tokens], cos[:, tokens], sin[:, tokens])
    del out
    leaves = [x.requires_grad_(), cos.requires_grad_(), sin.requires_grad_()]
    dy = torch.randn_like(x)
    actual = grads(kernel.rope3d(x, cos, sin), leaves, dy)
    sub64 = float64_leaves(x[:, tokens], cos[:, tokens], sin[:, tokens])
    expected = grads(reference(*sub64), sub64, dy[:, tokens].double())
    for a, e in zip(actual, expected):
        assert_grad_close(a[:, tokens], e)


@pytest.mark.slow
def test_grid_more_than_2_31_elements(kernel, dtype, device):
    """rope3d_qk_grid with seq x dim > 2^31 (63 x 64 x 64 tokens of 8448 channels, every g at most 1), forward and
    backward: tokens around element 2^31 against the float64 formula."""
    grid, dim = (63, 64, 64), 8448
    shape = (1, math.prod(grid), dim)
    require_free_memory(8 * math.prod(shape) * dtype.itemsize)  # q, k, outputs, seeds, gradients
    q, k = (torch.randn(shape, dtype=dtype, device=device) for _ in range(2))
    q_out, k_out = kernel.rope3d_qk_grid(
        q,
        k,
        *grid,
        rope_interpolation_scale=LTX_SCALE,
        out=(torch.full_like(q, float("nan")), torch.full_like(k, float("nan"))),
    )
    assert not q_out.isnan().any() and not k_out.isnan().any(), "an element was not written"
    tokens = boundary_rows(shape[1], dim, device)
    freqs = fp32_frequencies(dim, 10000.0, device)
    cos, sin = formula_tables(*grid, dim, freqs=freqs, device=device, tokens=tokens)
    for out, t in ((q_out, q), (k_out, k)):
        assert_close(out[:, tokens], reference(t[:, tokens], cos, sin), atol=atol_of(t, 5e-3))
    del q_out, k_out
    leaves = [q.requires_grad_(), k.requires_grad_()]
    seeds = (torch.randn_like(q), torch.randn_like(k))
    actual = grads(kernel.rope3d_qk_grid(q, k, *grid, rope_interpolation_scale=LTX_SCALE), leaves, seeds)
    for a, t, seed in zip(actual, leaves, seeds):
        (t64,) = float64_leaves(t[:, tokens])
        (expected,) = grads(reference(t64, cos, sin), [t64], seed[:, tokens].double())
        assert_close(a[:, tokens], expected, atol=atol_of(seed, 5e-3))


# Gradients, torch.library registration and torch.compile.


@pytest.mark.kernels_ci
@pytest.mark.parametrize("shape", [(2, 33, 2048), (3, 7, 130)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("tables", ["per_batch", "broadcast"])
@pytest.mark.parametrize("table_grads", [False, True], ids=["x_only", "tables_too"])
def test_gradients_match_float64(kernel, dtype, device, shape, tables, table_grads):
    b, s, d = shape
    x = torch.randn(shape, dtype=dtype, device=device, requires_grad=True)
    cos, sin = (t.requires_grad_(table_grads) for t in random_tables(b if tables == "per_batch" else 1, s, d, device))
    leaves = [x, cos, sin] if table_grads else [x]
    dy = torch.randn_like(x)
    actual = grads(kernel.rope3d(x, cos, sin), leaves, dy)
    x64, cos64, sin64 = float64_leaves(x, cos, sin)
    expected = grads(reference(x64, cos64, sin64), [x64, cos64, sin64] if table_grads else [x64], dy.double())
    for a, e in zip(actual, expected):
        assert_grad_close(a, e)


@pytest.mark.parametrize("table_grads", [False, True], ids=["qk_only", "tables_too"])
def test_qk_gradients_match_float64(kernel, dtype, device, table_grads):
    q, k = (torch.randn(2, 40, 256, dtype=dtype, device=device, requires_grad=True) for _ in range(2))
    cos, sin = (t.requires_grad_(table_grads) for t in random_tables(1, 40, 256, device))
    leaves = [q, k, cos, sin] if table_grads else [q, k]
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    actual = grads(kernel.rope3d_qk(q, k, cos, sin), leaves, (dq, dk))
    q64, k64, cos64, sin64 = float64_leaves(q, k, cos, sin)
    outputs = (reference(q64, cos64, sin64), reference(k64, cos64, sin64))
    expected = grads(outputs, [q64, k64, cos64, sin64] if table_grads else [q64, k64], (dq.double(), dk.double()))
    for a, e in zip(actual, expected):
        assert_grad_close(a, e)


def test_grid_gradients_equal_qk_with_generated_tables(kernel, dtype, device):
    q, k = (torch.randn(2, 105, 2048, dtype=dtype, device=device, requires_grad=True) for _ in range(2))
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    cos, sin = kernel.ltx_rope_cos_sin(3, 5, 7, 2048, rope_interpolation_scale=LTX_SCALE, device=device)
    expected = grads(kernel.rope3d_qk(q, k, cos, sin), [q, k], (dq, dk))
    actual = grads(kernel.rope3d_qk_grid(q, k, 3, 5, 7, rope_interpolation_scale=LTX_SCALE), [q, k], (dq, dk))
    assert torch.equal(actual[0], expected[0]) and torch.equal(actual[1], expected[1])
    # The generated tables hold cos/sin of one angle per pair: the gradient is the inverse rotation.
    (x64,) = float64_leaves(q)
    (expected64,) = grads(reference(x64, cos, sin), [x64], dq.double())
    assert_grad_close(expected[0], expected64)


# Devices and streams (tests/multi_gpu.py says what each check asserts): tensors on cuda:1 while cuda:0 is current
# (2 GPUs), on a side stream, and in a CUDA graph (on cuda:1, or on the only GPU), forward and backward. The grid
# form makes its frequency vector on q's GPU.
@pytest.mark.multi_gpu
@pytest.mark.parametrize("check", MULTI_GPU_CHECKS)
@pytest.mark.parametrize("form", ["x", "qk", "qk_grid"])
def test_devices_and_streams(kernel, dtype, check, form):
    frames, height, width, dim = 3, 4, 6, 2048
    q, k = (randn(2, frames * height * width, dim, dtype=dtype) for _ in range(2))
    cos, sin = (randn(1, frames * height * width, dim, dtype=torch.float32) for _ in range(2))
    if form == "x":
        check(kernel.rope3d, [q, cos, sin], [True, False, False])
    elif form == "qk":
        check(kernel.rope3d_qk, [q, k, cos, sin], [True, True, False, False])
    else:

        def grid(q, k):
            return kernel.rope3d_qk_grid(q, k, frames, height, width, rope_interpolation_scale=LTX_SCALE)

        check(grid, [q, k], [True, True])


@two_gpus
def test_cos_sin_on_the_given_or_current_gpu(kernel):
    """ltx_rope_cos_sin writes its tables on `device`, whatever the current device; device="cuda" means the
    current one (its frequency vector too, whichever GPU was current at an earlier call)."""
    args = (3, 4, 6, 2048)
    with torch.cuda.device(0):
        expected = kernel.ltx_rope_cos_sin(*args, rope_interpolation_scale=LTX_SCALE)
        on_second = kernel.ltx_rope_cos_sin(*args, rope_interpolation_scale=LTX_SCALE, device="cuda:1")
        assert torch.cuda.current_device() == 0
        first = kernel.ltx_rope_cos_sin(*args, rope_interpolation_scale=LTX_SCALE, device="cuda")
    with torch.cuda.device(1):
        current = kernel.ltx_rope_cos_sin(*args, rope_interpolation_scale=LTX_SCALE, device="cuda")
    for tables, index in [(on_second, 1), (first, 0), (current, 1)]:
        for table, reference in zip(tables, expected):
            assert table.device == torch.device("cuda", index)
            torch.testing.assert_close(table.cpu(), reference.cpu(), rtol=0, atol=0)


def test_opcheck(kernel, dtype, device):
    ops = kernel._ops.ops
    q, k = (torch.randn(2, 30, 48, dtype=dtype, device=device, requires_grad=True) for _ in range(2))
    cos, sin = random_tables(1, 30, 48, device)
    params = torch.rand(9 + 48 // 6, device=device)  # the grid's factors and frequencies (dim 48)
    grid = (2, 3, 5)
    for transpose in (False, True):
        torch.library.opcheck(ops.rope3d_fwd, (q, cos, sin, transpose))
        torch.library.opcheck(ops.rope3d_qk_fwd, (q, k, cos.requires_grad_(), sin, transpose))
        torch.library.opcheck(ops.rope3d_qk_grid_fwd, (q, k, params, *grid, transpose))
    q, k, cos = q.detach(), k.detach(), cos.detach()
    torch.library.opcheck(ops.rope3d, (torch.empty_like(q), q, cos, sin))
    torch.library.opcheck(ops.rope3d_qk, (torch.empty_like(q), torch.empty_like(k), q, k, cos, sin))
    torch.library.opcheck(ops.rope3d_qk_grid, (torch.empty_like(q), torch.empty_like(k), q, k, params, *grid))
    table = torch.empty(1, 30, 48, device=device)
    torch.library.opcheck(ops.rope3d_cos_sin, (table, torch.empty_like(table), params, *grid))


def test_compiles_fullgraph(kernel, dtype, device):
    def attention_inputs(q, k, cos, sin):
        q1, k1 = kernel.rope3d_qk(q, k, cos, sin)
        q2, k2 = kernel.rope3d_qk_grid(q1, k1, 2, 3, 4, rope_interpolation_scale=LTX_SCALE)
        return kernel.rope3d(q2, cos, sin) * 2, k2

    def make_args(batch):
        q, k = (torch.randn(batch, 24, 128, dtype=dtype, device=device, requires_grad=True) for _ in range(2))
        return [q, k, *random_tables(1, 24, 128, device)]

    assert_compiles(attention_inputs, make_args)


def test_out_refuses_to_drop_gradients(kernel, dtype, device):
    x = torch.randn(2, 4, 8, dtype=dtype, device=device, requires_grad=True)
    cos, sin = random_tables(2, 4, 8, device)
    with pytest.raises(RuntimeError, match="does not record gradients"):
        kernel.rope3d(x, cos, sin, out=torch.empty_like(x))


# Parity with the real module (skipped when diffusers is not installed).


def diffusers_rope(dim, **options):
    ltx = pytest.importorskip("diffusers.models.transformers.transformer_ltx")
    return ltx, ltx.LTXVideoRotaryPosEmbed(
        dim=dim,
        base_num_frames=options.get("base_num_frames", 20),
        base_height=options.get("base_height", 2048),
        base_width=options.get("base_width", 2048),
        patch_size=options.get("patch_size", 1),
        patch_size_t=options.get("patch_size_t", 1),
        theta=options.get("theta", 10000.0),
    )


def test_parity_diffusers_apply_rotary_emb(kernel, dtype, device):
    ltx, rope = diffusers_rope(2048)
    frames, height, width = LTX_GRID
    q = torch.randn(2, frames * height * width, 2048, dtype=dtype, device=device)
    k = torch.randn_like(q)
    cos, sin = rope(q, frames, height, width, rope_interpolation_scale=LTX_SCALE)
    expected_q, expected_k = ltx.apply_rotary_emb(q, (cos, sin)), ltx.apply_rotary_emb(k, (cos, sin))
    q_out, k_out = kernel.rope3d_qk(q, k, cos, sin)
    assert torch.equal(q_out, expected_q) and torch.equal(k_out, expected_k), "differs from apply_rotary_emb"
    assert torch.equal(kernel.rope3d(q, cos[:1], sin[:1]), expected_q)  # one table for the whole batch


@GENERATOR_OPTIONS
@pytest.mark.parametrize(
    "grid", [(*LTX_GRID, 2048), (3, 5, 7, 2048), (3, 5, 7, 130)], ids=lambda g: "x".join(map(str, g))
)
def test_parity_diffusers_generator(kernel, device, options, grid):
    frames, height, width, dim = grid
    _, rope = diffusers_rope(dim, **options)
    x = torch.empty(2, frames * height * width, dim, device=device)
    expected_cos, expected_sin = rope(
        x, frames, height, width, rope_interpolation_scale=options["rope_interpolation_scale"]
    )
    cos, sin = kernel.ltx_rope_cos_sin(frames, height, width, dim, device=device, **options)
    diff = max((cos - expected_cos).abs().max().item(), (sin - expected_sin).abs().max().item())
    print(f"LTXVideoRotaryPosEmbed {grid} {options}: max |difference| {diff:.2e}")
    torch.testing.assert_close(cos.expand_as(expected_cos), expected_cos, rtol=0, atol=2e-3)
    torch.testing.assert_close(sin.expand_as(expected_sin), expected_sin, rtol=0, atol=2e-3)
    assert (cos[..., : dim % 6] == 1).all() and (sin[..., : dim % 6] == 0).all()


def test_parity_diffusers_grid_variant(kernel, dtype, device):
    ltx, rope = diffusers_rope(2048)
    frames, height, width = LTX_GRID
    q = torch.randn(2, frames * height * width, 2048, dtype=dtype, device=device)
    k = torch.randn_like(q)
    cos, sin = rope(q, frames, height, width, rope_interpolation_scale=LTX_SCALE)
    q_out, k_out = kernel.rope3d_qk_grid(q, k, frames, height, width, rope_interpolation_scale=LTX_SCALE)
    assert_close(q_out, reference(q, cos, sin), atol=atol_of(q, 5e-3))
    assert_close(k_out, reference(k, cos, sin), atol=atol_of(k, 5e-3))
    expected = ltx.apply_rotary_emb(q, (cos, sin))
    print(f"rope3d_qk_grid vs diffusers {dtype}: {(q_out != expected).double().mean().item():.2e} of elements differ")


# Errors: one clear line, never a crash or a silently wrong result.


def test_rejects_cpu_tensors(kernel):
    x, cos, sin = torch.randn(1, 4, 8), torch.randn(1, 4, 8), torch.randn(1, 4, 8)
    with pytest.raises(RuntimeError, match="x must be a CUDA tensor"):
        kernel.rope3d(x, cos, sin)
    with pytest.raises(RuntimeError, match="q must be a CUDA tensor"):
        kernel.rope3d_qk(x, x, cos, sin)


def test_rejects_bad_arguments(kernel, dtype, device):
    x = torch.randn(2, 4, 8, dtype=dtype, device=device)
    cos, sin = random_tables(2, 4, 8, device)
    with pytest.raises(RuntimeError, match=r"x must have shape \[batch, seq, dim\]"):
        kernel.rope3d(x[0], cos, sin)
    with pytest.raises(RuntimeError, match="last dimension must be even"):
        kernel.rope3d(x[..., :7], cos[..., :7], sin[..., :7])
    with pytest.raises(RuntimeError, match="contiguous in its last dimension"):
        kernel.rope3d(torch.randn(2, 8, 4, dtype=dtype, device=device).transpose(1, 2), cos, sin)
    with pytest.raises(RuntimeError, match=r"cos must have shape \[2, 4, 8\] or \[1, 4, 8\]"):
        kernel.rope3d(x, cos[:, :3], sin)
    with pytest.raises(RuntimeError, match="sin must be float32"):
        kernel.rope3d(x, cos, sin.to(torch.bfloat16))
    with pytest.raises(RuntimeError, match="cos must be a CUDA tensor"):
        kernel.rope3d(x, cos.cpu(), sin)
    with pytest.raises(RuntimeError, match="out has shape"):
        kernel.rope3d(x, cos, sin, out=torch.empty(2, 4, 6, dtype=dtype, device=device))
    with pytest.raises(RuntimeError, match="k has shape"):
        kernel.rope3d_qk(x, x[:1], cos, sin)
    other = torch.float32 if dtype != torch.float32 else torch.bfloat16
    with pytest.raises(RuntimeError, match="k has dtype"):
        kernel.rope3d_qk(x, x.to(other), cos, sin)
    with pytest.raises(ValueError, match="out must be a pair"):
        kernel.rope3d_qk(x, x, cos, sin, out=x)
    with pytest.raises(RuntimeError, match="q has 4 tokens but the latent grid"):
        kernel.rope3d_qk_grid(x, x, 1, 2, 3)
    with pytest.raises(ValueError, match="rope_interpolation_scale must be None or 3 numbers"):
        kernel.rope3d_qk_grid(x, x, 1, 2, 2, rope_interpolation_scale=(1.0, 2.0))
    with pytest.raises(ValueError, match="theta must be positive"):
        kernel.rope3d_qk_grid(x, x, 1, 2, 2, theta=1.0)
    with pytest.raises(ValueError, match="must be non-zero"):
        kernel.rope3d_qk_grid(x, x, 1, 2, 2, rope_interpolation_scale=LTX_SCALE, base_num_frames=0)
    with pytest.raises(RuntimeError, match="dim must be even"):
        kernel.ltx_rope_cos_sin(1, 2, 2, 7, device=device)
    with pytest.raises(ValueError, match="must be non-negative"):
        kernel.ltx_rope_cos_sin(-1, 2, 2, 8, device=device)
    ops = kernel._ops.ops
    with pytest.raises(RuntimeError, match=r"params must be a contiguous float32 tensor of 9 \+ dim // 6 = 10"):
        ops.rope3d_qk_grid_fwd(x, x, torch.ones(9, device=device), 1, 2, 2, False)


def test_rejects_dtypes_not_compiled(kernel, device, uncompiled_dtypes):
    cos, sin = random_tables(1, 4, 8, device)
    for dtype in [torch.float64, torch.int32, *uncompiled_dtypes]:
        x = torch.ones(1, 4, 8, device=device).to(dtype)
        with pytest.raises(RuntimeError, match="but this kernel was built for"):
            kernel.rope3d(x, cos, sin)
        with pytest.raises(RuntimeError, match="but this kernel was built for"):
            kernel.rope3d_qk_grid(x, x, 1, 2, 2)
