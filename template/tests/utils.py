"""Test helpers: NaN-poisoned outputs, float64 comparisons with per-dtype tolerances, ulp statistics, and exact
references: the outputs a kernel may return given where it rounds and a bound on its fp32 arithmetic's error."""

from __future__ import annotations

import math
import random

import torch

# |y - ref| <= atol + rtol * |ref| for ONE rounding of an exact result to the dtype: rtol is the unit roundoff
# (bf16 2^-8, fp16 2^-11) plus a little fp32 arithmetic; results rounded twice (as some models do) get twice that.
_TOLERANCE = {
    torch.bfloat16: (2**-8 * 1.05, 1e-5),
    torch.float16: (2**-11 * 1.05, 1e-5),
    torch.float32: (1e-5, 1e-6),
}


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    """An output buffer full of NaN: an element the kernel forgets to write fails the comparison."""
    return torch.full_like(t, float("nan"), memory_format=torch.contiguous_format)


def laid_out(shape, order, dtype, device, offset=0) -> torch.Tensor:
    """Fresh random data of `shape` whose leading dimensions lie in memory in `order` (outermost first; the last
    dimension stays innermost and contiguous), starting `offset` elements into its storage. order (0, 2, 1) of a
    [B, H, S, D] shape is the q of a per-head norm after .transpose(1, 2): strides [S*H*D, D, H*D, 1]."""
    leading = len(shape) - 1
    stored = [shape[d] for d in order] + [shape[-1]]
    flat = torch.randn(offset + math.prod(stored), dtype=dtype, device=device)
    view = flat[offset:].view(stored).permute([order.index(d) for d in range(leading)] + [leading])
    assert view.shape == tuple(shape) and view.storage_offset() == offset
    return view


def random_order(leading: int, seed: int) -> tuple[int, ...]:
    """A random (seeded: the same every run) memory order of `leading` leading dimensions, never the contiguous one."""
    rng = random.Random(seed)
    while True:
        order = tuple(rng.sample(range(leading), leading))
        if order != tuple(range(leading)):
            return order


# Leading-dimension layouts the ops must take at full speed or through one copy: (shape, memory order). The kernels
# address up to three levels of evenly spaced rows in place; four levels are copied (inputs) or written through a
# temporary (outputs).
LAYOUTS = [
    ((37, 6, 128), (1, 0)),  # a sequence-first tensor seen batch-first: two levels
    ((2, 8, 37, 128), (0, 2, 1)),  # the transposed q/k of a per-head norm: [B, S, H, D] seen as [B, H, S, D]
    ((3, 4, 5, 64), (2, 0, 1)),
    ((3, 4, 5, 6, 64), (1, 0, 2, 3)),  # three levels
    ((3, 4, 5, 6, 64), (3, 1, 0, 2)),  # four levels: copied
    ((2, 3, 4, 64), random_order(3, 4)),
    ((2, 3, 4, 5, 64), random_order(4, 5)),
]


def layout_id(case) -> str:
    shape, order = case
    return "x".join(map(str, shape)) + "_order" + "".join(map(str, order))


def assert_close(actual: torch.Tensor, expected: torch.Tensor, roundings: int = 1, atol: float | None = None) -> None:
    """Compare a kernel output with a float64 reference; NaN never passes."""
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert not actual.isnan().any(), "output has NaN: an element was not written"
    rtol, default_atol = _TOLERANCE[actual.dtype]
    torch.testing.assert_close(
        actual.double(),
        expected.double(),
        rtol=rtol * roundings,
        atol=(default_atol if atol is None else atol) * roundings,
    )


