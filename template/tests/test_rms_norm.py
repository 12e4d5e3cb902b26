"""RMSNorm: float64 references on fresh random data, parity with the modules it replaces, and error messages."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from . import fuzz
from .huge import boundary_rows, require_free_memory, row_chunk_sum
from .multi_gpu import MULTI_GPU_CHECKS, randn
from .utils import (
    LAYOUTS,
    U32,
    assert_close,
    assert_compiles,
    assert_grad_close,
    assert_identical_but_ties,
    assert_outside_fraction,
    assert_parity,
    assert_rounded,
    column_sum_depth,
    counting,
    float64_leaves,
    grads,
    laid_out,
    layout_id,
    poisoned_like,
    round_to,
    rounded_product_bounds,
    rounding_bounds,
    sm_count,
    sum_depth,
)


def reference(x, weight=None, eps=1e-6, residual=None):
    """float64 RMSNorm of the values the kernel actually sees (x + residual rounded to x's dtype)."""
    h = x if residual is None else (x + residual)  # torch rounds the sum to x's dtype, like the models
    hd = h.double()
    y = hd * torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight.double()


def roundings(weight, rounding):
    return 2 if weight is not None and rounding == "model" else 1


def inv_rms_error(cols):
    """Relative bound on a kernel's fp32 rsqrt(mean(x^2) + eps): the sum of squares within sum_depth(cols) unit
    roundoffs (one more for the squares of fp32 inputs), the mean and + eps two or three more, all halved by the
    square root; then rsqrtf's 2 ulp (4 unit roundoffs)."""
    return ((sum_depth(cols) + 4) / 2 + 4) * U32


def bounds(x, weight=None, eps=1e-6, rounding="model", residual=None):
    """What the kernel may return (utils.rounding_bounds), from the exact float64 norm n of the values it sees:
    "model" rounds n to x's dtype, then multiplies by the weight and rounds again (Qwen3RMSNorm, diffusers RMSNorm
    with a weight); "single" multiplies by the weight in fp32 and rounds once (torch.nn.RMSNorm); no weight, n
    rounded once. fp32 error: 1/rms (inv_rms_error) and one rounding per product."""
    h = x if residual is None else x + residual  # torch rounds the sum to x's dtype, like the kernel
    hd = h.double()
    n = hd * torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + eps)
    rel = inv_rms_error(h.shape[-1]) + U32
    if weight is None or rounding == "model":
        n_bounds = rounding_bounds(n, rel * n.abs(), h.dtype)
        return n_bounds if weight is None else rounded_product_bounds(n_bounds, weight.detach(), h.dtype)
    y = n * weight.detach().double()
    return rounding_bounds(y, (rel + U32) * y.abs(), h.dtype)


def input_grad_error(x, weight, dy, eps=1e-6, grad_residual=None):
    """Per-element bound (float64) on a kernel's fp32 error in d/dx = inv * g - x * inv^3 * mean(g * x), with
    g = dy * weight (+ the fused add's gradient): inv within inv_rms_error (three times that in inv^3), the sum of
    g * x within sum_depth roundings of the sum of |g * x|, and a few roundings per product and sum. A kernel that
    drops the second term (the projection on x) is off by |x| * inv^3 * |mean(g * x)|, hundreds of these bounds."""
    xd = x.double()
    g = dy.double() * (1 if weight is None else weight.double())
    cols = x.shape[-1]
    inv = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
    rel = inv_rms_error(cols) / U32
    projection = xd.abs() * inv**3 * (g * xd).abs().mean(-1, keepdim=True)
    error = U32 * ((rel + 4) * inv * g.abs() + (3 * rel + sum_depth(cols) + 8) * projection)
    return error if grad_residual is None else error + 2 * U32 * grad_residual.double().abs()


