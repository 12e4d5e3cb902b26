"""Helpers for the template's tests: render projects with copier, run commands, find the CUDA toolkit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import copier
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# The op list is written once, in ops.yml: answer value -> stem (and label, functions).
OP_SPECS = yaml.safe_load((ROOT / "ops.yml").read_text())["op_specs"]["default"]
ALL_OPS = list(OP_SPECS)
ALL_PRECISIONS = ["bf16", "fp16", "fp32"]
GPU_SPECS = yaml.safe_load((ROOT / "template" / "gpus.yml").read_text())["gpu_specs"]["default"]
ALL_GPUS = list(GPU_SPECS)
# Source stem of each op: kernel_src/<stem>.cu|.h, torch-ext/<stem>.cpp, torch-ext/<pkg>/<stem>.py,
# tests/test_<stem>.py, benchmarks/cases/<stem>.py.
STEMS = {op: spec["stem"] for op, spec in OP_SPECS.items()}


def render(dst: Path, **answers) -> Path:
    """Render the template at its working tree (uncommitted changes included) with `answers` over the defaults."""
    copier.run_copy(
        str(ROOT),
        dst,
        data=answers,
        defaults=True,
        unsafe=True,
        vcs_ref="HEAD",
        quiet=True,
    )
    return dst


def run(*args, cwd: Path | None = None, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


def copier_cli(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run(sys.executable, "-m", "copier", *args, cwd=cwd, check=False)


def cuda_home() -> Path:
    """The CUDA toolkit root (CUDA_HOME, else the folder of the real nvcc behind any wrapper on PATH)."""
    if os.environ.get("CUDA_HOME"):
        return Path(os.environ["CUDA_HOME"])
    for candidate in [
        Path("/usr/local/cuda"),
        *sorted(Path("/usr/local").glob("cuda-*")),
    ]:
        if (candidate / "bin" / "nvcc").exists():
            return candidate
    pytest.fail("no CUDA toolkit found: set CUDA_HOME")


def require_tool(name: str) -> str:
    """A tool the checks need: missing is a failure on CI (where .ci/run installs it), a skip elsewhere."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed (.ci/run installs it)")
        pytest.skip(f"{name} is not installed")
    return path
