"""Local build without Nix, for development on a machine with CUDA and torch.

Reads build.toml (the one list of sources), writes what kernel-builder would generate (torch-ext/registration.h
and torch-ext/<package>/_ops.py with the `_<package>_cuda_<id>` op namespace) and builds one abi3 extension.

    python -m pip install -r requirements/build.txt  # torch (a CUDA build), setuptools, wheel, ninja
    python -m pip install --no-build-isolation -e .  # editable install: `import <package>` works
    python setup.py build_kernel              # also stage build/<variant>/ for kernels.get_local_kernel()

Environment: CUDA_HOME (the CUDA toolkit root), CUDA_CAPABILITIES (e.g. "9.0"; default: build.toml's list),
MAX_JOBS (parallel compile jobs). Before compiling, preflight() checks torch, the toolkit and their CUDA versions
and says in one line what is wrong. Hub-compliant binaries (manylinux_2_28, every torch/CUDA variant) come from the
Nix build: `kernel-builder build-and-copy -L`. kernel-builder's `create-pyproject` would overwrite this file.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

import sys

if "develop" in sys.argv:  # pip < 25 runs `setup.py develop`, which re-enters pip in an isolated env without torch
    sys.exit(
        "setup.py develop is not supported: upgrade pip to 25 or later, or run "
        "`python -m pip install --no-build-isolation --use-pep517 -e .`"
    )

try:
    import torch
except ModuleNotFoundError as error:
    if error.name != "torch":
        raise
    hidden = any("pip-build-env-" in p for p in sys.path)  # pip's isolated build environment (the default)
    where = ", which pip's build isolation hides" if hidden else " installed in this environment"
    raise SystemExit(
        f"error: setup.py needs torch{where}: pip install -r requirements/build.txt, then build with "
        "python -m pip install --no-build-isolation -e ."
    ) from None
from setuptools import Command, setup
from torch.utils import cpp_extension
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

ROOT = Path(__file__).resolve().parent
CONFIG = tomllib.loads((ROOT / "build.toml").read_text())
NAME = CONFIG["general"]["name"]
PACKAGE = NAME.replace("-", "_")
PACKAGE_DIR = ROOT / "torch-ext" / PACKAGE
KERNELS = [k for k in CONFIG.get("kernel", {}).values() if k["backend"] == "cuda"]

REGISTRATION_H = """\
// Written by setup.py (kernel-builder generates the same macros); do not edit or commit.
#pragma once
#include <Python.h>

#define _CONCAT(A, B) A##B
#define CONCAT(A, B) _CONCAT(A, B)
#define _STRINGIFY(A) #A
#define STRINGIFY(A) _STRINGIFY(A)

#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)
#define TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) TORCH_LIBRARY_IMPL(NAME, DEVICE, MODULE)

// An empty Python module: importing it loads the library, whose static initializers register the ops.
#define REGISTER_EXTENSION(NAME)                                                          \\
  PyMODINIT_FUNC CONCAT(PyInit_, NAME)() {                                               \\
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, STRINGIFY(NAME), nullptr, 0, nullptr}; \\
    return PyModule_Create(&module);                                                      \\
  }
"""

OPS_PY = '''\
# Written by setup.py (kernel-builder generates the same module); do not edit or commit.
import torch

from . import OPS_NAME

ops = torch.ops.OPS_NAME


def add_op_namespace_prefix(op_name: str) -> str:
    """Prefix an op name with this build's namespace (required for torch.library registrations)."""
    return f"OPS_NAME::{op_name}"
