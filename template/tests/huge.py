"""Helpers of the tests with more than 2^31 elements (marker `slow`): free-memory checks, the rows worth comparing,
and float64 sums over row chunks, so that no test ever holds a float64 copy of a whole tensor."""

from __future__ import annotations

import pytest
import torch


def require_free_memory(nbytes: int) -> None:
    """Skip unless the GPU has `nbytes` free, plus 1 GiB for references and temporaries (the blocks torch keeps
    cached from earlier tests are released first)."""
    torch.cuda.empty_cache()
    free = torch.cuda.mem_get_info()[0]
    if free < nbytes + 2**30:
        pytest.skip(f"needs {(nbytes + 2**30) / 2**30:.0f} GiB of free GPU memory, {free / 2**30:.0f} GiB free")


def boundary_rows(rows: int, cols: int, device) -> torch.Tensor:
    """Indices of the rows worth comparing: the first and last ones, and those around elements 2^31 and 2^32, where
    32-bit element offsets would wrap."""
    picks = {0, 1, rows - 2, rows - 1}
    for boundary in (2**31, 2**32):
        picks |= {boundary // cols - 1, boundary // cols, boundary // cols + 1}
    return torch.tensor(sorted(p for p in picks if 0 <= p < rows), device=device)


def row_chunk_sum(fn, rows: int, cols: int, chunk_elements: int = 2**26) -> torch.Tensor:
    """fn(slice of rows) summed over consecutive row chunks of about `chunk_elements` elements: fn returns a float64
    sum over its rows (e.g. a weight gradient's share), so only one chunk is ever held in float64."""
    step = max(1, chunk_elements // max(cols, 1))
    total = fn(slice(0, min(step, rows)))
    for start in range(step, rows, step):
        total = total + fn(slice(start, min(start + step, rows)))
    return total
