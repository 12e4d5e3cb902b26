"""AdaLN: float64 references on fresh random data, parity with the eager LTX-Video / DiT modulation, and errors.

y = norm(x) * (1 + scale) + shift can cancel (the two addends nearly opposite), so errors are bounded by the size
of the addends, |norm(x) * (1 + scale)| + |shift|, not by |y|: rounding an addend-sized intermediate, as the eager
chain does, moves y by that much however small y is.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from . import fuzz
from .huge import boundary_rows, require_free_memory, row_chunk_sum
from .multi_gpu import MULTI_GPU_CHECKS, randn
from .utils import (
    U32,
    assert_compiles,
    assert_grad_close,
    assert_rounded,
    column_sum_depth,
    float64_leaves,
    grads,
    laid_out,
    poisoned_like,
    rounding_bounds,
    sm_count,
    ulp_diff,
)

# Eager fp32 chains (parity tests): their own fp32 error, of torch's reductions, is not bounded here, so the kernel
# and they agree to a flat fraction of the addends.
EAGER_FP32 = 1e-5
UNIT_ROUNDOFF = {torch.bfloat16: 2**-8, torch.float16: 2**-11}
FORMS = {  # scale/shift shape for an input (B, S, D)
    "per_sample": lambda b, s, d: (b, 1, d),  # LTXPipeline: one timestep per sample
    "per_sample_2d": lambda b, s, d: (b, d),  # the same, without the token dimension
    "per_token": lambda b, s, d: (b, s, d),  # image-to-video / condition pipelines: one timestep per token
    "shared": lambda b, s, d: (1, 1, d),  # one row for the whole batch
}


def reference(x, scale, shift, eps=1e-6, norm="rms"):
    """float64 AdaLN; returns (y, addends, offset): addends = |n * (1 + scale)| + |shift|, and offset =
    |mean(x)| / std(x) * |1 + scale| for LayerNorm (0 for RMSNorm), which scales the fp32 error of the mean:
    an absolute error in n, however small n is."""
    xd = x.double()
    mean = xd.mean(-1, keepdim=True) if norm == "layer" else torch.zeros_like(xd[..., :1])
    inv = torch.rsqrt((xd - mean).pow(2).mean(-1, keepdim=True) + eps)  # LayerNorm: biased variance of x - mean
    scale, shift = (t[:, None].double() if t.dim() == 2 else t.double() for t in (scale, shift))  # (B, D): per sample
    product = (xd - mean) * inv * (1 + scale)
    return product + shift, product.abs() + shift.abs(), (mean * inv).abs() * (1 + scale).abs()


def statistic_depth(cols):
    """sum_depth for the AdaLN kernels' row sums (of x, x^2, (x - mean)^2, g, g * x): the warp-per-row forward
    kernel's lanes add up to cols / 32 + 8 elements each (a 16-byte vector past that share), the block kernels' threads
    at most 16 (2 cached vectors) or, streaming, cols / 512 + 8; then at most 10 levels of shuffles and slots."""
    return max(16, -(-cols // 32) + 8) + 11


def statistics(x, eps=1e-6, norm="rms"):
    """float64 norm(x) of each row, and a per-element bound on the fp32 error of the kernels' n = (x - mean) * inv
    (forward and backward compute it alike). LayerNorm's mean is within statistic_depth roundings of mean(|x|)
    (and one of the division): an absolute error m in x - mean, whose effect on the variance, sum((x - mean - m)^2),
    is second order (sum(x - mean) = 0). The variance (the mean of x^2 for RMSNorm) within statistic_depth + 3
    roundings (squares, sum, division, + eps) and m^2; rsqrtf 2 ulp (4 unit roundoffs); n rounded after x - mean
    and the product."""
    xd = x.double()
    depth = statistic_depth(x.shape[-1])
    if norm == "layer":
        mean = xd.mean(-1, keepdim=True)
        mean_error = U32 * (depth * xd.abs().mean(-1, keepdim=True) + mean.abs())
    else:
        mean = mean_error = torch.zeros_like(xd[..., :1])
    inv = torch.rsqrt((xd - mean).pow(2).mean(-1, keepdim=True) + eps)
    inv_error = ((depth + 5) / 2 + 4) * U32 + (mean_error * inv) ** 2  # relative
    n = (xd - mean) * inv
    return n, (inv * mean_error + n.abs() * (inv_error + 2 * U32)) * (1 + 2**-10)  # 2^-10: second-order terms


def modulated(t):
    """scale or shift in float64, (B, D) as (B, 1, D): broadcasting against (B, S, D)."""
    return t[:, None].double() if t.dim() == 2 else t.double()


def output_bounds(x, scale, shift, eps=1e-6, norm="rms"):
    """What the kernel may return (utils.rounding_bounds): the exact y = n * (1 + scale) + shift, within fp32 error
    of n (statistics) times |1 + scale|, plus three roundings (1 + scale, the product, the sum: at most 3 unit
    roundoffs of the addends |n * (1 + scale)| + |shift|), rounded once to the output dtype (scale's)."""
    n, n_error = statistics(x, eps, norm)
    one_plus, shift = 1 + modulated(scale), modulated(shift)
    product = n * one_plus
    error = one_plus.abs() * n_error * (1 + 4 * U32) + 3 * U32 * product.abs() + 2 * U32 * shift.abs() + 2**-148
    return rounding_bounds(product + shift, error, scale.dtype)


def assert_adaln_close(actual, x, scale, shift, eps=1e-6, norm="rms"):
    assert actual.dtype == scale.dtype  # x's, or fp32 beside fp32 scale / shift
    assert_rounded(f"adaln {norm} {actual.dtype}", actual, output_bounds(x, scale, shift, eps, norm))


def modulation_grad_depth(batch, tokens, shared, sms):
    """column_sum_depth of a summed scale or shift gradient (over the tokens of a sample, or, shared, of all samples)
    for the launches adaln.cpp's adaln_bwd may make on a GPU of `sms` SMs: chunks of adaln_backward_chunk_rows
    tokens, min(tokens, ceil(rows / (8 sms))), or of single tokens when the other gradient is per token; the partial
    rows of a sample's chunks (of every sample's, shared) added by sum_rows."""
    worst = 0
    for chunk in {1, min(tokens, -(-batch * tokens // (8 * sms)))}:
        worst = max(worst, column_sum_depth(chunk, -(-tokens // chunk) * (batch if shared else 1)))
    return worst


def summed_like(t, like):
    """(B, S, D) t summed over the dimensions `like` (a scale or shift) broadcasts over, to like's shape."""
    if like.dim() == 2:
        return t.sum(1)
    dims = [d for d in range(3) if like.size(d) == 1 and t.size(d) != 1]
    return t.sum(dims, keepdim=True) if dims else t


def modulation_grads(x, scale, shift, dy, eps=1e-6, norm="rms"):
    """[(float64 gradient, per-element bound on the kernel's fp32 error in it)] for scale and shift: sums of dy * n and
    of dy over the rows they broadcast over. A term dy * n carries n's error (statistics) and one rounding; a sum,
    modulation_grad_depth roundings of the sum of its terms' magnitudes; a gradient of one term per element (per
    token) is that term."""
    n, n_error = statistics(x, eps, norm)
    g = dy.double()
    batch, tokens = x.shape[:2]
    result = []
    for t, terms, term_error in ((scale, g * n, g.abs() * n_error), (shift, g, torch.zeros_like(g))):
        magnitudes = terms.abs() + term_error
        depth = 1  # the product dy * n
        if summed_like(terms, t).numel() != terms.numel():
            depth += modulation_grad_depth(batch, tokens, t.size(0) == 1, sm_count(x.device))
        result.append((summed_like(terms, t), summed_like(term_error, t) + depth * U32 * summed_like(magnitudes, t)))
    return result


def assert_modulation_grads(grad_scale, grad_shift, x, scale, shift, dy, eps=1e-6, norm="rms"):
    """The gradients of scale and shift (None: not asked for) against modulation_grads', per element."""
    for actual, (expected, error) in zip((grad_scale, grad_shift), modulation_grads(x, scale, shift, dy, eps, norm)):
        if actual is not None:
            assert_grad_close(actual, expected, error=error)


def modulation(form, x, std=1.0):
    shape = FORMS[form](*x.shape)
    return (torch.randn(shape, device=x.device) * std).to(x.dtype), (torch.randn(shape, device=x.device) * std).to(
        x.dtype
    )


SHAPES = [
    (1, 1, 1),
    (2, 3, 7),
    (3, 5, 64),
    (2, 9, 24),  # 3 bf16 vectors per row: fewer vectors than threads
    (1, 7, 4097),  # odd width: the scalar path
    (2, 9, 1536),  # fixed-width launches (see launch in adaln.cu): SD3 / Wan 1.3B width, 3 warps per bf16 row
    (2, 33, 2048),  # LTX-Video width
    (1, 11, 3072),  # Flux width
    (2, 17, 4096),  # LTX-Video 13B width
    (1, 3, 40000),  # longer than the register cache: the streaming path
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_matches_float64_reference(kernel, dtype, device, shape, form, norm):
    x = torch.randn(shape, dtype=dtype, device=device)
    scale, shift = modulation(form, x)
    out = poisoned_like(x)
    result = kernel.adaln(x, scale, shift, 1e-6, norm=norm, out=out)
    assert result is out
    assert_adaln_close(out, x, scale, shift, 1e-6, norm)


@pytest.mark.parametrize("shape", [(2, 2688, 2048), (2, 7392, 2048)], ids=["ltx_2688", "ltx_7392"])
@pytest.mark.parametrize("form", ["per_sample", "per_token"])
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_real_model_shapes(kernel, dtype, device, shape, form, norm):
    x = torch.randn(shape, dtype=dtype, device=device)
    scale, shift = modulation(form, x, std=0.5)
    assert_adaln_close(kernel.adaln(x, scale, shift, norm=norm), x, scale, shift, norm=norm)


@pytest.mark.parametrize("per_token", [False, True], ids=["per_sample", "per_token"])
def test_ltx_ada_values_views(kernel, dtype, device, per_token):
    """The LTX block passes strided unbind() views of ada_values (token stride 6 * D): used without a copy."""
    batch, tokens, dim = 2, 96, 2048
    x = torch.randn(batch, tokens, dim, dtype=dtype, device=device)
    table = torch.randn(6, dim, dtype=dtype, device=device)
    temb = torch.randn(batch, tokens if per_token else 1, 6 * dim, dtype=dtype, device=device)
    ada_values = table[None, None] + temb.reshape(batch, temb.size(1), 6, -1)
    shift_msa, scale_msa, _, shift_mlp, scale_mlp, _ = ada_values.unbind(dim=2)
    assert not scale_msa.is_contiguous()
    for scale, shift in [(scale_msa, shift_msa), (scale_mlp, shift_mlp)]:
        assert_adaln_close(kernel.adaln(x, scale, shift), x, scale, shift)


def test_strided_and_unaligned(kernel, dtype, device):
    dim = 1024
    base = torch.randn(2, 6, dim + 64, dtype=dtype, device=device)
    x = base[:, ::2, :dim]  # rows spaced by 2 * (dim + 64): still evenly spaced
    scale, shift = modulation("per_token", x)
    out = torch.full((2, 3, dim + 8), float("nan"), dtype=dtype, device=device)[:, :, :dim]  # strided output rows
    assert kernel.adaln(x, scale, shift, norm="layer", out=out) is out
    assert_adaln_close(out, x, scale, shift, norm="layer")
    flat = torch.randn(1 + 2 * dim, dtype=dtype, device=device)
    scale = flat[1:].view(2, 1, dim)  # data pointer not 16-byte aligned: the scalar path
    assert_adaln_close(kernel.adaln(x, scale, shift), x, scale, shift)


@pytest.mark.parametrize("form", ["per_sample", "per_token"])
@pytest.mark.parametrize("norm", ["rms", "layer"])
@pytest.mark.parametrize("shape", [(2, 37, 256), (3, 5, 4097)], ids=["vectors", "scalars"])
def test_any_leading_strides(kernel, dtype, device, form, norm, shape):
    """x, out= and the gradient with batch and token strides that do not fold into evenly spaced rows (a
    sequence-first (S, B, D) tensor seen batch-first), past their storage's first element."""
    x = laid_out(shape, (1, 0), dtype, device, offset=8)
    scale, shift = modulation(form, x)
    out = laid_out(shape, (1, 0), dtype, device, offset=16).fill_(float("nan"))
    assert kernel.adaln(x, scale, shift, norm=norm, out=out) is out
    assert_adaln_close(out, x, scale, shift, norm=norm)
    every_other = torch.full((shape[0], 2 * shape[1], shape[2]), float("nan"), dtype=dtype, device=device)
    other = every_other[:, 1::2]  # out= a token slice
    assert_adaln_close(kernel.adaln(x, scale, shift, norm=norm, out=other), x, scale, shift, norm=norm)
    assert every_other[:, ::2].isnan().all(), "wrote outside the output rows"

    x.requires_grad_()
    scale.requires_grad_()
    shift.requires_grad_()
    dy = laid_out(shape, (1, 0), dtype, device, offset=8)  # the gradient arrives strided too
    actual = grads(kernel.adaln(x, scale, shift, norm=norm), [x, scale, shift], dy)
    x64, scale64, shift64 = float64_leaves(x, scale, shift)
    expected = grads(reference(x64, scale64, shift64, norm=norm)[0], [x64, scale64, shift64], dy.double())
    assert_grad_close(actual[0], expected[0])
    assert_modulation_grads(*actual[1:], x, scale, shift, dy, norm=norm)


def test_in_place_on_a_strided_view(kernel, dtype, device):
    x = laid_out((2, 37, 256), (1, 0), dtype, device, offset=8)
    scale, shift = modulation("per_token", x, std=0.1)
    expected = kernel.adaln(x, scale, shift)
    assert kernel.adaln(x, scale, shift, out=x) is x
    assert torch.equal(x, expected)


def test_layer_norm_of_offset_rows(kernel, dtype, device):
    """Rows with a mean far from 0: the variance of (x - mean) is exact where mean(x^2) - mean^2 would cancel."""
    x = (torch.randn(4, 8, 4096, device=device) + 50).to(dtype)
    scale, shift = modulation("per_sample", x)
    assert_adaln_close(kernel.adaln(x, scale, shift, norm="layer"), x, scale, shift, norm="layer")


@pytest.mark.parametrize("eps", [1e-6, 1e-5, 0.5])
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_eps(kernel, dtype, device, eps, norm):
    x = (torch.randn(2, 16, 1024, device=device) * 0.1).to(dtype)
    scale, shift = modulation("per_sample", x)
    assert_adaln_close(kernel.adaln(x, scale, shift, eps, norm=norm), x, scale, shift, eps, norm)


# Fuzzing and sanitizing (tests/fuzz.py, tools/sanitize.sh): one case, forward and backward, each tensor in a
# layout of its own (missing names: contiguous).


def check_case(kernel, dtype, device, shape, *, form, norm, eps, seed, layouts):
    """adaln into a NaN-poisoned output, then the gradients of x, scale and shift."""
    at = lambda name: layouts.get(name, fuzz.Layout())  # noqa: E731
    gen = fuzz.generator(seed, device)
    x = at("x").like(fuzz.randn(shape, dtype, gen))
    scale, shift = (at(name).like(fuzz.randn(FORMS[form](*shape), dtype, gen)) for name in ("scale", "shift"))
    out, out_buffer = at("out").empty(shape, dtype, device)
    assert kernel.adaln(x, scale, shift, eps, norm=norm, out=out) is out
    fuzz.assert_written_only_inside(out, out_buffer)
    assert_adaln_close(out, x, scale, shift, eps, norm)

    leaves = [t.requires_grad_() for t in (x, scale, shift)]
    dy = at("dy").like(fuzz.randn(shape, dtype, gen))
    actual = grads(kernel.adaln(x, scale, shift, eps, norm=norm), leaves, dy)
    leaves64 = float64_leaves(*leaves)
    expected = grads(reference(*leaves64, eps, norm)[0], leaves64, dy.double())
    if shape[-1] > (2 if norm == "layer" else 1):
        # Rows of one element (two for LayerNorm) normalize to 0 or +-1 whatever x: d/dx is eps-sized, all
        # cancellation in fp32. The gradients of scale and shift are still checked.
        assert_grad_close(actual[0], expected[0])
    assert_modulation_grads(*actual[1:], x, scale, shift, dy, eps, norm)


@pytest.mark.fuzz
@given(width=fuzz.widths(), form=st.sampled_from(list(FORMS)), norm=st.sampled_from(["rms", "layer"]), data=st.data())
def test_fuzz(kernel, dtype, device, width, form, norm, data):
    batch = data.draw(fuzz.counts(8), label="batch")
    tokens = data.draw(fuzz.counts(fuzz.MAX_ELEMENTS // (batch * width)), label="tokens")
    lead = len(FORMS[form](batch, tokens, width)) - 1
    layouts = fuzz.draw_layouts(data, width, x=2, scale=lead, shift=lead, out=2, dy=2)
    eps, seed = data.draw(fuzz.eps_values, label="eps"), data.draw(fuzz.seeds, label="seed")
    check_case(kernel, dtype, device, (batch, tokens, width), form=form, norm=norm, eps=eps, seed=seed, layouts=layouts)


# Small odd, misaligned and strided cases for tools/sanitize.sh (compute-sanitizer is slow: keep them small).
# "warp_rows" takes the warp-per-row kernel in every precision (shared modulation, 129-512 vectors per row: 1280 is
# 160 or 320 and no fixed width; 16 rows per SM, up to 150 SMs);
# "fixed_width" the fixed-width launch, whose LayerNorm reductions share one barrier each (racecheck), forward and,
# per token, the backward's row kernel too.
SANITIZE_CASES = {
    "odd_misaligned": (
        (2, 3, 37),
        dict(form="per_token", norm="rms"),
        dict(x=fuzz.Layout(offset=1), scale=fuzz.Layout(offset=3), out=fuzz.Layout(offset=1)),
    ),
    "vectors_strided": (
        (2, 5, 264),
        dict(form="per_sample", norm="layer"),
        dict(x=fuzz.Layout((1, 0), pad=8), shift=fuzz.Layout(step=2), out=fuzz.Layout(step=2), dy=fuzz.Layout((1, 0))),
    ),
    "streamed": ((1, 2, 40003), dict(form="shared", norm="layer"), dict(dy=fuzz.Layout(pad=5, offset=2))),
    "warp_rows": ((1, 2400, 1280), dict(form="shared", norm="rms"), {}),
    "fixed_width": ((2, 3, 2048), dict(form="per_sample", norm="layer"), {}),
    "fixed_width_per_token": ((2, 3, 2048), dict(form="per_token", norm="layer"), {}),
}


@pytest.mark.sanitize
@pytest.mark.parametrize("case", SANITIZE_CASES)
def test_sanitize(kernel, dtype, device, case):
    shape, options, layouts = SANITIZE_CASES[case]
    check_case(kernel, dtype, device, shape, eps=1e-6, seed=0, layouts=layouts, **options)


def test_empty_input(kernel, dtype, device):
    x = torch.empty(2, 0, 2048, dtype=dtype, device=device)
    scale = torch.randn(2, 1, 2048, dtype=dtype, device=device)
    assert kernel.adaln(x, scale, scale).shape == (2, 0, 2048)


@pytest.mark.slow
@pytest.mark.parametrize(
    "dim, form, norm", [(2047, "per_sample", "rms"), (2048, "per_token", "layer")], ids=["scalars", "vectors"]
)
def test_more_than_2_31_elements(kernel, dtype, device, dim, form, norm):
    """batch x tokens x dim > 2^31, forward and backward: rows past 32-bit element offsets, and per-sample
    scale/shift gradients summed over a million tokens. Rows around element 2^31 against float64; the per-sample
    gradients against float64 sums by chunks."""
    batch, eps = 2, 1e-6
    tokens = 2**31 // (batch * dim) + 2
    per_token = form == "per_token"
    require_free_memory(batch * tokens * dim * dtype.itemsize * (8 if per_token else 4))
    x = torch.randn(batch, tokens, dim, dtype=dtype, device=device)
    scale, shift = (torch.randn(FORMS[form](batch, tokens, dim), dtype=dtype, device=device) for _ in range(2))
    out = torch.full_like(x, float("nan"))
    kernel.adaln(x, scale, shift, eps, norm=norm, out=out)
    assert not out.isnan().any(), "an element was not written"
    picked = boundary_rows(batch * tokens, dim, device)  # rows of the flattened (batch * tokens, dim) view
    b, s = picked // tokens, picked % tokens

    def rows(t):  # the picked rows of x, or of scale/shift, as (rows, 1, dim)
        return (t[b, s] if t.size(1) == tokens else t[b, 0] if t.dim() == 3 else t[b])[:, None]

    assert_adaln_close(rows(out), rows(x), rows(scale), rows(shift), eps, norm)
    del out

    leaves = [t.requires_grad_() for t in (x, scale, shift)]
    dy = torch.randn_like(x)
    dx, dscale, dshift = grads(kernel.adaln(x, scale, shift, eps, norm=norm), leaves, dy)
    sub64 = float64_leaves(rows(x), rows(scale), rows(shift))
    expected = grads(reference(*sub64, eps, norm)[0], sub64, rows(dy).double())
    assert_grad_close(rows(dx), expected[0])
    if per_token:  # one row of scale and shift per row of x
        assert_grad_close(rows(dscale), expected[1])
        assert_grad_close(rows(dshift), expected[2])
    else:  # per sample: sums over the tokens of each sample, in float64 by chunks of tokens

        def sample_sums(part):
            xd = x.detach()[:, part].double()
            mean = xd.mean(-1, keepdim=True) if norm == "layer" else 0
            n = (xd - mean) * torch.rsqrt((xd - mean).pow(2).mean(-1, keepdim=True) + eps)
            g = dy[:, part].double()
            return torch.stack([(g * n).sum(1), g.sum(1)])

        expected_scale, expected_shift = row_chunk_sum(sample_sums, tokens, batch * dim)
        assert_grad_close(dscale.view(batch, dim), expected_scale)
        assert_grad_close(dshift.view(batch, dim), expected_shift)


# Gradients, torch.library registration and torch.compile.


@pytest.mark.kernels_ci
@pytest.mark.parametrize(
    "shape",
    [(2, 5, 256), (3, 300, 2048), (2, 7, 127), (1, 3, 8192), (1, 3, 40000)],  # 8192: 72 KiB of gradient sums
    ids=lambda s: "x".join(map(str, s)),
)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_gradients_match_float64(kernel, dtype, device, shape, form, norm):
    x = torch.randn(shape, dtype=dtype, device=device, requires_grad=True)
    scale, shift = (t.requires_grad_() for t in modulation(form, x))
    dy = torch.randn(shape, dtype=dtype, device=device)
    actual = grads(kernel.adaln(x, scale, shift, norm=norm), [x, scale, shift], dy)
    x64, scale64, shift64 = float64_leaves(x, scale, shift)
    expected = grads(reference(x64, scale64, shift64, norm=norm)[0], [x64, scale64, shift64], dy.double())
    assert_grad_close(actual[0], expected[0])
    assert_modulation_grads(*actual[1:], x, scale, shift, dy, norm=norm)


def test_gradients_of_ltx_ada_values(kernel, dtype, device):
    """Through the strided unbind() views of the LTX block, back to the timestep embedding."""
    b, s, d = 2, 64, 256
    x = torch.randn(b, s, d, dtype=dtype, device=device, requires_grad=True)
    temb = torch.randn(b, 1, 6 * d, dtype=dtype, device=device, requires_grad=True)
    dy = torch.randn_like(x)

    def modulate(adaln, x, temb):
        shift, scale = temb.reshape(b, 1, 6, d).unbind(dim=2)[:2]
        return adaln(x, scale, shift)

    actual = grads(modulate(kernel.adaln, x, temb), [x, temb], dy)
    x64, temb64 = float64_leaves(x, temb)
    expected = grads(modulate(lambda *a: reference(*a)[0], x64, temb64), [x64, temb64], dy.double())
    for a, e in zip(actual, expected):
        assert_grad_close(a, e)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("shape", [(2, 5, 256), (3, 40, 2048), (2, 7, 127)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize(
    "forms", [("per_token", "per_sample"), ("per_sample", "per_token"), ("per_token", "shared")], ids="-".join
)
@pytest.mark.parametrize("wanted", [(True, True), (True, False), (False, True)], ids=["both", "scale", "shift"])
def test_gradients_of_mixed_forms_and_frozen_modulation(kernel, dtype, device, shape, forms, wanted):
    """scale and shift of different forms (one summed, one not), and only some of them requiring a gradient (the
    backward then computes only those): each gradient matches float64."""
    x = torch.randn(shape, dtype=dtype, device=device, requires_grad=True)
    scale, shift = modulation(forms[0], x)[0], modulation(forms[1], x)[1]
    for t, want in zip((scale, shift), wanted):
        t.requires_grad_(want)
    leaves = [x] + [t for t in (scale, shift) if t.requires_grad]
    dy = torch.randn(shape, dtype=dtype, device=device)
    y = kernel.adaln(x, scale, shift)
    actual = grads(y, leaves, dy)
    x64, scale64, shift64 = float64_leaves(x, scale, shift)
    leaves64 = [x64] + [t for t, want in zip((scale64, shift64), wanted) if want]
    expected = grads(reference(x64, scale64, shift64)[0], leaves64, dy.double())
    assert_grad_close(actual[0], expected[0])
    rest = iter(actual[1:])
    assert_modulation_grads(*(next(rest) if want else None for want in wanted), x, scale, shift, dy)


def test_per_token_shift_gradient_is_grad_out(kernel, dtype, device):
    """d/d shift of norm(x) * (1 + scale) + shift is grad_out itself when shift has the output's shape: autograd gets
    grad_out back (as from torch's add), no kernel writes a copy. grad_scale still matches float64."""
    x = torch.randn(2, 9, 256, dtype=dtype, device=device, requires_grad=True)
    scale, shift = (t.requires_grad_() for t in modulation("per_token", x))
    dy = torch.randn_like(x)
    _, grad_scale, grad_shift = grads(kernel.adaln(x, scale, shift), [x, scale, shift], dy)
    assert grad_shift.data_ptr() == dy.data_ptr() and torch.equal(grad_shift, dy)
    assert_modulation_grads(grad_scale, None, x, scale, shift, dy)


@pytest.mark.parametrize("form", ["per_sample", "per_token", "shared"])
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_backward_op_computes_only_what_is_asked(kernel, dtype, device, form, norm):
    """adaln_bwd(..., scale_grad, shift_grad): a gradient not asked for is an empty tensor; the others are the
    same bits as when all are asked for (grad_shift of a per-token shift, from the kernel, is grad_out), and
    grad_input the same up to the order of its sums (without a summed gradient, it comes from the row kernel)."""
    ops = kernel._ops.ops
    x = torch.randn(2, 33, 512, dtype=dtype, device=device)
    scale, shift = modulation(form, x)
    dy = torch.randn_like(x)
    layer = norm == "layer"
    full = ops.adaln_bwd(dy, x, scale, shift, 1e-6, layer, True, True)
    assert [tuple(t.shape) for t in full] == [tuple(x.shape), tuple(scale.shape), tuple(shift.shape)]
    if form == "per_token":
        assert torch.equal(full[2], dy)
    for wanted in [(True, False), (False, True), (False, False)]:
        got = ops.adaln_bwd(dy, x, scale, shift, 1e-6, layer, *wanted)
        assert_grad_close(got[0], full[0].double())
        for g, f, want in zip(got[1:], full[1:], wanted):
            assert torch.equal(g, f) if want else g.shape == (0,)


# Devices and streams (tests/multi_gpu.py says what each check asserts): tensors on cuda:1 while cuda:0 is current
# (2 GPUs), on a side stream, and in a CUDA graph (on cuda:1, or on the only GPU), forward and backward. Per sample,
# 4 x 600 rows of 2048 take the persistent warp-per-row kernel (its grid sized from the input's GPU) and the chunked
# backward with its fp32 scratch; per token, the row kernels (the shift's gradient is the output gradient itself).
@pytest.mark.multi_gpu
@pytest.mark.parametrize("check", MULTI_GPU_CHECKS)
@pytest.mark.parametrize("form", ["per_sample", "per_token"])
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_devices_and_streams(kernel, dtype, check, form, norm):
    batch, tokens, dim = (4, 600, 2048) if form == "per_sample" else (2, 64, 1024)
    x = randn(batch, tokens, dim, dtype=dtype)
    scale, shift = (randn(batch, 1 if form == "per_sample" else tokens, dim, dtype=dtype) * 0.5 for _ in range(2))
    check(lambda x, sc, sh: kernel.adaln(x, sc, sh, 1e-6, norm=norm), [x, scale, shift], [True] * 3)


def test_opcheck(kernel, dtype, device):
    ops = kernel._ops.ops
    x = torch.randn(2, 5, 256, dtype=dtype, device=device, requires_grad=True)
    for form in ("per_sample", "per_token", "shared"):
        scale, shift = (t.requires_grad_() for t in modulation(form, x))
        for layer in (False, True):
            torch.library.opcheck(ops.adaln_fwd, (x, scale, shift, 1e-6, layer))
            for wanted in [(True, True), (True, False), (False, False)]:
                torch.library.opcheck(
                    ops.adaln_bwd,
                    (torch.randn_like(x), x.detach(), scale.detach(), shift.detach(), 1e-6, layer, *wanted),
                )
            torch.library.opcheck(
                ops.adaln, (torch.empty_like(x), x.detach(), scale.detach(), shift.detach(), 1e-6, layer)
            )


@pytest.mark.parametrize("per_token", [False, True], ids=["per_sample", "per_token"])
def test_compiles_fullgraph(kernel, dtype, device, per_token):
    def modulate(x, temb):
        shift, scale = temb.unbind(dim=2)
        return kernel.adaln(x, scale, shift) * 2

    def make_args(batch):
        x = torch.randn(batch, 11, 512, dtype=dtype, device=device, requires_grad=True)
        tokens = 11 if per_token else 1
        return [x, torch.randn(batch, tokens, 2, 512, dtype=dtype, device=device, requires_grad=True)]

    assert_compiles(modulate, make_args)


def test_out_refuses_to_drop_gradients(kernel, dtype, device):
    x = torch.randn(2, 3, 64, dtype=dtype, device=device, requires_grad=True)
    scale = shift = torch.zeros(2, 1, 64, dtype=dtype, device=device)
    with pytest.raises(RuntimeError, match="does not record gradients"):
        kernel.adaln(x, scale, shift, out=torch.empty_like(x))


# Parity with the eager module chains (skipped when the library is not installed). The eager chain rounds four
# times (norm, 1 + scale, product, sum), each by up to half an ulp of an addend-sized value, so it sits within
# ~4 unit roundoffs of the addends from the exact result and we within 1: the two differ by at most 5. In ulps of
# y that is unbounded where the addends cancel, so the >1-ulp fraction is printed, not asserted (about 8% for
# these inputs); we also assert that in bf16/fp16 the kernel is on average closer to the float64 result.


def assert_parity(name, actual, eager, x, scale, shift, norm):
    expected, addends, offset = reference(x, scale, shift, norm=norm)
    dtype = actual.dtype
    diff = (actual.double() - eager.double()).abs()
    ulps = ulp_diff(actual, eager)
    worst = (diff / addends).max().item()
    print(
        f"{name}: {(ulps > 1).double().mean().item():.2e} of elements differ by more than 1 ulp, "
        f"max difference {worst / UNIT_ROUNDOFF.get(dtype, 2**-24):.2f} unit roundoffs of the addends"
    )
    assert actual.dtype == eager.dtype and not actual.isnan().any()
    tiny = torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps + 2**-18 * offset  # LayerNorm: fp32 mean
    limit = 5.1 * UNIT_ROUNDOFF[dtype] if dtype in UNIT_ROUNDOFF else EAGER_FP32
    assert (diff <= limit * addends + 2 * tiny).all(), f"{name}: differs from eager by {worst:.3g} x the addends"
    if dtype in UNIT_ROUNDOFF:  # float32 errors are reduction-order noise in both
        ours, theirs = (actual.double() - expected).abs().mean(), (eager.double() - expected).abs().mean()
        assert ours < theirs, f"{name}: mean error {ours:.3g} >= eager's {theirs:.3g}"


@pytest.mark.parametrize("per_token", [False, True], ids=["per_sample", "per_token"])
def test_parity_ltx_block(kernel, dtype, device, per_token):
    """LTXVideoTransformerBlock: norm1(h) * (1 + scale_msa) + shift_msa with diffusers' RMSNorm (no weight)."""
    normalization = pytest.importorskip("diffusers.models.normalization")
    batch, tokens, dim = 2, 1024, 2048
    norm1 = normalization.RMSNorm(dim, eps=1e-6, elementwise_affine=False)
    x = torch.randn(batch, tokens, dim, dtype=dtype, device=device)
    table = (torch.randn(6, dim, device=device) / dim**0.5).to(dtype)  # scale_shift_table's initialization
    temb = (torch.randn(batch, tokens if per_token else 1, 6 * dim, device=device) * 0.5).to(dtype)
    shift_msa, scale_msa = (table[None, None] + temb.reshape(batch, temb.size(1), 6, -1)).unbind(dim=2)[:2]
    eager = norm1(x) * (1 + scale_msa) + shift_msa
    actual = kernel.adaln(x, scale_msa, shift_msa, norm1.eps)
    assert_parity(f"LTX norm1 modulation per_token={per_token} {dtype}", actual, eager, x, scale_msa, shift_msa, "rms")


@pytest.mark.parametrize("per_token", [False, True], ids=["per_sample", "per_token"])
def test_parity_layer_norm(kernel, dtype, device, per_token):
    """LTX-Video's output step (and DiT-style adaLN): nn.LayerNorm(no affine)(h) * (1 + scale) + shift."""
    batch, tokens, dim = 2, 1024, 2048
    norm_out = torch.nn.LayerNorm(dim, eps=1e-6, elementwise_affine=False)
    x = torch.randn(batch, tokens, dim, dtype=dtype, device=device)
    table = (torch.randn(2, dim, device=device) / dim**0.5).to(dtype)
    embedded_timestep = torch.randn(batch, tokens if per_token else 1, dim, device=device).to(dtype)
    values = table[None, None] + embedded_timestep[:, :, None]
    shift, scale = values[:, :, 0], values[:, :, 1]  # strided views, as in LTXVideoTransformer3DModel.forward
    eager = norm_out(x) * (1 + scale) + shift
    actual = kernel.adaln(x, scale, shift, norm_out.eps, norm="layer")
    assert_parity(f"LayerNorm modulation per_token={per_token} {dtype}", actual, eager, x, scale, shift, "layer")


# Mixed precision: fp32 scale and shift beside a bfloat16 or float16 x (a model kept in fp32 under autocast). The
# result is fp32, as the eager chain's type promotion makes it, computed in fp32 without rounding.


def half_precision(dtype):
    if dtype not in UNIT_ROUNDOFF:
        pytest.skip("fp32 scale and shift beside an fp32 x are the same-dtype case")


@pytest.mark.kernels_ci
@pytest.mark.parametrize(
    "shape",
    [(2, 9, 24), (1, 7, 4097), (2, 33, 2048), (2, 300, 2048), (1, 3, 40000)],
    ids=lambda s: "x".join(map(str, s)),
)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_fp32_modulation_matches_float64(kernel, dtype, device, shape, form, norm):
    half_precision(dtype)
    x = torch.randn(shape, dtype=dtype, device=device)
    scale, shift = (t.float() + 0.01 * torch.randn_like(t.float()) for t in modulation(form, x))  # fp32 values
    result = kernel.adaln(x, scale, shift, 1e-6, norm=norm)
    assert result.dtype == torch.float32
    assert_adaln_close(result, x, scale, shift, 1e-6, norm)
    out = torch.full(shape, float("nan"), device=device)  # out=: fp32, the result's dtype
    assert kernel.adaln(x, scale, shift, 1e-6, norm=norm, out=out) is out
    assert torch.equal(out, result)


@pytest.mark.parametrize(
    "shape",
    [(2, 5, 256), (3, 300, 2048), (2, 7, 127), (1, 3, 8192), (1, 3, 40000)],
    ids=lambda s: "x".join(map(str, s)),
)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_fp32_modulation_gradients(kernel, dtype, device, shape, form, norm):
    half_precision(dtype)
    x = torch.randn(shape, dtype=dtype, device=device, requires_grad=True)
    scale, shift = (t.float().requires_grad_() for t in modulation(form, x))
    y = kernel.adaln(x, scale, shift, norm=norm)
    dy = torch.randn(shape, device=device)  # the gradient reaching an fp32 result is fp32
    actual = grads(y, [x, scale, shift], dy)
    assert [g.dtype for g in actual] == [dtype, torch.float32, torch.float32]
    x64, scale64, shift64 = float64_leaves(x, scale, shift)
    expected = grads(reference(x64, scale64, shift64, norm=norm)[0], [x64, scale64, shift64], dy.double())
    assert_grad_close(actual[0], expected[0])
    assert_modulation_grads(*actual[1:], x, scale, shift, dy, norm=norm)


def test_fp32_modulation_opcheck_and_compile(kernel, dtype, device):
    half_precision(dtype)
    ops = kernel._ops.ops
    x = torch.randn(2, 5, 256, dtype=dtype, device=device, requires_grad=True)
    for form in ("per_sample", "per_token"):
        scale, shift = (t.float().requires_grad_() for t in modulation(form, x))
        for layer in (False, True):
            torch.library.opcheck(ops.adaln_fwd, (x, scale, shift, 1e-6, layer))
            dy = torch.randn(2, 5, 256, device=device)
            for wanted in [(True, True), (True, False), (False, False)]:  # per token: the row kernel
                args = (dy, x.detach(), scale.detach(), shift.detach(), 1e-6, layer, *wanted)
                torch.library.opcheck(ops.adaln_bwd, args)

    def modulate(x, temb):
        shift, scale = temb.unbind(dim=2)
        return kernel.adaln(x, scale, shift) * 2

    def make_args(batch):
        x = torch.randn(batch, 11, 512, dtype=dtype, device=device, requires_grad=True)
        return [x, torch.randn(batch, 1, 2, 512, device=device, requires_grad=True)]

    assert_compiles(modulate, make_args)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_parity_under_autocast(kernel, dtype, device, norm):
    """LTX-Video's block kept in fp32 under autocast: fp32 scale_shift_table plus the (bf16) timestep embedding give
    fp32 scale and shift; x comes from a bf16 projection. The eager chain's diffusers RMSNorm rounds norm(x) to x's
    dtype, autocast's layer_norm does not: the kernel matches the second to fp32 noise, the first to that rounding."""
    half_precision(dtype)
    normalization = pytest.importorskip("diffusers.models.normalization") if norm == "rms" else None
    batch, tokens, dim = 2, 1024, 2048
    module = (
        normalization.RMSNorm(dim, eps=1e-6, elementwise_affine=False)
        if norm == "rms"
        else torch.nn.LayerNorm(dim, eps=1e-6, elementwise_affine=False)
    )
    x = torch.randn(batch, tokens, dim, dtype=dtype, device=device)
    table = torch.randn(6, dim, device=device) / dim**0.5  # fp32 parameter
    temb = (torch.randn(batch, 1, 6 * dim, device=device) * 0.5).to(dtype)
    shift, scale = (table[None, None] + temb.reshape(batch, 1, 6, -1)).unbind(dim=2)[:2]
    assert scale.dtype == torch.float32
    with torch.autocast("cuda", dtype=dtype):
        eager = module(x) * (1 + scale) + shift
    actual = kernel.adaln(x, scale, shift, 1e-6, norm=norm)
    assert actual.dtype == eager.dtype == torch.float32
    expected, addends, offset = reference(x, scale, shift, norm=norm)
    diff = (actual.double() - eager.double()).abs()
    tiny = 2**-18 * offset + 1e-30
    limit = 1.1 * UNIT_ROUNDOFF[dtype] if norm == "rms" else EAGER_FP32
    worst = (diff / addends).max().item()
    print(f"{norm} under autocast {dtype}: max difference {worst:.3g} x the addends")
    assert (diff <= limit * addends + 2 * tiny).all(), f"differs from eager by {worst:.3g} x the addends"
    if norm == "rms":  # eager rounded norm(x) to x's dtype: the kernel is closer to the exact result
        ours, theirs = (actual.double() - expected).abs().mean(), (eager.double() - expected).abs().mean()
        assert ours < theirs, f"mean error {ours:.3g} >= eager's {theirs:.3g}"


# Errors: one clear line, never a crash or a silently wrong result.


def test_rejects_cpu_tensors(kernel, device):
    x = torch.randn(2, 3, 8)
    with pytest.raises(RuntimeError, match="input must be a CUDA tensor"):
        kernel.adaln(x, torch.randn(2, 1, 8), torch.randn(2, 1, 8))
    x = x.to(device)
    with pytest.raises(RuntimeError, match="scale must be a CUDA tensor"):
        kernel.adaln(x, torch.randn(2, 1, 8), torch.randn(2, 1, 8, device=device))


def test_rejects_bad_arguments(kernel, dtype, device):
    x = torch.randn(2, 5, 64, dtype=dtype, device=device)
    ok = torch.randn(2, 1, 64, dtype=dtype, device=device)
    for bad in [(2, 5, 32), (2, 4, 64), (3, 1, 64), (2, 65), (64,), (1, 2, 5, 64)]:
        with pytest.raises(RuntimeError, match=r"scale must have shape \(2, 1, 64\) or \(2, 64\) per sample"):
            kernel.adaln(x, torch.randn(bad, dtype=dtype, device=device), ok)
    with pytest.raises(RuntimeError, match=r"shift must have shape"):
        kernel.adaln(x, ok, torch.randn(2, 6, 64, dtype=dtype, device=device))
    other = torch.float32 if dtype != torch.float32 else torch.bfloat16
    with pytest.raises(RuntimeError, match="shift has dtype"):
        kernel.adaln(x, ok, ok.to(other))
    if dtype != torch.float32:  # fp32 scale and shift give an fp32 result
        with pytest.raises(RuntimeError, match="out has dtype"):
            kernel.adaln(x, ok.float(), ok.float(), out=torch.empty_like(x))
    with pytest.raises(RuntimeError, match="scale must be contiguous in its last dimension"):
        kernel.adaln(x, torch.randn(2, 1, 128, dtype=dtype, device=device)[:, :, ::2], ok)
    with pytest.raises(RuntimeError, match="input must be contiguous in its last dimension"):
        kernel.adaln(torch.randn(2, 64, 5, dtype=dtype, device=device).transpose(1, 2), ok, ok)
    with pytest.raises(RuntimeError, match="out must be contiguous in its last dimension"):
        kernel.adaln(x, ok, ok, out=torch.empty(2, 64, 5, dtype=dtype, device=device).transpose(1, 2))
    with pytest.raises(RuntimeError, match=r"input must have shape \(batch, tokens, dim\)"):
        kernel.adaln(x[0], ok, ok)
    with pytest.raises(RuntimeError, match="out has shape"):
        kernel.adaln(x, ok, ok, out=torch.empty(2, 5, 32, dtype=dtype, device=device))
    with pytest.raises(RuntimeError, match="eps must be non-negative"):
        kernel.adaln(x, ok, ok, -1.0)
    with pytest.raises(ValueError, match="norm must be one of"):
        kernel.adaln(x, ok, ok, norm="group")


def test_rejects_dtypes_not_compiled(kernel, device, uncompiled_dtypes):
    for dtype in [torch.float64, *uncompiled_dtypes]:
        x = torch.ones(2, 3, 64, device=device).to(dtype)
        with pytest.raises(RuntimeError, match="but this kernel was built for"):
            kernel.adaln(x, x[:, :1], x[:, :1])


def test_out_may_be_the_input_itself(kernel, dtype, device):
    x = torch.randn(2, 9, 256, dtype=dtype, device=device)
    scale, shift = (0.1 * torch.randn(2, 1, 256, dtype=dtype, device=device) for _ in range(2))
    expected = kernel.adaln(x, scale, shift)
    assert kernel.adaln(x, scale, shift, out=x) is x
    assert torch.equal(x, expected)


@pytest.mark.parametrize("case", ["partial", "scale", "expanded"])
def test_overlapping_out_is_refused_before_anything_is_written(kernel, dtype, device, case):
    buf = torch.randn(2, 10, 256, dtype=dtype, device=device)
    scale, shift = (0.1 * torch.randn(2, 1, 256, dtype=dtype, device=device) for _ in range(2))
    x, out, message = {
        "partial": (buf[:, 1:], buf[:, :-1], "out shares memory with input"),
        "scale": (buf[:, :1], scale, "out is the same tensor as scale"),
        "expanded": (buf[:, 1:], torch.empty(256, dtype=dtype, device=device).expand(2, 9, 256), "share memory"),
    }[case]
    before, scale_before = buf.clone(), scale.clone()
    with pytest.raises(RuntimeError, match=message):
        kernel.adaln(x, scale, shift, out=out)
    assert torch.equal(buf, before) and torch.equal(scale, scale_before)