def ulp_diff(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """|actual - expected| in units in the last place of `expected`'s dtype at `expected`'s magnitude."""
    e = expected.double()
    _, exponent = torch.frexp(e.abs().clamp_min(torch.finfo(expected.dtype).tiny))
    spacing = torch.ldexp(torch.full_like(e, torch.finfo(expected.dtype).eps), exponent - 1)
    return (actual.double() - e).abs() / spacing


def assert_parity(name: str, actual: torch.Tensor, expected: torch.Tensor, exact: torch.Tensor | None = None) -> None:
    """Compare with the output of the module being replaced, and print how often the two differ by more than
    1 ulp. Half precisions must agree to 1 ulp almost everywhere (reduction order can flip a rounding);
    float32 differs by reduction-order noise, so it gets a relative tolerance. With `exact` (the float64 result),
    an element more than 2 ulp from the module's passes where the kernel's is the closer of the two to it: where
    the module's own fp32 math loses digits (e.g. 1 + erff(x) for x far below 0), the kernel may be right."""
    diff = ulp_diff(actual, expected)
    fraction = (diff > 1).double().mean().item()
    print(f"{name}: {fraction:.2e} of elements differ by more than 1 ulp (max {diff.max().item():.1f} ulp)")
    assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype} != {expected.dtype}"
    if actual.dtype == torch.float32:
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)
        return
    far = diff > 2
    if exact is not None:  # more than 2 ulp apart where the kernel is the closer to exact: the module's error
        print(f"{name}: {far.sum().item()} elements more than 2 ulp apart")
        far &= (actual.double() - exact).abs() >= (expected.double() - exact).abs()
    assert fraction < 1e-3 and not far.any(), f"{name}: differs from the module it replaces"


def assert_grad_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    roundings: int = 2,
    error: torch.Tensor | None = None,
    like: torch.dtype | None = None,
) -> None:
    """Compare a gradient with float64 autograd's. Each element is within `roundings` unit roundoffs of its value,
    or of the tensor's largest value: gradients of normalizations subtract a mean, so elements near zero are only
    accurate relative to the whole tensor. With `error` (float64, per element: a bound on the kernel's fp32
    arithmetic before its one rounding to the dtype), the bound is per element instead: the final rounding of the
    element itself plus `error`, which a term missing from the formula exceeds even where it is small. `like`: the
    unit roundoff of this dtype instead of actual's (an fp32 gradient of values rounded to a half precision on the
    way)."""
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype != torch.float64 and not actual.isnan().any(), "gradient has NaN or was not computed"
    if error is not None:
        u = _TOLERANCE[actual.dtype][0] if actual.dtype != torch.float32 else U32
        tiny = torch.finfo(actual.dtype).smallest_normal * torch.finfo(actual.dtype).eps  # a subnormal's rounding
        e = expected.double()
        bound = u * (e.abs() + error) + error + tiny
        err = (actual.double() - e).abs()
        bad = err > bound
        worst = (err / bound).max().item()
        assert not bad.any(), (
            f"{bad.sum().item()} of {actual.numel()} gradient elements exceed their error bound (up to {worst:.3g} "
            f"times it); first at {tuple(i.item() for i in bad.nonzero()[0])}"
        )
        return
    rtol = _TOLERANCE[like or actual.dtype][0] * roundings
    scale = expected.abs().max().item()
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=rtol * scale)


# Exact references. A kernel computes in fp32 and rounds to the output dtype at set points (where the module it
# replaces rounds). Given the exact (float64) value v of what it rounds and a bound e on its fp32 arithmetic's error
# (summation order, rsqrtf, ...), its fp32 result lies in [v - e, v + e], and rounding is monotonic, so its output
# lies between the roundings of v - e and v + e: one value of the dtype, except where v is within e of a tie
# between two (a small fraction of elements, where either neighbour is right). For float32 outputs this is the
# tolerance |y - v| <= e itself. Two roundings (Qwen3's norm, then its product with the weight) chain: bounds of the
# first rounding, each multiplied exactly and rounded again.

U32 = 2.0**-24  # fp32 unit roundoff


