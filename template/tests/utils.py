"""Test helpers: NaN-poisoned outputs, float64 comparisons with per-dtype tolerances, ulp statistics."""

from __future__ import annotations

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


def assert_parity(name: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Compare with the output of the module being replaced, and print how often the two differ by more than
    1 ulp. Half precisions must agree to 1 ulp almost everywhere (reduction order can flip a rounding);
    float32 differs by reduction-order noise, so it gets a relative tolerance."""
    diff = ulp_diff(actual, expected)
    fraction = (diff > 1).double().mean().item()
    print(f"{name}: {fraction:.2e} of elements differ by more than 1 ulp (max {diff.max().item():.1f} ulp)")
    assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype} != {expected.dtype}"
    if actual.dtype == torch.float32:
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)
    else:
        assert fraction < 1e-3 and diff.max().item() <= 2, f"{name}: differs from the module it replaces"
