"""GEGLU: float64 references (erf and tanh GELU) on fresh random data, which GELU a build computes, parity with
diffusers' GEGLU module and eager PyTorch, and error messages."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from . import fuzz
from .huge import boundary_rows, require_free_memory
from .multi_gpu import MULTI_GPU_CHECKS, randn
from .utils import (
    LAYOUTS,
    U32,
    assert_close,
    assert_compiles,
    assert_grad_close,
    assert_identical_but_ties,
    assert_parity,
    assert_rounded,
    float64_leaves,
    grads,
    laid_out,
    layout_id,
    poisoned_like,
    rounded_product_bounds,
    rounding_bounds,
    ulp_diff,
)

APPROXIMATE = ["none", "tanh"]


def gelu64(gate, approximate="none"):
    g = gate.double()
    if approximate == "tanh":
        return 0.5 * g * (1 + torch.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)))
    return 0.5 * g * (1 + torch.erf(g / math.sqrt(2)))


def reference(x, approximate="none"):
    """float64 GEGLU of the values the kernel sees: the first half is the value, the second half the gate."""
    value, gate = x.double().chunk(2, dim=-1)
    return value * gelu64(gate, approximate)


def bounds(x, approximate="none"):
    """What the kernel may return (utils.rounding_bounds): gelu(gate) in fp32, rounded to x's dtype, times the value,
    rounded again, as the eager module rounds. The fp32 GELU is within 8 unit roundoffs of |gate| + |gelu(gate)|
    of exact. Eager's: erff/tanhf within 2 ulp, the rounding of their argument (at most half a unit roundoff after
    erf' or tanh'), of 1 + erf and of the two products. The kernel's erf form, gate * normal_cdf(gate): within
    1.64 units over every bf16 and fp16 value and 2^23 fp32 ones (geglu_lab.cu, the template's kernel lab)."""
    value, gate = x.double().chunk(2, dim=-1)
    act = gelu64(gate, approximate)
    act_bounds = rounding_bounds(act, 8 * U32 * (gate.abs() + act.abs()), x.dtype)
    return rounded_product_bounds(act_bounds, x.chunk(2, dim=-1)[0], x.dtype)


def gelu_of(kernel, gate, approximate="none"):
    """The kernel's gelu(gate), rounded to the gate's dtype: GEGLU with a value of 1, whose product is exact."""
    return kernel.geglu(torch.cat([torch.ones_like(gate), gate], dim=-1), approximate=approximate)


def every_gate(dtype, device):
    """Every finite bf16 or fp16 value in [-8, 8] (GELU's whole lower tail in these dtypes), as one row."""
    values = torch.arange(-(2**15), 2**15, dtype=torch.int32, device=device).to(torch.int16).view(dtype)
    return values[values.isfinite() & (values.abs() <= 8)].view(1, -1)


def output_like(x):
    """A NaN-poisoned output for x: the same leading dimensions, half the last one."""
    return poisoned_like(x[..., : x.shape[-1] // 2])


# gelu(gate) is rounded to the dtype before the multiply, as in the eager module: two roundings.
ROUNDINGS = 2

SHAPES = [
    (1, 2),  # inner 1
    (3, 14),  # inner 7: scalar path
    (5, 254),
    (4, 2 * 4096),
    (3, 2 * 4097),  # odd inner: scalar path
    (2, 3, 2 * 2048),  # 3-D input
    (7, 5, 2 * 4097),  # 3-D, odd inner
    (33, 2 * 2560),
    (2, 2 * 40000),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("approximate", APPROXIMATE)
def test_matches_float64_reference(kernel, dtype, device, shape, approximate):
    x = torch.randn(shape, dtype=dtype, device=device)
    out = output_like(x)
    result = kernel.geglu(x, approximate=approximate, out=out)
    assert result is out and result.dtype == dtype
    assert_close(out, reference(x, approximate), ROUNDINGS)
    assert_rounded(f"approximate={approximate!r}", out, bounds(x, approximate))  # where eager rounds, exactly


@pytest.mark.kernels_ci
def test_first_half_is_the_value(kernel, dtype, device):
    value = torch.full((4, 64), -3.0, dtype=dtype, device=device)
    gate = torch.ones(4, 64, dtype=dtype, device=device)
    out = kernel.geglu(torch.cat([value, gate], dim=-1))
    # -3 * gelu(1) = -2.524; with the halves swapped it would be 1 * gelu(-3) = -0.004
    assert_close(out, value.double() * gelu64(gate), ROUNDINGS)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("approximate", APPROXIMATE)
def test_computes_the_requested_gelu(kernel, dtype, device, approximate):
    # Exact (erf) and tanh GELU differ by at most 4.7e-4, at g = -2.70. Over most of [-4, 4] that is less than one
    # bf16/fp16 rounding, so both formulas would round to the same output there and the comparison would say
    # nothing. It is therefore made only where the two formulas differ by more than 4 ulp of the dtype (bf16:
    # g in [-4, -2.5]; fp32: nearly all of [-4, 4]). With value = 1 the product is exact, so the kernel is within
    # half an ulp (plus fp32 noise) of the formula it computes, and at least 3.5 ulp away from the other one.
    gate = torch.linspace(-4, 4, 8192, device=device).to(dtype)
    x = torch.cat([torch.ones_like(gate), gate]).view(1, -1)
    out = (kernel.geglu(x) if approximate == "none" else kernel.geglu(x, approximate="tanh")).flatten()
    intended = gelu64(gate, approximate)
    other = gelu64(gate, "tanh" if approximate == "none" else "none")
    differ = ulp_diff(other, intended.to(dtype)) > 4
    assert differ.sum().item() >= 1000, "too few gates where the formulas differ: the test would prove nothing"
    error_intended = (out.double() - intended)[differ].abs().mean().item()
    error_other = (out.double() - other)[differ].abs().mean().item()
    assert error_intended < 0.25 * error_other, (
        f"approximate={approximate!r}: mean error {error_intended:.3g} against the intended GELU, "
        f"{error_other:.3g} against the other one"
    )


@pytest.mark.parametrize(
    "shape",
    [(2, 2688, 2 * 8192), (2, 4096, 2 * 2560), (2, 1024, 2 * 5120)],
    ids=["ltx_like_2688x8192", "sd_4096x2560", "sdxl_1024x5120"],
)
@pytest.mark.parametrize("approximate", APPROXIMATE)
def test_real_model_shapes(kernel, dtype, device, shape, approximate):
    x = torch.randn(shape, dtype=dtype, device=device)
    out = kernel.geglu(x, approximate=approximate, out=output_like(x))
    assert_close(out, reference(x, approximate), ROUNDINGS)


@pytest.mark.parametrize("inner", [128, 2560, 4097])
def test_strided_rows(kernel, dtype, device, inner):
    base = torch.randn(6, 5, 2 * inner + 64, dtype=dtype, device=device)
    x = base[:, :, : 2 * inner]  # rows spaced by 2 * inner + 64
    out_base = torch.full((6, 5, inner + 32), float("nan"), dtype=dtype, device=device)
    out = out_base[:, :, :inner]  # strided output rows
    assert not x.is_contiguous() and not out.is_contiguous()
    assert kernel.geglu(x, out=out) is out
    assert_close(out, reference(x), ROUNDINGS)
    assert out_base[:, :, inner:].isnan().all(), "wrote outside the output rows"
    y = torch.randn(6, 10, 2 * inner + 64, dtype=dtype, device=device)[:, ::2, : 2 * inner]  # every other row
    assert_close(kernel.geglu(y, approximate="tanh"), reference(y, "tanh"), ROUNDINGS)


@pytest.mark.parametrize("case", LAYOUTS, ids=layout_id)
@pytest.mark.parametrize("approximate", APPROXIMATE)
def test_any_leading_strides(kernel, dtype, device, case, approximate):
    """Input and out= in any layout of their leading dimensions (permuted rank-3/4/5 views, the transposed layout of
    per-head tensors), past their storage's first element, forward and backward."""
    shape, order = case
    shape = (*shape[:-1], 2 * shape[-1])  # [value | gate]
    half = (*shape[:-1], shape[-1] // 2)
    x = laid_out(shape, order, dtype, device, offset=8)
    out = laid_out(half, tuple(reversed(order)), dtype, device, offset=16).fill_(float("nan"))
    assert kernel.geglu(x, approximate=approximate, out=out) is out
    assert_close(out, reference(x, approximate), ROUNDINGS)
    assert_close(kernel.geglu(x, approximate=approximate), reference(x, approximate), ROUNDINGS)

    x.requires_grad_()
    dy = laid_out(half, tuple(reversed(order)), dtype, device, offset=8)  # the gradient arrives strided too
    (actual,) = grads(kernel.geglu(x, approximate=approximate), [x], dy)
    (x64,) = float64_leaves(x)
    (expected,) = grads(reference(x64, approximate), [x64], dy.double())
    for a, e in zip(actual.chunk(2, dim=-1), expected.chunk(2, dim=-1)):  # value, gate
        assert_grad_close(a, e)


def test_unaligned_rows_take_the_scalar_path(kernel, dtype, device):
    flat = torch.randn(1 + 7 * 8192, dtype=dtype, device=device)
    x = flat[1:].view(7, 8192)  # data pointer not 16-byte aligned
    assert_close(kernel.geglu(x), reference(x), ROUNDINGS)
    y = torch.randn(7, 8193, dtype=dtype, device=device)[:, :8192]  # row stride of 8193 elements
    assert_close(kernel.geglu(y, approximate="tanh"), reference(y, "tanh"), ROUNDINGS)


def test_empty_input(kernel, dtype, device):
    assert kernel.geglu(torch.empty(0, 64, dtype=dtype, device=device)).shape == (0, 32)
    assert kernel.geglu(torch.empty(4, 0, dtype=dtype, device=device)).shape == (4, 0)


# Fuzzing and sanitizing (tests/fuzz.py, tools/sanitize.sh): one case, forward and backward, each tensor in a
# layout of its own (missing names: contiguous).


def check_case(kernel, dtype, device, shape, *, approximate, seed, layouts):
    """geglu into a NaN-poisoned output, then the gradients of both halves."""
    at = lambda name: layouts.get(name, fuzz.Layout())  # noqa: E731
    gen = fuzz.generator(seed, device)
    half = (*shape[:-1], shape[-1] // 2)
    x = at("x").like(fuzz.randn(shape, dtype, gen))
    out, out_buffer = at("out").empty(half, dtype, device)
    assert kernel.geglu(x, approximate=approximate, out=out) is out
    fuzz.assert_written_only_inside(out, out_buffer)
    assert_close(out, reference(x, approximate), ROUNDINGS)

    dy = at("dy").like(fuzz.randn(half, dtype, gen))
    (actual,) = grads(kernel.geglu(x.requires_grad_(), approximate=approximate), [x], dy)
    (x64,) = float64_leaves(x)
    (expected,) = grads(reference(x64, approximate), [x64], dy.double())
    for a, e in zip(actual.chunk(2, dim=-1), expected.chunk(2, dim=-1)):  # value, then gate
        assert_grad_close(a, e)


@pytest.mark.fuzz
@given(inner=fuzz.widths(fuzz.MAX_WIDTH // 2), approximate=st.sampled_from(APPROXIMATE), data=st.data())
def test_fuzz(kernel, dtype, device, inner, approximate, data):
    shape = (*data.draw(fuzz.leading_shapes(2 * inner), label="leading shape"), 2 * inner)
    n = len(shape) - 1
    layouts = {**fuzz.draw_layouts(data, 2 * inner, x=n), **fuzz.draw_layouts(data, inner, out=n, dy=n)}
    check_case(
        kernel, dtype, device, shape, approximate=approximate, seed=data.draw(fuzz.seeds, label="seed"), layouts=layouts
    )


# Small odd, misaligned and strided cases for tools/sanitize.sh (compute-sanitizer is slow: keep them small).
SANITIZE_CASES = {
    "odd_misaligned": ((3, 2 * 37), dict(approximate="none"), dict(x=fuzz.Layout(offset=1), out=fuzz.Layout(offset=3))),
    "vectors_strided": (
        (2, 3, 2 * 264),
        dict(approximate="tanh"),
        dict(x=fuzz.Layout((1, 0), step=2, pad=8), out=fuzz.Layout(pad=264), dy=fuzz.Layout((1, 0))),
    ),
    "long_rows": ((2, 2 * 40003), dict(approximate="none"), dict(dy=fuzz.Layout(pad=5, offset=2))),
}


@pytest.mark.sanitize
@pytest.mark.parametrize("case", SANITIZE_CASES)
def test_sanitize(kernel, dtype, device, case):
    shape, options, layouts = SANITIZE_CASES[case]
    check_case(kernel, dtype, device, shape, seed=0, layouts=layouts, **options)


@pytest.mark.slow
@pytest.mark.parametrize("inner", [4097, 4096], ids=["scalars", "vectors"])
def test_more_than_2_31_elements(kernel, dtype, device, inner):
    """rows x inner > 2^31, forward and backward. One launch indexes at most 2^31 - 1 vectors: with an odd inner (the
    scalar path, one element per vector) more rows than that are split over several launches. Rows around elements
    2^31 of the output and of the input, and around the split, against float64."""
    rows = 2**31 // inner + 2  # the scalar path's launch holds 2^31 // inner rows: two more start a second launch
    require_free_memory(7 * rows * inner * dtype.itemsize)  # x and its gradient, out, dy and the output it seeds
    x = torch.randn(rows, 2 * inner, dtype=dtype, device=device)
    out = kernel.geglu(x, out=output_like(x))
    assert not out.isnan().any(), "an element was not written"
    picked = torch.cat([boundary_rows(rows, inner, device), boundary_rows(rows, 2 * inner, device)]).unique()
    assert_close(out[picked], reference(x[picked]), ROUNDINGS)
    del out
    dy = torch.randn(rows, inner, dtype=dtype, device=device)
    (dx,) = grads(kernel.geglu(x.requires_grad_()), [x], dy)
    (x64,) = float64_leaves(x[picked])
    (expected,) = grads(reference(x64), [x64], dy[picked].double())
    for a, e in zip(dx[picked].chunk(2, dim=-1), expected.chunk(2, dim=-1)):
        assert_grad_close(a, e)


# Gradients, torch.library registration and torch.compile.


@pytest.mark.kernels_ci
@pytest.mark.parametrize(
    "shape", [(3, 14), (4, 2 * 4096), (2, 3, 2 * 2048), (7, 5, 2 * 4097)], ids=lambda s: "x".join(map(str, s))
)
@pytest.mark.parametrize("approximate", APPROXIMATE)
def test_gradients_match_float64(kernel, dtype, device, shape, approximate):
    x = torch.randn(shape, dtype=dtype, device=device, requires_grad=True)
    dy = torch.randn((*shape[:-1], shape[-1] // 2), dtype=dtype, device=device)
    (actual,) = grads(kernel.geglu(x, approximate=approximate), [x], dy)
    (x64,) = float64_leaves(x)
    (expected,) = grads(reference(x64, approximate), [x64], dy.double())
    value_grad, gate_grad = actual.chunk(2, dim=-1)
    value_ref, gate_ref = expected.chunk(2, dim=-1)
    assert_grad_close(value_grad, value_ref)  # dy * gelu(gate): gelu(gate) rounded as in the forward
    assert_grad_close(gate_grad, gate_ref)


# Devices and streams (tests/multi_gpu.py says what each check asserts): tensors on cuda:1 while cuda:0 is current
# (2 GPUs), on a side stream, and in a CUDA graph (on cuda:1, or on the only GPU), forward and backward.
@pytest.mark.multi_gpu
@pytest.mark.parametrize("check", MULTI_GPU_CHECKS)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_devices_and_streams(kernel, dtype, check, approximate):
    x = randn(4, 77, 2 * 1280, dtype=dtype)
    check(lambda x: kernel.geglu(x, approximate=approximate), [x], [True])


def test_opcheck(kernel, dtype, device):
    ops = kernel._ops.ops
    x = torch.randn(6, 2 * 256, dtype=dtype, device=device, requires_grad=True)
    for tanh in (False, True):
        torch.library.opcheck(ops.geglu_fwd, (x, tanh))
        torch.library.opcheck(ops.geglu_bwd, (torch.randn(6, 256, dtype=dtype, device=device), x.detach(), tanh))
        torch.library.opcheck(ops.geglu, (torch.empty(6, 256, dtype=dtype, device=device), x.detach(), tanh))


def test_compiles_fullgraph(kernel, dtype, device):
    proj = torch.nn.Linear(256, 2 * 512, device=device, dtype=dtype)

    def feed_forward(x):
        return kernel.geglu(proj(x)) * 2

    assert_compiles(
        feed_forward, lambda batch: [torch.randn(batch, 9, 256, dtype=dtype, device=device, requires_grad=True)]
    )


def test_out_refuses_to_drop_gradients(kernel, dtype, device):
    x = torch.randn(4, 64, dtype=dtype, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="does not record gradients"):
        kernel.geglu(x, out=torch.empty(4, 32, dtype=dtype, device=device))


# Parity with what the op replaces: eager PyTorch (always) and diffusers' GEGLU (skipped without diffusers). In
# bf16/fp16 eager rounds gelu(gate) to the dtype before the multiply, and so does the kernel: the outputs are
# identical wherever the fp32 GELU values round alike, which they may not only where the exact GELU is within fp32
# error of a rounding tie (the fp32 error of either: eager's, or the kernel's erf form, normal_cdf). Rounding once
# instead would differ by 1 ulp in about a quarter of the elements.


@pytest.mark.parametrize("approximate", APPROXIMATE)
def test_parity_eager(kernel, dtype, device, approximate):
    x = torch.randn(4096, 2 * 4096, dtype=dtype, device=device)
    value, gate = x.chunk(2, dim=-1)
    act = F.gelu(gate, approximate=approximate)
    actual = kernel.geglu(x, approximate=approximate)
    # The kernel's gelu(gate) against eager's, then the output as the product of the value and that rounded GELU
    # (an exact fp32 product, rounded once more), as eager forms it. The erf form's CDF keeps its digits below -4,
    # where eager's 1 + erff cancels (geglu.cu, normal_cdf): there a tiny GELU may be a few ulp from eager's, and
    # nearer the exact value.
    ours = gelu_of(kernel, gate, approximate)
    exact = gelu64(gate, approximate) if approximate == "none" else None
    assert_parity(f"F.gelu(gate, approximate={approximate!r}) {dtype}", ours, act, exact=exact)
    assert torch.equal(actual, value * ours), "the output is not value * gelu(gate) rounded as eager rounds it"
    name = f"value * F.gelu(gate, approximate={approximate!r}) {dtype}"
    assert_identical_but_ties(name, actual, value * act, bounds(x, approximate))


def test_parity_eager_every_gate(kernel, dtype, device):
    """The erf form at every bf16 / fp16 gate in [-8, 8]: wherever the kernel's GELU is more than 1 ulp from
    eager's, it is the nearer of the two to the exact value (eager's 1 + erff loses its digits below -4)."""
    if dtype == torch.float32:
        pytest.skip("fp32 has too many gates to try each; test_matches_float64_reference bounds its error")
    gate = every_gate(dtype, device)
    ours, eager, exact = gelu_of(kernel, gate), F.gelu(gate), gelu64(gate)
    apart = ulp_diff(ours, eager) > 1
    print(f"erf GELU {dtype}: {apart.sum().item()} of {gate.numel()} gates more than 1 ulp from eager's")
    wrong = apart & ((ours.double() - exact).abs() >= (eager.double() - exact).abs())
    assert not wrong.any(), (
        f"{dtype}: the kernel's GELU is more than 1 ulp from eager's, and not nearer the exact value, at gates "
        + ", ".join(f"{g:.8g}" for g in gate[wrong][:8].tolist())
    )


@pytest.mark.parametrize("dims", [(640, 2560, 4096), (1280, 5120, 1024)], ids=["sd_640", "sdxl_1280"])
def test_parity_diffusers_geglu(kernel, dtype, device, dims):
    activations = pytest.importorskip("diffusers.models.activations")
    dim_in, dim_out, tokens = dims
    module = activations.GEGLU(dim_in, dim_out).to(device=device, dtype=dtype)
    x = torch.randn(2, tokens, dim_in, dtype=dtype, device=device)
    with torch.no_grad():
        expected = module(x)
        projected = module.proj(x)
        actual = kernel.geglu(projected)
    name = f"diffusers GEGLU({dim_in}, {dim_out}) {dtype}"
    assert_parity(name, actual, expected, exact=reference(projected))
    assert_identical_but_ties(name, actual, expected, bounds(projected))


# Errors: one clear line, never a crash or a silently wrong result.


def test_rejects_cpu_tensors(kernel):
    with pytest.raises(RuntimeError, match="input must be a CUDA tensor"):
        kernel.geglu(torch.randn(4, 8))


def test_rejects_bad_arguments(kernel, dtype, device):
    x = torch.randn(4, 64, dtype=dtype, device=device)
    with pytest.raises(RuntimeError, match="input's last dimension must be even"):
        kernel.geglu(torch.randn(4, 7, dtype=dtype, device=device))
    with pytest.raises(RuntimeError, match=r"out has shape \[4, 64\] but must have shape \[4, 32\]"):
        kernel.geglu(x, out=torch.empty(4, 64, dtype=dtype, device=device))
    other = torch.float32 if dtype != torch.float32 else torch.bfloat16
    with pytest.raises(RuntimeError, match="out has dtype"):
        kernel.geglu(x, out=torch.empty(4, 32, dtype=other, device=device))
    with pytest.raises(RuntimeError, match="out must be a CUDA tensor"):
        kernel.geglu(x, out=torch.empty(4, 32, dtype=dtype))
    with pytest.raises(RuntimeError, match="contiguous in its last dimension"):
        kernel.geglu(torch.randn(64, 4, dtype=dtype, device=device).t())
    with pytest.raises(RuntimeError, match="out must be contiguous in its last dimension"):
        kernel.geglu(x, out=torch.empty(32, 4, dtype=dtype, device=device).t())
    with pytest.raises(ValueError, match="approximate must be one of"):
        kernel.geglu(x, approximate="erf")


def test_rejects_dtypes_not_compiled(kernel, device, uncompiled_dtypes):
    for dtype in [torch.float64, torch.int32, *uncompiled_dtypes]:
        with pytest.raises(RuntimeError, match="but this kernel was built for"):
            kernel.geglu(torch.ones(4, 64, device=device).to(dtype))


@pytest.mark.parametrize("case", ["value_half", "expanded"])
def test_overlapping_out_is_refused_before_anything_is_written(kernel, dtype, device, case):
    x = torch.randn(8, 2 * 512, dtype=dtype, device=device)
    out, message = {
        "value_half": (x[:, :512], "out shares memory with input"),
        "expanded": (torch.empty(512, dtype=dtype, device=device).expand(8, 512), "share memory"),
    }[case]
    before = x.clone()
    with pytest.raises(RuntimeError, match=message):
        kernel.geglu(x, out=out)
    assert torch.equal(x, before)
