"""The generated setup.py says in one line what is missing before it compiles anything: torch (not installed, or
hidden by pip's build isolation), a CUDA toolkit (CUDA_HOME wrong or unset with a wrapper nvcc on PATH), or a toolkit
whose CUDA major version differs from torch's. Commands that do not build (--help) run no checks."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .conftest import render

NO_TORCH = (
    "error: setup.py needs torch installed in this environment: pip install -r requirements/build.txt, then build "
    "with python -m pip install --no-build-isolation -e ."
)
ISOLATED = (
    "error: setup.py needs torch, which pip's build isolation hides: pip install -r requirements/build.txt, then "
    "build with python -m pip install --no-build-isolation -e ."
)
NO_TOOLKIT = (
    "error: no CUDA toolkit found ({}): set CUDA_HOME to the toolkit root, the folder with bin/nvcc and "
    "include/cuda_runtime.h"
)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp("setup-errors") / "p")


def setup_py(project: Path, *args: str, python: str = sys.executable, **env: str | None) -> subprocess.CompletedProcess:
    """`python setup.py *args` in the project, with `env` over this environment (None: unset)."""
    environ = {**os.environ, **env}
    environ = {key: value for key, value in environ.items() if value is not None}
    return subprocess.run([python, *args], cwd=project, env=environ, capture_output=True, text=True)


def assert_fails_before_compiling(project: Path, result: subprocess.CompletedProcess, line: str, last: bool = True):
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    if last:
        assert result.stderr.strip().splitlines()[-1] == line, result.stderr
    else:  # pip prints its own lines after the build backend's output
        assert line in [printed.strip() for printed in output.splitlines()], output
    assert "building '" not in output and "Emitting ninja" not in output, output
    assert not (project / "build-ext").exists() and not list(project.glob("torch-ext/*/*.so")), output


def fake_toolkit(root: Path, release: str) -> Path:
    """A folder laid out like a CUDA toolkit whose bin/nvcc only prints a version."""
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "include" / "cuda_runtime.h").write_text("")
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.131'\n")
    nvcc.chmod(0o755)
    return root


def test_without_torch(project, tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "venv"], check=True)
    result = setup_py(project, "setup.py", "build_ext", python=str(tmp_path / "venv" / "bin" / "python"))
    assert_fails_before_compiling(project, result, NO_TORCH)


def test_torch_hidden_by_build_isolation(project):
    """`pip install -e .` without --no-build-isolation: pip runs setup.py in an environment without torch."""
    if int(importlib.metadata.version("pip").split(".")[0]) < 25:
        pytest.skip("pip < 25 runs `setup.py develop` for a project without pyproject.toml")
    result = setup_py(project, "-m", "pip", "install", "--dry-run", "-e", ".")
    assert_fails_before_compiling(project, result, ISOLATED, last=False)


@pytest.mark.parametrize("command", ["build_ext", "build_kernel", "bdist_wheel"])
def test_cuda_home_not_a_toolkit(project, command):
    result = setup_py(project, "setup.py", command, CUDA_HOME="/nonexistent")
    assert_fails_before_compiling(project, result, NO_TOOLKIT.format("CUDA_HOME=/nonexistent"))


def test_editable_install_checks_too(project):
    """The documented build (pip runs setup.py for metadata, then editable_wheel): the same line, from pip."""
    result = setup_py(project, "-m", "pip", "install", "--no-build-isolation", "-e", ".", CUDA_HOME="/nonexistent")
    assert_fails_before_compiling(project, result, NO_TOOLKIT.format("CUDA_HOME=/nonexistent"), last=False)


def test_wrapper_nvcc_on_path_without_cuda_home(project, tmp_path):
    """torch guesses CUDA_HOME as the folder above the nvcc on PATH: a wrapper script's folder is no toolkit."""
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text('#!/bin/sh\nexec /usr/local/cuda/bin/nvcc "$@"\n')
    wrapper.chmod(0o755)
    path = f"{wrapper.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    result = setup_py(project, "setup.py", "build_ext", CUDA_HOME=None, CUDA_PATH=None, PATH=path)
    found = f"CUDA_HOME is unset; torch guessed {tmp_path} from {wrapper}, maybe a wrapper script"
    assert_fails_before_compiling(project, result, NO_TOOLKIT.format(found))


def test_nvcc_major_version_differs_from_torch(project, tmp_path):
    torch_major = int(torch.version.cuda.split(".")[0])
    other = f"{torch_major - 1}.4"  # e.g. 12.4 against a torch built for CUDA 13
    toolkit = fake_toolkit(tmp_path / "cuda", other)
    result = setup_py(project, "setup.py", "build_ext", CUDA_HOME=str(toolkit))
    line = (
        f"error: {toolkit}/bin/nvcc is CUDA {other} but torch {torch.__version__} is built for CUDA "
        f"{torch.version.cuda}: the major versions must match (set CUDA_HOME to a CUDA {torch_major} toolkit, or "
        "install a matching torch)"
    )
    assert_fails_before_compiling(project, result, line)


def test_commands_that_do_not_build_run_no_checks(project, tmp_path):
    toolkit = fake_toolkit(tmp_path / "cuda", "1.0")
    for cuda_home in ["/nonexistent", str(toolkit)]:
        result = setup_py(project, "setup.py", "--help", CUDA_HOME=cuda_home)
        assert result.returncode == 0 and "error:" not in result.stderr, result.stderr