def sum_depth(n: int) -> int:
    """A bound on the fp32 additions one term goes through in a GPU row reduction of n terms: a thread adds up at
    most 32 of its elements (up to 4 cached 16-byte vectors of 8) or, streaming a long row over 1024 threads, one of
    every 1024 (plus a vector), then the threads' sums meet in a tree of at most log2(2 n) levels. The sum of n
    positive terms is then within sum_depth(n) unit roundoffs of exact (Higham, Accuracy and Stability, 4.2)."""
    return 32 + math.ceil(n / 1024) + 8 + math.ceil(math.log2(2 * max(n, 1)))


def column_sum_depth(run: int, partials: int, block_rows: int = 1) -> int:
    """A bound on the fp32 additions one term goes through in a backward kernel's column sum (the gradient of a
    weight, scale or shift: a sum over many rows). A thread adds its column's terms of up to `run` rows in sequence
    (the rows its block visits, or a chunk of tokens), its block then adds the sums of its `block_rows` rows in
    sequence (RMSNorm's row slots), and reduce.cuh's sum_rows adds the `partials` partial rows (one per block or
    chunk): each of its 32 warps every 32nd of them in sequence, then the 32 warps' sums in sequence. Counting each
    sequence's first addition (to 0, exact) too, as here, leaves a margin of 3: a sum whose every term goes through
    at most d - 1 roundings is within gamma_(d-1) <= d u (while d^2 u <= 1) of the sum of the terms' magnitudes,
    whatever the order (Higham, Accuracy and Stability, 4.2). Which run and partials a launch has depends on the
    GPU's SM count: the callers (rms_norm's and adaln's tests) take the worst launch plan the kernel may pick."""
    return run + block_rows - 1 + math.ceil(partials / 32) + 32


def sm_count(device) -> int:
    """The SMs of `device`'s GPU, which the backward kernels' launch plans (and so their column sums) depend on."""
    return torch.cuda.get_device_properties(torch.device(device)).multi_processor_count