'''


def unique_id() -> str:
    """Same rule as kernel-builder: the short git tree id of HEAD, with `_dirty` for modified tracked files."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()

    try:
        tree = git("rev-parse", "--short=7", "HEAD^{tree}")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "local"  # not a git repository (kernel-builder itself requires one)
    return f"{tree}_dirty" if dirty else tree


OPS_NAME = f"_{PACKAGE}_cuda_{unique_id()}"


def capabilities() -> list[str]:
    requested = os.environ.get("CUDA_CAPABILITIES")
    if requested:
        return requested.replace(",", ";").split(";")
    caps = {cap for kernel in KERNELS for cap in kernel.get("cuda-capabilities", [])}
    return sorted(caps, key=lambda c: tuple(int(x) for x in re.findall(r"\d+", c)))


def gencode(cap: str) -> str:
    match = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", cap)
    if not match:
        raise SystemExit(f"error: unsupported CUDA capability {cap!r} in build.toml")
    arch = f"{match[1]}{match[2]}{match[3]}"
    code = f"compute_{arch}" if match[4] else f"sm_{arch}"
    return f"-gencode=arch=compute_{arch},code={code}"


def write_if_changed(path: Path, text: str) -> None:
    """Rewriting an unchanged file would renew its mtime, and ninja would recompile every source that includes it."""
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def write_generated_files() -> None:
    write_if_changed(ROOT / "torch-ext" / "registration.h", REGISTRATION_H)
    write_if_changed(PACKAGE_DIR / "_ops.py", OPS_PY.replace("OPS_NAME", OPS_NAME))
    for stale in PACKAGE_DIR.glob(f"_{PACKAGE}_cuda_*.so"):  # builds from earlier commits
        if not stale.name.startswith(OPS_NAME + "."):
            stale.unlink()


def extension() -> CUDAExtension:
    def sources(paths: list[str]) -> list[str]:
        return [p for p in paths if p.endswith((".cu", ".cpp", ".cc"))]

    torch_cfg = CONFIG["torch"]
    srcs = sources(torch_cfg["src"]) + [s for kernel in KERNELS for s in sources(kernel["src"])]
    includes = ["torch-ext", *torch_cfg.get("include", [])] + [i for k in KERNELS for i in k.get("include", [])]
    cuda_flags = [f for kernel in KERNELS for f in kernel.get("cuda-flags", [])]
    return CUDAExtension(
        name=f"{PACKAGE}.{OPS_NAME}",
        sources=srcs,
        include_dirs=[str(ROOT / i) for i in dict.fromkeys(includes)],
        define_macros=[("CUDA_KERNEL", None)],  # py_limited_api=True defines Py_LIMITED_API
        extra_compile_args={
            "cxx": ["-O3", *torch_cfg.get("cxx-flags", [])],
            "nvcc": ["-O3", *map(gencode, capabilities()), *cuda_flags],
        },
        py_limited_api=True,
    )


# Commands that compile (pip runs editable_wheel or bdist_wheel): preflight() runs before them, and before any
# compiler, so that a missing toolkit or a CUDA version mismatch is one line, not a compiler's traceback.
BUILD_COMMANDS = {"build", "build_ext", "build_kernel", "bdist_wheel", "editable_wheel", "install"}


def preflight() -> None:
    """Stop with one line unless torch is a CUDA build and CUDA_HOME holds a toolkit of the same CUDA major version."""
    if torch.version.cuda is None:
        raise SystemExit(f"error: torch {torch.__version__} has no CUDA support; install a CUDA build of torch")
    home = cpp_extension.CUDA_HOME  # CUDA_HOME, else CUDA_PATH, else ../.. of the nvcc on PATH, else /usr/local/cuda
    nvcc = Path(home or "", "bin", "nvcc")
    if not (home and nvcc.is_file() and Path(home, "include", "cuda_runtime.h").is_file()):
        if os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
            found = f"{'CUDA_HOME' if os.environ.get('CUDA_HOME') else 'CUDA_PATH'}={home}"
        elif shutil.which("nvcc"):
            found = f"CUDA_HOME is unset; torch guessed {home} from {shutil.which('nvcc')}, maybe a wrapper script"
        else:
            found = "CUDA_HOME is unset and no nvcc is on PATH"
        raise SystemExit(
            f"error: no CUDA toolkit found ({found}): set CUDA_HOME to the toolkit root, the folder with bin/nvcc "
            "and include/cuda_runtime.h"
        )
    try:
        version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
    except OSError:  # not executable
        version = ""
    release = re.search(r"release (\d+)\.(\d+)", version)
    torch_major = torch.version.cuda.split(".")[0]
    if release is None or release[1] != torch_major:
        nvcc_cuda = f"CUDA {release[1]}.{release[2]}" if release else "of an unknown CUDA version"
        raise SystemExit(
            f"error: {nvcc} is {nvcc_cuda} but torch {torch.__version__} is built for CUDA {torch.version.cuda}: the "
            f"major versions must match (set CUDA_HOME to a CUDA {torch_major} toolkit, or install a matching torch)"
        )


def variant() -> str:
    """kernel-builder's build variant name for this torch/CUDA/platform, e.g. torch211-cxx11-cu130-x86_64-linux."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    if torch.version.cuda is None:
        raise SystemExit("error: this torch has no CUDA support; install a CUDA build of torch")
    cu_major, cu_minor = torch.version.cuda.split(".")[:2]
    abi = "cxx11" if torch.compiled_with_cxx11_abi() else "cxx98"
    return f"torch{major}{minor}-{abi}-cu{cu_major}{cu_minor}-{platform.machine()}-linux"


class BuildKernel(Command):
    """Build the extension in place and stage build/<variant>/ as kernel-builder lays it out."""

    description = "build the kernel and stage build/<variant>/ for kernels.get_local_kernel()"
    user_options: list = []

    def initialize_options(self) -> None:
        pass

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        self.run_command("build_ext")
        build_ext = self.get_finalized_command("build_ext")
        built = Path(build_ext.get_ext_fullpath(f"{PACKAGE}.{OPS_NAME}"))
        target = ROOT / "build" / variant()
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        pyext = tuple(f".{ext}" for ext in CONFIG["torch"].get("pyext", ["py", "pyi"]))
        for path in PACKAGE_DIR.rglob("*"):
            if path.is_file() and path.suffix in pyext and "__pycache__" not in path.parts:
                (target / path.relative_to(PACKAGE_DIR)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / path.relative_to(PACKAGE_DIR))
        shutil.copy2(built, target / built.name)
        metadata = {
            "name": NAME,
            "id": OPS_NAME,
            "version": CONFIG["general"]["version"],
            "license": CONFIG["general"]["license"],
            "python-depends": [],
            "backend": {"type": "cuda", "archs": capabilities()},
        }
        (target / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
        print(f"staged {target.relative_to(ROOT)}")


class BuildExtensionInPlace(BuildExtension):
    """Builds into torch-ext/<package>/ so that the package and the staged variant use the same library."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.inplace = True


if BUILD_COMMANDS & set(sys.argv[1:]):
    preflight()
write_generated_files()
setup(
    name=PACKAGE,
    version=str(CONFIG["general"]["version"]),
    package_dir={"": "torch-ext"},
    packages=[PACKAGE],
    ext_modules=[extension()] if cpp_extension.CUDA_HOME else [],  # no toolkit: preflight() stops builds
    cmdclass={"build_ext": BuildExtensionInPlace, "build_kernel": BuildKernel},
    options={"bdist_wheel": {"py_limited_api": "cp39"}, "build": {"build_base": "build-ext"}},  # build/ is for variants
    python_requires=">=3.9",
)
