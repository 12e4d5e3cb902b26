"""RMSNorm: float64 references on fresh random data, parity with the modules it replaces, and error messages."""

from __future__ import annotations

import pytest
import torch

from .utils import (
    LAYOUTS,
    assert_close,
    assert_compiles,
    assert_grad_close,
    assert_parity,
    float64_leaves,
    grads,
    laid_out,
    layout_id,
    poisoned_like,
)


def reference(x, weight=None, eps=1e-6, residual=None):
    """float64 RMSNorm of the values the kernel actually sees (x + residual rounded to x's dtype)."""
    h = x if residual is None else (x + residual)  # torch rounds the sum to x's dtype, like the models
    hd = h.double()
    y = hd * torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight.double()


def roundings(weight, rounding):
    return 2 if weight is not None and rounding == "model" else 1


SHAPES = [
    (1, 1),
    (3, 7),
    (5, 127),
    (4, 4095),
    (3, 4097),
    (2, 8193),
    (33, 4096),
    (128, 4096),  # Qwen3-8B hidden states, decode-sized batch
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


@pytest.mark.parametrize("shape", [(2, 2688, 2048), (2, 7392, 2048)], ids=["ltx_2688", "ltx_7392"])
def test_real_model_shapes(kernel, dtype, device, shape):
    x = torch.randn(shape, dtype=dtype, device=device)
    assert_close(kernel.rms_norm(x, None, 1e-6), reference(x))  # LTX-Video norm1/norm2: no weight


@pytest.mark.parametrize("cols", [128, 4096, 4097])
def test_strided_rows(kernel, dtype, device, cols):
    base = torch.randn(6, 5, cols + 64, dtype=dtype, device=device)
    x = base[:, :, :cols]  # rows spaced by cols + 64
    weight = torch.randn(cols, dtype=dtype, device=device)
    assert not x.is_contiguous()
    assert_close(kernel.rms_norm(x, weight), reference(x, weight), roundings=2)
    y = torch.randn(6, 10, cols + 64, dtype=dtype, device=device)[:, ::2, :cols]  # every other row: evenly spaced
    assert_close(kernel.rms_norm(y, weight, rounding="single"), reference(y, weight))


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
    for a, e in zip(actual, expected):
        assert_grad_close(a, e)


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
    assert_close(kernel.rms_norm(x, weight, rounding="single"), reference(x, weight))


def test_small_variance_and_outliers(kernel, dtype, device):
    x = torch.randn(64, 4096, device=device) * 0.05
    x[:, ::512] *= 40  # outliers: fp32 accumulation and eps handling both matter
    x = x.to(dtype)
    weight = torch.randn(4096, dtype=dtype, device=device)
    assert_close(kernel.rms_norm(x, weight, 1e-5), reference(x, weight, 1e-5), roundings=2)


@pytest.mark.parametrize("eps", [1e-6, 1e-5, 0.5])
def test_eps(kernel, dtype, device, eps):
    x = torch.randn(16, 1024, dtype=dtype, device=device) * 0.1
    assert_close(kernel.rms_norm(x, None, eps), reference(x, None, eps))


@pytest.mark.kernels_ci
@pytest.mark.parametrize("shape", [(7, 4096), (3, 5, 2048), (4, 4097), (2, 40000)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
def test_fused_add(kernel, dtype, device, shape, weighted):
    x = torch.randn(shape, dtype=dtype, device=device)
    residual = torch.randn(shape, dtype=dtype, device=device)
    weight = torch.randn(shape[-1], dtype=dtype, device=device) if weighted else None
    out, new_residual = kernel.fused_add_rms_norm(x, residual, weight, 1e-6)
    torch.testing.assert_close(new_residual, x + residual, rtol=0, atol=0)  # bitwise: the model's own add
    assert_close(out, reference(x, weight, residual=residual), roundings(weight, "model"))


def test_empty_input(kernel, dtype, device):
    x = torch.empty(0, 4096, dtype=dtype, device=device)
    assert kernel.rms_norm(x, torch.ones(4096, dtype=dtype, device=device)).shape == (0, 4096)


# Gradients, torch.library registration and torch.compile.

GRAD_SHAPES = [(7, 4096), (3, 5, 127), (9, 32, 128), (1000, 2048), (2, 40000)]


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
    for a, e in zip(actual, expected):
        assert_grad_close(a, e)


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
    for a, e in zip(actual, expected):
        assert_grad_close(a, e)


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
    for a, e in zip(actual, expected):
        assert_grad_close(a, e)


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
    expected = reference(x)
    kernel.rms_norm(x, out=out)
    assert_close(out, expected)


# Parity with the real modules (skipped when the library is not installed).


def test_parity_transformers_qwen3(kernel, dtype, device):
    modeling = pytest.importorskip("transformers.models.qwen3.modeling_qwen3")
    norm = modeling.Qwen3RMSNorm(4096, eps=1e-6).to(device=device, dtype=dtype)
    torch.nn.init.normal_(norm.weight)
    x = torch.randn(512, 4096, dtype=dtype, device=device)
    expected = norm(x)
    actual = kernel.rms_norm(x, norm.weight, norm.variance_epsilon, rounding="model")
    assert_parity(f"Qwen3RMSNorm {dtype}", actual, expected)
    q = torch.randn(64, 32, 128, dtype=dtype, device=device)  # q_norm: per head
    q_norm = modeling.Qwen3RMSNorm(128, eps=1e-6).to(device=device, dtype=dtype)
    torch.nn.init.normal_(q_norm.weight)
    assert_parity(f"Qwen3 q_norm {dtype}", kernel.rms_norm(q, q_norm.weight), q_norm(q))


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
    actual = kernel.rms_norm(x, norm.weight if affine else None, 1e-6, rounding="model")
    assert_parity(f"diffusers RMSNorm affine={affine} {dtype}", actual, norm(x))


# Errors: one clear line, never a crash or a silently wrong result.


def test_rejects_cpu_tensors(kernel):
    with pytest.raises(RuntimeError, match="input must be a CUDA tensor"):
        kernel.rms_norm(torch.randn(4, 8))


def test_rejects_bad_arguments(kernel, dtype, device):
    x = torch.randn(4, 64, dtype=dtype, device=device)
    with pytest.raises(RuntimeError, match=r"weight must have shape \[64\]"):
        kernel.rms_norm(x, torch.ones(32, dtype=dtype, device=device))
    other = torch.float32 if dtype != torch.float32 else torch.bfloat16
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


def test_rejects_dtypes_not_compiled(kernel, device, uncompiled_dtypes):
    for dtype in [torch.float64, torch.int32, *uncompiled_dtypes]:
        with pytest.raises(RuntimeError, match="but this kernel was built for"):
            kernel.rms_norm(torch.ones(4, 64, device=device).to(dtype))
