"""Fuzzing helpers (hypothesis) shared by the ops' fuzz tests, which live with each op in test_<op>.py.

A fuzz test draws a case (sizes, memory layouts, options, a data seed) and runs the op's forward and backward
against its float64 reference. The sizes cover 1, primes, powers of two and their neighbours, and rows up to 16K
wide or many rows; `Layout` places a tensor in memory with its leading dimensions permuted or sliced, padded rows and
a storage offset (a misaligned start). Outputs are NaN-poisoned tensors of a drawn layout, so an element the kernel
does not write, or one it writes outside the output, shows.

conftest.py registers two hypothesis profiles: `default` (a few derandomized examples per test: the same cases on
every run) and `gpu` (HYPOTHESIS_PROFILE=gpu: 2,000 random examples per fuzz test, split over the compiled dtypes).
Every example draws a seed for its data, so a failure's printed example reproduces it exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

# Rows at most this many elements (before padding): the float64 references stay cheap, thousands of examples fast.
MAX_ELEMENTS = 1 << 20
MAX_WIDTH = 16384

PRIMES = (2, 3, 5, 7, 11, 13, 31, 61, 127, 251, 509, 1021, 2039, 4093, 8191, 16381)
SPECIAL_WIDTHS = (1, 8, 16, 24, 64, 128, 129, 255, 256, 1000, 1024, 2048, 2560, 4095, 4096, 4097, 8192, 8200, 16384)

seeds = st.integers(0, 2**63 - 1)
eps_values = st.sampled_from([1e-6, 1e-5, 1e-12, 1e-3, 0.5]) | st.floats(1e-8, 1.0)


def widths(max_width: int = MAX_WIDTH, min_width: int = 1) -> st.SearchStrategy[int]:
    """Row widths: 1, primes, powers of two and their neighbours (vector and scalar paths), or any size."""
    special = sorted({w for w in (*SPECIAL_WIDTHS, *PRIMES) if min_width <= w <= max_width})
    return st.sampled_from(special) | st.integers(min_width, max_width)


def counts(limit: int) -> st.SearchStrategy[int]:
    """A dimension's size, at most `limit`: mostly small, sometimes as large as the budget allows (many rows)."""
    limit = max(1, limit)
    return st.integers(1, min(limit, 8)) | st.integers(1, limit)


@st.composite
def leading_shapes(draw, width: int, min_dims: int = 0, max_dims: int = 3, max_elements: int = MAX_ELEMENTS):
    """Leading dimensions for rows of `width` elements, within the element budget."""
    budget = max(1, max_elements // width)
    shape = []
    for _ in range(draw(st.integers(min_dims, max_dims))):
        shape.append(draw(counts(budget // math.prod(shape))))
    return tuple(shape)


@dataclass(frozen=True)
class Layout:
    """Where a tensor's elements lie in memory. Its leading dimensions are laid out in `order` (outermost first), the
    outermost of them keeps every `step`-th index, each row is followed by `pad` unused elements, and the first
    element sits `offset` elements into the buffer. Layout() is the contiguous one."""

    order: tuple[int, ...] = ()
    step: int = 1
    pad: int = 0
    offset: int = 0

    def empty(self, shape, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
        """A NaN-filled tensor of `shape` in this layout, and the whole buffer it lies in."""
        *lead, width = shape
        order = self.order or tuple(range(len(lead)))
        assert sorted(order) == list(range(len(lead))), f"layout order {order} for shape {tuple(shape)}"
        physical = [lead[d] for d in order] + [width + self.pad]
        if lead:
            physical[0] *= self.step
        buffer = torch.full((self.offset + math.prod(physical),), float("nan"), dtype=dtype, device=device)
        t = buffer[self.offset :].view(physical)[..., :width]
        if lead:
            t = t[:: self.step]
        return t.permute(*[order.index(d) for d in range(len(lead))], len(lead)), buffer

    def like(self, values: torch.Tensor) -> torch.Tensor:
        """A copy of `values` in this layout."""
        return self.empty(values.shape, values.dtype, values.device)[0].copy_(values)


@st.composite
def layouts(draw, lead_dims: int, width: int) -> Layout:
    """A layout for a tensor with `lead_dims` leading dimensions and rows of `width`: contiguous most often (the
    first of each choice, where hypothesis shrinks to), else permuted, sliced, padded (by up to two rows: q or k
    inside a fused qkv buffer) and offset (misaligned)."""
    return Layout(
        order=tuple(draw(st.permutations(range(lead_dims)))) if lead_dims > 1 else tuple(range(lead_dims)),
        step=draw(st.sampled_from([1, 1, 2, 3])) if lead_dims else 1,
        pad=draw(st.sampled_from([0, 0, 1, 3, 8, 64, width, 2 * width])),
        offset=draw(st.sampled_from([0, 0, 1, 2, 3, 8])),
    )


def draw_layouts(data, width: int, **ranks: int) -> dict[str, Layout]:
    """One layout per tensor name, for `rank` leading dimensions and rows of `width`: draw_layouts(data, 4096, x=2)."""
    return {name: data.draw(layouts(lead_dims, width), label=f"{name} layout") for name, lead_dims in ranks.items()}


def generator(seed: int, device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def randn(shape, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Fresh standard normal values (contiguous; Layout.like places them)."""
    return torch.randn(shape, generator=gen, device=gen.device, dtype=dtype)


def assert_written_only_inside(out: torch.Tensor, buffer: torch.Tensor) -> None:
    """`out` (a view of the NaN-filled `buffer`) has no NaN left, and every element of the buffer outside it does."""
    assert not out.isnan().any(), "output has NaN: an element was not written"
    untouched = buffer.isnan().sum().item()
    assert untouched == buffer.numel() - out.numel(), "the kernel wrote outside the output"