def weight_grad_depth(rows, cols, sms):
    """column_sum_depth of the weight gradient over `rows` rows, for any launch rms_norm.cu's backward_plan may pick
    on a GPU of `sms` SMs: rows_per_block (block_rows) a power of two up to 256 / (threads of a row: at least one
    per 16-byte vector), at least one block per SM (or per row group) and at most 1024 / 128 blocks per SM (the
    fixed-width launch of 128-thread rows)."""
    vectors = -(-cols // 8)
    threads = 1 << (vectors - 1).bit_length()
    worst, block_rows = 0, 1
    while block_rows <= max(1, 256 // threads):
        groups = -(-rows // block_rows)
        run = -(-groups // min(groups, sms))  # the rows each thread visits
        worst = max(worst, column_sum_depth(run, min(groups, 8 * sms), block_rows))
        block_rows *= 2
    return worst


def weight_grad(h, dy, rounding="model", eps=1e-6, sms=None):
    """(float64 weight gradient, per-element bound on the kernel's fp32 error in it): sum over rows of dy * n, n the
    normalized h as the kernel multiplies the weight by it (rounded to h's dtype with rounding="model", as the
    forward rounds it). A term's n is within the forward's fp32 error (inv_rms_error and a rounding) of exact; with
    rounding="model", rounded: either neighbour where that error reaches a rounding tie (utils.rounding_bounds).
    Then the product's rounding and the sum's, weight_grad_depth roundings of the sum of the terms' magnitudes."""
    cols = h.shape[-1]
    hd, g = h.detach().double().reshape(-1, cols), dy.double().reshape(-1, cols)
    n = hd * torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + eps)
    n_error = (inv_rms_error(cols) + U32) * n.abs()
    if rounding == "model" and h.dtype != torch.float32:
        low, high = rounding_bounds(n, n_error, h.dtype)
        n = round_to(n, h.dtype).double()
        n_error = torch.maximum(high.double() - n, n - low.double())
    depth = weight_grad_depth(hd.shape[0], cols, sms or sm_count(h.device))
    magnitudes = (g.abs() * (n.abs() + n_error)).sum(0)
    return (g * n).sum(0), (g.abs() * n_error).sum(0) + (depth + 1) * U32 * magnitudes


def assert_weight_grad(actual, h, dy, rounding="model", eps=1e-6):
    """The weight gradient against weight_grad's, per element (assert_grad_close with its `error`)."""
    expected, error = weight_grad(h, dy, rounding, eps)
    assert_grad_close(actual, expected, error=error)


SHAPES = [
    (1, 1),
    (3, 7),
    (5, 127),
    (4, 4095),
    (3, 4097),
    (2, 8193),
    (33, 4096),
    (128, 4096),  # Qwen3-8B hidden states, decode-sized batch (up to 16 rows per SM: 2 vectors per thread)
    (2560, 4096),  # more than 16 rows per SM (up to 159 SMs): 4 vectors per thread
    (2, 3, 2048),  # 3-D input
    (9, 32, 128),  # Qwen3 q_norm: per-head norm with a [head_dim] weight
    (9, 8, 128),  # Qwen3 k_norm
    (2, 40000),  # longer than the register cache: the streaming path
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("rounding", ["model", "single"])
def test_matches_float64_reference(kernel, dtype, device, shape, weighted, rounding):
    x = torch.randn(shape, dtype=dtype, device=device)
    weight = torch.randn(shape[-1], dtype=dtype, device=device) if weighted else None
    out = poisoned_like(x)
    result = kernel.rms_norm(x, weight, 1e-6, rounding=rounding, out=out)
    assert result is out and result.dtype == dtype
    assert_close(out, reference(x, weight), roundings(weight, rounding))
    assert_rounded(f"rounding={rounding!r}", out, bounds(x, weight, 1e-6, rounding))  # where it rounds, exactly


@pytest.mark.kernels_ci
@pytest.mark.parametrize(
    "shape", [(64, 4096), (9, 32, 128), (3, 4097), (2, 40000)], ids=lambda s: "x".join(map(str, s))
)
def test_rounding_modes_are_told_apart(kernel, dtype, device, shape):
    """Each mode rounds where its modules round: a kernel that ignores `rounding` (or rounds once in "model" mode)
    returns, in about a quarter of the elements, a value the other mode's rounding gives and this one's does not."""
    if dtype == torch.float32:
        pytest.skip("fp32 rounds the normalized value to fp32 either way: the modes are the same computation")
    x = torch.randn(shape, dtype=dtype, device=device)
    weight = torch.randn(shape[-1], dtype=dtype, device=device)
    model, single = bounds(x, weight, rounding="model"), bounds(x, weight, rounding="single")
    out_model = kernel.rms_norm(x, weight, rounding="model")
    out_single = kernel.rms_norm(x, weight, rounding="single")
    assert_rounded("rounding='model'", out_model, model)
    assert_rounded("rounding='single'", out_single, single)
    assert_outside_fraction("rounding='model' against single's bounds", out_model, single, 0.1)
    assert_outside_fraction("rounding='single' against model's bounds", out_single, model, 0.1)


@pytest.mark.parametrize("shape", [(2, 2688, 2048), (2, 7392, 2048)], ids=["ltx_2688", "ltx_7392"])
def test_real_model_shapes(kernel, dtype, device, shape):
    x = torch.randn(shape, dtype=dtype, device=device)
    assert_rounded("no weight", kernel.rms_norm(x, None, 1e-6), bounds(x))  # LTX-Video norm1/norm2


@pytest.mark.parametrize("cols", [128, 4096, 4097])
def test_strided_rows(kernel, dtype, device, cols):
    base = torch.randn(6, 5, cols + 64, dtype=dtype, device=device)
    x = base[:, :, :cols]  # rows spaced by cols + 64
    weight = torch.randn(cols, dtype=dtype, device=device)
    assert not x.is_contiguous()
    assert_close(kernel.rms_norm(x, weight), reference(x, weight), roundings=2)
    assert_rounded("strided rows", kernel.rms_norm(x, weight), bounds(x, weight))
    y = torch.randn(6, 10, cols + 64, dtype=dtype, device=device)[:, ::2, :cols]  # every other row: evenly spaced
    assert_rounded("every other row", kernel.rms_norm(y, weight, rounding="single"), bounds(y, weight, 1e-6, "single"))


@pytest.mark.parametrize("case", LAYOUTS, ids=layout_id)
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
def test_any_leading_strides(kernel, dtype, device, case, weighted):
    """Inputs and out= in any layout of their leading dimensions (the transposed q of a per-head norm, permuted
    rank-3/4/5 views), starting past their storage's first element, forward and backward."""
    shape, order = case
    x = laid_out(shape, order, dtype, device, offset=8)
    weight = torch.randn(shape[-1], dtype=dtype, device=device) if weighted else None
    out = laid_out(shape, tuple(reversed(order)), dtype, device, offset=16).fill_(float("nan"))
    assert kernel.rms_norm(x, weight, out=out) is out
    assert_close(out, reference(x, weight), roundings(weight, "model"))
    assert_close(kernel.rms_norm(x, weight, rounding="single"), reference(x, weight))

    x.requires_grad_()
    w = weight.requires_grad_() if weighted else None
    dy = laid_out(shape, tuple(reversed(order)), dtype, device, offset=8)  # the gradient arrives strided too
    leaves = [x, w] if weighted else [x]
    actual = grads(kernel.rms_norm(x, w), leaves, dy)
    x64, w64 = float64_leaves(x, w)
    expected = grads(reference(x64, w64), [x64, w64] if weighted else [x64], dy.double())
    assert_grad_close(actual[0], expected[0])
    if weighted:
        assert_weight_grad(actual[1], x, dy)


@pytest.mark.parametrize("case", LAYOUTS, ids=layout_id)
def test_fused_add_any_leading_strides(kernel, dtype, device, case):
    shape, order = case
    x = laid_out(shape, order, dtype, device, offset=8)
    residual = laid_out(shape, tuple(reversed(order)), dtype, device)
    weight = torch.randn(shape[-1], dtype=dtype, device=device)
    expected_h = x + residual
    out, h = (laid_out(shape, order, dtype, device).fill_(float("nan")) for _ in range(2))
    kernel._ops.ops.fused_add_rms_norm(out, h, x, residual, weight, 1e-6, False)
    torch.testing.assert_close(h, expected_h, rtol=0, atol=0)
    assert_close(out, reference(x, weight, residual=residual), roundings(weight, "model"))

    x.requires_grad_()
    residual.requires_grad_()
    d_out, d_h = (laid_out(shape, order[::-1], dtype, device) for _ in range(2))
    actual = grads(kernel.fused_add_rms_norm(x, residual, weight), [x, residual], (d_out, d_h))
    x64, r64 = float64_leaves(x, residual)
    h64 = x64 + r64
    expected = grads((reference(h64, weight.double()), h64), [x64, r64], (d_out.double(), d_h.double()))
    for a, e in zip(actual, expected):
        assert_grad_close(a, e)


@pytest.mark.parametrize("case", LAYOUTS, ids=layout_id)
def test_in_place_on_a_strided_view(kernel, dtype, device, case):
    shape, order = case
    x = laid_out(shape, order, dtype, device, offset=8)
    weight = torch.rand(shape[-1], dtype=dtype, device=device) + 0.5
    expected = kernel.rms_norm(x, weight)
    assert kernel.rms_norm(x, weight, out=x) is x
    assert torch.equal(x, expected)


def test_unaligned_input_takes_the_scalar_path(kernel, dtype, device):
    flat = torch.randn(1 + 7 * 4096, dtype=dtype, device=device)
    x = flat[1:].view(7, 4096)  # data pointer not 16-byte aligned
    weight = torch.randn(4096, dtype=dtype, device=device)
    assert_rounded("unaligned", kernel.rms_norm(x, weight, rounding="single"), bounds(x, weight, 1e-6, "single"))


def test_small_variance_and_outliers(kernel, dtype, device):
    x = torch.randn(64, 4096, device=device) * 0.05
    x[:, ::512] *= 40  # outliers: fp32 accumulation and eps handling both matter
    x = x.to(dtype)
    weight = torch.randn(4096, dtype=dtype, device=device)
    assert_rounded("small variance", kernel.rms_norm(x, weight, 1e-5), bounds(x, weight, 1e-5))


@pytest.mark.parametrize("eps", [1e-6, 1e-5, 0.5])
def test_eps(kernel, dtype, device, eps):
    x = torch.randn(16, 1024, dtype=dtype, device=device) * 0.1
    assert_rounded(f"eps={eps}", kernel.rms_norm(x, None, eps), bounds(x, None, eps))


@pytest.mark.kernels_ci
@pytest.mark.parametrize(
    "shape", [(7, 4096), (640, 4096), (3, 5, 2048), (4, 4097), (2, 40000)], ids=lambda s: "x".join(map(str, s))
)
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("rounding", ["model", "single"])
def test_fused_add(kernel, dtype, device, shape, weighted, rounding):
    x = torch.randn(shape, dtype=dtype, device=device)
    residual = torch.randn(shape, dtype=dtype, device=device)
    weight = torch.randn(shape[-1], dtype=dtype, device=device) if weighted else None
    out, new_residual = kernel.fused_add_rms_norm(x, residual, weight, 1e-6, rounding=rounding)
    torch.testing.assert_close(new_residual, x + residual, rtol=0, atol=0)  # bitwise: the model's own add
    assert_close(out, reference(x, weight, residual=residual), roundings(weight, rounding))
    assert_rounded(f"fused add, rounding={rounding!r}", out, bounds(x, weight, 1e-6, rounding, residual))


# Fuzzing and sanitizing (tests/fuzz.py, tools/sanitize.sh): one case, forward and backward, each tensor in a
# layout of its own (missing names: contiguous).


def check_case(kernel, dtype, device, shape, *, weighted, rounding, fused, eps, seed, layouts):
    """rms_norm, or the fused add through its out-variant op, into NaN-poisoned outputs; then the gradients."""
    at = lambda name: layouts.get(name, fuzz.Layout())  # noqa: E731
    gen = fuzz.generator(seed, device)
    x = at("x").like(fuzz.randn(shape, dtype, gen))
    weight = at("weight").like(fuzz.randn(shape[-1:], dtype, gen)) if weighted else None
    residual = at("residual").like(fuzz.randn(shape, dtype, gen)) if fused else None
    out, out_buffer = at("out").empty(shape, dtype, device)
    if fused:
        h, h_buffer = at("residual_out").empty(shape, dtype, device)
        kernel._ops.ops.fused_add_rms_norm(out, h, x, residual, weight, eps, rounding == "single")
        fuzz.assert_written_only_inside(h, h_buffer)
        torch.testing.assert_close(h, x + residual, rtol=0, atol=0)  # bitwise: the model's own add
    else:
        assert kernel.rms_norm(x, weight, eps, rounding=rounding, out=out) is out
    fuzz.assert_written_only_inside(out, out_buffer)
    assert_close(out, reference(x, weight, eps, residual), roundings(weight, rounding))

    leaves = [t.requires_grad_() for t in (x, residual, weight) if t is not None]
    leaves64 = [t for t in float64_leaves(x, residual, weight) if t is not None]
    dy = at("dy").like(fuzz.randn(shape, dtype, gen))
    if fused:
        d_h = at("d_residual").like(fuzz.randn(shape, dtype, gen))
        actual = grads(kernel.fused_add_rms_norm(x, residual, weight, eps, rounding=rounding), leaves, (dy, d_h))
        h64 = leaves64[0] + leaves64[1]
        expected = grads(
            (reference(h64, leaves64[2] if weighted else None, eps), h64), leaves64, (dy.double(), d_h.double())
        )
    else:
        actual = grads(kernel.rms_norm(x, weight, eps, rounding=rounding), leaves, dy)
        expected = grads(reference(leaves64[0], leaves64[1] if weighted else None, eps), leaves64, dy.double())
    pairs = list(zip(actual, expected))[: len(leaves) - weighted]  # the weight's gradient: per element, below
    if shape[-1] == 1 and not fused:
        # Rows of one element normalize to +-1: d/dx is eps / (x^2 + eps)^1.5, all cancellation in fp32. The weight's
        # gradient is still checked, and so is the fused add's d/dx, to which d_residual adds.
        pairs = pairs[1:]
    for a, e in pairs:
        assert_grad_close(a, e)
    if weighted:
        assert_weight_grad(actual[-1], x + residual if fused else x, dy, rounding, eps)


@pytest.mark.fuzz
@given(width=fuzz.widths(), weighted=st.booleans(), fused=st.booleans(), data=st.data())
def test_fuzz(kernel, dtype, device, width, weighted, fused, data):
    shape = (*data.draw(fuzz.leading_shapes(width), label="leading shape"), width)
    n = len(shape) - 1
    layouts = fuzz.draw_layouts(data, width, x=n, weight=0, residual=n, out=n, residual_out=n, dy=n, d_residual=n)
    rounding = data.draw(st.sampled_from(["model", "single"]), label="rounding")
    eps, seed = data.draw(fuzz.eps_values, label="eps"), data.draw(fuzz.seeds, label="seed")
    check_case(
        kernel,
        dtype,
        device,
        shape,
        weighted=weighted,
        rounding=rounding,
        fused=fused,
        eps=eps,
        seed=seed,
        layouts=layouts,
    )


# Small odd, misaligned and strided cases for tools/sanitize.sh (compute-sanitizer is slow: keep them small).
SANITIZE_CASES = {
    "odd_misaligned": (
        (3, 37),
        dict(weighted=True, rounding="model", fused=False),
        dict(x=fuzz.Layout(offset=1), weight=fuzz.Layout(offset=3), out=fuzz.Layout(offset=1)),
    ),
    "vectors_strided": (
        (2, 3, 264),
        dict(weighted=True, rounding="single", fused=True),
        dict(
            x=fuzz.Layout((1, 0), step=2, pad=8),
            residual=fuzz.Layout(pad=264),
            out=fuzz.Layout((1, 0)),
            dy=fuzz.Layout(step=3),
        ),
    ),
    "streamed": (
        (2, 40003),
        dict(weighted=False, rounding="model", fused=False),
        dict(dy=fuzz.Layout(pad=5, offset=2)),
    ),
    "per_head": (  # rms_norm_head_kernel: 2 rows per thread, 32 per block; 45 rows leave a part-filled block
        (3, 15, 128),
        dict(weighted=True, rounding="single", fused=False),
        dict(x=fuzz.Layout(pad=8), out=fuzz.Layout(pad=16)),
    ),
}


@pytest.mark.sanitize
@pytest.mark.parametrize("case", SANITIZE_CASES)
def test_sanitize(kernel, dtype, device, case):
    shape, options, layouts = SANITIZE_CASES[case]
    check_case(kernel, dtype, device, shape, eps=1e-6, seed=0, layouts=layouts, **options)


def test_empty_input(kernel, dtype, device):
    x = torch.empty(0, 4096, dtype=dtype, device=device)
    assert kernel.rms_norm(x, torch.ones(4096, dtype=dtype, device=device)).shape == (0, 4096)


@pytest.mark.slow
@pytest.mark.parametrize("cols", [4096, 4097], ids=["vectors", "scalars"])
@pytest.mark.parametrize("fused", [False, True], ids=["rms_norm", "fused_add"])
def test_more_than_2_31_elements(kernel, dtype, device, cols, fused):
    """rows x hidden > 2^31, forward and backward: rows past 32-bit element offsets, and a weight gradient summed
    over all of them. Rows around element 2^31 against float64; the weight gradient against float64 sums by chunks."""
    rows, eps = 2**31 // cols + 3, 1e-6
    require_free_memory(rows * cols * dtype.itemsize * (8 if fused else 5))
    x = torch.randn(rows, cols, dtype=dtype, device=device)
    residual = torch.randn(rows, cols, dtype=dtype, device=device) if fused else None
    weight = torch.randn(cols, dtype=dtype, device=device)
    picked = boundary_rows(rows, cols, device)
    out = torch.full_like(x, float("nan"))
    if fused:
        h = torch.full_like(x, float("nan"))
        kernel._ops.ops.fused_add_rms_norm(out, h, x, residual, weight, eps, False)
        assert not h.isnan().any(), "an element of residual_out was not written"
        assert torch.equal(h[picked], x[picked] + residual[picked])
        del h
    else:
        kernel.rms_norm(x, weight, eps, out=out)
    assert not out.isnan().any(), "an element was not written"
    assert_close(out[picked], reference(x[picked], weight, eps, None if residual is None else residual[picked]), 2)
    del out

    leaves = [t.requires_grad_() for t in (x, residual, weight) if t is not None]
    dy = torch.randn_like(x)
    if fused:
        d_h = torch.randn_like(x)
        y, h = kernel.fused_add_rms_norm(x, residual, weight, eps)
        grad = grads((y, h), leaves, (dy, d_h))
    else:
        h, d_h = x, None
        grad = grads(kernel.rms_norm(x, weight, eps), leaves, dy)
    # Rows: float64 autograd through those rows alone.
    sub = [t[picked] if t.dim() == 2 else t for t in leaves]
    sub64 = float64_leaves(*sub)
    w64 = sub64[-1]
    h64 = sub64[0] + sub64[1] if fused else sub64[0]
    seeds = (dy[picked].double(),) + ((d_h[picked].double(),) if fused else ())
    expected = grads((reference(h64, w64, eps), h64) if fused else reference(h64, w64, eps), sub64[:-1], seeds)
    for a, e in zip(grad[:-1], expected):
        assert_grad_close(a[picked], e)

    # The weight gradient: sum over rows of dy * norm(h), in float64 by chunks of rows.
    h = h.detach()

    def weight_grad(part):
        hd = h[part].double()
        return (dy[part].double() * hd * torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + eps)).sum(0)

    assert_grad_close(grad[-1], row_chunk_sum(weight_grad, rows, cols))


# Gradients, torch.library registration and torch.compile.

# Fixed-width backward launches of 4, 8, 12 and 16 warps (1024-4096 2-byte elements, 512-2048 fp32: 12 warps sum
# their rows' sums in groups of 16 lanes, padded), per-head rows, scalars and a row streamed from memory.
GRAD_SHAPES = [(7, 4096), (6, 1024), (2, 3, 1536), (2, 3, 3072), (3, 5, 127), (9, 32, 128), (1000, 2048), (2, 40000)]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("shape", GRAD_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("rounding", ["model", "single"])
def test_gradients_match_float64(kernel, dtype, device, shape, weighted, rounding):
    x = torch.randn(shape, dtype=dtype, device=device, requires_grad=True)
    weight = torch.randn(shape[-1], dtype=dtype, device=device, requires_grad=True) if weighted else None
    dy = torch.randn(shape, dtype=dtype, device=device)
    leaves = [x, weight] if weighted else [x]
    actual = grads(kernel.rms_norm(x, weight, 1e-6, rounding=rounding), leaves, dy)
    x64, w64 = float64_leaves(x, weight)
    expected = grads(reference(x64, w64), [x64, w64] if weighted else [x64], dy.double())
    assert_grad_close(actual[0], expected[0], error=input_grad_error(x, weight, dy))  # per element
    assert_grad_close(actual[0], expected[0])
    if weighted:
        assert_weight_grad(actual[1], x, dy, rounding)


@pytest.mark.parametrize("batch", [1, 2], ids=["two_levels", "three_levels"])
def test_gradients_through_a_transpose(kernel, dtype, device, batch):
    # Qwen3's q_norm output goes through .transpose(1, 2), so its gradient arrives with rows in two (one sequence)
    # or three levels of strides (heads, tokens, sequences); the kernel reads it in place either way.
    x = torch.randn(batch, 37, 8, 128, dtype=dtype, device=device, requires_grad=True)
    weight = torch.randn(128, dtype=dtype, device=device, requires_grad=True)
    dy = torch.randn(batch, 8, 37, 128, dtype=dtype, device=device)
    actual = grads(kernel.rms_norm(x, weight, 1e-6).transpose(1, 2), [x, weight], dy)
    x64, w64 = float64_leaves(x, weight)
    expected = grads(reference(x64, w64).transpose(1, 2), [x64, w64], dy.double())
    assert_grad_close(actual[0], expected[0], error=input_grad_error(x, weight, dy.transpose(1, 2)))
    assert_grad_close(actual[0], expected[0])
    assert_weight_grad(actual[1], x, dy.transpose(1, 2))


def test_per_head_norm_of_transposed_q(kernel, dtype, device):
    """F.rms_norm and Liger take q after .transpose(1, 2) ([B, S, H, D] seen as [B, H, S, D]) with a [D] weight."""
    q = torch.randn(2, 37, 8, 128, dtype=dtype, device=device).transpose(1, 2)
    weight = torch.randn(128, dtype=dtype, device=device)
    assert q.stride() == (37 * 8 * 128, 128, 8 * 128, 1)
    assert_close(kernel.rms_norm(q, weight, rounding="single"), reference(q, weight))
    q.requires_grad_()
    dy = torch.randn(2, 37, 8, 128, dtype=dtype, device=device).transpose(1, 2)
    x64, w64 = float64_leaves(q, weight)
    assert_grad_close(grads(kernel.rms_norm(q, weight), [q], dy)[0], grads(reference(x64, w64), [x64], dy.double())[0])


@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
def test_fused_add_gradients(kernel, dtype, device, weighted):
    x, residual = (torch.randn(33, 2048, dtype=dtype, device=device, requires_grad=True) for _ in range(2))
    weight = torch.randn(2048, dtype=dtype, device=device, requires_grad=True) if weighted else None
    d_out, d_h = torch.randn_like(x), torch.randn_like(x)  # both outputs feed the loss, as in a decoder
    leaves = [x, residual, weight] if weighted else [x, residual]
    out, h = kernel.fused_add_rms_norm(x, residual, weight)
    actual = grads((out, h), leaves, (d_out, d_h))
    x64, r64, w64 = float64_leaves(x, residual, weight)
    h64 = x64 + r64
    expected = grads(
        (reference(h64, w64), h64), [x64, r64, w64] if weighted else [x64, r64], (d_out.double(), d_h.double())
    )
    # Per element, against the gradient at h as rounded and stored (the point the kernel differentiates at).
    (h_stored,) = float64_leaves(x + residual)
    (at_h,) = grads(reference(h_stored, w64), [h_stored], d_out.double())
    error = input_grad_error(x + residual, weight, d_out, grad_residual=d_h)
    for a in actual[:2]:  # x and residual get the same gradient
        assert_grad_close(a, at_h + d_h.double(), error=error)
    for a, e in zip(actual[:2], expected):
        assert_grad_close(a, e)
    if weighted:
        assert_weight_grad(actual[2], x + residual, d_out)


@pytest.mark.parametrize("shape", [(4096, 2048), (1024, 16, 128), (5, 4096)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("form", ["weight", "fused_add"])
def test_weight_gradient_is_deterministic(kernel, dtype, device, shape, form):
    # A sum over every row, added up in a fixed order (each block's rows, then the blocks' partial rows by
    # sum_rows), never by atomics: the same bits on every run, whichever block finishes first.
    x, residual = (torch.randn(shape, dtype=dtype, device=device) for _ in range(2))
    weight = torch.randn(shape[-1], dtype=dtype, device=device, requires_grad=True)
    dy = torch.randn(shape, dtype=dtype, device=device)

    def weight_grad():
        out = kernel.fused_add_rms_norm(x, residual, weight)[0] if form == "fused_add" else kernel.rms_norm(x, weight)
        return grads(out, [weight], dy)[0]

    first = weight_grad()
    assert first.abs().sum() > 0
    for _ in range(4):
        assert torch.equal(weight_grad(), first)


# Devices and streams (tests/multi_gpu.py says what each check asserts): tensors on cuda:1 while cuda:0 is current
# (2 GPUs), on a side stream, and in a CUDA graph (on cuda:1, or on the only GPU), forward and backward. The weight's
# gradient adds up per-block partial sums in a scratch tensor, which must be allocated on the input's GPU.
@pytest.mark.multi_gpu
@pytest.mark.parametrize("check", MULTI_GPU_CHECKS)
@pytest.mark.parametrize("form", ["weight", "no_weight", "fused_add"])
def test_devices_and_streams(kernel, dtype, check, form):
    x, residual, weight = randn(300, 2048, dtype=dtype), randn(300, 2048, dtype=dtype), randn(2048, dtype=dtype)
    if form == "fused_add":
        check(lambda x, r, w: kernel.fused_add_rms_norm(x, r, w, 1e-6), [x, residual, weight], [True] * 3)
    elif form == "weight":
        check(lambda x, w: kernel.rms_norm(x, w, 1e-6), [x, weight], [True, True])
    else:
        check(lambda x: kernel.rms_norm(x, None, 1e-6, rounding="single"), [x], [True])


def test_opcheck(kernel, dtype, device):
    ops = kernel._ops.ops
    x = torch.randn(5, 256, dtype=dtype, device=device, requires_grad=True)
    weight = torch.randn(256, dtype=dtype, device=device, requires_grad=True)
    for w in (weight, None):
        torch.library.opcheck(ops.rms_norm_fwd, (x, w, 1e-6, False))
        torch.library.opcheck(ops.fused_add_rms_norm_fwd, (x, torch.randn_like(x), w, 1e-6, True))
        torch.library.opcheck(ops.rms_norm_bwd, (torch.randn_like(x), None, x.detach(), w, 1e-6, False))
        torch.library.opcheck(ops.rms_norm, (torch.empty_like(x.detach()), x.detach(), w, 1e-6, False))


def test_compiles_fullgraph(kernel, dtype, device):
    weight = torch.randn(1024, dtype=dtype, device=device, requires_grad=True)

    def block(x, residual):
        out, h = kernel.fused_add_rms_norm(x, residual, weight)
        return kernel.rms_norm(out * 2, weight) + h

    def make_args(batch):
        return [torch.randn(batch, 7, 1024, dtype=dtype, device=device, requires_grad=True) for _ in range(2)]

    assert_compiles(block, make_args)


def test_out_refuses_to_drop_gradients(kernel, dtype, device):
    x = torch.randn(4, 64, dtype=dtype, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="does not record gradients"):
        kernel.rms_norm(x, out=torch.empty_like(x))
    with torch.no_grad():
        kernel.rms_norm(x, out=torch.empty_like(x))


@pytest.mark.parametrize("shape", [(5, 4096), (3, 40000)], ids=["cached", "streamed"])  # 40000: too long for registers
def test_out_may_be_the_input_itself(kernel, dtype, device, shape):
    rows, cols = shape
    x = torch.randn(rows, cols, dtype=dtype, device=device)
    weight = torch.rand(cols, dtype=dtype, device=device) + 0.5
    expected = kernel.rms_norm(x, weight)
    assert kernel.rms_norm(x, weight, out=x) is x
    assert torch.equal(x, expected)


def test_fused_add_in_place(kernel, dtype, device):
    """vLLM's calling convention: the normalized output over the input, the sum over the residual."""
    ops = kernel._ops.ops
    x, residual = (torch.randn(7, 4096, dtype=dtype, device=device) for _ in range(2))
    weight = torch.rand(4096, dtype=dtype, device=device) + 0.5
    expected = kernel.fused_add_rms_norm(x, residual, weight)
    ops.fused_add_rms_norm(x, residual, x, residual, weight, 1e-6, False)
    assert torch.equal(x, expected[0]) and torch.equal(residual, expected[1])


def overlap_cases(dtype, device):
    """(name, call, buffers it could write, message) for out= arguments that share memory the wrong way."""
    buf = torch.randn(9, 4096, dtype=dtype, device=device)
    weight = torch.randn(4096, dtype=dtype, device=device)
    flat = torch.randn(4096 * 2, dtype=dtype, device=device)
    heads = torch.randn(2, 9, 4, 64, dtype=dtype, device=device)

    def fused_into_one_buffer(k):  # out and residual_out the same tensor
        k._ops.ops.fused_add_rms_norm(buf[0:2], buf[0:2], buf[2:4], buf[4:6], None, 1e-6, False)

    return [
        ("partial", lambda k: k.rms_norm(buf[1:], out=buf[:-1]), buf, "out shares memory with input"),
        (
            "shifted_cols",
            lambda k: k.rms_norm(flat[:4096].view(1, 4096), out=flat[8:4104].view(1, 4096)),
            flat,
            "out shares memory with input",
        ),
        ("expanded", lambda k: k.rms_norm(buf[:4], out=weight.expand(4, 4096)), weight, "out has elements that share"),
        ("weight", lambda k: k.rms_norm(buf[1:2], buf[0], out=buf[0:1]), buf, "out shares memory with weight"),
        ("both_outputs", fused_into_one_buffer, buf, "out is the same tensor as residual_out"),
        (
            "transposed_shifted",  # rows of several levels that meet: refused (when unsure, the check refuses)
            lambda k: k.rms_norm(heads[:, 1:].transpose(1, 2), out=heads[:, :-1].transpose(1, 2)),
            heads,
            "out shares memory with input",
        ),
    ]


@pytest.mark.parametrize(
    "case", ["partial", "shifted_cols", "expanded", "weight", "both_outputs", "transposed_shifted"]
)
def test_overlapping_out_is_refused_before_anything_is_written(kernel, dtype, device, case):
    name, call, written, message = next(c for c in overlap_cases(dtype, device) if c[0] == case)
    before = written.clone()
    with pytest.raises(RuntimeError, match=message):
        call(kernel)
    assert torch.equal(written, before)


def test_out_beside_the_input_in_one_buffer(kernel, dtype, device):
    """Rows of one buffer, input in the first half of each row and out in the second: no element shared."""
    buf = torch.randn(6, 2 * 1024, dtype=dtype, device=device)
    x, out = buf[:, :1024], buf[:, 1024:]
    expected = bounds(x)
    kernel.rms_norm(x, out=out)
    assert_rounded("out beside the input", out, expected)


# Parity with the real modules (skipped when the library is not installed).


def test_parity_transformers_qwen3(kernel, dtype, device):
    modeling = pytest.importorskip("transformers.models.qwen3.modeling_qwen3")
    norm = modeling.Qwen3RMSNorm(4096, eps=1e-6).to(device=device, dtype=dtype)
    torch.nn.init.normal_(norm.weight)
    x = torch.randn(512, 4096, dtype=dtype, device=device)
    with torch.no_grad():
        expected = norm(x)
        actual = kernel.rms_norm(x, norm.weight, norm.variance_epsilon, rounding="model")
    # Bit-identical (docs/transformers.md), except where the exact norm is within fp32 error of a rounding tie.
    assert_identical_but_ties(f"Qwen3RMSNorm {dtype}", actual, expected, bounds(x, norm.weight, 1e-6))
    q = torch.randn(64, 32, 128, dtype=dtype, device=device)  # q_norm: per head
    q_norm = modeling.Qwen3RMSNorm(128, eps=1e-6).to(device=device, dtype=dtype)
    torch.nn.init.normal_(q_norm.weight)
    with torch.no_grad():
        actual, expected = kernel.rms_norm(q, q_norm.weight), q_norm(q)
    assert_identical_but_ties(f"Qwen3 q_norm {dtype}", actual, expected, bounds(q, q_norm.weight, 1e-6))


def test_parity_torch_nn_rmsnorm(kernel, dtype, device):
    norm = torch.nn.RMSNorm(2048, eps=1e-5).to(device=device, dtype=dtype)
    torch.nn.init.normal_(norm.weight)
    x = torch.randn(2, 1024, 2048, dtype=dtype, device=device)
    actual = kernel.rms_norm(x, norm.weight, 1e-5, rounding="single")
    assert_parity(f"torch.nn.RMSNorm {dtype}", actual, norm(x))


@pytest.mark.parametrize("affine", [True, False], ids=["weight", "no_weight"])
def test_parity_diffusers_rmsnorm(kernel, dtype, device, affine):
    normalization = pytest.importorskip("diffusers.models.normalization")
    norm = normalization.RMSNorm(2048, eps=1e-6, elementwise_affine=affine).to(device=device, dtype=dtype)
    if affine:
        torch.nn.init.normal_(norm.weight)
    x = torch.randn(2, 1024, 2048, dtype=dtype, device=device)
    weight = norm.weight if affine else None
    with torch.no_grad():
        actual, expected = kernel.rms_norm(x, weight, 1e-6, rounding="model"), norm(x)
    name = f"diffusers RMSNorm affine={affine} {dtype}"
    assert_identical_but_ties(name, actual, expected, bounds(x, weight, 1e-6, "model"))


# Mixed precision: an fp32 weight beside a bfloat16 or float16 input (a model kept in fp32, run under autocast).

UNIT_ROUNDOFF = {torch.bfloat16: 2**-8, torch.float16: 2**-11}
# (rounding, out_dtype) -> the result's dtype ("input": x's). "model" defaults to transformers' promotion.
MIXED = {
    ("model", None): torch.float32,
    ("model", "input"): "input",
    ("single", None): "input",
    ("single", torch.float32): torch.float32,
}


def half_precision(dtype):
    if dtype not in UNIT_ROUNDOFF:
        pytest.skip("an fp32 weight beside an fp32 input is the same-dtype case")


def mixed_reference(x, weight, dtype, rounding, eps=1e-6, residual=None):
    """float64 value of the module's formula: "model" rounds norm(x) to x's dtype (`dtype`) before the weight
    multiply, "single" does not; a result of x's dtype is rounded once more (the tolerance's business)."""
    n = reference(x, None, eps, residual)
    if rounding == "model":
        n = n.to(dtype).to(n.dtype)  # differentiable: the gradient passes the rounding unchanged
    return n * weight.to(n.dtype)


def assert_mixed_close(actual, expected, dtype, rounding):
    """An fp32 result: fp32-close, except, with norm(x) rounded to x's dtype first ("model"), the rare elements that
    fp32 and float64 round to neighbouring values of that dtype (one ulp of it). (A result of x's dtype: bounds.)"""
    assert actual.dtype == torch.float32, actual.dtype
    assert not actual.isnan().any(), "output has NaN: an element was not written"
    if rounding == "single":
        assert_close(actual, expected)
        return
    off = ~torch.isclose(actual.double(), expected, rtol=1e-5, atol=1e-6)
    assert off.double().mean().item() < 1e-3, f"{off.double().mean().item():.2e} of elements differ"
    rtol = 2.1 * UNIT_ROUNDOFF[dtype]
    torch.testing.assert_close(actual.double(), expected, rtol=rtol, atol=rtol * 1e-3)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(
    "shape", [(3, 7), (33, 4096), (9, 32, 128), (4, 4097), (2, 40000)], ids=lambda s: "x".join(map(str, s))
)
@pytest.mark.parametrize("rounding, out_dtype", list(MIXED), ids=lambda v: str(v).removeprefix("torch."))
def test_fp32_weight_matches_float64(kernel, dtype, device, shape, rounding, out_dtype):
    half_precision(dtype)
    x = torch.randn(shape, dtype=dtype, device=device)
    weight = torch.randn(shape[-1], device=device)  # fp32
    asked = dtype if out_dtype == "input" else out_dtype
    result_dtype = dtype if MIXED[(rounding, out_dtype)] == "input" else MIXED[(rounding, out_dtype)]
    result = kernel.rms_norm(x, weight, 1e-6, rounding=rounding, out_dtype=asked)
    assert result.dtype == result_dtype
    if result_dtype == torch.float32:
        assert_mixed_close(result, mixed_reference(x, weight, dtype, rounding), dtype, rounding)
    else:  # x's dtype: where the exact roundings allow (a flat 2-rounding tolerance missed near-ties)
        assert_rounded("rms_norm", result, bounds(x, weight, rounding=rounding))
    out = torch.full(shape, float("nan"), dtype=result_dtype, device=device)  # out=: its dtype is the result's
    assert kernel.rms_norm(x, weight, 1e-6, rounding=rounding, out=out) is out
    assert torch.equal(out, result)


@pytest.mark.parametrize("rounding", ["model", "single"])
def test_fused_add_with_fp32_weight(kernel, dtype, device, rounding):
    half_precision(dtype)
    x, residual = (torch.randn(33, 2048, dtype=dtype, device=device, requires_grad=True) for _ in range(2))
    weight = torch.randn(2048, device=device, requires_grad=True)
    out, h = kernel.fused_add_rms_norm(x, residual, weight, 1e-6, rounding=rounding, out_dtype=torch.float32)
    assert out.dtype == torch.float32 and h.dtype == dtype
    torch.testing.assert_close(h, x + residual, rtol=0, atol=0)  # the model's own add, in x's dtype
    assert_mixed_close(
        out, mixed_reference(x.detach(), weight.detach(), dtype, rounding, residual=residual.detach()), dtype, rounding
    )
    d_out, d_h = torch.randn_like(out), torch.randn_like(h)
    actual = grads((out, h), [x, residual, weight], (d_out, d_h))
    assert [g.dtype for g in actual] == [dtype, dtype, torch.float32]
    x64, r64, w64 = float64_leaves(x, residual, weight)
    h64 = (x64 + r64).to(dtype).double()  # rounded to x's dtype, as stored
    expected = grads((mixed_reference(h64, w64, dtype, rounding), h64), [x64, r64, w64], (d_out.double(), d_h.double()))
    for a, e in zip(actual[:2], expected):
        assert_grad_close(a, e, like=dtype if rounding == "model" else None)
    assert_weight_grad(actual[2], x + residual, d_out, rounding)


@pytest.mark.parametrize(
    "shape", [(7, 4096), (9, 32, 128), (1000, 2048), (2, 40000)], ids=lambda s: "x".join(map(str, s))
)
@pytest.mark.parametrize("rounding, out_dtype", list(MIXED), ids=lambda v: str(v).removeprefix("torch."))
def test_fp32_weight_gradients(kernel, dtype, device, shape, rounding, out_dtype):
    half_precision(dtype)
    x = torch.randn(shape, dtype=dtype, device=device, requires_grad=True)
    weight = torch.randn(shape[-1], device=device, requires_grad=True)
    y = kernel.rms_norm(x, weight, 1e-6, rounding=rounding, out_dtype=dtype if out_dtype == "input" else out_dtype)
    dy = torch.randn(shape, dtype=y.dtype, device=device)  # the gradient reaching an fp32 result is fp32
    grad_x, grad_w = grads(y, [x, weight], dy)
    assert grad_x.dtype == dtype and grad_w.dtype == torch.float32
    x64, w64 = float64_leaves(x, weight)
    expected_x, expected_w = grads(mixed_reference(x64, w64, dtype, rounding), [x64, w64], dy.double())
    assert_grad_close(grad_x, expected_x)
    # norm(x) rounded to x's dtype ("model"): fp32 and float64 may round an element to neighbouring values
    assert_grad_close(grad_w, expected_w, like=dtype if rounding == "model" else None)
    assert_weight_grad(grad_w, x, dy, rounding)  # per element, those neighbours allowed for


def test_fp32_weight_opcheck_and_compile(kernel, dtype, device):
    half_precision(dtype)
    ops = kernel._ops.ops
    x = torch.randn(5, 256, dtype=dtype, device=device, requires_grad=True)
    weight = torch.randn(256, device=device, requires_grad=True)
    for single, out_dtype in [(False, torch.float32), (True, None), (True, torch.float32)]:
        torch.library.opcheck(ops.rms_norm_fwd, (x, weight, 1e-6, single, out_dtype))
        torch.library.opcheck(ops.fused_add_rms_norm_fwd, (x, torch.randn_like(x), weight, 1e-6, single, out_dtype))
        dy = torch.randn(5, 256, dtype=out_dtype or dtype, device=device)
        torch.library.opcheck(ops.rms_norm_bwd, (dy, None, x.detach(), weight, 1e-6, single))

    def block(x, residual):
        out, h = kernel.fused_add_rms_norm(x, residual, weight)  # fp32 out, h in x's dtype
        return kernel.rms_norm(out.to(dtype), weight, rounding="single") + h

    def make_args(batch):
        return [torch.randn(batch, 7, 256, dtype=dtype, device=device, requires_grad=True) for _ in range(2)]

    assert_compiles(block, make_args)


def assert_layer_parity(name, module, patched, x, dtype):
    """The patched module against the original, fp32 parameters, with and without autocast: the same dtypes, the
    values to 1 ulp of x's dtype, the gradients of x and of the weight."""
    for autocast in (False, True):
        with torch.autocast("cuda", dtype=dtype, enabled=autocast):
            expected, actual = module(x), patched(x)
        what = f"{name} autocast={autocast} {dtype}"
        assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
        if actual.dtype == torch.float32:  # fp32 results of fp32 math, or of norm(x) rounded to x's dtype
            off = ~torch.isclose(actual, expected, rtol=1e-5, atol=1e-6)
            assert off.double().mean().item() < 1e-3, f"{what}: {off.double().mean().item():.2e} of elements differ"
            torch.testing.assert_close(actual, expected, rtol=2.1 * UNIT_ROUNDOFF[dtype], atol=1e-5)
        else:
            assert_parity(what, actual, expected)
        dy = torch.randn_like(expected)
        weights = [module.weight, patched.weight]
        expected_grads = torch.autograd.grad(expected, [x, weights[0]], dy)
        actual_grads = torch.autograd.grad(actual, [x, weights[1]], dy)
        assert actual_grads[1].dtype == torch.float32
        for a, e in zip(actual_grads, expected_grads):
            assert_grad_close(a, e.double(), like=dtype)


def test_parity_torch_nn_rmsnorm_fp32_weight(kernel, dtype, device, monkeypatch):
    half_precision(dtype)
    norm = torch.nn.RMSNorm(2048, eps=1e-5).to(device)  # fp32 weight, as in a model kept in fp32
    torch.nn.init.normal_(norm.weight)
    patched = copy.deepcopy(norm)
    assert kernel.patch_diffusers(patched) == {"torch.nn.RMSNorm": 1}
    calls = counting(monkeypatch, kernel.layers, "rms_norm")
    x = torch.randn(2, 512, 2048, dtype=dtype, device=device, requires_grad=True)
    assert_layer_parity("torch.nn.RMSNorm", norm, patched, x, dtype)
    assert calls == [(dtype, torch.float32)] * 2, calls  # the kernel, with and without autocast


def test_parity_diffusers_rmsnorm_fp32_weight(kernel, dtype, device, monkeypatch):
    half_precision(dtype)
    normalization = pytest.importorskip("diffusers.models.normalization")
    norm = normalization.RMSNorm(2048, eps=1e-6).to(device)
    torch.nn.init.normal_(norm.weight)
    patched = copy.deepcopy(norm)
    assert kernel.patch_diffusers(patched) == {"RMSNorm": 1}
    calls = counting(monkeypatch, kernel.layers, "rms_norm")
    x = torch.randn(2, 512, 2048, dtype=dtype, device=device, requires_grad=True)
    assert_layer_parity("diffusers RMSNorm", norm, patched, x, dtype)
    assert calls == [(dtype, torch.float32)] * 2, calls


def test_parity_transformers_qwen3_fp32_weight(kernel, dtype, device, monkeypatch):
    half_precision(dtype)
    modeling = pytest.importorskip("transformers.models.qwen3.modeling_qwen3")
    norm = modeling.Qwen3RMSNorm(128, eps=1e-6).to(device)  # q_norm of a model kept in fp32: bf16 q under autocast
    torch.nn.init.normal_(norm.weight)
    patched = copy.deepcopy(norm)
    patched.forward = kernel.layers.RMSNorm.forward.__get__(patched)
    calls = counting(monkeypatch, kernel.layers, "rms_norm")
    x = torch.randn(64, 32, 128, dtype=dtype, device=device, requires_grad=True)
    assert_layer_parity("Qwen3RMSNorm", norm, patched, x, dtype)
    assert calls == [(dtype, torch.float32)] * 2, calls


def test_rejects_mixed_dtypes_it_does_not_take(kernel, dtype, device):
    x = torch.randn(4, 64, dtype=dtype, device=device)
    if dtype in UNIT_ROUNDOFF:
        with pytest.raises(RuntimeError, match="out has dtype"):  # an fp32 result needs an fp32 weight
            kernel.rms_norm(x, torch.ones(64, dtype=dtype, device=device), out_dtype=torch.float32)
        with pytest.raises(RuntimeError, match="out has dtype"):
            kernel.rms_norm(x, None, out_dtype=torch.float32)
        other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16
        with pytest.raises(RuntimeError, match="out has dtype"):
            kernel.rms_norm(x, torch.ones(64, device=device), out_dtype=other)
    else:
        with pytest.raises(RuntimeError, match="weight has dtype"):  # fp32 input: its weight must be fp32 too
            kernel.rms_norm(x, torch.ones(64, dtype=torch.bfloat16, device=device))


# Errors: one clear line, never a crash or a silently wrong result.


def test_rejects_cpu_tensors(kernel):
    with pytest.raises(RuntimeError, match="input must be a CUDA tensor"):
        kernel.rms_norm(torch.randn(4, 8))


def test_rejects_bad_arguments(kernel, dtype, device):
    x = torch.randn(4, 64, dtype=dtype, device=device)
    with pytest.raises(RuntimeError, match=r"weight must have shape \[64\]"):
        kernel.rms_norm(x, torch.ones(32, dtype=dtype, device=device))
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16  # float32 is taken beside bf16 / fp16
    with pytest.raises(RuntimeError, match="weight has dtype"):
        kernel.rms_norm(x, torch.ones(64, dtype=other, device=device))
    with pytest.raises(RuntimeError, match="weight must be a CUDA tensor"):
        kernel.rms_norm(x, torch.ones(64, dtype=dtype))
    with pytest.raises(RuntimeError, match="contiguous in its last dimension"):
        kernel.rms_norm(torch.randn(64, 4, dtype=dtype, device=device).t())
    with pytest.raises(RuntimeError, match="out must be contiguous in its last dimension"):
        kernel.rms_norm(x, out=torch.empty(64, 4, dtype=dtype, device=device).t())
    with pytest.raises(RuntimeError, match="residual has shape"):
        kernel.fused_add_rms_norm(x, torch.randn(4, 32, dtype=dtype, device=device))
    with pytest.raises(RuntimeError, match="eps must be non-negative"):
        kernel.rms_norm(x, None, -1.0)
    with pytest.raises(ValueError, match="rounding must be one of"):
        kernel.rms_norm(x, rounding="hf")
    wrong = torch.float16 if dtype == torch.float32 else torch.float32  # not out's dtype
    with pytest.raises(ValueError, match=f"out_dtype={wrong} but out has dtype {dtype}"):
        kernel.rms_norm(x, out=torch.empty_like(x), out_dtype=wrong)


def test_rejects_dtypes_not_compiled(kernel, device, uncompiled_dtypes):
    for dtype in [torch.float64, torch.int32, *uncompiled_dtypes]:
        with pytest.raises(RuntimeError, match="but this kernel was built for"):
            kernel.rms_norm(torch.ones(4, 64, device=device).to(dtype))