def round_to(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 -> fp32 -> dtype, both round-to-nearest-even: what a kernel holding value in fp32 stores."""
    return value.float().to(dtype)


def rounding_bounds(value: torch.Tensor, error: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, high) of dtype: every fp32 result within `error` of the exact `value` rounds into [low, high]."""
    return round_to(value - error, dtype), round_to(value + error, dtype)


def rounded_product_bounds(
    bounds: tuple[torch.Tensor, torch.Tensor], factor: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds of round(a * factor) for a between `bounds` (a and factor of dtype: for 2-byte types their product is
    exact in fp32, so it is rounded once; a float32 product is rounded to float32, as a kernel rounds it)."""
    ends = [round_to(b.double() * factor.double(), dtype) for b in bounds]
    return torch.minimum(*ends), torch.maximum(*ends)


def assert_rounded(name: str, actual: torch.Tensor, bounds: tuple[torch.Tensor, torch.Tensor]) -> float:
    """`actual` lies within `bounds` (see rounding_bounds) everywhere; returns the fraction of elements whose bounds
    hold two values of the dtype (near a tie), which it prints."""
    low, high = torch.minimum(*bounds), torch.maximum(*bounds)
    assert actual.shape == low.shape, f"{name}: shape {tuple(actual.shape)} != {tuple(low.shape)}"
    assert actual.dtype == low.dtype, f"{name}: dtype {actual.dtype} != {low.dtype}"
    assert not actual.isnan().any(), f"{name}: output has NaN (an element was not written)"
    outside = (actual < low) | (actual > high)
    near_tie = (low != high).double().mean().item()
    where = "within the fp32 error bound" if actual.dtype == torch.float32 else f"{near_tie:.2e} near a rounding tie"
    print(f"{name}: {outside.sum().item()} of {actual.numel()} elements outside the bounds ({where})")
    if outside.any():
        index = tuple(i.item() for i in outside.nonzero()[0])
        ulps = ulp_diff(actual[outside], ((low.double() + high.double()) / 2)[outside].to(actual.dtype))
        raise AssertionError(
            f"{name}: {outside.sum().item()} of {actual.numel()} elements ({outside.double().mean().item():.2%}) are "
            f"not what rounding the exact result allows (up to {ulps.max().item():.1f} ulp off); first at {index}: "
            f"{actual[index].item()!r} not in [{low[index].item()!r}, {high[index].item()!r}]"
        )
    return near_tie


def assert_outside_fraction(name: str, actual: torch.Tensor, bounds, at_least: float) -> None:
    """At least `at_least` of the elements of `actual` lie outside `bounds`: the bounds of another rounding really
    tell the two apart (a kernel computing the wrong one would fail assert_rounded)."""
    low, high = torch.minimum(*bounds), torch.maximum(*bounds)
    fraction = ((actual < low) | (actual > high)).double().mean().item()
    print(f"{name}: {fraction:.2%} of elements outside the other rounding's bounds")
    assert fraction >= at_least, f"{name}: only {fraction:.2%} of elements tell the roundings apart"


def assert_identical_but_ties(name: str, actual: torch.Tensor, expected: torch.Tensor, bounds) -> None:
    """`actual` equals the replaced module's output `expected` bit for bit, except where the exact result is within
    fp32 error of a rounding tie (`bounds` hold two values there: summation order may pick either neighbour);
    there both lie within the bounds (the tie's two neighbours, carried through any second rounding: after a product
    with the weight they may be more than 1 ulp apart). The differing fraction is printed."""
    assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype} != {expected.dtype}"
    low, high = torch.minimum(*bounds), torch.maximum(*bounds)
    differ = actual != expected
    at_tie = low != high
    print(
        f"{name}: {differ.double().mean().item():.2e} of elements differ from the module "
        f"({at_tie.double().mean().item():.2e} near a rounding tie)"
    )
    assert not actual.isnan().any(), f"{name}: output has NaN"
    away = differ & ~at_tie
    assert not away.any(), (
        f"{name}: {away.sum().item()} of {actual.numel()} elements differ from the module away from any rounding tie "
        f"(first at {tuple(i.item() for i in away.nonzero()[0])})"
    )
    if actual.dtype != torch.float32:
        for t, who in ((actual, "kernel"), (expected, "module")):
            assert ((t >= low) & (t <= high))[differ].all(), f"{name}: the {who} is off its bounds"


def grads(output: torch.Tensor, inputs: list[torch.Tensor], seed_grad: torch.Tensor) -> list[torch.Tensor]:
    """d(output . seed_grad) / d(inputs)."""
    return list(torch.autograd.grad(output, inputs, seed_grad))


def float64_leaves(*tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """Detached float64 copies that require grad: the reference side of a gradient test."""
    return [None if t is None else t.detach().double().requires_grad_() for t in tensors]


def assert_compiles(fn, make_args, batches=(3, 5, 6)) -> None:
    """`fn` compiled with fullgraph=True (a graph break fails) gives eager's outputs and gradients for several batch
    sizes, all served by one dynamic-shape graph (a recompile fails). The first batch size must differ from every
    other size of the first call's tensors: dynamo gives equal sizes one symbol, so a batch equal to a fixed size
    would be specialized."""
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for batch in batches:
            args = make_args(batch)
            leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
            expected, got = fn(*args), compiled(*args)
            expected = expected if isinstance(expected, tuple) else (expected,)
            got = got if isinstance(got, tuple) else (got,)
            seeds = [torch.randn_like(e) for e in expected]
            for e, g in zip(expected, got):
                torch.testing.assert_close(g, e, rtol=0, atol=0)  # the same kernels, so the same bits
            if leaves:
                expected_grads = torch.autograd.grad(expected, leaves, seeds)
                got_grads = torch.autograd.grad(got, leaves, seeds)
                for e, g in zip(expected_grads, got_grads):
                    torch.testing.assert_close(g, e, rtol=0, atol=0)


def counting(monkeypatch, module, name):
    """Replaces `module.name` with a wrapper that records the dtypes of its first two arguments per call."""
    calls, function = [], getattr(module, name)

    def wrapper(*args, **kwargs):
        calls.append(tuple(None if a is None else a.dtype for a in args[:2]))
        return function(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls
