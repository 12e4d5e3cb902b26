"""Every kernel source of every render in the matrix compiles with nvcc for each chosen capability, warnings as
errors, with the flags torch builds use (no implicit half/bfloat16 operators)."""

from __future__ import annotations

import os
import re
import tomllib
from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import cuda_home, render, run
from .test_render import MATRIX

MAX_SPILL_BYTES = 16
TORCH_NVCC_FLAGS = [
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
]


@pytest.mark.parametrize("case", list(MATRIX))
def test_kernels_compile_without_warnings(tmp_path, case):
    project = render(tmp_path / "p", name="ck", **MATRIX[case])
    nvcc = cuda_home() / "bin" / "nvcc"
    config = tomllib.loads((project / "build.toml").read_text())
    jobs = []
    for kernel in config["kernel"].values():
        for source in (s for s in kernel["src"] if s.endswith(".cu")):
            for cap in kernel["cuda-capabilities"]:
                arch = cap.replace(".", "")
                jobs.append(
                    [
                        nvcc,
                        "-std=c++17",
                        "-O3",
                        "-c",
                        project / source,
                        "-o",
                        tmp_path / f"{arch}-{os.path.basename(source)}.o",
                        f"-gencode=arch=compute_{arch},code=sm_{arch}",
                        *TORCH_NVCC_FLAGS,
                        "--Werror",
                        "all-warnings",
                        "-Xptxas",
                        "-v",
                        "-Xcompiler",
                        "-Wall,-Werror",
                    ]
                )
    assert jobs
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        reports = list(pool.map(lambda args: run(*args).stderr, jobs))
    # ptxas reports each kernel's spills; a few bytes (ptxas keeping one value across a barrier) are tolerated,
    # real register pressure is not.
    spills = [int(n) for report in reports for n in re.findall(r"(\d+) bytes spill stores", report)]
    assert spills and max(spills) <= MAX_SPILL_BYTES, f"register spills up to {max(spills)} bytes"
